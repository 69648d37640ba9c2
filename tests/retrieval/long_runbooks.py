"""Long runbooks, as organisations write them, each with one fact buried in one line.

Each is several hundred lines: an overview, diagnosis and mitigation steps with commands,
reference sections (a script's options, the keys a service writes, the files a role renders),
tables, and a FAQ. The fact a test asks for sits in one line of a long section that is not the
one the question's shape leads to. Built from parts so that the reference lists are as long as
real ones (a failover script with thirty options), while every line says something real.
"""

from __future__ import annotations

# (flag, what it does): the failover script's options, one of which skips the confirmation.
FAILOVER_OPTIONS = [
    ("--primary HOST", "the host to promote; defaults to the replica with the least lag."),
    ("--cluster NAME", "which Patroni cluster to act on, as named in `patronictl list`."),
    ("--dry-run", "print every command the script would run and exit without running them."),
    ("--wait SECONDS", "how long to wait for the new primary to accept writes (default 120)."),
    ("--no-fence", "leave the old primary's network fence off; only when it is already gone."),
    ("--fence-method METHOD", "`iptables` (default) or `shutdown` for fencing the old primary."),
    ("--lag-limit BYTES", "refuse to promote a replica further behind than this (default 16MB)."),
    ("--pgbouncer-reload", "reload every PgBouncer after the switch (on by default)."),
    ("--no-pgbouncer-reload", "leave PgBouncer alone; you reload it yourself afterwards."),
    ("--consul-wait SECONDS", "how long to wait for the Consul service to move (default 30)."),
    ("--skip-backup-check", "do not require a base backup younger than 24 hours."),
    ("--yes",
     "skip the interactive confirmation prompt; for unattended runs from the chatops bot."),
    ("--reason TEXT", "the reason written to the audit log and the incident channel."),
    ("--incident ID", "the incident the failover belongs to, linked in the audit log."),
    ("--log-file PATH", "where the transcript goes (default /var/log/gitlab/failover.log)."),
    ("--verbose", "print each step's commands and their output as they run."),
    ("--quiet", "print only errors and the final summary."),
    ("--json", "write the final summary as JSON, for the chatops bot."),
    ("--timeout SECONDS", "abort the whole run after this long (default 900)."),
    ("--max-connections N", "the connection limit set on the new primary (default 500)."),
    ("--replication-slot NAME", "the slot the old primary gets when it rejoins as a replica."),
    ("--rejoin", "rejoin the old primary as a replica once it is reachable again."),
    ("--no-rejoin", "leave the old primary out of the cluster; rebuild it later."),
    ("--sync-standby HOST", "the replica that becomes the synchronous standby afterwards."),
    ("--force-async", "allow promoting an asynchronous replica when no synchronous one is up."),
    ("--notify CHANNEL", "the Slack channel told about each step (default #database-ops)."),
    ("--no-notify", "tell nobody; for rehearsals in staging."),
    ("--environment ENV", "`gprd`, `gstg` or `pre`; required."),
    ("--check-only", "run the pre-flight checks and stop before fencing anything."),
    ("--version", "print the script's version and exit."),
]

_CHECKS = [
    ("replication lag", "`SELECT now() - pg_last_xact_replay_timestamp();` on each replica"),
    ("Patroni's view", "`gitlab-patronictl list` on any database node"),
    ("Consul's view", "`consul catalog nodes -service=db-replica`"),
    ("PgBouncer pools", "`gitlab-ctl pgb-console` then `SHOW POOLS;`"),
    ("disk space", "`df -h /var/opt/gitlab/postgresql`"),
    ("WAL archiving", "`SELECT * FROM pg_stat_archiver;` on the primary"),
    ("long transactions", "`SELECT pid, now() - xact_start FROM pg_stat_activity;`"),
    ("locks", "`SELECT * FROM pg_locks WHERE NOT granted;`"),
]


