"""Confluence attachments: text extraction from real files, and attachments end to end through
the fake site (both API flavours), the real pipeline, model and index."""

from __future__ import annotations

import io
import zipfile

import pytest
from pypdf import PdfReader, PdfWriter

from citewise.connectors.confluence.attachments import (
    AttachmentError,
    attachment_kind,
    docx_to_html,
    extract,
    pdf_to_html,
)
from citewise.connectors.confluence.config import ConfluenceConfig
from citewise.errors import SourceError
from citewise.types import Identity
from tests.connectors.confluence_site import connector, docs_by_title, run, serving
from tests.fakes.confluence_server import sample_site

ENG = Identity(user="bob", groups=("eng",))
SRE = Identity(user="carol", groups=("eng", "sre"))

PDF_NAME = "canary-policy.pdf"
DOCX_NAME = "rollout-plan.docx"
TXT_NAME = "custodians.txt"
PDF_TITLE = f"{PDF_NAME} (attachment of Deploy guide)"
DOCX_TITLE = f"{DOCX_NAME} (attachment of Deploy guide)"
TXT_TITLE = f"{TXT_NAME} (attachment of Payment key rotation)"


# Real files, built here ----------------------------------------------------------------------
def make_pdf(pages: list[str]) -> bytes:
    """A small valid PDF with one line of Helvetica text per page, written object by object
    (pypdf writes PDFs but cannot lay out text), with a correct cross-reference table."""
    n = len(pages)
    font = 3 + 2 * n
    objects = ["<< /Type /Catalog /Pages 2 0 R >>",
               "<< /Type /Pages /Kids [" + " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
               + f"] /Count {n} >>"]
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                       f"{4 + 2 * i} 0 R /Resources << /Font << /F1 {font} 0 R >> >> >>")
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            ).encode()
    return bytes(out)


W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _p(text: str, style: str | None = None, numbered: bool = False) -> str:
    ppr = ""
    if style or numbered:
        ppr = "<w:pPr>" + (f'<w:pStyle w:val="{style}"/>' if style else "") + (
            '<w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr>' if numbered else ""
        ) + "</w:pPr>"
    return f"<w:p>{ppr}<w:r><w:t xml:space=\"preserve\">{text}</w:t></w:r></w:p>"


