"""Heading anchors, the way each kind of source renders them, so deep links land on the heading.

A style is ``fn(heading, title) -> anchor``: the innermost heading's text and the document's
title (some wikis put the page title into every anchor). Connectors pick a style with
``metadata["anchor_style"]``; the default is GitHub's, which most Markdown renderers share.
"""

from __future__ import annotations

import re
from collections.abc import Callable

AnchorStyle = Callable[[str, str], str]


def slugify(heading: str) -> str:
    """GitHub-style anchor: lowercase, punctuation dropped, spaces to dashes."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return re.sub(r"\s", "-", s)


def github_anchor(heading: str, title: str) -> str:
    return slugify(heading)


def confluence_server_anchor(heading: str, title: str) -> str:
    """Confluence Data Center / Server (and Cloud's legacy editor): ``<Title>-<Heading>`` with
    all whitespace removed, punctuation kept: "Deploy guide" / "Roll back" ->
    ``Deployguide-Rollback`` (the id the rendered page gives its ``<h2>``)."""
    return re.sub(r"\s+", "", title) + "-" + re.sub(r"\s+", "", heading)


def confluence_cloud_anchor(heading: str, title: str) -> str:
    """Confluence Cloud's editor: the heading text, case and punctuation kept, each run of
    whitespace turned into a dash: "Roll back now" -> ``Roll-back-now``. (Third-party tools that
    link into Confluence describe the same rule: Cloud only turns spaces into hyphens, Data
    Center prefixes the page title; e.g. the v1.2.0 release notes of wonseok-han/confluence-sync.
    Atlassian documents neither.)"""
    return re.sub(r"\s+", "-", heading.strip())


ANCHOR_STYLES: dict[str, AnchorStyle] = {
    "github": github_anchor,
    "confluence-server": confluence_server_anchor,
    "confluence-cloud": confluence_cloud_anchor,
}


def anchor_style(name: str | None) -> AnchorStyle:
    """The named style; an unknown name falls back to GitHub's rather than failing the document."""
    return ANCHOR_STYLES.get(name or "github", github_anchor)
