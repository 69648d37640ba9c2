"""The deployment files (``deploy/``), checked against the code: no container can be pulled here,
so the compose file, the Kubernetes manifests and the Dockerfile are read as data (PyYAML) and
held to what citewise is. Every ``CITEWISE_*`` variable they set is a setting
(``Settings.setting_fields``), a variable a command reads (click's ``envvar``) or one the
config file names for a credential (``token_env``...), and together they load as valid settings
with the config file they mount; every citewise process points at the same database; each
health check asks a route of the app's OpenAPI document; every command they run parses as a
citewise command; and the replicas, selectors and ports agree with each other.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import click
import pytest
import yaml

from citewise.api.app import create_app
from citewise.api.cli import cli
from citewise.api.settings import Settings
from citewise.postgres import is_postgres_url

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PREFIX = "CITEWISE_"


# Reading the files ---------------------------------------------------------------------------


def _yaml_documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _citewise_services(compose: dict) -> dict[str, dict]:
    """The services that run citewise (a command that starts with ``citewise``)."""
    return {name: s for name, s in compose["services"].items()
            if (s.get("command") or [None])[0] == "citewise"}


def _compose_env(service: dict) -> dict[str, str]:
    env: dict[str, str] = {}
    files = service.get("env_file") or []
    for file in [files] if isinstance(files, str) else files:
        env.update(_env_file(DEPLOY / file))
    env.update({k: str(v) for k, v in (service.get("environment") or {}).items()})
    return env


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    out = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name != "kustomization.yaml":  # kustomize's list of them, no resource
            out.extend(_yaml_documents(path))
    return out


def _kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


def _pod_spec(workload: dict) -> dict:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def _k8s_env(manifests: list[dict], container: dict) -> dict[str, str]:
    """A container's environment: its envFrom ConfigMaps and Secrets, then its own env."""
    by_name = {(m["kind"], m["metadata"]["name"]): m for m in manifests}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(by_name["ConfigMap", source["configMapRef"]["name"]]["data"])
        if "secretRef" in source:
            env.update(by_name["Secret", source["secretRef"]["name"]]["stringData"])
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def _k8s_containers(manifests: list[dict]) -> list[tuple[dict, dict]]:
    return [(w, c) for w in _kind(manifests, "Deployment") + _kind(manifests, "CronJob")
            for c in _pod_spec(w)["containers"]]


# What citewise is -----------------------------------------------------------------------------


def _command_variables(command: click.Command) -> set[str]:
    names = set()
    for param in command.params:
        envvar = getattr(param, "envvar", None)
        names.update([envvar] if isinstance(envvar, str) else envvar or [])
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _command_variables(sub)
    return names


def _named_by_config(config: str) -> set[str]:
    """The variables a config file's sources name for their credentials (``*_env`` options)."""
    return set(re.findall(r'^\s*\w+_env\s*=\s*"([A-Z0-9_]+)"', config, re.M))


def _check_variables(env: dict[str, str], config: str, where: str) -> None:
    settings = {PREFIX + name.upper() for name in Settings.setting_fields()}
    known = settings | _command_variables(cli) | _named_by_config(config)
    unknown = sorted(k for k in env if k.startswith(PREFIX) and k not in known)
    assert not unknown, f"{where} sets variables citewise does not read: {unknown}"


def _load_settings(env: dict[str, str], config: str, tmp_path: Path, monkeypatch) -> Settings:
    """The settings a process with this environment and config file gets: what
    ``citewise serve`` would refuse at start is refused here."""
    path = tmp_path / "citewise.toml"
    path.write_text(config)
    for key in [k for k in os.environ if k.startswith(PREFIX)]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CITEWISE_CONFIG_FILE", str(path))
    return Settings.load(path)


def _check_command(argv: list[str], where: str) -> click.Command:
    """``argv`` parses as a citewise command (its options and arguments checked by click, its
    callbacks not run); the command it names."""
    assert argv and argv[0] == "citewise", f"{where}: {argv} is not a citewise command"
    command: click.Command = cli
    name, rest, ctx = "citewise", list(argv[1:]), None
    while True:
        ctx = click.Context(command, info_name=name, parent=ctx)
        # A group's own options, up to its subcommand; a command's options and arguments, with
        # click's errors for an unknown option, a missing one or a stray argument.
        rest = click.Command.parse_args(command, ctx, rest)
        if not isinstance(command, click.Group):
            return command
        assert rest, f"{where}: {argv} names no citewise command"
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"{where}: citewise has no command {rest[0]!r} ({argv})"
        command, name, rest = sub, rest[0], rest[1:]


@pytest.fixture(scope="module")
def routes(tmp_path_factory) -> set[str]:
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("deploy") / "data"))
    return set(app.openapi()["paths"])


def _path_of(command: list[str] | str) -> str:
    text = command if isinstance(command, str) else " ".join(command)
    match = re.search(r"https?://[^/\s'\"]+(/[^\s'\"]*)", text)
    assert match, f"no URL in the health check {command}"
    return match.group(1)


