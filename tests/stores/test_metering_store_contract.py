"""Metering's contract (``api/metering/store.py``): usage, the audit log and the token buckets,
through the services that keep them, on every backend."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from citewise.api.identity.keys import ApiKeys
from citewise.api.metering.audit import AuditLog
from citewise.api.metering.buckets import Policy, TokenBuckets
from citewise.api.metering.latency import percentile
from citewise.api.metering.store import Usage
from citewise.api.metering.usage import UsageLog

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def _usage(at: datetime, status: int = 200, key: str | None = "bot", **extra) -> Usage:
    return Usage(at.isoformat(timespec="seconds"), "user:dana", key, "/v1/search", "POST",
                 status, 10.0, results=2, **extra)


def test_each_request_is_counted_once_before_and_after_compaction(stores):
    log = UsageLog(stores.metering, stores.keys, raw_days=7, retention_days=400)
    for days, status in ((10, 200), (10, 429), (10, 500), (1, 200), (500, 200)):
        log.record(_usage(NOW - timedelta(days=days), status, cache_hits=1, saved_tokens=7))
    assert log.flush() == 5 and log.flush() == 0
    window = (NOW - timedelta(days=30), NOW)
    before = log.report(*window)
    assert [(r["principal"], r["requests"], r["errors"], r["denied"], r["results"],
             r["cache_hits"], r["saved_tokens"]) for r in before] == [
        ("user:dana", 4, 2, 1, 8, 4, 28)]
    assert log.compact(NOW) == 4  # three 10 days old, one past retention
    assert log.compact(NOW) == 0
    assert log.report(*window) == before  # folded, not lost and not counted twice
    assert log.report(NOW - timedelta(days=600), NOW)[0]["requests"] == 4  # 500 days: dropped
    by_key = log.report(*window, group_by="key")
    assert by_key[0]["key"] == "bot"
    by_day = {r["day"]: r["requests"] for r in log.report(*window, group_by="day")}
    assert by_day == {(NOW - timedelta(days=10)).date().isoformat(): 3,
                      (NOW - timedelta(days=1)).date().isoformat(): 1}


def test_a_request_with_a_key_records_when_the_key_was_last_used(stores):
    ApiKeys(stores.keys).create("bot", "search")
    log = UsageLog(stores.metering, stores.keys)
    log.record(_usage(NOW - timedelta(minutes=5)))
    log.record(_usage(NOW - timedelta(minutes=1)))
    log.record(_usage(NOW, status=401))  # a refusal is not a use
    log.flush()
    assert stores.keys.get("bot").last_used_at == (NOW - timedelta(minutes=1)).isoformat(
        timespec="seconds")


def test_the_audit_log_reads_newest_first_and_after_an_entry(stores, open_stores):
    audit = AuditLog(stores.metering)
    audit.record("key.create", actor="operator:ana", target="ci", detail={"scopes": ["search"]})
    audit.record("key.revoke", actor="operator:ana", target="ci", request_id="r2")
    audit.record("request.refused", actor="anonymous", outcome="denied", client="10.0.0.9")
    entries = AuditLog(open_stores().metering).read()
    assert [e["action"] for e in entries] == ["request.refused", "key.revoke", "key.create"]
    assert entries[0]["id"] > entries[1]["id"] > entries[2]["id"]
    assert entries[2]["detail"] == {"scopes": ["search"]} and entries[1]["request_id"] == "r2"
    assert entries[0]["outcome"] == "denied" and entries[0]["client"] == "10.0.0.9"
    assert [e["action"] for e in audit.read(after_id=entries[2]["id"])] == [
        "request.refused", "key.revoke"]
    assert [e["target"] for e in audit.read(action="key.revoke")] == ["ci"]
    assert len(audit.read(limit=1)) == 1
    assert audit.read(since="2999-01-01") == []


def test_a_buckets_level_survives_a_restart_and_refills(stores, open_stores):
    policy = Policy("answer-minute", "principal:user:dana|answer|minute", quota=3, window=60)
    buckets = TokenBuckets(stores.bucket_levels())
    now = time.time()
    for _ in range(3):
        assert buckets.take([policy], now=now).allowed
    buckets.flush()  # levels kept in memory are kept in the store now (shared ones were already)
    assert set(open_stores().metering.load_buckets()) == {policy.bucket}
    restarted = TokenBuckets(open_stores().bucket_levels())
    restarted.load()
    assert not restarted.take([policy], now=now).allowed  # no fresh allowance after a restart
    assert restarted.take([policy], now=now + 20).allowed  # 20 s refill one token of 3/min


def test_idle_buckets_are_forgotten(stores):
    stores.metering.save_buckets({"old": (1.0, 100.0), "new": (2.0, 5000.0)},
                                 forget_before=1000.0)
    assert stores.metering.load_buckets() == {"new": (2.0, 5000.0)}


def test_usage_audit_and_buckets_copy_into_another_store_once_and_in_order(stores,
                                                                           other_stores):
    """What ``citewise migrate-catalog`` reads and writes: the requests and audit entries
    under their own ids (a second copy adds nothing), the hours as they were folded, and what
    is appended there afterwards comes after them."""
    log = UsageLog(stores.metering, stores.keys, raw_days=7, retention_days=400)
    for days, status in ((10, 200), (10, 429), (1, 200), (0, 500)):
        log.record(_usage(NOW - timedelta(days=days), status, key=None if days else "bot",
                          cache_hits=1, saved_tokens=7, request_id=f"r{days}"))
    log.flush()
    log.compact(NOW)  # the two of 10 days ago become an hour
    audit = AuditLog(stores.metering)
    audit.record("key.create", actor="operator:ana", target="ci", detail={"scopes": ["x"]})
    audit.record("request.refused", actor="anonymous", outcome="denied", client="10.0.0.9")

    here, there = stores.metering, other_stores.metering
    requests, hours, entries = list(here.export_usage()), here.export_hourly_usage(), list(
        here.export_audit())
    assert len(requests) == 2 and len(hours) == 1 and hours[0].requests == 2
    assert [e.action for _, e in entries] == ["key.create", "request.refused"]
    assert there.import_usage(requests) == 2 and there.import_usage(requests) == 0
    there.import_hourly_usage(hours)
    there.import_hourly_usage(hours)  # replaced, not added to
    assert there.import_audit(entries) == 2 and there.import_audit(entries) == 0
    assert list(there.export_usage()) == requests and there.export_hourly_usage() == hours
    assert list(there.export_audit()) == entries
    window = (NOW - timedelta(days=30), NOW + timedelta(hours=1))
    for group in ("principal", "key", "day"):
        assert there.usage_report(*(t.isoformat() for t in window), group) == \
            here.usage_report(*(t.isoformat() for t in window), group)
    AuditLog(there).record("key.revoke", actor="operator:ana", target="ci")
    latest = AuditLog(there).read()
    assert [e["action"] for e in latest] == ["key.revoke", "request.refused", "key.create"]
    assert latest[0]["id"] > entries[-1][0]

    there.save_buckets(here.load_buckets() | {"p|answer|minute": (1.5, 1000.0)}, 0.0)
    assert there.load_buckets()["p|answer|minute"] == (1.5, 1000.0)


def test_providers_answers_and_latency_percentiles_survive_compaction(stores, other_stores):
    """The console's figures: per provider, answers against abstentions, and p50/p95 read from
    latency buckets, the same before the requests are folded into hours and after (and after
    a copy into another store)."""
    log = UsageLog(stores.metering, stores.keys, raw_days=7, retention_days=400)
    latencies = [10.0] * 10 + [100.0] * 8 + [2000.0, 5000.0]  # p50 10 ms, p95 2 s
    for i, ms in enumerate(latencies):
        answered = i % 4 != 0
        log.record(Usage((NOW - timedelta(days=10, minutes=i)).isoformat(timespec="seconds"),
                         "user:dana", "bot", "/v1/answer", "POST", 200, ms,
                         provider="primary" if i % 2 else None, tokens_in=5,
                         answers=int(answered), abstentions=int(not answered)))
    log.flush()
    window = (NOW - timedelta(days=30), NOW)

    def figures(report):
        return [(r["provider"], r["requests"], r["answers"], r["abstentions"], r["tokens_in"],
                 r["p50_ms"], r["p95_ms"]) for r in report]

    before = figures(log.report(*window, group_by="provider"))
    # Odd requests went to "primary" (5 of 10 ms, 4 of 100 ms, one of 5 s), even ones to no
    # model (5 of 10 ms, 4 of 100 ms, one of 2 s); every fourth abstained. Nearest rank over
    # the buckets (1.25^i ms), each value its bucket's upper bound: 10 ms reads 11.642
    # (1.25^11), 2 s 2465.19 (1.25^35), 5 s 6018.531 (1.25^39).
    assert before == [(None, 10, 5, 5, 50, 11.642, 2465.19),
                      ("primary", 10, 10, 0, 50, 11.642, 6018.531)]
    total = log.report(*window, group_by="all")
    assert [(r["all"], r["requests"], r["p50_ms"], r["p95_ms"]) for r in total] == [
        (None, 20, 11.642, 2465.19)]
    assert log.compact(NOW) == 20
    assert figures(log.report(*window, group_by="provider")) == before
    hours = stores.metering.export_hourly_usage()
    assert sum(sum(h.latency_counts.values()) for h in hours) == 20
    other_stores.metering.import_hourly_usage(hours)
    assert other_stores.metering.export_hourly_usage() == hours
    copied = UsageLog(other_stores.metering).report(*window, group_by="provider")
    assert figures(copied) == before


def test_the_daily_rows_hold_what_the_requests_and_hours_hold(stores, other_stores):
    """For whole days, the daily rows (``rollup.py``: what the console's 7- and 30-day views
    read) give every figure ``usage_report`` sums from the requests and hours, folded or not,
    and so does a copy of the store."""
    from tests.console_data import seed_console

    seed_console(stores, principals=4, sources=1, days=10, requests_per_day=6, now=NOW,
                 feedback=0)
    first, end = (NOW - timedelta(days=10)).date(), (NOW + timedelta(days=1)).date()
    since = datetime.combine(first, datetime.min.time(), UTC)
    until = datetime.combine(end, datetime.min.time(), UTC)

    def kept(store, lo: datetime, hi: datetime, group: str) -> dict:
        """The store's sums over the requests and hourly rows, as usage_report gives them."""
        return {r[group] or "": r for r in store.usage_report(
            lo.isoformat(timespec="seconds"), hi.isoformat(timespec="seconds"), group)}

    def compare(store) -> int:
        for dimension in ("principal", "key", "route", "provider"):
            daily = {r["name"]: r for r in store.usage_by_day(
                first.isoformat(), end.isoformat(), dimension, False)}
            report = kept(store, since, until, dimension)
            assert set(daily) == set(report) and len(daily) > 1, dimension
            for name, row in daily.items():
                assert {f: row[f] for f in counts} == {f: report[name][f] for f in counts}
                assert row["cost"] == pytest.approx(report[name]["cost_sum"], abs=1e-9)
                assert row["latency_counts"] == report[name]["latency_counts"], name
        per_day = {r["day"]: r["requests"] for r in store.usage_by_day(
            first.isoformat(), end.isoformat(), "all", True)}
        assert per_day == {day: r["requests"] for day, r in kept(store, since, until,
                                                                 "day").items()}
        return sum(per_day.values())

    counts = ("requests", "errors", "denied", "results", "tokens_in", "tokens_out",
              "cache_hits", "saved_tokens", "answers", "abstentions")
    total = compare(stores.metering)
    assert total > 100 and UsageLog(stores.metering).compact(NOW) == 0  # folded already
    # A window that is not whole days: the report adds the days' rows to the hours around
    # them, and gives what the requests and hours alone give.
    log = UsageLog(stores.metering)
    lo, hi = NOW - timedelta(days=8, hours=5, minutes=30), NOW - timedelta(hours=3)
    for group in ("principal", "key", "route", "provider", "day"):
        alone = kept(stores.metering, lo, hi, group)
        added = {r[group] or "": r for r in log.report(lo, hi, group)}
        assert set(added) == set(alone) and len(added) > 1, group
        for name, row in added.items():
            assert {f: row[f] for f in (*counts, "mean_latency_ms")} == {
                f: alone[name][f] for f in (*counts, "mean_latency_ms")}, (group, name)
            assert row["cost"] == pytest.approx(alone[name]["cost"], abs=1e-6)
            assert row["p95_ms"] == percentile(alone[name]["latency_counts"], 0.95)
    there = other_stores.metering
    there.import_usage(list(stores.metering.export_usage()))
    there.import_hourly_usage(stores.metering.export_hourly_usage())
    there.import_hourly_usage(stores.metering.export_hourly_usage())  # replaced, not added
    assert compare(there) == total
