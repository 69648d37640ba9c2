"""The one third-party file set the page serves: uPlot, the console's chart library.

Everything the repository holds is our own, so uPlot is not committed: ``make setup`` runs this
file, which downloads one exact npm tarball, checks it against the integrity hash pinned here (the
same ``sha512-...`` string the npm registry publishes in ``dist.integrity``), and unpacks the three
files the page needs into ``api/web/vendor/`` (ignored by git), where ``/ui/vendor/...`` serves
them. A checkout without them still works: the console shows its tables and says the charts are
missing. Standard library only, so any Python runs it before or without the virtualenv.

    python api/web_vendor.py                  # fetch (nothing to do when already there)
    python api/web_vendor.py --from FILE.tgz  # an air-gapped machine: the same tarball, copied in
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

NAME = "uplot"
VERSION = "1.6.32"
URL = f"https://registry.npmjs.org/uplot/-/uplot-{VERSION}.tgz"
INTEGRITY = ("sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/"
             "ep3tOkyTxpiQIw==")
# Tarball member -> the name it is served under (/ui/vendor/<name>).
MEMBERS = {"package/dist/uPlot.iife.min.js": "uPlot.iife.min.js",
           "package/dist/uPlot.min.css": "uPlot.min.css",
           "package/LICENSE": "uPlot.LICENSE.txt"}
VENDOR_DIR = Path(__file__).resolve().parent / "web" / "vendor"
STAMP = "VERSION"  # names the version unpacked, so a changed pin fetches again


class IntegrityError(RuntimeError):
    pass


def check_integrity(data: bytes, integrity: str = INTEGRITY) -> None:
    """Refuse anything but the exact tarball pinned (the registry's Subresource Integrity
    string: the algorithm, a dash, the base64 digest)."""
    algorithm, _, expected = integrity.partition("-")
    digest = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if digest != expected:
        raise IntegrityError(
            f"the downloaded {NAME} tarball is not the one pinned ({algorithm} {digest} != "
            f"{expected}): refusing to unpack it. A proxy or mirror changed it, or the pin in "
            f"api/web_vendor.py is wrong")


def unpack(data: bytes, dest: Path, version: str = VERSION) -> list[Path]:
    """The pinned members of the tarball, written under ``dest``; nothing else is extracted
    (no paths from the archive are trusted)."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member, name in MEMBERS.items():
            handle = archive.extractfile(member)
            if handle is None:
                raise IntegrityError(f"the {NAME} tarball has no file {member}")
            target = dest / name
            target.write_bytes(handle.read())
            written.append(target)
    (dest / STAMP).write_text(f"{NAME} {version}\n")
    return written


def present(dest: Path = VENDOR_DIR, version: str = VERSION) -> bool:
    stamp = dest / STAMP
    return (stamp.is_file() and stamp.read_text().split() == [NAME, version]
            and all((dest / name).is_file() for name in MEMBERS.values()))


def download(url: str = URL, timeout: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (a pinned https URL)
        return response.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=f"Fetch {NAME} {VERSION} (the console's charts) into {VENDOR_DIR}, checked "
                    "against the pinned sha512. The page works without it (tables only).")
    parser.add_argument("--from", dest="source", type=Path, metavar="FILE",
                        help=f"use this copy of {URL} instead of downloading it")
    parser.add_argument("--dest", type=Path, default=VENDOR_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.source is None and present(args.dest):
        (args.dest / STAMP).touch()  # newer than this file: make has nothing left to do
        print(f"{NAME} {VERSION} is already in {args.dest}")
        return 0
    try:
        data = args.source.read_bytes() if args.source else download()
    except OSError as e:
        print(f"could not fetch {URL}: {e}\nThe console will show tables without charts. On a "
              f"machine without internet, copy that file here and run: python "
              f"api/web_vendor.py --from uplot-{VERSION}.tgz", file=sys.stderr)
        return 2
    try:
        check_integrity(data)
    except IntegrityError as e:
        print(str(e), file=sys.stderr)
        return 3
    for path in unpack(data, args.dest):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