# docker-compose.yml --------------------------------------------------------------------------


def test_compose_runs_replicas_a_worker_and_the_official_engines(compose):
    services = compose["services"]
    ours = _citewise_services(compose)
    assert services["api"]["deploy"]["replicas"] >= 2
    assert set(ours) == {"api", "worker"}
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    images = {s["image"].split(":")[0] for s in services.values() if "image" in s}
    assert {"qdrant/qdrant", "quay.io/minio/minio", "nginx"} <= images
    # Every image pinned to a version: a tag that moves changes a deployment nobody changed.
    for name, service in services.items():
        image = service.get("image") or compose["x-citewise"]["image"]
        repository, _, tag = image.partition(":")
        assert tag and tag != "latest" and not tag.startswith("pg"), (name, image)
    # Only the load balancer is published; the replicas are reached through it.
    assert [name for name, s in services.items() if s.get("ports")] == ["lb"]
    upstream = re.search(r"server\s+(\w+):(\d+)", (DEPLOY / "nginx.conf").read_text())
    assert upstream.group(1) == "api" and "--port" in ours["api"]["command"]
    port = ours["api"]["command"][ours["api"]["command"].index("--port") + 1]
    assert upstream.group(2) == port
    worker = _compose_env(ours["worker"])
    assert worker["CITEWISE_SCHEDULE_INGEST"]
    assert "CITEWISE_SCHEDULE_INGEST" not in _compose_env(ours["api"])  # one process runs it
    # The replicas accept jobs, the worker runs them.
    assert _compose_env(ours["api"])["CITEWISE_SERVE_RUNS_INGEST"] == "false"


def test_compose_sets_real_settings_that_load_with_its_config_file(compose, tmp_path,
                                                                   monkeypatch):
    config = (DEPLOY / "citewise.toml").read_text()
    for name, service in _citewise_services(compose).items():
        env = _compose_env(service)
        _check_variables(env, config, f"docker-compose.yml service {name}")
        settings = _load_settings(env, config, tmp_path, monkeypatch)
        assert settings.index.blob_store == "s3" and settings.index.qdrant_url
        assert [s.name for s in settings.sources] == ["runbooks", "eng-wiki"]
        mounted = {v.split(":")[1] for v in service["volumes"]}
        assert env["CITEWISE_CONFIG_FILE"] in {f"{m}" for m in mounted}


