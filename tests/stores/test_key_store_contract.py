"""The API keys' contract (``api/identity/key_store.py``), through the key service, on every
backend."""

from __future__ import annotations

import hashlib

import pytest

from citewise.api.identity.keys import ApiKeys
from citewise.errors import AuthError, ConflictError, NotFoundError


def test_a_key_is_kept_as_a_hash_and_found_by_its_id(stores):
    key, secret = ApiKeys(stores.keys).create("ci-bot", "search,answer", principal="user:ci",
                                              limits=["answer_per_minute=5"])
    found, secret_hash = stores.keys.by_id(key.id)
    assert secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert found == key and stores.keys.get("ci-bot") == key
    assert found.scopes == {"search", "answer"} and found.limits == {"answer_per_minute": 5}
    assert stores.keys.by_id("nosuchkey0") is None and stores.keys.get("nope") is None


def test_a_revoked_key_is_refused_everywhere_and_keeps_its_name(stores, open_stores):
    keys = ApiKeys(stores.keys)
    _, secret = keys.create("old", "search")
    first = keys.revoke("old")
    assert first.revoked_at and first.status == "revoked"
    # Another process (a server beside the CLI) refuses it at its next request.
    other = ApiKeys(open_stores().keys)
    with pytest.raises(AuthError, match="revoked"):
        other.verify(secret)
    assert other.revoke("old").revoked_at == first.revoked_at  # revoked once, when it was
    with pytest.raises(ConflictError, match=r"already exists \(revoked\)"):
        keys.create("old", "search")
    with pytest.raises(NotFoundError):
        keys.revoke("never-made")


def test_active_keys_leave_out_revoked_and_expired_ones(stores):
    keys = ApiKeys(stores.keys)
    keys.create("a", "search")
    keys.create("b", "search", expires="1m")
    keys.create("c", "search")
    keys.revoke("c")
    assert keys.active_count() == 2
    assert stores.keys.active_count("2999-01-01T00:00:00+00:00") == 1  # b has expired by then
    assert [k.name for k in keys.list()] == ["a", "b", "c"]  # oldest first


def test_a_keys_last_use_is_recorded(stores):
    keys = ApiKeys(stores.keys)
    keys.create("bot", "search")
    assert keys.get("bot").last_used_at is None
    stores.keys.touch({"bot": "2026-03-01T10:00:00+00:00", "gone": "2026-03-01T10:00:00+00:00"})
    assert keys.get("bot").last_used_at == "2026-03-01T10:00:00+00:00"


def test_a_key_copies_whole_into_another_store_and_a_rerun_never_unrevokes_it(stores,
                                                                              other_stores):
    """What ``citewise migrate-catalog`` writes: the key under its id with its hash, its
    revocation and last use; copied again, a key revoked there stays revoked and its last use
    is the later one; another key by that name is refused."""
    keys = ApiKeys(stores.keys)
    bot, secret = keys.create("bot", "search,answer", principal="user:ci",
                              limits=["answer_per_minute=5"], expires="90d")
    stores.keys.touch({"bot": "2026-03-01T10:00:00+00:00"})
    _, old_secret = keys.create("old", "search")
    keys.revoke("old")
    for key in stores.keys.list():
        other_stores.keys.import_key(key, stores.keys.by_id(key.id)[1])
    copied = ApiKeys(other_stores.keys)
    assert other_stores.keys.list() == stores.keys.list()
    assert other_stores.keys.by_id(bot.id) == stores.keys.by_id(bot.id)
    assert copied.verify(secret).name == "bot"  # the secret still works there
    with pytest.raises(AuthError, match="revoked"):
        copied.verify(old_secret)

    copied.revoke("bot")  # revoked there after the first copy, and used later
    other_stores.keys.touch({"bot": "2026-04-01T10:00:00+00:00"})
    before = other_stores.keys.get("bot")
    other_stores.keys.import_key(stores.keys.get("bot"), stores.keys.by_id(bot.id)[1])
    assert other_stores.keys.get("bot") == before
    assert before.revoked_at and before.last_used_at == "2026-04-01T10:00:00+00:00"

    copied.create("ci", "search")
    stranger, _ = keys.create("ci", "admin")  # the same name, another key
    with pytest.raises(ConflictError):
        other_stores.keys.import_key(stranger, stores.keys.by_id(stranger.id)[1])
    assert other_stores.keys.get("ci").scopes == {"search"}
