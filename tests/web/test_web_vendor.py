"""api/web_vendor.py: the console's chart library is unpacked only from the exact tarball pinned
(its sha512), and only the files the page serves. Built from a tarball made here, so no network."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from citewise.api import web_vendor


def tarball(extra: dict[str, bytes] | None = None) -> bytes:
    files = {member: f"contents of {member}".encode() for member in web_vendor.MEMBERS}
    files["package/README.md"] = b"not wanted"
    files.update(extra or {})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_the_pinned_tarball_passes_and_any_other_is_refused():
    data = tarball()
    web_vendor.check_integrity(data, integrity(data))
    with pytest.raises(web_vendor.IntegrityError, match="not the one pinned"):
        web_vendor.check_integrity(tarball({"package/LICENSE": b"changed"}), integrity(data))


def test_only_the_served_files_are_unpacked(tmp_path: Path):
    written = web_vendor.unpack(tarball(), tmp_path)
    assert sorted(p.name for p in written) == sorted(web_vendor.MEMBERS.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*web_vendor.MEMBERS.values(), web_vendor.STAMP])
    assert (tmp_path / "uPlot.iife.min.js").read_bytes() == (
        b"contents of package/dist/uPlot.iife.min.js")
    assert web_vendor.present(tmp_path)
    assert not web_vendor.present(tmp_path, version="0.0.1")  # a changed pin fetches again


def test_a_tampered_copy_is_refused_and_nothing_is_written(tmp_path: Path, capsys):
    copy = tmp_path / "uplot.tgz"
    copy.write_bytes(tarball())  # not the registry's tarball: its sha512 differs from the pin
    dest = tmp_path / "vendor"
    assert web_vendor.main(["--from", str(copy), "--dest", str(dest)]) == 3
    assert "refusing to unpack" in capsys.readouterr().err
    assert not dest.exists()


def test_a_missing_copy_says_what_to_do(tmp_path: Path, capsys):
    assert web_vendor.main(["--from", str(tmp_path / "nope.tgz"),
                            "--dest", str(tmp_path / "vendor")]) == 2
    assert "--from uplot-" in capsys.readouterr().err
