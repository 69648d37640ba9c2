"""The shared database's plumbing (``core/postgres.py``) against a real PostgreSQL server:
migrations run once however many replicas start together, a database that goes away is a
503-shaped ``BackendError`` (never a traceback), and the pool recovers by itself."""

from __future__ import annotations

import threading
import time

import pytest

from citewise.errors import BackendError, ConfigError
from citewise.postgres import PostgresDatabase, display_url
from citewise.store_schema import Migration, StoreSchema

# A migration that fails if it runs twice: CREATE TABLE without IF NOT EXISTS, and a row.
SCHEMA = StoreSchema("demo", (
    Migration("CREATE TABLE demo (n INTEGER); INSERT INTO demo VALUES (1);"),
    Migration("ALTER TABLE demo ADD COLUMN label TEXT;"),
))


def test_replicas_starting_together_migrate_once(postgres_url):
    errors: list[BaseException] = []
    opened: list[PostgresDatabase] = []
    start = threading.Barrier(6)

    def replica() -> None:
        try:
            start.wait()
            db = PostgresDatabase(postgres_url, pool_size=2)
            opened.append(db)
            db.migrate(SCHEMA)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=replica) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    db = opened[0]
    assert db.store_versions() == {"demo": 2}
    assert db.rows("SELECT n, label FROM demo") == [{"n": 1, "label": None}]
    for d in opened:
        d.close()


def test_a_newer_schema_is_refused(postgres_url):
    db = PostgresDatabase(postgres_url)
    db.migrate(SCHEMA)
    with pytest.raises(ConfigError, match="schema version 2, newer than this citewise"):
        db.migrate(StoreSchema("demo", SCHEMA.migrations[:1]))
    db.close()


def test_transactions_join_and_roll_back_whole(postgres_url):
    db = PostgresDatabase(postgres_url)
    db.migrate(SCHEMA)
    with pytest.raises(RuntimeError), db.transaction():
        db.execute("INSERT INTO demo (n) VALUES (2)")
        with db.transaction():  # a store method called inside joins the outer transaction
            db.execute("INSERT INTO demo (n) VALUES (3)")
        raise RuntimeError("the caller fails after both writes")
    assert db.rows("SELECT n FROM demo ORDER BY n") == [{"n": 1}]
    db.close()


def test_a_database_that_goes_away_is_a_backend_error_and_comes_back(postgres):
    url = postgres.create_database()
    db = PostgresDatabase(url, connect_timeout=1)
    db.migrate(SCHEMA)
    postgres.stop("immediate")
    try:
        with pytest.raises(BackendError, match="cannot be reached") as caught:
            db.ping()
        assert caught.value.status_code == 503 and "CITEWISE_DATABASE_URL" in caught.value.hint
    finally:
        postgres.start()
    # The pool replaces its dead connections by itself (retrying with a backoff): no restart
    # of ours, and no request needed to wake it.
    deadline = time.monotonic() + 30
    while True:
        try:
            db.ping()
            break
        except BackendError:
            assert time.monotonic() < deadline, "the pool did not reconnect within 30 s"
            time.sleep(0.2)
    assert db.rows("SELECT n FROM demo") == [{"n": 1}]
    db.close()


def test_an_unreachable_database_at_start_says_where_without_the_password():
    with pytest.raises(BackendError) as caught:
        PostgresDatabase("postgresql://citewise:s3cret@127.0.0.1:1/citewise", connect_timeout=1)
    assert "s3cret" not in str(caught.value) and "citewise:***@127.0.0.1:1" in str(caught.value)
    assert display_url("postgresql://u@h/db") == "postgresql://u@h/db"


def test_a_url_that_is_not_postgresql_is_refused_with_the_form_to_use():
    with pytest.raises(ConfigError, match="not a PostgreSQL URL") as caught:
        PostgresDatabase("mysql://u@h/db")
    assert "postgresql://user:password@host:5432/database" in caught.value.hint
