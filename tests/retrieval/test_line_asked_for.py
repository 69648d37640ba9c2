"""The answer holds the one line asked for, and says so when no line gives the value asked.

Each runbook below has the shape of a real on-call page where an earlier answer cited the right
document and left out what the engineer needed (bench/golden/dev.jsonl, docs/quality.md "The
line asked for"): a step whose command sits in its second paragraph, a "do this as follows:"
sentence whose YAML is the point, a retention list whose one row is asked after, a retention
table written as HTML inside Markdown, a flag in a login command, an alert whose runbook is
outranked by a sibling's. Ingested by the real pipeline, asked through the real search and
answer service with the real model.
"""

from __future__ import annotations

import pytest

from citewise.ingest.outline import build_outline
from citewise.retrieval.alert_runbooks import alert_names, names_runbook, runbooks_first
from citewise.retrieval.answering.lexical import restates
from citewise.retrieval.answering.named_things import (
    asked_kinds,
    asked_unit,
    states_value,
    value_subject,
)
from citewise.retrieval.answering.question import analyse
from citewise.retrieval.search import SearchResult
from citewise.types import Identity
from tests.kb import services_over
from tests.retrieval.test_named_line import cited_lines

ANON = Identity.anonymous()

DISK = """\
# Disk space alerts on VMs

## Resolution

Work through these in order.

### Old logs

Delete rotated logs older than two days:

```
sudo find /var/log/app -name '*.gz' -mtime +2 -delete
```

### Space held by deleted files

A process that removes a file but keeps it open keeps its blocks allocated, so `df` reports
the space as used while `du` cannot find it.

You can list such files with `sudo lsof +L1`. Restart the process that holds them to give
the space back.

### Growing the disk

As a last resort, grow the persistent disk in the cloud console and then the filesystem.
"""

ROUTING = """\
# Alert routing

## Sending SLO alerts to a team's channel

Teams that own an SLI can have its alerts posted to their own channel.

Step 1: Add your team to the `teams.yml` file, as follows:

```yaml
teams:
- name: billing
  slack_channel: billing-alerts
  route_slo_alerts_to_channel: true
```

Step 2: Merge the change; the next rule evaluation picks it up.
"""

CHAT = """\
# Chat at our company

## Message retention

Chat is not where decisions are kept. The workspace keeps messages as follows:

- **Direct messages:** 18 months retention
- **Private channels:** 18 months retention
- **Public channels:** 18 months retention
- **Customer and trial channels:** 5 years retention

Exceptions are reviewed by the IT team.
"""

RETENTION = """\
# Data management policy

## Purpose

This policy says how long each kind of data is kept and who decides.

## Retention matrix

<table>
  <tr>
   <td><strong>System</strong>
   </td>
   <td><strong>Data</strong>
   </td>
   <td><strong>Retention period</strong>
   </td>
  </tr>
  <tr>
   <td>Hosted product
   </td>
   <td>Customer data
   </td>
   <td>Up to 45 days after the contract ends
   </td>
  </tr>
  <tr>
   <td>Dedicated instances
   </td>
   <td>Customer data and code
   </td>
   <td>Deleted 12 days after contract termination
   </td>
  </tr>
</table>
"""

CONSOLE = """\
# Opening the application console through the access proxy

## Ways in

There are two ways to reach the console:

1. The `gate` command line client. This is the recommended way.
2. The proxy's web portal.

## Asking for a role

The token you get at login has no console role. To open a read-only console, log in and ask
for the role at the same time:

`gate login --proxy=gate.internal --request-roles=console-readonly --reason="ticket URL"`

An approver in the access channel grants it.
"""

SIBLING = """\
# NodeContainerStartSlow

## Meaning

Container start on a node has a 99th percentile latency above 45 seconds for 10 minutes. It
often fires with NodeEventLoopLagHigh: when the node agent's event loop lags, its p99 lag in
seconds grows and container starts queue behind it.

## Impact

Pods take long to start; rollouts and autoscaling lag behind.

## Diagnosis

Look at the container runtime's logs on the node and at the image pull times.

## Mitigation

Cordon and drain the node, then delete it; its replacement starts clean.
"""

NAMED = """\
# NodeEventLoopLagHigh

## Meaning

The node agent's event loop has a 99th percentile lag of XX seconds on the node.

## Impact

TODO

## Mitigation

TODO
"""

PRIVATE = """\
---
readers: [group:sre]
---
# NodeSecretSyncStalled

## Meaning

The node agent has not synced secrets for 15 minutes.

## Mitigation

Restart the node agent.
"""

