"""Cited answers in the shape the question wants: steps in order with their commands, facts with
their headers, code with its signature; honest abstention; the optional OpenAI-compatible LLM.

The knowledge base is written here (real files, real pipeline, real model): a runbook with
numbered steps and commands, a service catalog table, a restricted procedure that a public page
points at, and a Python module.
"""

from __future__ import annotations

import re

import pytest

from citewise.ingest.jobs import run_source
from citewise.retrieval.answering.markdown import blocks_from_markdown
from citewise.retrieval.answering.question import analyse, defining_clause
from citewise.retrieval.answering.strategies.expansion import spelled_out
from citewise.settings import SourceConfig
from citewise.types import Identity
from tests.connectors.gitrepo import GitRepo
from tests.kb import folder_source, write, write_kb

ANON = Identity.anonymous()
SECURITY = Identity(user="c", groups=("security",))

FAILOVER = """
---
title: Cache failover
service: cache
owner: team-cache
alerts: [CachePrimaryDown]
---
# Cache failover

## What the alert means

- **`CachePrimaryDown`** fires when the cache primary has not answered health checks for two
  minutes.

## Diagnosis

Check which node is primary:

```bash
cachectl status --cluster main
```

## Mitigation

If the primary is gone for good, fail over in this order:

1. Freeze writes from the checkout service.
   ```bash
   ffctl set checkout.cache_writes false --env prod
   ```
2. Promote the replica with the smallest lag.
   ```bash
   cachectl promote --cluster main --replica cache-2
   ```
   Promotion takes about a minute.
3. Restart the checkout pods so they reconnect.
   ```bash
   kubectl -n checkout rollout restart deploy/checkout
   ```
4. Turn writes back on once the new primary answers.

## Related

- Queue backlog runbook
"""
CATALOG = """
---
title: Service catalog
---
# Service catalog

Every service, its owner and its tier.

| Service | Owner | Tier | Repository |
|---|---|---|---|
| ledger-service | team-ledger | 0 | acme/ledger |
| search-indexer + search-prod (OpenSearch) | team-catalog | 1 | acme/search-indexer |
| notification-service | team-growth | 2 | acme/notify |
"""
POINTER = """
---
title: Provider webhook backlog
---
# Provider webhook backlog

## Mitigation

- Scale the webhook worker: `kubectl scale deploy/webhook-worker --replicas=12`.
- Rotating provider credentials is a restricted procedure covered in Rotating the provider
  signing keys.
"""
ROTATION = """
---
title: Rotating the provider signing keys
readers: [group:security]
---
# Rotating the provider signing keys

## Procedure

1. Open a ticket in SEC.
2. Generate the new key in the provider portal: `providerctl keys create --scope payments`.
3. Switch traffic to the new key.
"""
COMPACTOR = """
---
title: Compactor restarts
---
# Compactor restarts

## Corrupted blocks

Sometimes a block in the bucket is corrupted and the compactor crashes on it, restarts, and
crashes again. The log then says:

```
level=error msg="compaction failed for group 0@tenant-7" block=01HABCDEF
```

The interesting parts of that message are:

1. the group, which tells you the tenant;
2. the block id, which is what you delete.

The data in a corrupted block cannot be recovered. Delete the block, then watch the log:

```bash
objstore rm --bucket metrics-prod 01HABCDEF/
```
"""
ORDERS_DB = """
---
title: Orders database access
---
# Orders database access

## Connecting

To connect to the orders database, there are two options:

1. Connect from the command line
2. Connect from the web console (read-only)

### Connect from the command line

Request read access first, then run:

```bash
pgproxy connect orders-prod --role readonly
```

### Connect from the web console

Open the console and pick the `orders-prod` instance.
"""
RETENTION = """
---
title: Catalog hygiene
---
# Catalog hygiene

## Reviews

Catalog entries are reviewed by the platform team. Entries that nobody claims are archived
after 90 days. Archived entries can be restored by any engineer.
"""
# A mitigation that is one sentence of prose, under a Diagnosis with commands.
MEMBERS = """
---
title: Gossip cluster members inconsistent
---
# GossipMembersInconsistent

## Meaning

At least one member of the gossip cluster cannot be found by its peers.

## Diagnosis

Compare the addresses the service lists with the pods that exist:

```shell
kubectl describe svc gossip-main
kubectl get pod -o wide | grep gossip-main
```

## Mitigation

Deleting the stale Endpoint makes the operator recreate it with the right pod address.
"""
# Steps that are subsections, each a procedure of its own.
TOKENS = """
---
title: Partner API token expires soon
---
# Partner API token expires soon

A partner's API token is about to expire; rotate it before the partner's calls start failing.

## Rotate a partner API token

### 1. Issue a new token

1. Open the partner admin page.
2. Pick the partner whose email matches the alert's `partner` label.
3. Choose **Manage tokens**, then **Create token**.

### 2. Update the secret the partner gateway reads

1. Run the `gateway-sync-tokens` job.
2. Revoke the old token on the Manage tokens page.
"""
# "bounce" is restart; "Steps to check" is where the search hit falls, the restart is below.
METRICSD = """
---
title: Metricsd is down
---
# Metricsd is down

## Steps to check

1. Log in to `metrics-1.example.net` and check the service with `sv status metricsd`.
2. If it is down, read `/var/log/metricsd/current`; it is usually a configuration error.

## Working with metricsd

1. Check the configuration first: `metricsd-check config /etc/metricsd.yml`.
2. Reload the configuration: `sudo sv reload metricsd`.
3. Restart the service after checking the configuration: `sudo sv restart metricsd`.
"""
# A value stated in one sentence, among sentences that mention the setting more.
LIMITS = """
---
title: SSH connection limits on the git nodes
---
# SSH connection limits on the git nodes

## What to do

If connections are dropped at the top of the hour, raise MaxStartups in the git role of
chef-repo. At this writing, the values are 250:30:300; raise them in small steps.

## Additional context

The MaxStartups alert counts SSH connections the load balancer closed before sshd answered on
the git nodes, a stand-in for MaxStartups being reached on the git nodes.
"""
# An alert runbook whose Meaning defines the component and whose Impact matches the trouble.
ALLOCATOR = """
---
title: MacAllocatorDown
---
# MacAllocatorDown

## Meaning

`macallocator` is down. `macallocator` is responsible for handing out MAC addresses to
virtual machines and keeping them unique across the cluster.

## Impact

If `macallocator` is down, new virtual machines cannot be created.

## Mitigation

1. Restart it: `kubectl -n vm rollout restart deploy/macallocator`.
"""
# A list asked for by its section's name, beside a table that shares a word with the question.
LEVELS = """
---
title: Incident handbook
---
# Incident handbook

## Paging policy

| Alert severity | Notification |
|---|---|
| `critical` | phone call and push |
| `low` | a ticket, never a page |

## Severity levels

Severity describes the impact on customers, not how hard the problem is.

### SEV1 - critical

Any of:

- Checkout unavailable for five minutes.
- Confirmed loss of order data.

### SEV2 - major

Response: the incident commander is paged.

## The incident commander

The IC coordinates; they do not debug. It covers the channel, the roles and the timeline.
"""
POSTMORTEM = """---
title: "Postmortem: search outage, 2025-06-03"
---

# Postmortem: search outage, 2025-06-03

## Summary

Search returned errors for 40 minutes after a reindex job filled the disk of the search nodes.

## Timeline

| Time | Event |
|---|---|
| 09:12 | The nightly reindex job starts on search-prod. |
| 09:40 | Search errors rise; the on-call engineer restarts the search pods. |
| 09:52 | The reindex job is stopped and errors drop. |

## Root cause

The reindex job wrote its new index beside the old one without checking free space. The
disk filled at 09:38 and the search nodes went read-only, so every query failed.

## Action items

- Check free space before a reindex starts.
"""
CLIENT = """---
title: Partner API client
---

# Partner API client

## Status codes

| Status | What the client does |
|---|---|
| 401 | Fails the run: the credentials are wrong. |
| 429 | Counts it as a rate limit in the run report. |
| 503 | Retries with backoff. |

## Waiting

After a 429 response the client sleeps for the number of seconds in the Retry-After header,
at most five minutes, before it sends the request again.
"""
CODE = '''"""Ingest guards."""


def refuse_mass_deletion(gone: int, existing: int, force: bool) -> None:
    """Refuse a run that would delete most of a source, unless forced.

    An emptied checkout looks exactly like everything was deleted.
    """
    if not force and gone > existing / 2:
        raise RuntimeError("refusing")
'''


