"""Text out of Confluence attachments: PDF, Word (.docx), plain text and Markdown.

What is stored and indexed is the extracted text, never the file: the pipeline redacts secrets
from every document's content before storing it, and that only works on text.

* **PDF** (pypdf): one section per page under a "Page N" heading, so a chunk keeps the page it
  came from and a citation can say so.
* **DOCX** (zipfile + lxml, no Word needed): paragraphs; Heading 1..6 styles become ``h1..h6``
  (looked up by style *name*, so localised style ids such as ``berschrift1`` work too); list
  paragraphs become list items; tables become HTML tables.
* **txt / md**: UTF-8 text as it is.

A file that cannot be read (encrypted, corrupt, not what its name says) raises
``AttachmentError`` with a message for the run report; the run goes on.
"""

from __future__ import annotations

import html
import io
import re
import zipfile

from lxml import etree

from citewise.errors import DocumentError

SUPPORTED_TYPES = ("pdf", "docx", "txt", "md")

_BY_EXTENSION = {".pdf": "pdf", ".docx": "docx", ".txt": "txt", ".md": "md",
                 ".markdown": "md"}
_BY_MEDIA_TYPE = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/x-markdown": "md",
}
# The media type of the extracted text, as the pipeline's parser knows them.
TEXT_MEDIA_TYPES = {"pdf": "text/html", "docx": "text/html", "txt": "text/plain",
                    "md": "text/markdown"}

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_HEADING_NAME = re.compile(r"^heading\s*([1-6])$", re.IGNORECASE)
# A zip bomb guard: document.xml of even a huge real report is a few tens of MB.
_MAX_XML_BYTES = 200 * 1024 * 1024


class AttachmentError(DocumentError):
    """One attachment could not be turned into text."""


def attachment_kind(file_name: str, media_type: str | None) -> str | None:
    """``pdf``, ``docx``, ``txt`` or ``md`` by the file's extension, else by its media type;
    None for anything else (images, spreadsheets, archives: not admitted)."""
    name = file_name.lower()
    for ext, kind in _BY_EXTENSION.items():
        if name.endswith(ext):
            return kind
    base = (media_type or "").split(";")[0].strip().lower()
    return _BY_MEDIA_TYPE.get(base)


def extract(kind: str, data: bytes, *, title: str = "") -> str:
    """The attachment's text: HTML for pdf and docx, the text itself for txt and md."""
    if kind == "pdf":
        body = pdf_to_html(data)
    elif kind == "docx":
        body = docx_to_html(data)
    elif kind in ("txt", "md"):
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise AttachmentError(
                f"the {kind} attachment is not UTF-8 text (byte {e.start})",
                hint="save it as UTF-8 in Confluence") from None
    else:
        raise AttachmentError(f"attachments of type {kind!r} are not supported")
    head = f"<title>{html.escape(title)}</title>" if title else ""
    return f"<html><head>{head}</head><body>\n{body}</body></html>\n"


# PDF ------------------------------------------------------------------------------------------
def pdf_to_html(data: bytes) -> str:
    from pypdf import PasswordType, PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many "encrypted" PDFs only carry permissions with an empty user password.
            try:
                opened = reader.decrypt("")
            except Exception:  # pypdf raises several kinds for ciphers it cannot handle
                opened = PasswordType.NOT_DECRYPTED
            if not opened:
                raise AttachmentError(
                    "the PDF is password-protected; its text cannot be read",
                    hint="attach a copy without a password, or leave it out of the index")
        out = []
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
            paragraphs = [p for p in paragraphs if p]
            if not paragraphs:
                continue
            out.append(f"<h2>Page {number}</h2>\n")
            out.extend(f"<p>{html.escape(p, quote=False)}</p>\n" for p in paragraphs)
        return "".join(out)
    except AttachmentError:
        raise
    except Exception as e:  # corrupt files fail deep inside pypdf, with many error types
        raise AttachmentError(
            f"the PDF could not be read ({type(e).__name__}: {_short(e)}); it may be corrupt",
            hint="open it in a PDF viewer; re-upload a repaired copy") from None


