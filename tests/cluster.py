"""citewise as a cluster on this machine: ``citewise serve`` replicas and ``citewise`` commands
(the ingest worker, ``keys``, ``verify``) as real processes on loopback, sharing one PostgreSQL
database (stores and pgvector) and one S3 bucket, each with a data folder of its own for what
stays local (the embedding cache, ``server.json``).

Every process is configured by ``CITEWISE_*`` variables only, as a container would be, and
started in a folder without a ``citewise.toml``. Used by ``tests/integration/test_cluster.py``
and ``bench/bench_cluster.py`` (so nothing here needs pytest).

Cleanup never leaves a process behind and never ends one it did not start: each process is
ended through its own ``Popen`` (its pid), in ``Cluster.close()``, which the test's fixture
calls however the test went. As a second guard, each child asks the kernel to SIGKILL it if
the process that started it dies (``PR_SET_PDEATHSIG``), so even a test run killed with
SIGKILL takes its replicas with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.kb import clean_env
from tests.live import free_port

CITEWISE = Path(sys.executable).with_name("citewise")
PROBLEM_JSON = "application/problem+json"


class ClusterError(AssertionError):
    """A process of the cluster did not do what the test needs of it; says what its log says."""


def command(*args: str) -> list[str]:
    """``citewise ARGS``, behind util-linux's ``setpriv --pdeathsig KILL`` where it exists: the
    kernel then kills the process if the thread that started it dies (setpriv execs the
    command, so the pid stays the command's). Processes are started from the caller's main
    thread, whose end is the test run's end. (``preexec_fn`` could do the same without
    setpriv, but is not safe in a process with threads, as a test process is.)"""
    guard = shutil.which("setpriv")
    base = [guard, "--pdeathsig", "KILL", "--"] if guard else []
    return [*base, str(CITEWISE), *args]


def tail(path: Path, chars: int = 6000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return text[-chars:]


@dataclass
class ClusterConfig:
    """What every process of the cluster shares: the database (none: each process its own
    SQLite catalog, the embedded default) and the bucket (none: blobs in each data folder)."""

    database_url: str | None
    s3_endpoint: str | None = None
    s3_bucket: str | None = None
    extra: dict[str, str] = field(default_factory=dict)  # CITEWISE_* for every process

    def environment(self, data_dir: Path, **more: str) -> dict[str, str]:
        env = {"CITEWISE_DATA_DIR": str(data_dir)}
        if self.database_url:
            env.update(CITEWISE_DATABASE_URL=self.database_url, CITEWISE_VECTOR_STORE="pgvector")
        if self.s3_bucket:
            env.update(CITEWISE_BLOB_STORE="s3", CITEWISE_S3_BUCKET=self.s3_bucket,
                       CITEWISE_S3_ENDPOINT_URL=self.s3_endpoint or "",
                       CITEWISE_S3_REGION="us-east-1", CITEWISE_S3_ACCESS_KEY_ID="test",
                       CITEWISE_S3_SECRET_ACCESS_KEY="test")
        return clean_env(**{**env, **self.extra, **more})


class Process:
    """One ``citewise`` process started in the background, its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.args = command(*args)
        self.env = env
        self.cwd = cwd
        self.log = cwd / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> Process:
        self.cwd.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- citewise {' '.join(args_of(self.args))}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.args, cwd=self.cwd, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT)
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would; returns once it is gone."""
        if self.alive:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{self.name} did not finish in {timeout:.0f} s:\n"
                               f"{tail(self.log)}") from None

    def output(self) -> str:
        return tail(self.log)


class Replica(Process):
    """``citewise serve`` on a port of its own."""

    def __init__(self, name: str, env: dict[str, str], cwd: Path) -> None:
        self.port = free_port()
        super().__init__(name, ["serve", "--port", str(self.port)], env, cwd)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_healthy(self, timeout: float = 240.0) -> dict:
        """``/healthz`` once it answers 200 and has loaded its parts (no longer ``starting``:
        ``api/startup.py``; the body it answers); a ``ClusterError`` with the log if the process
        exits or stays silent for ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise ClusterError(f"{self.name} exited with {self.proc.returncode}:\n"
                                   f"{self.output()}")
            try:
                resp = httpx.get(f"{self.url}/healthz", timeout=3)
                if resp.status_code == 200 and resp.json().get("status") != "starting":
                    return resp.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"{self.name} did not answer /healthz in {timeout:.0f} s:\n"
                           f"{self.output()}")


class Cluster:
    """The processes of one cluster under ``root``: each has a folder of its own there (its
    data folder and its log)."""

    def __init__(self, root: Path, config: ClusterConfig) -> None:
        self.root = root
        self.config = config
        self.processes: list[Process] = []

    def folder(self, name: str) -> Path:
        return self.root / name

    def env(self, name: str, **more: str) -> dict[str, str]:
        return self.config.environment(self.folder(name) / "data", **more)

    def replica(self, name: str, **more: str) -> Replica:
        replica = Replica(name, self.env(name, **more), self.folder(name))
        self.processes.append(replica)
        return replica

    def start_together(self, replicas: Sequence[Replica], timeout: float = 240.0
                       ) -> list[dict]:
        """Start every replica at once (within milliseconds), then wait for each to be
        healthy; their ``/healthz`` bodies."""
        for r in replicas:
            r.start()
        return [r.wait_healthy(timeout) for r in replicas]

    def background(self, name: str, *args: str, folder: str = "worker") -> Process:
        """A ``citewise`` command running in the background (the worker's folder by default),
        to be waited for or killed."""
        process = Process(name, args, self.env(folder), self.folder(folder))
        self.processes.append(process)
        return process.start()

    def run(self, *args: str, folder: str = "worker", timeout: float = 300.0
            ) -> subprocess.CompletedProcess[str]:
        """A ``citewise`` command, to its end (the worker's data folder by default)."""
        cwd = self.folder(folder)
        cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.run(command(*args), cwd=cwd, env=self.env(folder),
                              capture_output=True, text=True, timeout=timeout)

    def create_key(self, name: str, scopes: str, *options: str) -> str:
        done = self.run("keys", "create", name, "--scopes", scopes, *options, "--json",
                        folder="operator")
        if done.returncode != 0:
            raise ClusterError(f"citewise keys create {name} failed:\n{shown(done)}")
        return json.loads(done.stdout)["secret"]

    def logs(self) -> str:
        """Every process's log tail: what a failing test prints."""
        return "\n".join(f"===== {p.name} (pid {p.proc.pid if p.proc else '-'}, "
                         f"{'alive' if p.alive else 'exited'})\n{p.output()}"
                         for p in self.processes)

    def close(self) -> None:
        """End every process started here that still runs (by its own pid)."""
        for p in self.processes:
            try:
                p.stop(grace=10.0)
            except Exception:  # one stuck process must not keep the others running
                if p.alive and p.proc is not None:
                    p.proc.kill()


def args_of(argv: list[str]) -> list[str]:
    return argv[argv.index(str(CITEWISE)) + 1:]


def shown(done: subprocess.CompletedProcess) -> str:
    return (f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
            f"--- stderr\n{done.stderr[-4000:]}")


def is_problem(resp: httpx.Response, status: int) -> bool:
    """A problem document (RFC 9457) with this status."""
    if resp.status_code != status or \
            not resp.headers.get("content-type", "").startswith(PROBLEM_JSON):
        return False
    try:
        return resp.json().get("status") == status
    except ValueError:
        return False
