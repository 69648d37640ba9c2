"""A small knowledge base made for the learned ranking stage's tests: for each of a dozen
services, its runbook (the procedure under "Mitigation", the answer to "what do I do") and a
history page that talks about the service more (its words repeated under "Background"), so
the fused ranking tends to put the history page first, and a model can learn from labelled
questions that the procedure answers them."""

from __future__ import annotations

from pathlib import Path

from tests.kb import write

TOPICS = (
    ("kafka consumer lag", "KafkaConsumerLagHigh", "scale the consumer group"),
    ("redis memory evictions", "RedisEvictionsHigh", "raise maxmemory on the replica"),
    ("postgres replication lag", "PostgresReplicationLag", "restart the wal receiver"),
    ("nginx upstream errors", "NginxUpstream5xx", "drain the failing upstream"),
    ("dns resolution failures", "DnsResolutionFailing", "restart the coredns pods"),
    ("certificate expiry", "CertificateExpiringSoon", "renew the certificate with certbot"),
    ("disk space on build hosts", "BuildHostDiskFull", "prune the docker images"),
    ("elasticsearch cluster red", "ElasticsearchClusterRed", "reroute the unassigned shards"),
    ("queue backlog in the mailer", "MailerQueueBacklog", "add mailer workers"),
    ("cron job missed schedule", "CronJobMissedSchedule", "trigger the job by hand"),
    ("object storage errors", "ObjectStorageErrors", "fail over to the second bucket"),
    ("ledger posting latency", "LedgerPostingLatency", "pause the reconciliation batch"),
)


def slug(topic: str) -> str:
    return topic.replace(" ", "-")


def write_rank_kb(root: Path) -> Path:
    for topic, alert, fix in TOPICS:
        write(root, f"runbooks/{slug(topic)}.md", f"""
            # {alert}

            ## Meaning

            {alert} fires when the {topic.split()[0]} service misbehaves.

            ## Mitigation

            1. Confirm the alert on the dashboard.
            2. To fix it, {fix}.
            3. Watch the graph recover for ten minutes.
            """)
        write(root, f"history/{slug(topic)}.md", f"""
            # Notes on {topic}

            ## Background

            We have seen {topic} many times. {topic.capitalize()} was first seen in 2019;
            {topic} came back in 2021 and again in 2023, and every time {topic} was
            discussed at length in the review of {topic}.
            """)
    return root


def question(topic: str) -> str:
    return f"what do I do about {topic}"


def golden_rows(topics=TOPICS, split: str = "tune") -> list[dict]:
    return [{"question": question(t), "relevant": [f"rank/runbooks/{slug(t)}.md"],
             "answerable": True, "kind": "action", "must_contain_any": [fix],
             "split": split} for t, _, fix in topics]
