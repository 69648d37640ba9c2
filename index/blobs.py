"""Raw source bytes, content-addressed: a local folder by default, any S3 API at scale.

Keys are ``sha256/<2 hex>/<64 hex>``, so the same bytes are stored once however many documents
or runs carry them, writes are idempotent, and a crash between writing a blob and recording it in
the catalog leaves at worst an orphan, never a wrong blob.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from citewise.errors import BackendError, ConfigError, StoreUnavailableError, write_failure
from citewise.private_files import FOLDER_MODE

if TYPE_CHECKING:  # boto3-stubs' S3 types: in the test extra only, never imported at run time
    from mypy_boto3_s3 import S3Client


def blob_key(data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    return f"sha256/{digest[:2]}/{digest}"


class BlobStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store bytes (if not already there) and return their key."""

    def get(self, key: str) -> bytes:
        """The bytes under key; ``KeyError`` when absent."""

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None:
        """Remove the blob; deleting an absent key is not an error."""

    def keys(self) -> Iterator[str]:
        """Every stored key (for checking the store against the catalog)."""

    def leftovers(self, older_than: float) -> list[str]:
        """Keys of partial writes older than ``older_than`` seconds (none for S3, where a put
        is atomic)."""


class LocalBlobStore:
    """Blobs as files under one folder (the data dir's ``blobs/``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # Restricted documents' bytes: folders 0700 (``mkstemp`` makes the files 0600).
        self.root.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)

    def _path(self, key: str) -> Path:
        if ".." in key or key.startswith("/"):
            raise ValueError(f"invalid blob key {key!r}")
        return self.root / key

    def put(self, data: bytes) -> str:
        key = blob_key(data)
        path = self._path(key)
        if path.exists():
            return key
        try:
            for folder in (path.parent.parent, path.parent):  # sha256/, then sha256/<2 hex>/
                folder.mkdir(exist_ok=True, mode=FOLDER_MODE)
            # Write then rename, so a crash never leaves a truncated blob under a valid key.
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            failure = write_failure(e, "the blob store", self.root)
            if failure is None:
                raise
            raise failure from e
        return key

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self) -> Iterator[str]:
        for path in sorted(self.root.glob("sha256/*/*")):
            if path.is_file() and not path.name.startswith(".tmp-"):
                yield path.relative_to(self.root).as_posix()

    def leftovers(self, older_than: float) -> list[str]:
        """Half-written blobs a killed process left (``put`` writes, then renames): never a
        live blob, and removable with ``delete`` once no write can still be under way."""
        cutoff = time.time() - older_than
        return [p.relative_to(self.root).as_posix()
                for p in sorted(self.root.glob("sha256/*/.tmp-*"))
                if p.is_file() and p.stat().st_mtime < cutoff]


S3_ATTEMPTS = 3  # per call, the first included
# Answers that every blob would get: the bucket or the credentials are wrong.
_REFUSED = {"NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
            "ExpiredToken", "InvalidToken", "AllAccessDisabled"}


class S3BlobStore:
    """Blobs in an S3-compatible bucket (AWS S3, Cloudflare R2, MinIO) through boto3."""

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        client: S3Client | None = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        if not bucket:
            raise ConfigError(
                "the S3 blob store needs a bucket", hint="set CITEWISE_S3_BUCKET"
            )
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self._client = client or boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            # Path-style works on every S3 clone. Retries ride out a blip, and are bounded so
            # that a dead endpoint costs a run seconds, not minutes: three attempts with up to
            # 1 s and 2 s of backoff (refused at once: 3 s at most; no answer: under a minute).
            config=Config(
                s3={"addressing_style": "path"},
                retries={"total_max_attempts": S3_ATTEMPTS, "mode": "standard"},
                connect_timeout=5,
                read_timeout=15,
            ),
        )

    def _where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" + (
            f" at {self.endpoint_url}" if self.endpoint_url else ""
        )

    def _fail(self, action: str, key: str, e: Exception) -> BackendError:
        """A failed call as the error to raise. An endpoint that does not answer (after the
        retries), fails, or refuses the bucket or the credentials fails every blob alike: that
        is a ``StoreUnavailableError``, which stops an ingest run at once."""
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

        what = f"could not {action} blob {key} in {self._where()}"
        if isinstance(e, ConnectionError | HTTPClientError):
            reason = str(e).split(":", 1)[0]  # the rest repeats the endpoint and the key
            return StoreUnavailableError(
                f"the blob store {self._where()} does not answer ({reason}; {S3_ATTEMPTS} "
                f"attempts to {action} a blob)",
                hint="check that the S3 endpoint is up and reachable from here "
                     "(CITEWISE_S3_ENDPOINT_URL); documents already indexed stay searchable, "
                     "and `citewise ingest` run again once it answers finishes the rest")
        error = e.response.get("Error", {}) if isinstance(e, ClientError) else {}
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) \
            if isinstance(e, ClientError) else 0
        hint = "check CITEWISE_S3_* settings, the bucket's existence and the credentials"
        if status >= 500:
            return StoreUnavailableError(f"the blob store {self._where()} is failing ({what}: "
                                         f"{e})", hint="try again once it recovers")
        if status == 403 or error.get("Code") in _REFUSED:
            return StoreUnavailableError(f"{what}: {e}", hint=hint)
        return BackendError(f"{what}: {e}", hint=hint)

    def put(self, data: bytes) -> str:
        key = blob_key(data)
        if self.exists(key):
            return key
        try:
            self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
        except Exception as e:  # botocore raises many unrelated types
            raise self._fail("store", key, e) from e
        return key

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            obj = self._client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            return obj["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise KeyError(key) from None
            raise self._fail("read", key, e) from e
        except Exception as e:
            raise self._fail("read", key, e) from e

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_object(Bucket=self.bucket, Key=self.prefix + key)
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._fail("look up", key, e) from e
        except Exception as e:
            raise self._fail("look up", key, e) from e

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as e:
            raise self._fail("delete", key, e) from e

    def keys(self) -> Iterator[str]:
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + "sha256/")
            for page in pages:
                for obj in page.get("Contents", []):
                    yield obj["Key"][len(self.prefix):]
        except Exception as e:
            raise self._fail("list", "sha256/", e) from e

    def leftovers(self, older_than: float) -> list[str]:
        return []  # a PUT is atomic: there are no partial objects
