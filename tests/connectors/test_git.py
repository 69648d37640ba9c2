"""The git connector against real repositories made in the test, and end to end through the
pipeline (real model, embedded Qdrant, SQLite, blob folder)."""

from __future__ import annotations

import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from citewise.connectors.base import SyncRequest
from citewise.connectors.git import GitConnector, classify
from citewise.errors import ConfigError, SourceError
from citewise.index.catalog import document_id
from citewise.index.vector_index import IndexFilter
from citewise.types import Identity
from tests.connectors.gitrepo import GitRepo

# Fake credentials, shaped like real ones. None of these may be found anywhere we store.
AWS_KEY_ID = "AKIAZ7QX3PLM4NR2TW5Y"
AWS_SECRET = "q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro"
KEY_MATERIAL = "MIIEpAIBAAKCAQEAz9FakeKeyMaterialOnlyForTestsXq7Lw2Rb8Nd4Vc"
SECRETS = (AWS_KEY_ID, AWS_SECRET, KEY_MATERIAL)
TEMPLATE = "https://github.com/acme/shop/blob/{commit}/{path}#L{start}-L{end}"

CLIENT = '''"""Payments client: talks to the payment provider, with retries."""

import time

DEFAULT_TIMEOUT_S = 5


class PaymentsClient:
    """Calls the payment provider's charge API."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    @property
    def retry_budget(self) -> int:
        """How many times a failed charge is retried before the client gives up."""
        return 3

    def charge(self, amount_cents: int) -> str:
        for attempt in range(self.retry_budget):
            time.sleep(0.1 * attempt)
        return "charged"


def provider_url(region: str) -> str:
    return f"https://pay.example.com/{region}"
'''

DEPLOY = """#!/usr/bin/env bash
set -euo pipefail

# The region comes from the environment, or the default for the current team.
pick_region() {
  local region="${DEPLOY_REGION:-eu-west-1}"
  echo "$region"
}

main() {
  region=$(pick_region)
  kubectl --context "$region" apply -f k8s/
}

main "$@"
"""

README = """# Shop

The shop's storefront and payment services.

## Deploying

Run `deploy/deploy.sh`; it picks the region from DEPLOY_REGION.

## Payments

The payments client retries failed charges (see app/payments/client.py).
"""

SECRETS_PY = f'''"""Credentials the integration tests once used (committed by mistake)."""

AWS_ACCESS_KEY_ID = "{AWS_KEY_ID}"
aws_secret_access_key = "{AWS_SECRET}"

SIGNING_KEY = """-----BEGIN RSA PRIVATE KEY-----
{KEY_MATERIAL}
Xk2Pq8Lm4Nz7Rt1Vb6Cw3Hy9Jd5Fg0Sa2Ue8Io4
-----END RSA PRIVATE KEY-----"""


def signing_key() -> str:
    return SIGNING_KEY
'''

SETTINGS = """payments:
  provider: northpay
  timeout_s: 5
storefront:
  replicas: 3
"""