def failover_runbook() -> str:
    options = "\n".join(f"- `{flag}`: {what}" for flag, what in FAILOVER_OPTIONS)
    checks = "\n".join(
        f"{i}. Check {name}: {how}. Note the value in the incident channel before you go on;\n"
        f"   the post-incident review compares it with the value after the failover."
        for i, (name, how) in enumerate(_CHECKS, 1))
    history = "\n".join(
        f"| 2025-{m:02d}-1{m % 9} | {kind} | {minutes} min | {cause} |"
        for m, (kind, minutes, cause) in enumerate([
            ("planned", 4, "kernel upgrade of the primary"),
            ("unplanned", 11, "primary lost its disk"),
            ("planned", 3, "minor version upgrade"),
            ("unplanned", 17, "network partition between zones"),
            ("planned", 5, "instance type change"),
            ("unplanned", 9, "OOM kill of the postmaster"),
            ("planned", 4, "storage migration"),
            ("planned", 6, "Patroni upgrade"),
            ("unplanned", 14, "replica promoted by mistake during maintenance"),
            ("planned", 3, "certificate rotation"),
        ], 1))
    faq = "\n\n".join(
        f"### {question}\n\n{answer}" for question, answer in [
            ("Can I fail over during a deploy?",
             "No. Wait for the deploy to finish or cancel it first: migrations that run while "
             "the primary changes can leave the schema half applied."),
            ("What happens to running background jobs?",
             "Sidekiq jobs that held a connection fail and are retried by Sidekiq's own retry "
             "policy. Jobs that are not idempotent are listed in the Sidekiq handbook."),
            ("How long does a failover take?",
             "Four to six minutes end to end when the replicas are healthy; most of it is "
             "waiting for Consul and PgBouncer to notice the new primary."),
            ("Do I need to tell customers?",
             "For an unplanned failover, yes: the incident manager posts on the status page "
             "once writes are back."),
            ("What if two replicas are equally behind?",
             "Pick the one in the same zone as the old primary: PgBouncer's pools there are "
             "already warm."),
            ("Can the script run from my laptop?",
             "No. It runs from the console node, which holds the SSH keys and the Consul token "
             "it needs."),
        ])
    return f"""---
title: Patroni primary failover
service: patroni
owner: team-database-reliability
---
# Patroni primary failover

This runbook covers moving the primary role of a Patroni-managed PostgreSQL cluster to one of
its replicas, planned or not. Read the whole Mitigation section before you start: a failover
done halfway is worse than none. The database reliability team owns this runbook and reviews it
after every failover.

## Overview

GitLab.com's main database is a Patroni cluster of one primary and several replicas across
three zones. Consul tells clients which node is the primary, PgBouncer pools the connections in
front of it, and the application reaches the primary through PgBouncer only. A failover
therefore has four parts: fence the old primary, promote a replica, move Consul's service
record, and reload PgBouncer so that its pools point at the new primary.

Patroni fails over on its own when the primary's leader key expires. This runbook is for the
cases where it did not, or where a person decides to move the primary: maintenance, a primary
that answers health checks but not queries, or a primary whose disk is failing.

## When to use this runbook

- The `PatroniPrimaryUnreachable` alert fired and Patroni did not promote a replica within five
  minutes.
- A planned maintenance of the primary's host (kernel upgrade, instance type change).
- The primary accepts connections but every write times out.
- The primary's disk reports errors and a replica is healthy.

Do not use it for a replica that fell behind: that is the replication lag runbook.

## Diagnosis

Before anything is moved, find out what state the cluster is in:

{checks}

If Patroni already shows a new leader, stop here: the failover happened; go to Post-failover
checks.

## Mitigation

Fail over with the failover script from the console node, in this order:

1. Announce the failover in the incident channel and pause deploys with `/chatops run deploy pause`.
2. Run the pre-flight checks.
   ```bash
   sudo gitlab-failover --environment gprd --check-only
   ```
3. Run the failover, naming the replica to promote.
   ```bash
   sudo gitlab-failover --environment gprd --primary patroni-main-03 --reason "disk errors"
   ```
   The script asks you to confirm the replica before it fences the old primary.
4. Watch the script's transcript until it prints the summary.
5. Resume deploys with `/chatops run deploy resume`.

## The failover script

`gitlab-failover` lives on the console node and wraps `patronictl switchover` with the fencing,
Consul and PgBouncer steps this runbook describes. It logs every command it runs, and it stops
at the first step that fails, printing what to do next.

It refuses to run when the chosen replica is further behind than its lag limit, when no base
backup younger than a day exists, or when another failover is recorded as running in Consul.

### Options

The script takes these options:

{options}

Options can also be set in `/etc/gitlab-failover/defaults.conf`, one `option = value` a line;
the command line wins over the file.

### Exit codes

| Code | Meaning |
|---|---|
| 0 | The failover finished and the new primary accepts writes. |
| 1 | A pre-flight check failed; nothing was changed. |
| 2 | Fencing failed; the old primary may still accept writes. |
| 3 | Promotion failed; the cluster has no primary. Page the database on-call. |
| 4 | Consul or PgBouncer did not follow; the primary is up but unreachable. |
| 5 | The run was aborted after its timeout. |

## Post-failover checks

After the script prints its summary:

1. Check that `gitlab-patronictl list` shows the new leader and the old one as stopped or as a
   replica.
2. Check that Consul's `db-replica` and `master.patroni` records point at the right nodes.
3. Check the error rate on the web fleet's dashboard for five minutes.
4. Check that WAL archiving resumed on the new primary (`pg_stat_archiver`).
5. Open an issue to rebuild or rejoin the old primary.

## Replication and lag

Replicas stream WAL from the primary; their lag is the bytes of WAL they have not replayed. A
replica more than 16MB behind loses the writes in those bytes if it is promoted, which is why
the script refuses it unless told otherwise. Lag normally stays under 1MB; it grows during
large migrations and during backups, which read the whole disk.

The replication lag runbook explains how to find a replica's lag, why it grows and how to
rebuild a replica that cannot catch up.

## Failover history

| Date | Kind | Writes unavailable | Cause |
|---|---|---|---|
{history}

## FAQ

{faq}

## Related

- Replication lag runbook
- PgBouncer saturation runbook
"""