def test_every_compose_process_shares_the_database_the_engines_and_the_proxy(compose):
    services = compose["services"]
    urls = {name: _compose_env(s)["CITEWISE_DATABASE_URL"]
            for name, s in _citewise_services(compose).items()}
    assert len(set(urls.values())) == 1, urls
    url = urlsplit(next(iter(urls.values())))
    assert is_postgres_url(url.geturl())
    postgres = services[url.hostname]["environment"]
    assert (url.username, url.password, url.path.lstrip("/")) == (
        postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"])
    env = _compose_env(services["api"])
    assert services[urlsplit(env["CITEWISE_QDRANT_URL"]).hostname]["image"].startswith(
        "qdrant/qdrant")
    minio = services[urlsplit(env["CITEWISE_S3_ENDPOINT_URL"]).hostname]
    assert (env["CITEWISE_S3_ACCESS_KEY_ID"], env["CITEWISE_S3_SECRET_ACCESS_KEY"]) == (
        minio["environment"]["MINIO_ROOT_USER"], minio["environment"]["MINIO_ROOT_PASSWORD"])
    # The bucket maker reads the replicas' own settings, so it makes the bucket they use.
    assert services["minio-bucket"]["env_file"] == services["api"]["env_file"]
    lb = services["lb"]["networks"]["default"]["ipv4_address"]
    assert env["CITEWISE_TRUSTED_PROXIES"] == lb


def test_compose_health_checks_ask_a_route_of_the_app(compose, routes):
    for name, service in _citewise_services(compose).items():
        if _check_command(service["command"], f"compose {name}").name == "worker":
            assert "healthcheck" not in service  # no HTTP: its restart policy watches it
            continue
        path = _path_of(service["healthcheck"]["test"])
        assert path in routes, f"{name}'s health check asks {path}, not a route of the app"


def test_compose_commands_are_citewise_commands(compose):
    names = {name: _check_command(service["command"], f"compose {name}").name
             for name, service in _citewise_services(compose).items()}
    assert names == {"api": "serve", "worker": "worker"}


# Kubernetes ----------------------------------------------------------------------------------


def test_k8s_runs_api_replicas_behind_a_service_and_an_ingest_cronjob(manifests):
    (api,) = _kind(manifests, "Deployment")
    (ingest,) = _kind(manifests, "CronJob")
    assert api["spec"]["replicas"] >= 2
    assert ingest["spec"]["concurrencyPolicy"] == "Forbid"
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert api["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (service,) = _kind(manifests, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = _pod_spec(api)["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    target = service["spec"]["ports"][0]["targetPort"]
    assert target in ports
    command = container["command"]
    assert str(ports[target]) == command[command.index("--port") + 1]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    namespaces = {m["metadata"].get("namespace") for m in manifests if m["kind"] != "Namespace"}
    assert namespaces == {_kind(manifests, "Namespace")[0]["metadata"]["name"]}
    listed = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in (DEPLOY / "k8s").glob("*.yaml")
                                    if p.name != "kustomization.yaml")


def test_k8s_probes_ask_a_route_of_the_app(manifests, routes):
    (api,) = _kind(manifests, "Deployment")
    (container,) = _pod_spec(api)["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] in routes, f"{probe} asks {get['path']}"
        assert get["port"] in {p["name"] for p in container["ports"]}


def test_k8s_settings_are_real_and_shared_by_every_pod(manifests, tmp_path, monkeypatch):
    config = next(m for m in _kind(manifests, "ConfigMap")
                  if m["metadata"]["name"] == "citewise-sources")["data"]["citewise.toml"]
    urls = set()
    for workload, container in _k8s_containers(manifests):
        where = f"{workload['kind']} {workload['metadata']['name']}"
        env = _k8s_env(manifests, container)
        _check_variables(env, config, where)
        urls.add(env["CITEWISE_DATABASE_URL"])
        settings = _load_settings(env, config, tmp_path, monkeypatch)
        assert [s.name for s in settings.sources] == ["runbooks", "eng-wiki"]
        # Every variable the config file names for a credential is provided.
        assert _named_by_config(config) <= set(env), where
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert str(Path(env["CITEWISE_CONFIG_FILE"]).parent) in mounts
        assert env["CITEWISE_DATA_DIR"] in mounts
    assert len(urls) == 1 and is_postgres_url(urls.pop())


def test_k8s_commands_are_citewise_commands(manifests):
    names = {f"{w['kind']} {w['metadata']['name']}": _check_command(c["command"], w["kind"]).name
             for w, c in _k8s_containers(manifests)}
    assert names == {"Deployment citewise-api": "serve", "CronJob citewise-ingest": "ingest"}


# The image -------------------------------------------------------------------------------------


def test_the_image_runs_a_citewise_command_with_the_pinned_cpu_torch():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1)
    assert _check_command(yaml.safe_load(cmd), "Dockerfile CMD").name == "serve"
    install = " ".join(dockerfile.split("\\\n"))
    assert "-c constraints.txt" in install and "download.pytorch.org/whl/cpu" in install
    assert re.search(r"^torch==", (ROOT / "constraints.txt").read_text(), re.M)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "data", ".git"} <= set(ignored)


def test_the_commands_the_deploy_docs_give_parse():
    """The citewise commands of docs/deploy.md's examples (run in a container, after settings
    given inline) and of the compose file's instructions: options and arguments that exist."""
    doc = (ROOT / "docs" / "deploy.md").read_text()
    lines = [line for block in re.findall(r"```bash\n(.*?)```", doc, re.S)
             for line in block.splitlines()]
    comments = [line.lstrip("#").strip() for line in
                (DEPLOY / "docker-compose.yml").read_text().splitlines() if line.startswith("#")]
    lines += [line for line in comments if line.startswith("docker ")]
    commands = [m.group(1) for line in lines if (m := re.search(r"(?:^|\s)(citewise\s.*)$",
                                                               line.strip()))]
    assert len(commands) >= 4, commands
    for command in commands:
        _check_command(shlex.split(command), command)


def test_the_compose_bucket_maker_makes_the_bucket_once(compose, s3_server):
    """The ``minio-bucket`` service's script, run against a real S3 server (moto's, on
    loopback) with the settings of ``citewise.env``: it makes the bucket, and a second start
    finds it there and succeeds."""
    import subprocess
    import sys

    import boto3

    service = compose["services"]["minio-bucket"]
    assert service["command"][:2] == ["python", "-c"], service["command"]
    env = {**os.environ, **_compose_env(service), "CITEWISE_S3_ENDPOINT_URL": s3_server,
           "CITEWISE_S3_BUCKET": f"compose-{os.getpid()}"}
    for start in ("first", "second"):
        made = subprocess.run([sys.executable, "-c", service["command"][2]], env=env,
                              capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, (start, made.stdout, made.stderr)
        assert f"bucket {env['CITEWISE_S3_BUCKET']} is ready" in made.stdout, made.stdout
    client = boto3.client("s3", endpoint_url=s3_server, region_name=env["CITEWISE_S3_REGION"],
                          aws_access_key_id=env["CITEWISE_S3_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["CITEWISE_S3_SECRET_ACCESS_KEY"])
    names = [b["Name"] for b in client.list_buckets()["Buckets"]]
    assert names.count(env["CITEWISE_S3_BUCKET"]) == 1
