"""Readers and identities meet on one spelling of a principal (``citewise.types.principal``)."""

from __future__ import annotations

import pytest

from citewise.types import Identity, normalise_readers


@pytest.mark.parametrize(
    ("declared", "stored"),
    [
        (["Group:Security"], ["group:security"]),
        (["GROUP:SRE", "group:sre"], ["group:sre"]),  # one principal, listed once
        (["Dana"], ["user:dana"]),
        (["User:Dana@Example.com"], ["user:dana@example.com"]),
        ("Public", ["public"]),
    ],
)
def test_readers_are_stored_with_case_folded_names(declared, stored):
    assert normalise_readers(declared) == stored


def test_an_identity_matches_readers_whatever_the_case_either_side_used():
    # Identity providers send groups as they name them ("Security", "SRE"); people write
    # readers as they like ("Group:Security"). Neither may make a document match nobody.
    readers = set(normalise_readers(["Group:Security", "user:Dana"]))
    for caller in (Identity(groups=("security",)), Identity(groups=("SECURITY",)),
                   Identity(user="dana"), Identity(user="DANA", groups=("sre",))):
        assert readers & set(caller.principals()), caller
    assert not readers & set(Identity(user="li", groups=("sre", "Securities")).principals())


def test_principals_are_listed_once():
    assert Identity(user="Ana", groups=("SRE", "sre", "")).principals() == [
        "public", "user:ana", "group:sre"]