@pytest.fixture
def repo(tmp_path) -> GitRepo:
    repo = GitRepo(tmp_path / "shop")
    repo.write("app/payments/client.py", CLIENT)
    repo.write("deploy/deploy.sh", DEPLOY)
    repo.write("README.md", README)
    repo.write("config/secrets.py", SECRETS_PY)
    repo.write("config/settings.yaml", SETTINGS)
    repo.write("assets/logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    repo.write("data/fixture.dat", b"header\0\x01\x02binary body")
    repo.write("vendor/lib/left-pad.js", "module.exports = s => s;\n")
    repo.write("package-lock.json", '{"lockfileVersion": 3}\n')
    repo.commit("Shop: first version")
    return repo


INDEXED = {"app/payments/client.py", "deploy/deploy.sh", "README.md", "config/secrets.py",
           "config/settings.yaml"}


def connector(repo_or_path, data_dir: Path, **options) -> GitConnector:
    if isinstance(repo_or_path, GitRepo):
        options.setdefault("path", str(repo_or_path.root))
    options.setdefault("url_template", TEMPLATE)
    return GitConnector.from_options(options, ["public"], data_dir=data_dir)


def run_sync(conn: GitConnector, state=None, retry=(), full=False, checkpoint=None):
    request = SyncRequest(state=state or {}, checkpoint=checkpoint, retry=list(retry), full=full)
    batches = list(conn.sync(request, batch_size=2))
    docs = {d.external_id: d for b in batches for d in b.documents}
    deleted = {e for b in batches for e in b.deleted}
    live = [b.live_ids for b in batches if b.live_ids is not None]
    states = [b.state for b in batches if b.state is not None]
    return docs, deleted, (live[0] if live else None), states[-1], batches


# The connector on its own --------------------------------------------------------------------
def test_first_sync_reads_the_tracked_text_files(repo, tmp_path):
    docs, deleted, live, state, batches = run_sync(connector(repo, tmp_path / "data"))
    ok = {e for e, d in docs.items() if d.error is None}
    assert ok == INDEXED
    # A NUL-bearing file with no binary extension is reported, not silently dropped.
    assert "binary" in docs["data/fixture.dat"].error
    assert "assets/logo.png" not in docs and "vendor/lib/left-pad.js" not in docs
    assert "package-lock.json" not in docs
    assert set(live) == INDEXED | {"data/fixture.dat"}
    assert deleted == set()
    assert state == {"commit": repo.head(), "ref": "HEAD"}
    assert batches[0].total == 6

    client = docs["app/payments/client.py"]
    assert client.media_type == "text/x-code"
    assert client.metadata["language"] == "python"
    assert client.metadata["repository"] == "shop"
    last = client.metadata["last_commit"]
    assert last["sha"] == repo.head() and last["author"] == "Ada Lovelace"
    assert client.link_template == TEMPLATE.replace("{commit}", repo.head()).replace(
        "{path}", "app/payments/client.py")
    assert client.url == f"https://github.com/acme/shop/blob/{repo.head()}/app/payments/client.py"
    assert docs["deploy/deploy.sh"].metadata["language"] == "shell"
    assert docs["config/settings.yaml"].metadata["language"] == "yaml"
    readme = docs["README.md"]
    assert readme.media_type == "text/markdown" and readme.title == "Shop"
    assert readme.link_template.endswith("/README.md#{anchor}")


def test_later_commits_touch_exactly_the_changed_paths(repo, tmp_path):
    data = tmp_path / "data"
    _, _, _, state, _ = run_sync(connector(repo, data))
    repo.write("app/payments/client.py", CLIENT.replace("return 3", "return 5"))
    repo.remove("config/settings.yaml")
    repo.move("deploy/deploy.sh", "deploy/release.sh")
    second = repo.commit("Retry more; drop settings; rename the deploy script")

    docs, deleted, live, new_state, _ = run_sync(connector(repo, data), state=state)
    assert set(docs) == {"app/payments/client.py", "deploy/release.sh"}
    assert deleted == {"config/settings.yaml", "deploy/deploy.sh"}
    assert live is None  # an incremental pass lists nothing
    assert new_state["commit"] == second
    assert docs["app/payments/client.py"].metadata["last_commit"]["sha"] == second
    assert second in docs["deploy/release.sh"].link_template

    # Nothing changed: nothing read.
    docs, deleted, _, _, _ = run_sync(connector(repo, data), state=new_state)
    assert docs == {} and deleted == set()


def test_unknown_or_rewritten_history_falls_back_to_a_full_comparison(repo, tmp_path):
    data = tmp_path / "data"
    docs, _, live, _, _ = run_sync(connector(repo, data), state={"commit": "0" * 40})
    assert set(live) >= INDEXED and {e for e, d in docs.items() if not d.error} == INDEXED

    _, _, _, state, _ = run_sync(connector(repo, data))
    repo.write("README.md", README + "\nMore.\n")
    indexed = repo.commit("Readme")
    # A force-push: the branch now points at a commit that does not descend from the old one.
    repo.git("reset", "--quiet", "--hard", "HEAD~1")
    repo.write("app/payments/client.py", CLIENT + "\n# rewritten\n")
    rewritten = repo.commit("Rewritten history")
    docs, _, live, new_state, _ = run_sync(connector(repo, data), state={"commit": indexed})
    assert live is not None and set(live) == INDEXED | {"data/fixture.dat"}
    assert new_state["commit"] == rewritten


def test_retried_failures_are_read_again_unless_still_the_same_broken_file(repo, tmp_path):
    data = tmp_path / "data"
    _, _, _, state, _ = run_sync(connector(repo, data))
    docs, _, _, _, _ = run_sync(connector(repo, data), state=state,
                                retry=["data/fixture.dat", "README.md"])
    # README failed downstream last time (say, a backend error): read it again. The binary
    # file is the same blob as before: saying so again every run helps nobody.
    assert set(docs) == {"README.md"}


def test_resumes_an_interrupted_pass_and_repeats_its_deletions(repo, tmp_path):
    data = tmp_path / "data"
    _, _, _, state, _ = run_sync(connector(repo, data))
    for name in ("a", "b", "c", "d"):
        repo.write(f"docs/{name}.md", f"# {name}\n\ntext {name}\n")
    repo.remove("config/settings.yaml")
    target = repo.commit("Docs")
    batches = connector(repo, data).sync(SyncRequest(state=state), batch_size=2)
    first = next(batches)
    # Items go in path order: the deletion of config/settings.yaml, then docs/a.md.
    assert first.deleted == ["config/settings.yaml"]
    assert [d.external_id for d in first.documents] == ["docs/a.md"]
    checkpoint = first.checkpoint
    assert checkpoint["target"] == target and checkpoint["done"] == 2
    repo.write("docs/e.md", "# e\n")
    head = repo.commit("One more")
    docs, deleted, _, new_state, _ = run_sync(connector(repo, data), state=state,
                                              checkpoint=checkpoint)
    assert deleted == {"config/settings.yaml"}  # repeated: deletions apply at the run's end
    assert set(docs) == {"docs/b.md", "docs/c.md", "docs/d.md", "docs/e.md"}
    assert new_state["commit"] == head


def test_submodule_corrupt_object_and_oversized_file_are_reported(repo, tmp_path):
    data = tmp_path / "data"
    other = GitRepo(tmp_path / "lib")
    other.write("lib.py", "x = 1\n")
    lib_head = other.commit("lib")
    # A gitlink entry, as `git submodule add` makes (without needing a remote).
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{lib_head},libs/lib")
    repo.write("docs/big.md", "# Big\n\n" + "word " * 400)
    repo.git("add", "docs/big.md")
    repo.commit("Submodule and a big file", add_all=False)  # add --all would drop the gitlink
    blob = repo.git("rev-parse", "HEAD:README.md")
    obj = repo.root / ".git" / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"not a zlib stream")

    docs, _, _, _, _ = run_sync(connector(repo, data, max_file_bytes=1000))
    assert "submodule" in docs["libs/lib"].error
    assert "missing or corrupt" in docs["README.md"].error
    assert "over the limit of 1000" in docs["docs/big.md"].error
    assert docs["app/payments/client.py"].error is None