def make_docx(body: str, styles: str | None = None) -> bytes:
    """A real .docx: the parts Word needs to open it, the document and (optionally) styles."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml",
                   '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"><Default Extension="rels" '
                   'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
                   '<Default Extension="xml" ContentType="application/xml"/><Override '
                   'PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
                   'officedocument.wordprocessingml.document.main+xml"/></Types>')
        z.writestr("_rels/.rels",
                   '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" '
                   'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
                   'officeDocument" Target="word/document.xml"/></Relationships>')
        z.writestr("word/document.xml",
                   f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W}">'
                   f"<w:body>{body}</w:body></w:document>")
        if styles:
            z.writestr("word/styles.xml", f'<w:styles xmlns:w="{W}">{styles}</w:styles>')
    return buf.getvalue()


ROLLOUT_DOCX = make_docx(
    _p("Rollout plan", "Heading1")
    + _p("Every checkout release starts behind the quokka feature flag.")
    + _p("Stages", "Heading2")
    + _p("Enable for staff accounts", numbered=True)
    + _p("Enable for one region", numbered=True)
    + "<w:tbl>"
    + "".join(f"<w:tr><w:tc>{_p(a)}</w:tc><w:tc>{_p(b)}</w:tc></w:tr>"
              for a, b in [("Stage", "Owner"), ("Staff", "Team Heron"), ("Region", "Team Ibis")])
    + "</w:tbl>"
)
CANARY_PDF = make_pdf([
    "Canary policy for the checkout service.",
    "The canary cohort receives five percent of checkout traffic for thirty minutes.",
])
CUSTODIANS_TXT = b"Opening the Northpay HSM requires a quorum of three key custodians.\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


# Extraction ---------------------------------------------------------------------------------
def test_pdf_text_comes_out_page_by_page():
    assert [p.extract_text() for p in PdfReader(io.BytesIO(CANARY_PDF)).pages][1].startswith(
        "The canary cohort")  # the hand-written PDF is valid for pypdf itself
    out = pdf_to_html(CANARY_PDF)
    assert out.index("<h2>Page 1</h2>") < out.index("Canary policy") < out.index(
        "<h2>Page 2</h2>") < out.index("five percent of checkout traffic")


def test_docx_headings_lists_and_tables_become_html():
    out = docx_to_html(ROLLOUT_DOCX)
    assert "<h1>Rollout plan</h1>" in out and "<h2>Stages</h2>" in out
    assert "<p>Every checkout release starts behind the quokka feature flag.</p>" in out
    assert "<ul>\n<li>Enable for staff accounts</li>\n<li>Enable for one region</li>\n</ul>" in out
    assert "<tr><td>Staff</td><td>Team Heron</td></tr>" in out
    # A German Word names its heading style id "berschrift1"; its style *name* says heading 1.
    german = make_docx(_p("Notfallplan", "berschrift1"),
                       styles='<w:style w:type="paragraph" w:styleId="berschrift1">'
                              '<w:name w:val="heading 1"/></w:style>')
    assert docx_to_html(german) == "<h1>Notfallplan</h1>\n"


def test_unreadable_files_give_clear_errors():
    with pytest.raises(AttachmentError, match="PDF could not be read.*corrupt"):
        pdf_to_html(CANARY_PDF[:200])
    writer = PdfWriter()
    writer.add_blank_page(100, 100)
    writer.encrypt("s3cret", algorithm="RC4-128")
    locked = io.BytesIO()
    writer.write(locked)
    with pytest.raises(AttachmentError, match="password-protected"):
        pdf_to_html(locked.getvalue())
    with pytest.raises(AttachmentError, match="encrypted .password-protected. or corrupt"):
        docx_to_html(b"\xd0\xcf\x11\xe0 an OLE container, as Word writes encrypted files")
    with pytest.raises(AttachmentError, match="not UTF-8"):
        extract("txt", b"caf\xe9")
    assert attachment_kind("diagram.png", "image/png") is None
    assert attachment_kind("NOTES", "text/markdown") == "md"  # no extension: by media type


def test_attachment_options_are_checked():
    config = ConfluenceConfig.from_options({"base_url": "https://x.atlassian.net"}, ["public"])
    assert config.attachments is False and config.max_attachment_bytes == 20 * 1024 * 1024
    assert config.attachment_types == ["docx", "md", "pdf", "txt"]
    with pytest.raises(SourceError, match=r"\['xlsx'\] are not supported"):
        ConfluenceConfig.from_options({"base_url": "https://x.atlassian.net", "attachments": True,
                                       "attachment_types": ["pdf", "xlsx"]}, ["public"])


# End to end ---------------------------------------------------------------------------------
@pytest.fixture
def site(monkeypatch):
    model, ids = sample_site(filler=2)
    ids["pdf"] = model.attach(ids["deploy"], PDF_NAME, "application/pdf", CANARY_PDF)
    ids["docx"] = model.attach(
        ids["deploy"], DOCX_NAME,
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document", ROLLOUT_DOCX)
    ids["png"] = model.attach(ids["deploy"], "topology.png", "image/png", PNG)
    ids["txt"] = model.attach(ids["keys"], TXT_NAME, "text/plain", CUSTODIANS_TXT)
    with serving(model, monkeypatch) as server:
        yield server, model, ids


@pytest.mark.parametrize("flavour", ["cloud", "datacenter"])
def test_attachments_are_documents_with_their_pages_readers(site, make_services, flavour):
    server, model, ids = site
    services = make_services()
    report = run(services, connector(server, flavour, attachments=True))
    assert report.status == "succeeded", report.summary()
    docs = docs_by_title(services)
    base = server.cloud_url if flavour == "cloud" else server.dc_url
    pdf = docs[PDF_TITLE]
    assert pdf.external_id == f"attachment:{ids['pdf']}"
    assert pdf.readers == docs["Deploy guide"].readers == ["group:eng"]
    assert docs[DOCX_TITLE].readers == ["group:eng"]
    assert docs[TXT_TITLE].readers == docs["Payment key rotation"].readers == ["group:sre"]
    assert not any("topology.png" in t for t in docs)  # not an admitted type: not listed
    assert len(docs) == 9 + 3  # the pages of test_confluence_sync's site (2 fillers) + 3 files
    assert pdf.metadata["attachment_of"] == str(ids["deploy"])
    assert pdf.metadata["breadcrumb"] == (
        f"Engineering > Engineering home > Deploy guide > {PDF_NAME}")
    assert pdf.metadata["media_type"] == "application/pdf"
    assert pdf.metadata["file_size"] == len(CANARY_PDF)

    # Text found only inside the PDF and the Word file; the hit links to the file itself.
    hit = services.search.search("How much checkout traffic does the canary cohort get?", ENG,
                                 top_k=1)[0]
    assert hit.title == PDF_TITLE and hit.heading == "Page 2"
    assert hit.url.startswith(f"{base}/download/attachments/{ids['deploy']}/{PDF_NAME}?")
    hit = services.search.search("Which team owns the regional stage of the rollout?", ENG,
                                 top_k=1)[0]
    assert hit.title == DOCX_TITLE and "Team Ibis" in hit.text

    # A restricted page's attachment is never retrieved by someone outside its readers.
    question = "How many custodians must open the Northpay HSM?"
    assert all(r.title != TXT_TITLE for r in services.search.search(question, ENG, top_k=30))
    assert services.search.search(question, SRE, top_k=1)[0].title == TXT_TITLE


def test_attachments_are_off_by_default(site, make_services):
    server, model, ids = site
    services = make_services()
    assert run(services, connector(server, "cloud")).status == "succeeded"
    docs = services.catalog.documents_of_source("wiki")
    assert docs and not any(ext.startswith("attachment:") for ext in docs)
    assert not any("/download/" in line or "attachments" in line for line in server.log)


def test_attachment_lifecycle_deletion_permissions_and_errors(site, make_services):
    server, model, ids = site
    services = make_services()
    conn = connector(server, "cloud", attachments=True, full_every_runs=100,
                     max_attachment_bytes=2000)
    bad = model.attach(ids["failover"], "broken.docx", "application/octet-stream", b"not a zip")
    big = model.attach(ids["failover"], "huge.txt", "text/plain", b"x" * 2001)
    report = run(services, conn)
    assert report.status == "partial", report.summary()
    errors = dict(report.errors)
    assert "encrypted (password-protected) or corrupt" in errors[f"attachment:{bad}"]
    assert "2001 bytes" in errors[f"attachment:{big}"]
    assert "max_attachment_bytes = 2000" in errors[f"attachment:{big}"]
    assert PDF_TITLE in docs_by_title(services)  # the rest went on

    # Fixed on the server: the failed attachment is read again by the next (incremental) run.
    model.pages[ids["failover"]].attachments[-2].data = make_docx(_p("Patroni switchover."))
    model.remove_attachment(big)
    report = run(services, conn)
    assert "broken.docx (attachment of Database failover)" in docs_by_title(services)
    # The too-big file, gone from its page, is looked up on retry and no longer reported.
    assert report.status == "succeeded" and not report.errors

    # Deleted on the server: an incremental run cannot see it; the next full listing prunes it.
    model.remove_attachment(ids["docx"])
    run(services, conn)
    assert DOCX_TITLE in docs_by_title(services)
    # Meanwhile a permission-only change on the page (no new version in Confluence).
    model.restrict(ids["deploy"], groups=("sre",))
    report = run(services, conn, force=True)
    docs = docs_by_title(services)
    assert DOCX_TITLE not in docs and report.counts.deleted == 1
    assert docs[PDF_TITLE].readers == docs["Deploy guide"].readers == ["group:sre"]
    assert all(r.title != PDF_TITLE for r in services.search.search(
        "canary cohort checkout traffic", ENG, top_k=30))
