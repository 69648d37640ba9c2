"""Confluence Data Center as its documentation and other connectors' recordings show it.

The fake (tests/fakes/confluence_server.py) answers in Data Center's documented shapes: space
permissions that name users by ``userKey`` only (9.1+), a 404 before 9.1 with JSON-RPC as the
way, a 500 for accounts without space-admin rights (CONFSERVER-99908), anonymous access on its
own endpoints, timestamps with the server's UTC offset, and CQL dates read in the server's zone.
The Cloud behaviour is covered, unchanged, by test_confluence_sync.py.
"""

from __future__ import annotations

from datetime import UTC, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from citewise.connectors.confluence.permissions import NO_READERS
from citewise.connectors.confluence.storage_format import storage_to_html
from citewise.types import Identity
from tests.connectors.confluence_site import connector, docs_by_title, run, serving
from tests.fakes.confluence_server import ConfluenceModel

ENG = Identity(user="bob", groups=("eng",))
DANA = Identity(user="dana.whitfield")
OUTSIDER = Identity(user="eve")
JIRA_PAGE = (
    '<h2>Timeline</h2><p>Checkout failed for 20 minutes; the follow-ups are in '
    '<ac:structured-macro ac:name="jira" ac:schema-version="1" ac:macro-id="a1a887df">'
    '<ac:parameter ac:name="server">JIRA (jira.fernhill.example)</ac:parameter>'
    '<ac:parameter ac:name="serverId">70d83bc8-0aff-3fa5-8121-5ae90121f5fc</ac:parameter>'
    '<ac:parameter ac:name="key">OPS-1423</ac:parameter></ac:structured-macro>.</p>'
)


def site(**server) -> tuple[ConfluenceModel, dict[str, int]]:
    """One space granted to a group and to a named user (as Confluence grants every space's
    creator), with an unrestricted page and a restricted one."""
    m = ConfluenceModel()
    for key, value in server.items():
        setattr(m, key, value)
    m.add_space("OPS", "Operations", [("group", "eng"), ("user", "dana.whitfield")])
    ids = {
        "runbook": m.add_page("OPS", "Failover runbook",
                              "<p>Promote the standby with patronictl failover.</p>"),
        "postmortem": m.add_page("OPS", "Checkout outage postmortem", JIRA_PAGE),
        "private": m.add_page("OPS", "On-call roster", "<p>Pager rota for December.</p>",
                              users=("dana.whitfield",)),
    }
    return m, ids


def search(services, query: str, who: Identity) -> list[str]:
    return [h.title for h in services.search.search(query, who, top_k=5)]


def test_a_user_grant_by_key_no_longer_hides_the_space(make_services, monkeypatch):
    model, ids = site()
    with serving(model, monkeypatch) as server:
        services = make_services()
        report = run(services, connector(server, "datacenter"))
        assert report.status == "succeeded", report.summary()
        docs = docs_by_title(services)
        assert docs["Failover runbook"].readers == ["group:eng", "user:dana.whitfield"]
        assert docs["On-call roster"].readers == ["user:dana.whitfield"]
        assert search(services, "promote the standby", ENG)[0] == "Failover runbook"
        assert search(services, "promote the standby", DANA)[0] == "Failover runbook"
        assert "Failover runbook" not in search(services, "promote the standby", OUTSIDER)
        # Each user key was resolved once, through /rest/api/user?key=.
        lookups = [e for e in server.log if "/rest/api/user?" in e]
        assert len(lookups) == 1 and "key=" in lookups[0]


def test_an_unresolvable_user_is_left_out_and_reported_not_fatal(make_services, monkeypatch):
    model, ids = site()
    model.add_space("SEC", "Security", [("group", "security"), ("user", "gone.user")])
    model.add_page("SEC", "Key rotation", "<p>Rotate the signing keys every quarter.</p>")
    model.user("gone.user")
    with serving(model, monkeypatch) as server:
        model.users.pop("gone.user")  # deactivated and purged: its key resolves to nothing
        services = make_services()
        report = run(services, connector(server, "datacenter"))
    assert report.status == "succeeded", report.summary()  # a warning, not a failure
    (warning,) = report.warnings
    assert warning.startswith("space SEC:") and "1 of the users and groups" in warning
    assert docs_by_title(services)["Key rotation"].readers == ["group:security"]


def test_before_9_1_permissions_come_from_json_rpc(make_services, monkeypatch):
    model, ids = site(dc_version=(8, 5))
    with serving(model, monkeypatch) as server:
        services = make_services()
        report = run(services, connector(server, "datacenter"))
        assert report.status == "succeeded", report.summary()
        assert any(e.startswith("POST /confluence/rpc/json-rpc/") for e in server.log)
    assert docs_by_title(services)["Failover runbook"].readers == [
        "group:eng", "user:dana.whitfield"]