# Sections of the Rack Attack runbook that surround the one line about the ban key.
_RULES = [
    ("throttle_unauthenticated_api", "unauthenticated API requests", "3600", "per IP"),
    ("throttle_authenticated_api", "authenticated API requests", "7200", "per user"),
    ("throttle_unauthenticated_web", "unauthenticated web requests", "3600", "per IP"),
    ("throttle_authenticated_web", "authenticated web requests", "7200", "per user"),
    ("throttle_protected_paths", "sign-in and sign-up paths", "10", "per IP"),
    ("throttle_git_lfs", "Git LFS requests", "1000", "per user"),
    ("throttle_files_api", "the files API", "800", "per user"),
    ("throttle_deprecated_api", "deprecated API endpoints", "1800", "per user"),
    ("throttle_packages_api", "the packages API", "1000", "per IP"),
    ("throttle_search", "search requests", "30", "per user"),
]


_LIMIT_CHANGES = [
    ("2024-01-15", "throttle_authenticated_api", "2000", "7200", "customers' CI bursts"),
    ("2024-02-02", "throttle_protected_paths", "20", "10", "credential stuffing on sign-in"),
    ("2024-03-11", "throttle_search", "60", "30", "search cluster saturation"),
    ("2024-04-08", "throttle_git_lfs", "500", "1000", "large LFS pushes failing"),
    ("2024-05-20", "throttle_files_api", "400", "800", "the web IDE's file reads"),
    ("2024-06-03", "throttle_unauthenticated_web", "5000", "3600", "scrapers of public projects"),
    ("2024-07-22", "throttle_packages_api", "500", "1000", "package managers' retries"),
    ("2024-08-19", "throttle_deprecated_api", "3600", "1800", "moving clients off v3"),
    ("2024-09-30", "throttle_unauthenticated_api", "7200", "3600", "anonymous API crawlers"),
    ("2024-11-04", "throttle_authenticated_web", "3600", "7200", "large merge request pages"),
    ("2025-01-13", "throttle_search", "30", "30", "reviewed, unchanged"),
    ("2025-02-24", "throttle_protected_paths", "10", "10", "reviewed, unchanged"),
]
_INVESTIGATION = [
    "Ask the customer for the exact time, the endpoint and the address their requests come "
    "from.",
    "Open the rate limiting dashboard at that time and filter the top talkers by the address.",
    "Read which rule throttled them in the `rack_attack` log field of the Kibana index "
    "`pubsub-rails-inf-gprd`.",
    "Compare their request rate with the rule's limit in the Rules table above.",
    "If they share an egress address, tell them: the limit is per address, not per customer.",
    "If their use is legitimate and steady, open a change request for the allowlist.",
    "If their client retries in a tight loop, point them at the `Retry-After` header, which "
    "says when the period ends.",
    "Write what you found in the support ticket so that the next engineer does not repeat it.",
]