CHECKLIST = """\
# On-call checklist

## Going on call

Things to do at the start of a shift:

- *Set your status*: click your name, then `Set status`, and pick the pager icon.
- *Turn on notifications for these channels for `All new messages`*:
  - `#ops-escalations`
  - `#incident-room`
- Read the handover issue of the previous shift.
"""

PLAYBOOK = """\
# Web application playbooks

## Connecting to the databases

Connect with the cloud CLI, read-only:

```sh
gcloud sql connect web-prod --user=readonly --database=web
```

## Invalidating all sessions

If every session has to end, you can run this on the `web` database to make all users sign
in again.

```sql
UPDATE accounts SET sessions_revoked_at = now();
```
"""

SUPPORT = """\
# Support team

## Measures of success

### Ticket response times

We track a few numbers each quarter.

Our main agreement with customers is the time to a first reply. We aim to meet this 95% of the
time.
"""

WORKFLOW = """\
# Support workflow

## First response SLA

Support tickets get their first response within the first-response SLA: the support engineer
answers every support ticket on time, with a helpful reply that shows progress.
"""

FILES = {
    "runbooks/disk-space.md": DISK,
    "runbooks/alert-routing.md": ROUTING,
    "handbook/chat.md": CHAT,
    "handbook/data-policy.md": RETENTION,
    "runbooks/console-access.md": CONSOLE,
    "alerts/NodeContainerStartSlow.md": SIBLING,
    "alerts/NodeEventLoopLagHigh.md": NAMED,
    "alerts/NodeSecretSyncStalled.md": PRIVATE,
    "runbooks/oncall-checklist.md": CHECKLIST,
    "runbooks/web-playbooks.md": PLAYBOOK,
    "handbook/support.md": SUPPORT,
    "handbook/support-workflow.md": WORKFLOW,
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory, dense):
    with services_over(tmp_path_factory.mktemp("line-asked-for"), FILES) as built:
        yield built


def ask(kb, question: str, identity: Identity = ANON):
    services, _ = kb
    return services.answers.answer(question, identity, use_cache=False)


def answered(kb, question: str):
    """The answer, which must not be an abstention (its reason shown if it is)."""
    answer = ask(kb, question)
    assert not answer.abstained, answer.reason
    return answer


def test_a_step_brings_the_paragraph_that_holds_its_command(kb):
    answer = answered(kb, "disk almost full but du doesn't add up, a process holds removed files "
                          "open - how do I check?")
    assert "sudo lsof +L1" in answer.answer
    assert answer.citations[0].path == "runbooks/disk-space.md"


def test_a_sentence_that_announces_code_brings_the_code(kb):
    answer = ask(kb, "want slo alerts for my team sent to our slack channel, what do i set "
                     "in teams.yml")
    assert "route_slo_alerts_to_channel: true" in answer.answer
    cited = next(c for c in answer.citations if "route_slo_alerts_to_channel" in c.quote)
    # The citation's lines reach down over the code block.
    assert "route_slo_alerts_to_channel" in cited_lines(kb[1], cited)


def test_the_row_asked_after_is_not_taken_for_a_restatement(kb):
    answer = ask(kb, "retention for customer & trial chat channels?")
    assert "5 years" in answer.answer
    assert "Customer and trial channels" in answer.answer


def test_an_html_table_inside_markdown_is_read_as_a_table(kb):
    outline = build_outline(RETENTION, "text/markdown", title="Data management policy")
    table = next(b for s in outline.sections for b in s.blocks if b.kind == "table")
    assert table.header == ["System", "Data", "Retention period"]  # bold first row
    assert table.rows[1] == ["Dedicated instances", "Customer data and code",
                             "Deleted 12 days after contract termination"]
    lines = RETENTION.split("\n")  # the table's lines in the file, 1-based
    assert (table.start_line, table.end_line) == (lines.index("<table>") + 1,
                                                  lines.index("</table>") + 1)
    answer = ask(kb, "how long do we keep customer data on dedicated instances after the "
                     "contract is terminated")
    assert "12 days" in answer.answer
    assert answer.citations[0].path == "handbook/data-policy.md"


def test_a_flag_asked_for_by_the_word_flag(kb):
    assert asked_kinds(analyse("gate login flag to request the read only console role")) == [
        "flag"]
    answer = ask(kb, "gate login flag to request the read only console role")
    assert "--request-roles=console-readonly" in answer.answer


def test_an_alert_named_finds_its_own_runbook_before_a_siblings(kb):
    services, _ = kb
    question = "NodeEventLoopLagHigh - what's the p99 lag threshold in seconds"
    results = services.search.search(question, ANON, top_k=5)
    assert results[0].path == "alerts/NodeEventLoopLagHigh.md"
    # Its runbook writes "XX seconds": no value, so no answer, rather than the sibling's 45.
    answer = ask(kb, question)
    assert answer.abstained
    assert "in seconds" in answer.reason
    assert "45" not in answer.answer