def test_remote_clone_fetch_and_failures_never_show_the_token(repo, tmp_path, monkeypatch):
    data = tmp_path / "data"
    url = repo.root.as_uri()
    docs, _, _, state, _ = run_sync(connector(url, data, url=url, url_template=None))
    clones = list((data / "git").iterdir())
    assert len(clones) == 1 and clones[0].name.startswith("shop-")
    assert {e for e, d in docs.items() if not d.error} == INDEXED
    repo.write("README.md", README + "\nNew section.\n")
    head = repo.commit("Readme")
    docs, _, _, state, _ = run_sync(connector(url, data, url=url), state=state)
    assert set(docs) == {"README.md"} and state["commit"] == head

    token = "tok_Zq81Lm0Xr5Vn2Bc7"
    monkeypatch.setenv("SHOP_TOKEN", token)
    bad = connector(None, data, url="http://127.0.0.1:9/acme/shop.git", token_env="SHOP_TOKEN")
    with pytest.raises(SourceError) as err:
        run_sync(bad)
    message = f"{err.value} {err.value.hint}"
    assert "127.0.0.1:9" in message and "reached" in message
    assert token not in message
    for path in (data / "git").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes()

    with pytest.raises(SourceError, match="does not exist|no repository"):
        run_sync(connector(None, data, url=(tmp_path / "nowhere").as_uri()))
    with pytest.raises(ConfigError, match="token_env"):
        connector(None, data, url=f"https://bot:{token}@github.com/acme/shop.git")
    with pytest.raises(SourceError, match="SHOP_MISSING"):
        connector(None, data, url="https://github.com/acme/shop.git", token_env="SHOP_MISSING")