def rack_attack_runbook() -> str:
    changes = "\n".join(f"| {day} | `{rule}` | {old} | {new} | {why} |"
                        for day, rule, old, new, why in _LIMIT_CHANGES)
    investigation = "\n".join(f"{i}. {step}" for i, step in enumerate(_INVESTIGATION, 1))
    rules = "\n".join(f"| `{name}` | {what} | {limit} | {scope} |"
                      for name, what, limit, scope in _RULES)
    steps = "\n".join(
        f"{i}. {step}" for i, step in enumerate([
            "Find the offending address in the rate limiting dashboard's top talkers panel.",
            "Check whether it belongs to a customer on the allowlist (`gitlab-rails runner "
            "'puts Gitlab::RackAttack.allowlisted?(\"<ip>\")'`).",
            "If it is not allowlisted and keeps hitting the limits, ban it for the usual hour "
            "with `gitlab-rails runner 'Gitlab::RackAttack.ban!(\"<ip>\")'`.",
            "Record the ban in the incident issue with the address and the reason.",
            "If the traffic comes from a whole range, block the range at the edge instead "
            "(the Cloudflare traffic runbook).",
            "Watch the 429 rate on the dashboard for ten minutes.",
        ], 1))
    paragraphs = "\n\n".join([
        "Rack Attack is the Rack middleware that throttles and bans clients of GitLab.com's web "
        "and API fleets. Each rule counts requests per client in Redis and answers 429 once the "
        "client goes over the limit for the period.",
        "The counters live in the rate limiting Redis (`redis-ratelimiting`), not the cache "
        "Redis. Losing that Redis resets every counter, which is harmless: clients start "
        "counting again.",
        "A ban is stronger than a throttle: every request from a banned address gets a 403 "
        "until the ban lifts, whatever the endpoint.",
    ])
    storage = "\n\n".join([
        "Counters are Redis keys named after the rule and the client, such as "
        "`cache:rack::attack:<period>:throttle_authenticated_api:user:123`. They expire at the "
        "end of their period.",
        "Allow2Ban keeps two keys per address. The count key, "
        "`cache:rack::attack:allow2ban:count:<ip>`, counts failed sign-ins within the find time "
        "of 60 seconds.",
        "The ban key, `cache:rack::attack:allow2ban:ban:<ip>`, is written when an address goes "
        "over the limit. It is set with a TTL of 3600 seconds, so a ban lifts itself after an "
        "hour unless it is written again.",
        "Deleting the ban key lifts the ban at once; deleting the count key only forgets the "
        "failures counted so far.",
        "The keys are written with the `SET ... EX` command, so a Redis failover loses at most "
        "the last second of counts.",
    ])
    faq = "\n\n".join(
        f"### {question}\n\n{answer}" for question, answer in [
            ("A customer says they are throttled but they are under the limits",
             "They may share an egress address with others (a corporate proxy, a CI "
             "provider). Ask for their address and look it up on the dashboard."),
            ("Can we raise a limit for one customer?",
             "Not per customer: add their address to the allowlist instead, through a change "
             "request to the infrastructure team."),
            ("Why do throttled requests still reach the logs?",
             "Rack Attack answers before Rails, but Workhorse logs every request it proxies, "
             "429s included."),
            ("Do bans survive a deploy?",
             "Yes. They live in Redis, which deploys do not touch."),
        ])
    rows = "\n".join(f"- `{name}` throttles {what}: at most {limit} requests per period, "
                     f"counted {scope}." for name, what, limit, scope in _RULES)
    return f"""---
title: Rack Attack rate limiting
service: rack-attack
owner: team-scalability
---
# Rack Attack rate limiting

Everything about GitLab.com's application rate limits and IP bans: what the rules are, where
their state lives, and what to do when a client is hammering the site or a customer is limited
by mistake.

## Background

{paragraphs}

## Rules

The rules in force, from `config/initializers/rack_attack.rb` and the application settings:

| Rule | Applies to | Limit per period | Counted |
|---|---|---|---|
{rules}

In words:

{rows}

The period of every throttle is 60 seconds unless the application settings say otherwise.

## How the state is stored

{storage}

## Symptoms

- A spike of 429 responses on the web or API dashboards.
- Customers reporting "Retry later" pages or API errors with status 429.
- A single address among the top talkers of the rate limiting dashboard.
- The `RackAttackThrottleRateHigh` alert.

## Mitigation

When one address is hammering the site:

{steps}

To lift a ban early:

```bash
sudo gitlab-rails runner 'Gitlab::RackAttack.unban!("<ip>")'
```

## Investigating a throttled customer

When a customer says they are limited by mistake:

{investigation}

## History of limit changes

| Date | Rule | Old limit | New limit | Why |
|---|---|---|---|---|
{changes}

## Allowlist

The allowlist is the application setting `rate_limiting_allowlist`, a list of addresses and
ranges. Requests from them are never throttled or banned. Changing it is a change request: the
list is reviewed every quarter and each entry needs an owner and an expiry date.

## Dashboards and alerts

| Alert | Fires when | Severity |
|---|---|---|
| `RackAttackThrottleRateHigh` | more than 5% of requests are throttled for 10 minutes | s3 |
| `RackAttackBanSpike` | more than 50 addresses are banned within an hour | s2 |
| `RackAttackRedisDown` | the rate limiting Redis is unreachable | s2 |

## FAQ

{faq}
"""