@pytest.fixture(scope="module")
def services(tmp_path_factory, dense):
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings

    base = tmp_path_factory.mktemp("answers")
    docs = base / "docs"
    write(docs, "runbooks/cache-failover.md", FAILOVER)
    write(docs, "wiki/service-catalog.md", CATALOG)
    write(docs, "runbooks/webhook-backlog.md", POINTER)
    write(docs, "runbooks/rotate-signing-keys.md", ROTATION)
    write(docs, "runbooks/compactor-restarts.md", COMPACTOR)
    write(docs, "wiki/orders-database-access.md", ORDERS_DB)
    write(docs, "wiki/catalog-hygiene.md", RETENTION)
    write(docs, "runbooks/gossip-members.md", MEMBERS)
    write(docs, "runbooks/partner-token-expiry.md", TOKENS)
    write(docs, "runbooks/metricsd-down.md", METRICSD)
    write(docs, "wiki/ssh-limits.md", LIMITS)
    write(docs, "runbooks/mac-allocator-down.md", ALLOCATOR)
    write(docs, "wiki/incident-handbook.md", LEVELS)
    write(docs, "wiki/postmortem-search-outage.md", POSTMORTEM)
    write(docs, "wiki/partner-api-client.md", CLIENT)
    repo = GitRepo(base / "repo")
    repo.write("guards.py", CODE)
    repo.commit("init")
    s = build_services(Settings(data_dir=base / "data"))
    assert run_source(s.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    code = SourceConfig(name="code", type="git", path=str(repo.root), readers=["public"])
    assert run_source(s.pipeline, code, trigger="t").status == "succeeded"
    yield s
    s.close()


def markers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\[(\d+)\]", text)}


def test_question_shapes():
    assert analyse("What do I do when CachePrimaryDown fires?").kind == "alert"
    assert analyse("how do I fail over the cache?").kind == "action"
    assert analyse("Checkout is slow and the cache keeps timing out").kind == "action"
    assert analyse("who owns the search service?").kind == "fact"
    assert analyse("If the primary ignores a page for five minutes, who is paged?").kind == "fact"
    assert analyse("Which function refuses a mass deletion?").kind == "code"
    assert analyse("What is an error budget?").kind == "definition"
    assert analyse("Why did search fail on June 3rd?").kind == "cause"
    assert analyse("what was the root cause of the search outage").kind == "cause"
    # A statement with "because" asks what to do, not why.
    assert analyse("Search fails because the disk is full").kind == "action"
    assert analyse("How do I fail over the cockroachdb cluster?").names == []
    assert "UH" in analyse("What does the response flag UH mean?").names


def test_steps_stay_whole_and_in_order_with_their_commands(services):
    answer = services.answers.answer("how do I fail over the cache?", ANON)
    assert answer.kind == "action" and not answer.abstained
    steps_block = next(b for b in answer.blocks if b.type == "steps")
    texts = [s.text for s in steps_block.steps]
    assert texts[0].startswith("Freeze writes") and texts[-1].startswith("Turn writes back on")
    assert len(texts) == 4 and steps_block.ordered
    assert steps_block.steps[1].code[0].text == \
        "cachectl promote --cluster main --replica cache-2"
    assert steps_block.steps[1].code[0].language == "bash"
    assert "Promotion takes about a minute." in steps_block.steps[1].notes
    # The sentence that frames the steps comes with them.
    assert answer.blocks[0].type == "paragraph"
    assert answer.blocks[0].text.startswith("If the primary is gone for good")
    # The Markdown keeps numbered steps and fenced commands, in order, all cited.
    md = answer.answer
    assert md.index("1. Freeze writes") < md.index("2. Promote") < md.index("3. Restart")
    assert "   ```bash\n   cachectl promote --cluster main --replica cache-2\n   ```" in md
    (citation,) = answer.citations
    assert citation.heading == "Mitigation" and citation.path == "runbooks/cache-failover.md"
    assert markers(md) == {1}
    # Diagnosis commands and the Related list are not the answer to "how do I fail over".
    assert "cachectl status" not in md and "Queue backlog" not in md


def test_an_alert_question_gets_its_meaning_then_the_steps(services):
    answer = services.answers.answer("What do I do when CachePrimaryDown fires?", ANON)
    assert answer.kind == "alert"
    assert answer.blocks[0].type == "paragraph" and "CachePrimaryDown" in answer.blocks[0].text
    assert any(b.type == "steps" for b in answer.blocks)
    assert "cachectl promote" in answer.answer


SPOOL_ALERT = """\
# SpoolWriterStalled

## Meaning

[This alert][SpoolWriterStalled] fires when the spool writer has flushed nothing to disk
for ten minutes while its queue keeps growing.

## Impact

Log lines wait in memory and are lost if the writer restarts.

## Mitigation

1. Restart the spool writer.
   ```bash
   systemctl restart spool-writer
   ```
2. Check that the queue drains.

[SpoolWriterStalled]: https://alerts.example.com/SpoolWriterStalled
"""


def test_an_alert_whose_meaning_calls_it_this_alert_still_gets_its_meaning(make_services,
                                                                           tmp_path):
    """Runbooks often link the name away ("[This alert][X] fires when..."): the rendered text
    no longer names the alert, the title does, so the Meaning section's paragraph is quoted."""
    docs = tmp_path / "docs"
    write(docs, "alerts/SpoolWriterStalled.md", SPOOL_ALERT)
    services = make_services()
    assert run_source(services.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    a = services.answers.answer("What does SpoolWriterStalled mean?", ANON)
    assert a.kind == "alert" and not a.abstained
    assert a.blocks[0].type == "paragraph"
    assert a.blocks[0].text.startswith("This alert fires when the spool writer has flushed")
    assert a.citations[0].heading.endswith("Meaning")
    assert "systemctl restart spool-writer" in a.answer


EDGE_FALLBACK = """\
# Edge fallback

## When the edge cannot reach the origin

If the CDN times out fetching a page, it serves a stored copy instead.

### Order of fallbacks

When the origin is unavailable:

1. The CDN first serves the page from the primary bucket mirror in eu-west-2.
2. If that fails, it tries the replica bucket in eu-west-1.
3. As a last resort, it serves the page from the cold archive mirror.

## Emergency access

Use the `/break-glass` command in chat to get temporary admin rights.

Which events count as an emergency? For example:

- A regional outage where traffic must be moved by hand.
- A customer's instance deleted by mistake and needing a restore.
"""


def test_a_list_item_comes_with_its_list(make_services, tmp_path):
    """A fact found in a list item is not quoted mid-list: a short numbered list comes whole
    under the sentence that introduces it, a bullet with the question its list answers."""
    docs = tmp_path / "docs"
    write(docs, "wiki/edge-fallback.md", EDGE_FALLBACK)
    services = make_services()
    assert run_source(services.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    a = services.answers.answer("What does the CDN serve as a last resort when the origin is "
                                "down?", ANON)
    assert not a.abstained
    k = next(i for i, b in enumerate(a.blocks) if b.type == "steps")
    assert a.blocks[k - 1].text == "When the origin is unavailable:", a.answer
    assert [s.text.split()[0] for s in a.blocks[k].steps] == ["The", "If", "As"]
    assert a.answer.index("1. The CDN first") < a.answer.index("3. As a last resort")
    c = next(c for c in a.citations if c.n == a.blocks[k].citations[0])
    assert c.heading.endswith("Order of fallbacks") and c.end_line - c.start_line >= 4

    b = services.answers.answer("Does a regional outage count as an emergency?", ANON)
    assert not b.abstained
    frame = "Which events count as an emergency? For example:"
    assert b.blocks[0].text == frame, b.answer
    assert "regional outage where traffic must be moved by hand" in b.blocks[1].text


SECURITY_TOOLS = """\
# Security tooling

## Processes

- [Blocking IP ranges at the load balancer](https://docs.example.com/block-ip-ranges)
- [Rotating leaked credentials](https://docs.example.com/rotate)
"""

BLOCK_RANGES = """\
# Ban a netblock on the load balancer

## Background

Some traffic does not pass through the CDN, so the CDN's firewall cannot stop it.

## Procedure

1. Add the range to the deny list.
   ```bash
   echo "203.0.113.0/24" >> /etc/lb/deny-ranges.lst
   ```
2. Reload the load balancer.
   ```bash
   systemctl reload lb
   ```
"""


def test_a_reading_list_is_not_the_answer(make_services, tmp_path):
    """A list whose items are only links names where the answer is; the runbook it points at
    (when it is here) answers, and the list is never quoted as steps."""
    docs = tmp_path / "docs"
    write(docs, "security/tooling.md", SECURITY_TOOLS)
    write(docs, "runbooks/ban-netblock.md", BLOCK_RANGES)
    services = make_services()
    assert run_source(services.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    a = services.answers.answer("how do I block an IP range at the load balancer?", ANON)
    assert not a.abstained
    assert "deny-ranges.lst" in a.answer, a.answer
    assert a.citations[0].path == "runbooks/ban-netblock.md"
    assert all(c.path != "security/tooling.md" for c in a.citations), a.answer


QUEUE_STUCK = """\
# Mail queue stuck

## Mitigation

### Scenarios:

@TODO: more scenario examples

### Flush the queue

Flush what is waiting once the relay answers again.

```bash
mailctl flush --queue outbound
```
"""


def test_steps_from_subsections_skip_placeholders(make_services, tmp_path):
    """A step made of a subsection reads "title: first paragraph"; "@TODO: ..." is not text
    to quote, and a heading over nothing written yet ("Scenarios:") is not a step."""
    docs = tmp_path / "docs"
    write(docs, "runbooks/mail-queue.md", QUEUE_STUCK)
    services = make_services()
    assert run_source(services.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    a = services.answers.answer("the outbound mail queue is stuck, how do I fix it?", ANON)
    assert not a.abstained and "mailctl flush --queue outbound" in a.answer, a.answer
    assert "TODO" not in a.answer and "Scenarios" not in a.answer, a.answer
    assert a.blocks[0].steps[0].text.startswith("Flush the queue: Flush what is waiting")


LOCKS = """\
# Inventory lock contention

## Mitigation

1. During a flash sale, turn on the per-SKU reservation queue for the hot rows.
   ```bash
   ffctl set inventory.hot_sku_queue --env prod
   ```

## Related

- Pool exhaustion, where apps time out waiting for a free PgBouncer slot, is handled in
  [connection exhaustion](connection-exhaustion.md).
"""

EXHAUSTION = """\
# Connection exhaustion

## Impact

Every service that talks to the main database through the pooler stalls.

## Mitigation

1. Terminate the idle-in-transaction sessions of the affected pool.
   ```sql
   SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'idle in transaction';
   ```
2. Raise the pool size in the pooler's ConfigMap and reload it.
"""


def test_a_document_found_by_its_related_list_does_not_answer(make_services, tmp_path):
    """A "Related" list points at the document that answers; the one that holds the pointer
    answers only when nothing else was found."""
    docs = tmp_path / "docs"
    write(docs, "runbooks/lock-contention.md", LOCKS)
    write(docs, "runbooks/connection-exhaustion.md", EXHAUSTION)
    services = make_services()
    assert run_source(services.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    question = "Apps time out waiting for a free slot in PgBouncer"
    hits = services.search.search(question, ANON, top_k=3)
    assert hits[0].path == "runbooks/lock-contention.md" and hits[0].heading == "Related"
    a = services.answers.answer(question, ANON)
    assert a.citations[0].path == "runbooks/connection-exhaustion.md", a.answer
    assert "pg_terminate_backend" in a.answer and "hot_sku_queue" not in a.answer


LONG_CLIENT = '''\
import time


class PartnerClient:
    def fetch(self, path):
        """Fetch one page of the partner API, retrying what can be retried."""
        url = self.base + path
        attempt = 0
        while True:
            self.limiter.wait()
            try:
                response = self.http.get(url, timeout=self.timeout_s)
            except TimeoutError as error:
                reason = f"timed out: {error}"
                wait = self.backoff(attempt)
            else:
                if response.status_code < 300:
                    return response.json()
                if response.status_code == 404:
                    raise LookupError(f"the partner API has no {path}")
                if response.status_code == 429:
                    reason = "too many requests"
                    wait = retry_after_seconds(response) or self.backoff(attempt)
                elif response.status_code >= 500:
                    reason = f"server error {response.status_code}"
                    wait = self.backoff(attempt)
                else:
                    raise RuntimeError(f"the partner API refused {path}: {response.status_code}")
            attempt += 1
            if attempt > self.max_retries:
                raise RuntimeError(f"gave up on {path} after {attempt} attempts: {reason}")
            self.log.warning("retrying %s in %.1f s: %s", path, wait, reason)
            time.sleep(min(wait, self.max_wait_s))
'''


def test_a_later_part_of_a_long_function_is_quoted_as_found(make_services, tmp_path):
    """The code chunker splits a long function along its statements; a part found by the
    question is shown as that part (with file and lines), not a first line posing as the
    function's signature."""
    repo = GitRepo(tmp_path / "repo")
    repo.write("partner_client.py", LONG_CLIENT)
    repo.commit("init")
    services = make_services(chunk_max_tokens=120)
    code = SourceConfig(name="code", type="git", path=str(repo.root), readers=["public"])
    assert run_source(services.pipeline, code, trigger="t").status == "succeeded"
    a = services.answers.answer("Where does the partner client wait after a 429 response?",
                                ANON)
    assert not a.abstained
    code_block = next(b for b in a.blocks if b.type == "code")
    assert "retry_after_seconds(response)" in code_block.text, a.answer
    (c,) = a.citations
    assert c.symbol and c.symbol.endswith("def fetch") and c.start_line > 6, c
    if not code_block.text.startswith("def fetch"):
        assert a.blocks[0].text.startswith("Part of `def fetch` in `partner_client.py`")


def test_a_sentence_that_answers_beats_a_row_that_only_shares_a_word(services):
    """The status table's 429 row shares the rare word; the sentence under Waiting says how
    long. A row that is the answer still comes as label and value (the owner test above)."""
    a = services.answers.answer("How long does the partner API client sleep after a 429 "
                                "response?", ANON)
    assert a.kind == "fact" and not a.abstained
    assert "Retry-After header" in a.answer and "at most five minutes" in a.answer
    assert "Counts it as a rate limit" not in a.answer
    assert a.citations[0].heading.endswith("Waiting")


def test_a_why_question_gets_the_root_cause_whole(services):
    """The Root cause section says why, in one paragraph read whole; the Timeline's rows share
    more words with "why did search fail" and say only what happened when."""
    a = services.answers.answer("Why did search fail on June 3rd?", ANON)
    assert a.kind == "cause" and not a.abstained
    assert a.citations[0].heading.endswith("Root cause")
    assert a.blocks[0].type == "paragraph"
    assert a.blocks[0].text.startswith("The reindex job wrote its new index beside the old one")
    assert a.blocks[0].text.endswith("so every query failed.")
    assert "09:40" not in a.answer


def test_a_procedure_in_prose_keeps_its_commands_in_order(services):
    """No numbered steps, commands between paragraphs: the section reads in order, and the
    list of what a log line means is not mistaken for the steps."""
    a = services.answers.answer(
        "the compactor keeps crashing with compaction failed, how do I fix it?", ANON)
    assert not a.abstained
    assert a.citations[0].path == "runbooks/compactor-restarts.md"
    assert "objstore rm --bucket metrics-prod 01HABCDEF/" in a.answer
    assert a.answer.index("compaction failed for group") < a.answer.index("objstore rm")
    assert [b.type for b in a.blocks][:2] == ["paragraph", "code"]
    assert any(b.type == "code" and b.text.startswith("objstore rm") for b in a.blocks)


def test_a_list_of_links_to_sections_is_not_the_steps(services):
    a = services.answers.answer("how do I connect to the orders database from the command "
                                "line?", ANON)
    assert "pgproxy connect orders-prod --role readonly" in a.answer
    assert a.citations[0].heading.endswith("Connect from the command line")


def test_a_how_do_i_check_question_gets_the_diagnosis(services):
    a = services.answers.answer("CachePrimaryDown fired, how do I check which node is "
                                "primary?", ANON)
    assert "cachectl status --cluster main" in a.answer
    assert "cachectl promote" not in a.answer


def test_a_how_long_question_gets_the_sentence_with_the_number(services):
    a = services.answers.answer("how long before an unclaimed catalog entry gets archived?",
                                ANON)
    assert a.kind == "fact"
    assert "90 days" in a.answer
    assert a.citations[0].path == "wiki/catalog-hygiene.md"


def test_a_mitigation_in_one_sentence_is_what_to_do(services):
    """A Mitigation section of prose alone is still the answer to "what do I do", rather than
    the Diagnosis commands that happen to sit in a list."""
    a = services.answers.answer("the gossip service lists an address no pod has anymore, a "
                                "cluster peer is missing. what do i do", ANON)
    assert a.citations[0].path == "runbooks/gossip-members.md"
    assert "Deleting the stale Endpoint" in a.answer
    assert a.citations[0].heading.endswith("Mitigation")
    assert "kubectl describe" not in a.answer


def test_steps_that_are_subsections_bring_their_own_steps(services):
    a = services.answers.answer("partner api token expires soon, how do i rotate it?", ANON)
    steps = next(b for b in a.blocks if b.type == "steps")
    assert [s.text for s in steps.steps] == ["Issue a new token",
                                             "Update the secret the partner gateway reads"]
    assert steps.steps[0].notes == [
        "1. Open the partner admin page.",
        "2. Pick the partner whose email matches the alert's `partner` label.",
        "3. Choose Manage tokens, then Create token."]
    md = a.answer
    assert md.index("Issue a new token") < md.index("Manage tokens") \
        < md.index("Update the secret") < md.index("gateway-sync-tokens")


def test_shorthand_finds_the_section_that_spells_it_out(services):
    """ "bounce" is restart: the steps that restart, not the status checks the search hit
    lands on."""
    a = services.answers.answer("metricsd not running on metrics-1, how do i safely bounce it",
                                ANON)
    assert a.citations[0].path == "runbooks/metricsd-down.md"
    assert "sudo sv restart metricsd" in a.answer
    assert a.answer.index("metricsd-check config") < a.answer.index("sudo sv restart")


def test_a_value_question_gets_the_sentence_that_states_it(services):
    a = services.answers.answer("current MaxStartups values on the git nodes?", ANON)
    assert a.kind == "fact"
    assert "250:30:300" in a.answer
    assert a.citations[0].path == "wiki/ssh-limits.md"


def test_a_table_fact_carries_its_column_header(services):
    answer = services.answers.answer("who owns the search service?", ANON)
    assert answer.kind == "fact"
    facts = [(b.label, b.value) for b in answer.blocks if b.type == "fact"]
    assert facts[0] == ("Owner", "team-catalog")
    assert ("Service", "search-indexer + search-prod (OpenSearch)") in facts
    assert "**Owner:** team-catalog" in answer.answer
    assert "|" not in answer.answer  # never a raw pipe row without its headers


def test_a_front_matter_fact(services):
    answer = services.answers.answer("who owns the cache failover?", ANON)
    facts = {b.label: b.value for b in answer.blocks if b.type == "fact"}
    assert facts.get("Owner") == "team-cache"


def test_a_code_answer_carries_the_signature_and_the_lines(services):
    answer = services.answers.answer(
        "Which function refuses a run that would delete most of a source?", ANON)
    assert answer.kind == "code"
    code = next(b for b in answer.blocks if b.type == "code")
    assert code.text.strip().startswith("def refuse_mass_deletion(gone: int, existing: int")
    assert code.language == "python"
    (citation,) = answer.citations
    assert citation.path == "guards.py" and citation.start_line == 4 and citation.end_line
    assert "Refuse a run that would delete most of a source" in answer.blocks[0].text


def test_a_pointer_to_a_restricted_runbook_is_no_answer(services):
    outsider = services.answers.answer("How do I rotate the provider signing keys?", ANON)
    assert outsider.abstained, outsider.answer
    assert "providerctl" not in outsider.answer and "Rotating the provider" not in outsider.answer
    insider = services.answers.answer("How do I rotate the provider signing keys?", SECURITY)
    assert not insider.abstained
    assert "providerctl keys create --scope payments" in insider.answer
    assert insider.citations[0].path == "runbooks/rotate-signing-keys.md"


@pytest.mark.parametrize("question", [
    "What is the best recipe for sourdough bread?",
    "How do I fail over the cockroachdb cluster?",  # close wording, a database never mentioned
])
def test_questions_the_knowledge_base_cannot_answer_abstain(services, question):
    answer = services.answers.answer(question, ANON)
    assert answer.abstained, answer.answer
    assert answer.citations == [] and "could not find" in answer.answer and answer.reason


def test_a_definition_answers_the_clause_that_asks_for_it(services):
    """"What is X for? it's down and VMs won't create": the second clause describes the
    trouble (the runbook's Impact says the same); the answer is what X is for (its Meaning)."""
    question = "what is macallocator for? it's down and new virtual machines won't create"
    assert defining_clause(question) == "what is macallocator for"
    answer = services.answers.answer(question, ANON)
    assert answer.kind == "definition" and not answer.abstained
    assert "responsible for handing out MAC addresses" in answer.answer, answer.answer
    assert answer.citations[0].heading == "Meaning"
    # A clause that names nothing is no better than the whole question.
    assert defining_clause("es cluster health yellow, what does that mean") is None
    assert defining_clause("What does IC stand for, and what does that person do?") == \
        "What does IC stand for"
    assert defining_clause("What is an error budget?") is None  # one clause: the question


def test_a_list_asked_for_by_name_is_the_section_not_a_table_row(services):
    """"What are the severity levels?": the section of that name, each level with what it
    says first (a sentence that opens a list comes with the list's first item), rather than
    the paging table's row that shares the word "severity"."""
    answer = services.answers.answer("What are the severity levels?", ANON)
    assert not answer.abstained and [b.type for b in answer.blocks] == ["steps"], answer.answer
    items = [s.text for s in answer.blocks[0].steps]
    assert items == ["SEV1 - critical: Any of: Checkout unavailable for five minutes. ...",
                     "SEV2 - major: Response: the incident commander is paged."], items
    assert answer.citations[0].heading == "Severity levels"


def test_what_an_abbreviation_stands_for_comes_from_the_words_that_spell_it(services):
    """The handbook never writes "IC stands for"; its heading "The incident commander" is
    where the words are, and the section's first sentence says what the IC does."""
    answer = services.answers.answer("What does IC stand for, and what does that person do?",
                                     ANON)
    assert answer.kind == "definition" and not answer.abstained
    fact = answer.blocks[0]
    assert (fact.type, fact.label, fact.value) == ("fact", "IC", "incident commander")
    assert answer.blocks[1].text == "The IC coordinates; they do not debug."
    assert answer.citations[0].heading == "The incident commander"
    # Short or stop words never spell it ("It covers"), nor the letters themselves.
    assert spelled_out("IC", "It covers the channel") is None
    assert spelled_out("IC", "paged by the incident commander ",  # before "(IC)"
                        at_end=True) == "incident commander"


def test_a_tool_the_documents_never_name_is_what_the_question_is_about(services):
    """An ordinary English word where a tool goes ("a canary in spinnaker"), that no document
    contains, makes a weakly matched question a near miss; shorthand whose spelled-out form
    the documents use ("creds" for credentials) is not unknown."""
    answers = services.answers
    question = analyse("how do i abort a canary in spinnaker and roll back?")
    assert answers._unknown_names(question, ANON, evidence=0.4) == ["spinnaker"]
    # Matched well, the same word is taken for an ordinary one: "stuck in limbo".
    assert answers._unknown_names(question, ANON, evidence=0.8) == []
    assert answers._unknown_names(analyse("where are the provider creds kept?"), ANON,
                                  evidence=0.4) == []


def test_blocks_from_a_models_markdown():
    blocks = blocks_from_markdown(
        "Fail over like this [1]:\n\n1. Freeze writes [1]\n   ```bash\n   ffctl set x false\n"
        "   ```\n2. Promote the replica [2]\n\n**Owner:** team-cache [3]\n")
    assert [b.type for b in blocks] == ["paragraph", "steps", "fact"]
    assert blocks[1].steps[0].code[0].text == "ffctl set x false"
    assert blocks[1].citations == [1, 2]
    assert (blocks[2].label, blocks[2].value, blocks[2].citations) == ("Owner", "team-cache",
                                                                       [3])


def test_kb_answers_still_work(make_services, kb):
    """The shared test knowledge base: an answer cites what it quotes."""
    services = make_services()
    run_source(services.pipeline, folder_source(kb), trigger="t")
    write_kb(kb)
    answer = services.answers.answer("How do I fail over the Redis primary?", ANON)
    assert not answer.abstained and answer.citations[0].path == "runbooks/redis-failover.md"
    assert markers(answer.answer) == {c.n for c in answer.citations}