def test_an_account_without_space_admin_gets_a_clear_error(make_services, monkeypatch):
    model, ids = site(space_admin=False)
    with serving(model, monkeypatch) as server:
        services = make_services()
        report = run(services, connector(server, "datacenter"))
        # Asked once: a 500 here is the server's answer for a missing permission, not an outage.
        assert sum("/space/OPS/permissions" in e for e in server.log) == 1
    assert report.status == "partial"
    (problem,) = report.run_errors
    assert "CONFSERVER-99908" in problem and "space-administrator" in problem
    assert "use_space_permissions = false" in problem
    assert docs_by_title(services)["Failover runbook"].readers == [NO_READERS]


@pytest.mark.parametrize(("site_lets_anonymous", "public"), [(True, True), (False, False)])
def test_anonymous_access_is_asked_for(make_services, monkeypatch, site_lets_anonymous, public):
    model, ids = site(anonymous_site_access=site_lets_anonymous)
    model.add_space("HB", "Handbook", [("group", "staff"), ("anonymous", "")])
    model.add_page("HB", "Expenses", "<p>Claim travel within thirty days.</p>")
    with serving(model, monkeypatch) as server:
        services = make_services()
        run(services, connector(server, "datacenter"))
    readers = docs_by_title(services)["Expenses"].readers
    assert readers == (["group:staff", "public"] if public else ["group:staff"])
    assert bool(search(services, "claim travel", Identity.anonymous())) == public


ZONES = {"UTC-05:00": timezone(timedelta(hours=-5)), "UTC+05:30": timezone(timedelta(hours=5,
                                                                                    minutes=30)),
         "UTC": UTC}


@pytest.mark.parametrize("zone", ZONES, ids=list(ZONES))
def test_an_edit_after_the_last_run_is_picked_up_whatever_the_servers_zone(make_services,
                                                                         monkeypatch, zone):
    model, ids = site(server_tz=ZONES[zone])
    with serving(model, monkeypatch) as server:
        services = make_services()
        conn = connector(server, "datacenter", full_every_runs=100, overlap_minutes=1)
        assert run(services, conn).status == "succeeded"
        model.tick(90)  # the next edit comes an hour and a half later
        model.edit(ids["runbook"], body="<p>Promote the standby with pg_ctl promote now.</p>")
        server.reset_log()
        report = run(services, conn)
        assert report.counts.updated == 1, report.summary()
        assert search(services, "pg_ctl promote", ENG)[0] == "Failover runbook"
        # Incremental: a CQL query, not a listing of the space.
        assert any("lastmodified" in e for e in server.log)
        assert not any("/rest/api/content?spaceKey" in e for e in server.log)


def test_a_configured_time_zone_is_used_daylight_saving_included(make_services, monkeypatch):
    new_york = ZoneInfo("America/New_York")
    model, ids = site(server_tz=new_york)
    with serving(model, monkeypatch) as server:
        services = make_services()
        conn = connector(server, "datacenter", full_every_runs=100, overlap_minutes=1,
                         timezone="America/New_York")
        run(services, conn)
        model.tick(30)
        model.edit(ids["private"], body="<p>Pager rota for January.</p>")
        server.reset_log()
        assert run(services, conn).counts.updated == 1
        (query,) = [e for e in server.log if "lastmodified" in e]
        mark = docs_by_title(services)["On-call roster"].updated_at
    # The CQL date is New York wall-clock time (minus the overlap), not UTC.
    from datetime import datetime
    from urllib.parse import unquote_plus

    written = unquote_plus(query).split('lastmodified >= "')[1][:16]
    local = datetime.fromisoformat(mark).astimezone(new_york)
    assert written <= local.strftime("%Y/%m/%d %H:%M")
    assert written >= (local - timedelta(minutes=40)).strftime("%Y/%m/%d %H:%M")


def test_a_jira_issue_macro_keeps_its_key(make_services, monkeypatch):
    html_plain = storage_to_html(JIRA_PAGE)
    assert "OPS-1423" in html_plain and "<ac:" not in html_plain
    linked = storage_to_html(JIRA_PAGE, jira_url="https://jira.fernhill.example")
    assert '<a href="https://jira.fernhill.example/browse/OPS-1423">OPS-1423</a>' in linked
    model, ids = site()
    with serving(model, monkeypatch) as server:
        services = make_services()
        run(services, connector(server, "datacenter"))
    hits = services.search.search("OPS-1423 follow-ups", ENG, top_k=1)
    assert hits[0].title == "Checkout outage postmortem" and "OPS-1423" in hits[0].text