# The files the HAProxy role renders on the frontend nodes.
_FILES = [
    ("/etc/haproxy/haproxy.cfg", "the main configuration, rendered from the role's template"),
    ("/etc/haproxy/errors/429.http", "the page served with a 429"),
    ("/etc/haproxy/errors/503.http", "the page served while a backend is down"),
    ("/etc/haproxy/maps/backends.map", "which host name goes to which backend"),
    ("/etc/haproxy/maps/canary.map", "the paths sent to the canary fleet"),
    ("/etc/haproxy/certs/", "the TLS certificates, one PEM per domain"),
    ("/etc/haproxy/allow-internal.lst", "the internal ranges allowed to reach admin paths"),
]


_PATTERNS = [
    ("Credential stuffing", "many sign-in attempts from a range of cloud addresses"),
    ("Registry pull storms", "one CI provider pulling the same image thousands of times"),
    ("Pages scraping", "a crawler fetching every Pages site at full speed"),
    ("Open redirect probing", "requests to `/-/redirect` with external targets"),
    ("Archive hammering", "repeated downloads of the same repository archive"),
    ("API enumeration", "walking project ids on `/api/v4/projects/:id` in order"),
    ("Raw file hotlinking", "another site embedding raw files of a public project"),
    ("Fake user agents", "a browser user agent with no cookies and no JavaScript"),
    ("Slowloris", "connections held open by sending headers one byte at a time"),
    ("Oversized uploads", "uploads just under the limit, over and over"),
]
_DIRECTIVES = [
    ("maxconn", "the most connections a frontend node accepts (50000)"),
    ("timeout client", "how long a client may stay silent (90s)"),
    ("timeout server", "how long a backend may take to answer (90s)"),
    ("timeout http-request", "how long a client may take to send its headers (10s)"),
    ("stick-table", "the per-address request counters used for the tarpit"),
    ("http-request tarpit", "holds abusive requests open before answering 500"),
    ("http-request deny", "answers 403 at once; used with the deny lists"),
    ("acl", "names a condition, such as a source address in a list"),
    ("use_backend", "picks the backend for a request by host name and path"),
    ("option forwardfor", "adds the client's address in X-Forwarded-For"),
    ("option httplog", "logs each request with its timings"),
    ("ssl-min-ver", "the oldest TLS version accepted (TLSv1.2)"),
]


