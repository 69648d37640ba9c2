"""Confluence storage format (XHTML with ``ac:``/``ri:`` elements) -> clean HTML for the parser.

The spine's HTML parser (unstructured) turns ``h1``-``h6`` into headings with a depth, ``pre``
into code, ``table`` into rows, ``li`` into list items. So the job here is to keep those and
unwrap Confluence's own elements into them:

* code / noformat macros -> ``<pre><code class="language-x" data-language="x">``, code kept
  verbatim (it sits in CDATA), language kept;
* info / note / tip / warning / panel macros -> their body, the first paragraph prefixed with
  a bold label ("Warning:"), so the chunk still says it was a warning;
* layout, section, column, expand, excerpt and unknown macros with a rich-text body -> their
  body, transparently;
* macros that carry no content of their own (toc, children, page tree, anchors, Jira
  issue lists, attachments, ...) -> dropped, never dumped as markup;
* a single Jira issue (``jira`` macro with a ``key``) -> the issue key, linked to the issue when
  the source knows where Jira is (on-call pages cite their tickets);
* ``ac:link`` -> its link text (or the target page's title), ``ri:url`` targets kept as href;
* task lists -> list items marked ``[ ]`` / ``[x]``.

Storage format is documented by Atlassian as XHTML-based with these elements
(https://confluence.atlassian.com/doc/confluence-storage-format-790796544.html). It is XML, not
HTML: we parse it strictly, so a body that does not parse is a clear error for that one page,
never silently half-converted.
"""

from __future__ import annotations

import html
import re
from html.entities import name2codepoint
from urllib.parse import quote

from lxml import etree

from citewise.errors import DocumentError

AC = "http://atlassian.com/content"
RI = "http://atlassian.com/resource/identifier"
_NS = {"ac": AC, "ri": RI}

# Macros whose output is navigation or a live query, not content of the page itself.
CONTENTLESS_MACROS = frozenset({
    "toc", "toc-zone", "children", "pagetree", "pagetreesearch", "anchor", "recently-updated",
    "contentbylabel", "content-by-label", "livesearch", "search", "attachments", "jira",
    "jiraissues", "include", "excerpt-include", "profile", "profile-picture", "blog-posts",
    "create-from-template", "create-space-button", "space-details", "index", "navmap",
    "listlabels", "popular-labels", "related-labels", "gallery", "viewfile", "view-file",
    "multimedia", "widget", "roadmap", "network", "contributors", "contributors-summary",
    "page-index", "change-history", "tasks-report-macro", "detailssummary", "loremipsum",
})
ADMONITIONS = {"info": "Info", "note": "Note", "tip": "Tip", "warning": "Warning",
               "panel": None}  # a panel's label is its title, if it has one
CODE_MACROS = frozenset({"code", "noformat", "code-block"})
# Plain HTML kept as it is (attributes dropped, except a link's href).
_KEEP = frozenset({
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "table", "thead", "tbody",
    "tfoot", "tr", "th", "td", "blockquote", "pre", "code", "strong", "b", "em", "i", "u",
    "s", "del", "sub", "sup", "br", "hr", "a", "dl", "dt", "dd", "caption",
})
_BLOCK = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "table", "pre",
                    "blockquote", "dl", "hr"})
_ENTITY = re.compile(r"&([A-Za-z][A-Za-z0-9]*);")
_XML_ENTITIES = {"amp", "lt", "gt", "quot", "apos"}


class StorageFormatError(DocumentError):
    """A page body that is not well-formed storage format."""


def storage_to_html(storage: str, *, title: str = "", breadcrumb: str = "",
                    jira_url: str | None = None) -> str:
    """The page body as a small, clean HTML document whose ``<title>`` is the page title.

    The breadcrumb ("Space > Parent > Page"), when given, opens the body as a paragraph: the
    first chunk then carries where the page sits, which helps retrieval ("the payments
    runbook" finds pages under Payments > Runbooks), and a move re-indexes the page.
    """
    root = _parse(storage)
    body = _Converter(jira_url).children(root)
    head = f"<title>{html.escape(title)}</title>" if title else ""
    crumb = f"<p>{html.escape(breadcrumb, quote=False)}</p>\n" if breadcrumb else ""
    return f"<html><head>{head}</head><body>\n{crumb}{body}\n</body></html>\n"