def test_link_styles_are_inferred_from_well_known_hosts(tmp_path):
    gh = GitConnector.from_options({"url": "git@github.com:acme/shop.git"}, ["public"],
                                   data_dir=tmp_path)
    assert gh.repository == "acme/shop"
    assert gh._template == "https://github.com/acme/shop/blob/{commit}/{path}#L{start}-L{end}"
    gl = GitConnector.from_options({"url": "https://gitlab.com/acme/infra/deploy.git"},
                                   ["public"], data_dir=tmp_path)
    assert gl._template == "https://gitlab.com/acme/infra/deploy/-/blob/{commit}/{path}#L{start}-{end}"
    bb = GitConnector.from_options(
        {"url": "https://git.acme.internal/scm/shop.git", "link_style": "bitbucket",
         "web_url": "https://bitbucket.acme.internal/projects/SHOP/repos/shop"},
        ["public"], data_dir=tmp_path)
    assert bb._template.endswith("/repos/shop/src/{commit}/{path}#lines-{start}:{end}")
    with pytest.raises(ConfigError, match="unknown field"):
        GitConnector.from_options({"path": ".", "url_template": "https://x/{sha}/{path}"},
                                  ["public"], data_dir=tmp_path)


@pytest.mark.parametrize("path, expected", [
    ("src/app.ts", ("text/x-code", "typescript")),
    ("Dockerfile", ("text/x-code", "dockerfile")),
    ("deploy/values.yaml.j2", ("text/x-code", "yaml")),
    ("docs/guide.md", ("text/markdown", None)),
    ("docs/index.html", ("text/html", None)),
    ("LICENSE", ("text/plain", None)),
    ("notes.rst", ("text/plain", None)),
])
def test_classify(path, expected):
    assert classify(path) == expected


# End to end through the pipeline --------------------------------------------------------------
def ingest(services, repo, **options):
    conn = connector(repo, services.pipeline.work_dir, **options)
    return services.pipeline.run("shop", "git", conn, config={"path": str(repo.root)},
                                 trigger="test")


def all_payloads(services) -> list[dict]:
    """Every point's payload: an exact dense search with a limit of every point."""
    n = services.index.count()
    hits = services.index.search(services.dense.embed_query("anything"), filter=IndexFilter(),
                                 limit=max(n, 1))
    assert len(hits) == n
    return [h.payload.to_payload() for h in hits]


def test_end_to_end_secrets_links_and_incremental_commits(make_services, repo):
    services = make_services()
    first_sha = repo.head()
    report = ingest(services, repo)
    assert report.status == "partial", report.summary()  # the binary fixture is reported
    assert report.counts.added == 5 and report.counts.failed == 1
    assert [e for e, _ in report.errors] == ["data/fixture.dat"]
    docs = services.catalog.documents_of_source("shop")
    assert set(docs) == INDEXED

    # Secrets: found nowhere we store anything; the catalog says a redaction happened.
    secrets_doc = docs["config/secrets.py"]
    kinds = {r["kind"] for r in secrets_doc.metadata["redactions"]}
    assert {"aws-access-key-id", "aws-secret-access-key", "private-key"} <= kinds
    assert all(set(r) == {"kind", "line"} for r in secrets_doc.metadata["redactions"])
    blob = services.blobs.get(secrets_doc.blob_key).decode()
    assert "[REDACTED:aws-access-key-id]" in blob
    assert blob.count("\n") == SECRETS_PY.count("\n")
    payloads = all_payloads(services)
    stored = [str(p) for p in payloads]
    with closing(sqlite3.connect(services.settings.data.catalog_path)) as stored_rows:
        stored += [str(row) for table in ("documents", "chunks")
                   for row in stored_rows.execute(f"SELECT * FROM {table}")]
    stored += [services.blobs.get(d.blob_key).decode() for d in docs.values()]
    for secret in SECRETS:
        assert not any(secret in s for s in stored), secret
    services.close()
    for path in Path(services.settings.data_dir).rglob("*"):
        if path.is_file():
            raw = path.read_bytes()
            assert not any(s.encode() in raw for s in SECRETS), path

    # Citations: the method's exact lines, linked at the indexed commit.
    services = make_services()
    hits = services.search.search("how many times is a failed charge retried",
                                  Identity.anonymous(), top_k=3)
    top = hits[0]
    assert top.path == "app/payments/client.py"
    assert top.symbol == "class PaymentsClient > def retry_budget"
    start = repo.lines_of("app/payments/client.py", "@property")
    end = repo.lines_of("app/payments/client.py", "return 3")
    assert (top.start_line, top.end_line) == (start, end)
    assert top.url == (f"https://github.com/acme/shop/blob/{first_sha}/app/payments/client.py"
                       f"#L{start}-L{end}")
    assert top.metadata["language"] == "python"

    # A commit that edits one method, deletes a file and renames another.
    client_id = document_id("shop", "app/payments/client.py")
    before = {e: services.index.point_ids(IndexFilter(document_ids=[d.id]))
              for e, d in docs.items()}
    client_chunks = services.catalog.chunk_rows(client_id)
    repo.write("app/payments/client.py", CLIENT.replace("return 3", "return 5"))
    repo.remove("config/settings.yaml")
    repo.move("deploy/deploy.sh", "deploy/release.sh")
    second_sha = repo.commit("Retry five times; drop settings; rename the deploy script")
    report = ingest(services, repo)
    assert report.status == "succeeded", report.summary()
    c = report.counts
    assert (c.added, c.updated, c.deleted, c.failed) == (1, 1, 2, 0)
    release = services.catalog.chunk_rows(document_id("shop", "deploy/release.sh"))
    # Only the edited method's chunk is embedded again (the others come from the cache);
    # the renamed file's chunks carry a new path in their header, so they are new texts.
    assert c.chunks_embedded == 1 + len(release)
    after = services.catalog.chunk_rows(client_id)
    changed = [a for a, b in zip(after, client_chunks, strict=True) if a.text != b.text]
    assert [ch.symbol for ch in changed] == ["class PaymentsClient > def retry_budget"]
    docs = services.catalog.documents_of_source("shop")
    assert set(docs) == INDEXED - {"config/settings.yaml", "deploy/deploy.sh"} | {
        "deploy/release.sh"}
    for untouched in ("README.md", "config/secrets.py"):
        assert services.index.point_ids(IndexFilter(document_ids=[docs[untouched].id])) \
            == before[untouched]
    top = services.search.search("how many times is a failed charge retried",
                                 Identity.anonymous(), top_k=1)[0]
    assert top.url.startswith(f"https://github.com/acme/shop/blob/{second_sha}/")
    assert "return 5" in top.text

    # The source becomes unreachable: the run fails and nothing indexed is lost.
    points = services.index.count()
    gone = repo.root.rename(repo.root.with_name("moved-away"))
    report = ingest(services, repo)
    assert report.status == "failed" and "does not exist" in report.message
    assert services.index.count() == points
    assert set(services.catalog.documents_of_source("shop")) == set(docs)
    assert gone.exists()