def haproxy_runbook() -> str:
    patterns = "\n".join(f"- **{name}**: {what}." for name, what in _PATTERNS)
    directives = "\n".join(f"- `{name}`: {what}." for name, what in _DIRECTIVES)
    files = "\n".join(f"- `{path}`: {what}." for path, what in _FILES)
    backends = "\n".join(
        f"| `{name}` | {what} | {port} |" for name, what, port in [
            ("web", "the web fleet", 8181), ("api", "the API fleet", 8181),
            ("git_https", "Git over HTTPS", 8181), ("ssh", "Git over SSH", 2222),
            ("registry", "the container registry", 5000), ("pages", "GitLab Pages", 8090),
            ("websockets", "the websocket fleet", 8181), ("canary_web", "canary web", 8181),
        ])
    reasons = "\n\n".join([
        "HAProxy sits in front of every GitLab.com fleet. The frontend nodes terminate TLS for "
        "the domains that are not behind Cloudflare and route each request to a backend by host "
        "name and path.",
        "Most abusive traffic is stopped at Cloudflare. GitLab Pages and the container registry "
        "are not behind Cloudflare, so abuse of them is blocked here, at the frontend nodes.",
        "Blocking at HAProxy answers the request with a 403 before any backend sees it. The "
        "block is per address or per range, and it applies to every domain the node serves.",
        "The blocked IP addresses are listed in `/etc/haproxy/front-end-security/deny-403-ips.lst`,"
        " one address or CIDR range a line. Chef renders it from the `haproxy-frontend` role's "
        "`deny_403_ips` attribute, so an edit made by hand on a node is lost at the next run.",
        "Blocks are reviewed monthly; an entry that no longer sees traffic is removed.",
    ])
    return f"""---
title: Blocking abusive traffic at HAProxy
service: haproxy
owner: team-networking
---
# Blocking abusive traffic at HAProxy

How to stop a client that is abusing GitLab.com when Cloudflare cannot stop it: the domains
that do not go through Cloudflare, and the ranges that are better blocked before TLS.

## Background

{reasons}

## The frontend nodes

| Backend | Serves | Port |
|---|---|---|
{backends}

The frontend nodes are `fe-01` to `fe-12` in each zone. They all run the same role, so a block
reaches all of them within one chef run (up to 30 minutes, or at once with a forced run).

## Files on the frontend nodes

The role renders these files:

{files}

Never edit them by hand: chef overwrites them.

## Patterns of abuse seen before

{patterns}

Each of them has been blocked at the frontend nodes at least once; the incident issues are
linked from the networking team's tracker.

## Configuration reference

The role's template sets these directives:

{directives}

## Symptoms

- A surge of requests from one range on the HAProxy dashboards.
- The registry's or Pages' error rate rising while the web fleet is fine.
- `HAProxyBackendConnectionErrors` for the `registry` or `pages` backend.

## Mitigation

To block an address or a range:

1. Open a merge request to the chef-repo adding the range to the `haproxy-frontend` role's
   `deny_403_ips` attribute, with the incident link in the description.
2. Get it reviewed by another SRE and merge it.
3. Force a chef run on the frontend nodes.
   ```bash
   knife ssh 'roles:gprd-base-haproxy-frontend' 'sudo chef-client'
   ```
4. Check that the range now gets 403s in the HAProxy logs.
   ```bash
   sudo tail -f /var/log/haproxy.log | grep ' 403 '
   ```

To lift a block, revert the merge request and force a chef run the same way.

## Checking a node by hand

```bash
echo "show stat" | sudo socat stdio /run/haproxy/admin.sock | cut -d, -f1,2,18 | column -s, -t
```

The admin socket also answers `show info` and `show sess`, which list the node's sessions.

## Related

- Cloudflare traffic runbook
"""