def _parse(storage: str) -> etree._Element:
    # Storage format uses HTML named entities (&nbsp;, &mdash;) that XML does not define and
    # leaves the ac:/ri: prefixes undeclared: declare them and turn entities into numbers.
    def entity(m: re.Match) -> str:
        name = m.group(1)
        if name in _XML_ENTITIES:
            return m.group(0)
        code = name2codepoint.get(name)
        return f"&#{code};" if code else m.group(0)

    text = _ENTITY.sub(entity, storage)
    wrapped = f'<root xmlns:ac="{AC}" xmlns:ri="{RI}">{text}</root>'
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        return etree.fromstring(wrapped.encode("utf-8"), parser)
    except etree.XMLSyntaxError as e:
        raise StorageFormatError(
            f"page body is not well-formed storage format: {e.msg} "
            f"(line {e.lineno}, column {e.offset})"
        ) from None


def _local(el: etree._Element) -> tuple[str | None, str]:
    """(namespace prefix we know it by, local name) of an element."""
    if not isinstance(el.tag, str):
        return None, ""
    q = etree.QName(el)
    prefix = {AC: "ac", RI: "ri"}.get(q.namespace) if q.namespace else None
    return prefix, q.localname


def _attr(el: etree._Element, ns: str, name: str) -> str | None:
    return el.get(f"{{{_NS[ns]}}}{name}")