def test_changed_settings_reach_files_no_commit_touched(make_services, repo, monkeypatch):
    """A source's settings apply to every file, not only to those the next commit changes: an
    exclude added drops files already indexed, narrowed readers reach every point of files
    nobody edited; a new token variable (how the repository is reached) costs no full pass."""
    services = make_services()
    eng = Identity(user="ana", groups=("eng",))

    def run(readers=("public",), exclude=(), **options):
        # data/ holds a binary file, reported as failed by every full pass
        options = {"path": str(repo.root), "url_template": TEMPLATE,
                   "exclude": ["data/", *exclude], **options}
        conn = GitConnector.from_options(dict(options), list(readers),
                                         data_dir=services.pipeline.work_dir)
        config = {"type": "git", "readers": list(readers), **options}
        return services.pipeline.run("shop", "git", conn, config=config, trigger="test")

    def indexed() -> set[str]:
        return set(services.catalog.documents_of_source("shop"))

    assert run().status == "succeeded"
    assert indexed() == INDEXED
    assert run().counts.seen == 0  # no commit since, same settings: nothing is read

    report = run(exclude=["config/"])
    assert report.status == "succeeded", report.summary()
    assert (report.counts.deleted, report.counts.added) == (2, 0)
    assert indexed() == INDEXED - {"config/secrets.py", "config/settings.yaml"}

    report = run(exclude=["config/"], readers=["group:eng"])
    assert report.status == "succeeded", report.summary()
    assert report.counts.chunks_embedded == 0  # the readers change, not the text
    assert {tuple(p["readers"]) for p in all_payloads(services)} == {("group:eng",)}
    assert all(d.readers == ["group:eng"]
               for d in services.catalog.documents_of_source("shop").values())
    question = "how many times is a failed charge retried"
    assert services.search.search(question, Identity.anonymous(), top_k=3) == []
    assert services.search.search(question, eng, top_k=1)[0].path == "app/payments/client.py"

    monkeypatch.setenv("SHOP_GIT_TOKEN", "not-a-real-token")
    report = run(exclude=["config/"], readers=["group:eng"], token_env="SHOP_GIT_TOKEN")
    assert report.counts.seen == 0, report.summary()


def test_git_is_installed():
    out = subprocess.run(["git", "--version"], capture_output=True, check=True).stdout
    assert out.startswith(b"git version")