def on_call_policy() -> str:
    """A team's on-call page: how fast to be online is one item of a list, among other lists
    and sentences that hold durations and numbers of their own, in words the question does not
    use ("notified", not "paged")."""
    return """---
title: Platform on-call policy
service: on-call
---
# Platform on-call policy

How the platform team runs its on-call rotation, and what it asks of whoever holds the pager.

## Before your shift

- Check that you can log in to the status page and to the paging tool.
- Make sure the paging app on your phone is allowed to ring in do-not-disturb mode.
- Read the handover notes the previous shift left in the rotation's document.

## While you hold the pager

- Be able to start investigating a problem within half an hour of being notified about it.
- Keep a laptop and a working internet connection with you.
- Hand over anything still open at the end of the shift, in the handover document.

## What contacts you

There are 2 reasons the paging tool might contact you:

1. An alert of severity one or two fired.
2. Someone raised an incident by hand and chose the platform team.

## Drills and checks

The uptime checker sends an alert after 5 mins of failed checks. A drill alert goes out every
Monday at 10am, and acknowledging it is enough.

## Swaps

If you need cover for a day or two, arrange a swap with another engineer on the rotation and
update the schedule yourself.
"""


def failed_pods_runbook() -> str:
    """An alert runbook whose threshold is in its rule ("count >= 200"), while its diagnosis
    queries hold numbers that are arguments ("== 1", "topk(5, ...)")."""
    return """# VirtPodsStuckFailed

## Meaning

Many virt-launcher pods remain in the `Failed` phase.

Condition: `cluster:virt_pods_failed:count >= 200` holds for 10 minutes. Mass failures point
at a migration loop, an image pull problem or a storage attach failure.

## Impact

- The API server and etcd slow down listing the failed pods.
- Dashboards time out on the pod lists.

## Diagnosis

1. Confirm the scope and where the failed pods are:
    ```promql
    cluster:virt_pods_failed:count
    ```
    ```promql
    count by (namespace) (kube_pod_status_phase{phase="Failed", pod=~"virt-launcher-.*"} == 1)
    ```
    ```promql
    topk(5, count by (node) (kube_pod_status_phase{phase="Failed"} == 1))
    ```
2. Read the events of a few failed pods:
    ```bash
    $ oc get events -A --field-selector reason=Failed | head -n 20
    ```

## Mitigation

1. Stop the migration loop: cancel the in-flight migrations.
2. Delete the failed pods:
    ```bash
    $ oc delete pods -A -l kubevirt.io=virt-launcher --field-selector=status.phase=Failed
    ```
3. Fix the cause (registry credentials, the CNI, the storage class) and watch the count fall.
"""
