"""Blob stores: the local folder and S3 through moto's real HTTP server on loopback."""

from __future__ import annotations

import pytest

from citewise.errors import BackendError, StoreUnavailableError
from citewise.index.blobs import LocalBlobStore, S3BlobStore, blob_key
from tests.kb import folder_source


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs")
    endpoint = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return S3BlobStore(bucket, prefix="test/", endpoint_url=endpoint, region="us-east-1",
                       access_key_id="test", secret_access_key="test")


def test_round_trip_is_content_addressed(store):
    data = b"# Runbook\n\nrestart the pods\n" * 100
    key = store.put(data)
    assert key == blob_key(data) and key.startswith("sha256/")
    assert store.exists(key)
    assert store.get(key) == data
    assert store.put(data) == key  # idempotent
    other = store.put(b"another document")
    assert other != key
    store.delete(key)
    assert not store.exists(key)
    with pytest.raises(KeyError):
        store.get(key)
    assert store.get(other) == b"another document"
    store.delete(key)  # deleting twice is fine


def test_s3_objects_live_under_the_prefix(s3_server, s3_bucket):
    import boto3

    store = S3BlobStore(s3_bucket, prefix="tenant-a/", endpoint_url=s3_server,
                        region="us-east-1", access_key_id="k", secret_access_key="s")
    key = store.put(b"hello")
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s")
    listed = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert listed == [f"tenant-a/{key}"]


def test_s3_missing_bucket_is_a_clear_error(s3_server):
    store = S3BlobStore("no-such-bucket", endpoint_url=s3_server, region="us-east-1",
                        access_key_id="k", secret_access_key="s")
    with pytest.raises(BackendError) as err:
        store.put(b"data")
    assert "no-such-bucket" in err.value.message
    assert "CITEWISE_S3" in err.value.hint
    # Every blob would fail alike: an ingest run stops at this one.
    assert isinstance(err.value, StoreUnavailableError)


def test_pipeline_stores_raw_bytes_in_s3(make_services, kb, s3_server, s3_bucket):
    from citewise.ingest.jobs import run_source

    services = make_services(blob_store="s3", s3_bucket=s3_bucket, s3_endpoint_url=s3_server,
                             s3_region="us-east-1", s3_access_key_id="k",
                             s3_secret_access_key="s")
    report = run_source(services.pipeline, folder_source(kb),
                        trigger="test")
    assert report.status == "succeeded"
    doc = services.catalog.documents_of_source("kb")["wiki/onboarding.html"]
    assert services.blobs.get(doc.blob_key) == (kb / "wiki/onboarding.html").read_bytes()
    (kb / "wiki/onboarding.html").unlink()
    run_source(services.pipeline, folder_source(kb),
               trigger="test")
    assert not services.blobs.exists(doc.blob_key)