# DOCX -----------------------------------------------------------------------------------------
def docx_to_html(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            document = _read_part(z, "word/document.xml")
            if document is None:
                raise AttachmentError("the .docx has no word/document.xml; it is not a Word "
                                      "document", hint="check the file opens in Word")
            styles = _read_part(z, "word/styles.xml")
    except zipfile.BadZipFile:
        # Password-protected Office files are not zips at all (an OLE container).
        raise AttachmentError(
            "the .docx is not a valid Word file: it is encrypted (password-protected) or "
            "corrupt", hint="attach a copy without a password, or a repaired one") from None
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        root = etree.fromstring(document, parser)
        headings = _heading_styles(etree.fromstring(styles, parser) if styles else None)
    except etree.XMLSyntaxError as e:
        raise AttachmentError(f"the .docx is corrupt: its XML is not well-formed ({e})",
                              hint="open and save it again in Word") from None
    body = root.find(f"{{{W}}}body")
    if body is None:
        return ""
    out: list[str] = []
    in_list = False
    for el in body:
        item = False
        if el.tag == f"{{{W}}}p":
            text = _paragraph_text(el)
            style = _attr(el.find(f"{{{W}}}pPr/{{{W}}}pStyle"), "val")
            level = headings.get(style or "")
            item = el.find(f"{{{W}}}pPr/{{{W}}}numPr") is not None or (
                style or "").lower().startswith("listparagraph")
            if item and not level and text:
                if not in_list:
                    out.append("<ul>\n")
                    in_list = True
                out.append(f"<li>{html.escape(text, quote=False)}</li>\n")
                continue
            if in_list:
                out.append("</ul>\n")
                in_list = False
            if not text:
                continue
            if level:
                out.append(f"<h{level}>{html.escape(text, quote=False)}</h{level}>\n")
            else:
                out.append(f"<p>{html.escape(text, quote=False)}</p>\n")
        elif el.tag == f"{{{W}}}tbl":
            if in_list:
                out.append("</ul>\n")
                in_list = False
            out.append(_table(el))
    if in_list:
        out.append("</ul>\n")
    return "".join(out)


def _read_part(z: zipfile.ZipFile, name: str) -> bytes | None:
    try:
        info = z.getinfo(name)
    except KeyError:
        return None
    if info.file_size > _MAX_XML_BYTES:
        raise AttachmentError(f"the .docx's {name} unpacks to {info.file_size} bytes; refusing "
                              "(a zip bomb?)")
    return z.read(name)


def _attr(el, name: str) -> str | None:
    return None if el is None else el.get(f"{{{W}}}{name}")


def _heading_styles(styles) -> dict[str, int]:
    """Style id -> heading level. Word's ids are ``Heading1``.. in English installs but follow
    the language elsewhere; the style's *name* (``heading 1``) is the same everywhere."""
    levels = {f"Heading{n}": n for n in range(1, 7)}
    if styles is None:
        return levels
    for style in styles.iter(f"{{{W}}}style"):
        name = _attr(style.find(f"{{{W}}}name"), "val") or ""
        m = _HEADING_NAME.match(name.strip())
        sid = _attr(style, "styleId")
        if m and sid:
            levels[sid] = int(m.group(1))
    return levels


def _paragraph_text(p) -> str:
    parts = []
    for node in p.iter(f"{{{W}}}t", f"{{{W}}}tab", f"{{{W}}}br", f"{{{W}}}cr"):
        parts.append(node.text or "" if node.tag == f"{{{W}}}t" else " ")
    return " ".join("".join(parts).split())


def _table(tbl) -> str:
    rows = []
    for tr in tbl.iter(f"{{{W}}}tr"):
        cells = [" ".join(_paragraph_text(p) for p in tc.iter(f"{{{W}}}p")).strip()
                 for tc in tr.findall(f"{{{W}}}tc")]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c, quote=False)}</td>" for c in cells)
                    + "</tr>")
    return "<table><tbody>" + "".join(rows) + "</tbody></table>\n" if rows else ""


def _short(e: Exception, limit: int = 160) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + "..."