def test_a_value_in_the_unit_asked_is_answered(kb):
    answer = answered(kb, "NodeContainerStartSlow - what's the p99 threshold in seconds")
    assert "45 seconds" in answer.answer


def test_the_sentence_that_states_the_value_asked_wins_over_one_about_the_subject(kb):
    answer = answered(kb, "support tickets: what % of the time are we supposed to hit the "
                          "first-response sla")
    assert "95%" in answer.answer
    assert answer.citations[0].path == "handbook/support.md"


def test_a_named_runbook_the_caller_may_not_read_is_not_looked_up(kb):
    services, _ = kb
    question = "NodeSecretSyncStalled firing, what do i do"
    paths = [r.path for r in services.search.search(question, ANON, top_k=10)]
    assert "alerts/NodeSecretSyncStalled.md" not in paths
    sre = Identity("kim", ("sre",))
    assert services.search.search(question, sre, top_k=3)[0].path == \
        "alerts/NodeSecretSyncStalled.md"


def test_a_list_item_that_announces_its_sub_items_brings_them(kb):
    answer = ask(kb, "starting my on-call shift, which channels should have notifications on "
                     "for all new messages")
    assert "#ops-escalations" in answer.answer and "#incident-room" in answer.answer


def test_a_sentence_that_says_run_this_brings_the_code_below_it(kb):
    answer = ask(kb, "need to force every user to sign in again, what sql")
    assert "UPDATE accounts SET sessions_revoked_at = now();" in answer.answer
    # "sql" asks for the kind of thing; the connect command that says "sql" is not it.
    assert "gcloud sql connect" not in answer.answer


def test_a_contraction_typed_without_its_apostrophe_is_no_unknown_name(kb):
    answer = ask(kb, "node agent event loop lag alert isnt real, what does it mean")
    assert "isnt" not in (answer.reason or "")


# The rules on their own ----------------------------------------------------------------------
def test_alert_names_are_words_with_inner_capitals():
    assert alert_names("etcdBackendQuotaLowSpace and KubePodCrashLooping firing") == [
        "etcdBackendQuotaLowSpace", "KubePodCrashLooping"]
    assert alert_names("GitLab.com is down, openShift and iPhone too") == []


def _result(path: str, title: str = "", heading: str = "", chunk: str = "c") -> SearchResult:
    return SearchResult(chunk_id=chunk, document_id=path, source="s", title=title,
                        heading=heading, text="t", score=0.5, path=path)


def test_a_runbook_is_named_by_its_file_title_or_top_heading():
    assert names_runbook(_result("alerts/KubePodCrashLooping.md"), "KubePodCrashLooping")
    assert names_runbook(_result("x.md", title="Kube Pod Crash Looping"), "KubePodCrashLooping")
    assert names_runbook(_result("x.md", heading="KubePodCrashLooping > Meaning"),
                         "KubePodCrashLooping")
    assert not names_runbook(_result("alerts/KubePodCrashLoopingTooLong.md"),
                             "KubePodCrashLooping")


def test_runbooks_first_keeps_the_rest_in_order_and_looks_up_only_when_missing():
    a, b, c = (_result(f"{n}.md", chunk=n) for n in ("Other", "KubePodCrashLooping", "Third"))
    looked: list[str] = []

    def lookup(name: str):
        looked.append(name)
        return []

    assert [r.chunk_id for r in runbooks_first("KubePodCrashLooping?", [a, b, c], lookup)] == [
        "KubePodCrashLooping", "Other", "Third"]
    assert looked == []
    assert runbooks_first("NoSuchAlertName fired", [a, c], lookup) == [a, c]
    assert looked == ["NoSuchAlertName"]


def test_kinds_asked_for():
    assert asked_kinds(analyse("which slack channels should i watch")) == ["channel"]
    assert "file" in asked_kinds(analyse("where do i bump the sshd limit"))
    assert "command" in asked_kinds(analyse("what sql resets it"))
    assert "duration" in asked_kinds(analyse("how fast do i need to be online"))
    assert "duration" in asked_kinds(analyse("how far back do the production logs go"))
    assert states_value("time", "online within half an hour of the page")