class _Converter:
    def __init__(self, jira_url: str | None = None) -> None:
        self.jira_url = jira_url

    def children(self, el: etree._Element) -> str:
        """The converted content of ``el``: its text, each child, each child's tail."""
        out = [html.escape(el.text or "", quote=False)]
        for child in el:
            out.append(self.element(child))
            out.append(html.escape(child.tail or "", quote=False))
        return "".join(out)

    def element(self, el: etree._Element) -> str:
        if not isinstance(el.tag, str):  # comments, processing instructions
            return ""
        prefix, name = _local(el)
        if prefix == "ac":
            return self.ac_element(el, name)
        if prefix == "ri":
            return ""  # resource identifiers only make sense inside a link or image
        if name in _KEEP:
            inner = self.children(el)
            if name == "br":
                return "<br/>"
            if name == "hr":
                return "<hr/>"
            if name == "a":
                href = el.get("href")
                attr = f' href="{html.escape(href)}"' if href else ""
                return f"<a{attr}>{inner}</a>"
            if name in ("th", "td"):
                span = "".join(f' {a}="{html.escape(value)}"'
                               for a in ("colspan", "rowspan") if (value := el.get(a)))
                return f"<{name}{span}>{inner}</{name}>"
            return f"<{name}>{inner}</{name}>"
        if name == "time":
            return html.escape(el.get("datetime") or el.text or "")
        # div, span, colgroup, unknown wrappers: keep what is inside, drop the wrapper.
        if name in ("colgroup", "col", "img"):
            return ""
        return self.children(el)

    # Confluence elements ------------------------------------------------------------------
    def ac_element(self, el: etree._Element, name: str) -> str:
        if name in ("structured-macro", "macro"):
            return self.macro(el)
        if name in ("layout", "layout-section", "layout-cell", "rich-text-body",
                    "inline-comment-marker", "adf-fallback"):
            return self.children(el)
        if name == "adf-extension":
            fallback = el.find("ac:adf-fallback", _NS)
            return self.children(fallback) if fallback is not None else ""
        if name == "link":
            return self.link(el)
        if name == "task-list":
            items = []
            for task in el.findall("ac:task", _NS):
                status = (task.findtext("ac:task-status", default="", namespaces=_NS) or "")
                body = task.find("ac:task-body", _NS)
                mark = "[x]" if status.strip() == "complete" else "[ ]"
                items.append(f"<li>{mark} {self.children(body) if body is not None else ''}</li>")
            return f"<ul>{''.join(items)}</ul>" if items else ""
        # image, emoticon, placeholder, parameter outside a macro: no text worth indexing.
        return ""

    def link(self, el: etree._Element) -> str:
        body = el.find("ac:link-body", _NS)
        plain = el.find("ac:plain-text-link-body", _NS)
        if body is not None:
            text = self.children(body)
        elif plain is not None:
            text = html.escape(plain.text or "", quote=False)
        else:
            page = el.find("ri:page", _NS)
            attachment = el.find("ri:attachment", _NS)
            if page is not None:
                text = html.escape(_attr(page, "ri", "content-title") or "", quote=False)
            elif attachment is not None:
                text = html.escape(_attr(attachment, "ri", "filename") or "", quote=False)
            else:
                text = html.escape(_attr(el, "ac", "anchor") or "", quote=False)
        url = el.find("ri:url", _NS)
        href = _attr(url, "ri", "value") if url is not None else None
        if href:
            return f'<a href="{html.escape(href)}">{text}</a>'
        return text

    def macro(self, el: etree._Element) -> str:
        name = (_attr(el, "ac", "name") or "").lower()
        params = {(_attr(p, "ac", "name") or ""): (p.text or "").strip()
                  for p in el.findall("ac:parameter", _NS)}
        if name in CODE_MACROS:
            return self.code(el, params)
        if name in ("jira", "jiraissues") and params.get("key"):
            key = html.escape(params["key"], quote=False)
            if self.jira_url:
                href = html.escape(f"{self.jira_url}/browse/{quote(params['key'])}")
                return f'<a href="{href}">{key}</a>'
            return key
        if name in CONTENTLESS_MACROS:
            return ""
        if name == "status":
            label = params.get("title") or params.get("colour") or ""
            return f"[{html.escape(label, quote=False)}]" if label else ""
        body = el.find("ac:rich-text-body", _NS)
        if name in ADMONITIONS:
            caption = params.get("title") or ADMONITIONS[name]
            inner = self.children(body) if body is not None else ""
            return _labelled(caption, inner)
        if body is not None:  # expand, details, section, column, excerpt, unknown: transparent
            title = params.get("title") if name == "expand" else None
            inner = self.children(body)
            return (f"<p>{html.escape(title, quote=False)}</p>" if title else "") + inner
        plain = el.find("ac:plain-text-body", _NS)
        if plain is not None and (plain.text or "").strip():
            return self.code(el, params)
        return ""  # a macro with no body of its own carries no content

    def code(self, el: etree._Element, params: dict) -> str:
        text = el.findtext("ac:plain-text-body", default="", namespaces=_NS) or ""
        text = text.strip("\n")
        if not text.strip():
            return ""
        language = re.sub(r"[^A-Za-z0-9_+#.-]", "", params.get("language", "")).lower()
        attrs = f' class="language-{language}" data-language="{language}"' if language else ""
        caption = params.get("title")
        head = f"<p>{html.escape(caption, quote=False)}</p>\n" if caption else ""
        return f"{head}<pre><code{attrs}>{html.escape(text, quote=False)}</code></pre>\n"


def _labelled(label: str | None, inner: str) -> str:
    """Put "Label:" in bold at the start of the body's first paragraph (or before the body)."""
    if not label:
        return inner
    tag = f"<strong>{html.escape(label.rstrip(':'), quote=False)}:</strong> "
    stripped = inner.lstrip()
    if stripped.startswith("<p>"):
        return "<p>" + tag + stripped[3:]
    if not stripped or stripped.startswith(tuple(f"<{b}" for b in _BLOCK)):
        return f"<p>{tag.strip()}</p>{inner}"
    return f"<p>{tag}{inner}</p>"
