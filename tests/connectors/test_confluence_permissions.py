"""Readers from space permissions, page restrictions and their inheritance."""

from __future__ import annotations

import pytest

from citewise.connectors.confluence.permissions import (
    NO_READERS,
    ReadRestriction,
    page_readers,
    space_readers,
)
from citewise.types import Identity

OPEN = ReadRestriction()
SRE = ReadRestriction(groups=("sre",))


def test_unrestricted_pages_take_the_space_readers():
    assert page_readers(["group:eng"], [OPEN, OPEN]) == ["group:eng"]


def test_a_parent_restriction_is_inherited_by_its_children():
    assert page_readers(["group:eng"], [OPEN, SRE, OPEN]) == ["group:sre"]


def test_restrictions_add_up_down_the_tree():
    child = ReadRestriction(users=("alice",), groups=("sre",))
    assert page_readers(["group:eng"], [SRE, child]) == ["group:sre"]
    # alice is named on the page but only covered by a group on the parent: we cannot see
    # group membership, so nobody named on both levels -> readable by nobody, never public.
    assert page_readers(["group:eng"], [SRE, ReadRestriction(users=("alice",))]) == [NO_READERS]


def test_undeterminable_means_restricted_never_public():
    assert page_readers(["public"], [OPEN, None]) == [NO_READERS]
    assert page_readers(None, [OPEN]) == [NO_READERS]
    # No identity can hold the sentinel principal.
    everyone = Identity(user="x", groups=("", "eng", "confluence-administrators"))
    assert NO_READERS not in everyone.principals()


def test_space_grants():
    assert space_readers([("group", "eng"), ("user", "acc-1"), ("role", "r")]) == [
        "group:eng", "user:acc-1"]
    assert space_readers([("anonymous", None)]) == ["public"]
    assert space_readers([("group", None)]) is None  # a group we could not name
    assert space_readers([]) is None


def test_restriction_from_api_payload():
    payload = {"user": {"results": [{"type": "known", "accountId": "557058:abc"}]},
               "group": {"results": [{"type": "group", "name": "sre", "id": "g1"}]}}
    r = ReadRestriction.from_api(payload, user_key="accountId")
    assert r.principals() == {"user:557058:abc", "group:sre"}
    with pytest.raises(ValueError):
        ReadRestriction.from_api({"user": {"results": [{"type": "known"}]}}, user_key="username")


def test_confluence_names_are_spelled_as_every_other_reader():
    # Confluence keeps a group's case ("Site-Admins"); an identity provider may send it as
    # "site-admins". Both sides fold case, and restrictions on two levels that name the same
    # group in two spellings still intersect.
    assert space_readers([("group", "Site-Admins"), ("user", "JDoe")]) == [
        "group:site-admins", "user:jdoe"]
    parent, page = ReadRestriction(groups=("SRE",)), ReadRestriction(groups=("sre", "Eng"))
    readers = page_readers(["group:eng"], [parent, page])
    assert readers == ["group:sre"]
    assert set(readers) & set(Identity(user="li", groups=("Sre",)).principals())