def test_values_asked_in_a_unit():
    assert asked_unit(analyse("how many seconds of latency triggers it")) == (
        "time", "how many seconds")
    assert asked_unit(analyse("default quota size in GB?"))[0] == "size"
    assert asked_unit(analyse("at what % does it fire"))[0] == "percent"
    # "in days" asks for a value only beside a word that asks for one.
    assert asked_unit(analyse("the credentials lapse in days, help")) is None
    assert states_value("time", "Final schedules are due by 1 December.")
    assert states_value("time", "at least two weeks ahead")
    assert not states_value("time", "a lag of XX seconds")
    assert not states_value("time", "the latency, in seconds, of the oldest job")
    assert states_value("size", "the quota is 8 GiB") and not states_value("size", "quota")
    assert asked_unit(analyse("max number of consecutive weeks someone can be on call"))[0] \
        == "time"
    assert asked_unit(analyse("max number of on-call weeks in a row"))[0] == "time"
    assert states_value("time", "at most 4 on-call weeks a quarter")
    assert states_value("time", "up to three consecutive weeks")
    assert asked_unit(analyse("what is the number of day-shift engineers")) is None
    assert asked_unit(analyse("what is the number of replicas")) is None


def test_money_asked_for():
    assert asked_unit(analyse("how much extra do we get paid per week on call")) == (
        "money", "how much extra do we get paid")
    assert asked_unit(analyse("how much is the on-call stipend"))[0] == "money"
    for other in ("how much memory should the pod get", "how much CPU does a retry cost",
                  "how much traffic can the payment service take",
                  "how much memory does the pay-api need",
                  "how much memory does the payment worker need",
                  "how much lag is there on the payment db",
                  "how much attention should we pay to this alert",
                  "how much data did the salary export job write",
                  "what is the compensation step of the checkout saga",
                  "what is the storage allowance per tenant"):
        assert asked_unit(analyse(other)) is None, other
    for amount in ("£50 per weekend shift", "a stipend of US$1,000 a month", "100 USD a week",
                   "EUR 20 for each page", "a stipend (£300 per week)", "$10k a year", "50€"):
        assert states_value("money", amount), amount
    for none in ("the pay is set by your manager", "run `cp $1 $2` first",
                 "```\nawk '{print $1, $3}'\n```", "version 1.2, 3 shifts"):
        assert not states_value("money", none), none


def test_what_a_value_is_of():
    assert value_subject(analyse("how much extra are we paid for working on a bank holiday")) \
        == {"work", "bank", "holiday"}
    assert value_subject(analyse("how much is the bank holiday pay")) == {"bank", "holiday"}
    assert value_subject(analyse("how many seconds?")) == set()
    # Function words go before stemming ("during" would be "dure"), modals with them.
    assert value_subject(analyse("how much should I be reimbursed during travel")) == {"travel"}


def test_a_new_value_is_never_a_restatement():
    q = analyse("retention for support & trial channels?")
    assert not restates(q, "Support & Trial channels: 5 years retention")
    assert restates(analyse("large number of overdue jobs in the queue"),
                    "Large number of overdue jobs in queue")


def test_a_named_runbook_without_steps_is_not_answered_by_a_siblings(kb):
    answer = ask(kb, "NodeEventLoopLagHigh firing, what do i do")
    assert all(c.path == "alerts/NodeEventLoopLagHigh.md" for c in answer.citations)
    assert "Cordon" not in answer.answer


PAY_FILES = {
    "handbook/on-call.md": """\
# Being on call

## The rotation

Each engineer is on call for one week at a time, Monday 10:00 to Monday 10:00, and hands over
in the team's channel.

## Pay

Each week on call earns a stipend of £300, paid with the next month's salary.

## Escalation

A page not acknowledged within 10 minutes goes to the secondary.
""",
    "handbook/travel.md": """\
# Travel

Book trains and flights through the travel desk.

Meals on business trips are reimbursed up to £25 a day with receipts.
""",
    "handbook/holidays.md": """\
# Holidays

Everyone has 25 days of annual leave a year, plus bank holidays.

Working on a bank holiday is agreed with your manager in advance, and the day is taken back
later in the year.
""",
}


@pytest.fixture(scope="module")
def pay_kb(tmp_path_factory, dense):
    with services_over(tmp_path_factory.mktemp("pay"), PAY_FILES) as built:
        yield built


def test_an_amount_asked_for_is_answered_with_its_amount(pay_kb):
    answer = answered(pay_kb, "how much extra do we get paid per week of on-call")
    assert "£300" in answer.answer
    assert answer.citations[0].path == "handbook/on-call.md"


def test_no_amount_written_is_no_answer(pay_kb):
    # The holidays page says how a bank holiday worked is made up, not what it pays; the
    # amounts of other pages (a stipend, meals) are not its answer.
    for question in ("how much extra are we paid for working on a bank holiday",
                     "how much is the bank holiday pay"):
        answer = ask(pay_kb, question)
        assert answer.abstained, answer.answer
        assert "no value for 'how much" in answer.reason
        assert "£" not in answer.answer
