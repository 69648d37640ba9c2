"""A real PostgreSQL server with pgvector for the tests and benchmarks, on loopback.

The server is the one the ``pgserver`` wheel bundles (PostgreSQL 16 with pgvector 0.6.2: HNSW,
no sparsevec; installed by ``make setup-test``): Debian's PostgreSQL 15 on these machines has
no pgvector package. We run its binaries ourselves rather than through pgserver's helper, so
a test can stop the server, kill it, and start it again on the same port and data (the
cluster test's "database restarted under load"). Each test gets a database of its own
(``create_database``), so tests share one server and never see each other's tables.

PostgreSQL refuses to run as root: as root, the server runs as the ``postgres`` account
(Debian's server package makes it) or, where that is missing, one made here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from tests.live import free_port


def binaries() -> Path:
    """The bundled server's bin folder; ImportError where pgserver is not installed. Found
    without importing pgserver, whose own start-up helper we do not use."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pgserver is not installed")
    found = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    if not (found / "postgres").exists():
        raise ImportError(f"pgserver has no server binaries at {found}")
    return found


def _account() -> str | None:
    """The account to run the server as (None: ours, when we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "citewise-pg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "citewise-pg"], check=True)
    return "citewise-pg"


def _reachable_binaries(account: str | None) -> Path:
    """The bin folder, where ``account`` can run it: a checkout under a private folder (root's
    home) is not, and then the install is copied once to a folder of its own in /tmp."""
    found = binaries()
    if account is None or subprocess.run(
            ["runuser", "-u", account, "--", str(found / "postgres"), "--version"],
            capture_output=True).returncode == 0:
        return found
    install = found.parent
    tag = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    copy = Path("/tmp") / f"citewise-pgserver-{tag}"
    if not (copy / "bin" / "postgres").exists():
        partial = copy.with_name(copy.name + f".{os.getpid()}")
        shutil.copytree(install, partial, symlinks=True, dirs_exist_ok=True)
        partial.chmod(0o755)
        os.replace(partial, copy)
    return copy / "bin"


class PostgresServer:
    """One server in a folder of its own under /tmp (the account that runs it must reach the
    folder, and pytest's are private to root)."""

    def __init__(self, *, port: int | None = None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="citewise-pg-"))
        self.folder.chmod(0o755)
        self.data = self.folder / "pgdata"
        self.socket_dir = self.folder / "socket"
        self.port = port or free_port()
        self.account = _account()
        self.bin = _reachable_binaries(self.account)
        self.log = self.folder / "postgres.log"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(a) for a in args]
        if self.account is not None:
            cmd = ["runuser", "-u", self.account, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def _own(self, path: Path) -> None:
        if self.account is not None:
            shutil.chown(path, self.account, self.account)

    def start(self) -> PostgresServer:
        self._own(self.folder)
        if not (self.data / "PG_VERSION").exists():
            self._run(self.bin / "initdb", "-D", str(self.data), "--auth=trust", "-U",
                      "postgres", "--encoding=UTF8", "--locale=C")
        self.socket_dir.mkdir(exist_ok=True)
        self._own(self.socket_dir)
        # fsync off: a test server's data is thrown away, and an fsync on every commit would
        # make the tests measure the disk. Commits still reach the OS before they return, so a
        # killed server loses nothing (only a crashed machine would). Never for production.
        options = (f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c full_page_writes=off "
                   "-c max_connections=300 -c shared_buffers=128MB")
        done = self._run(self.bin / "pg_ctl", "-D", str(self.data), "-l", str(self.log),
                         "-o", options, "-w", "-t", "60", "start", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start: {done.stderr}\n{self.read_log()}")
        return self

    def read_log(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except OSError:
            return ""

    def stop(self, mode: str = "fast") -> None:
        self._run(self.bin / "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop",
                  check=False)

    def kill(self) -> None:
        """SIGKILL the postmaster (its children exit when they notice): a crash."""
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None, *, vector: bool = True) -> str:
        """A new, empty database (with the vector extension); its URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        if vector:
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_or_skip_reason() -> PostgresServer | str:
    """A started server, or why there is none (printed by the skipping test)."""
    try:
        binaries()
    except ImportError:
        return ("PostgreSQL tests need the pgserver wheel (PostgreSQL 16 + pgvector), "
                "which `make setup-test` installs; it is not installed here")
    return PostgresServer().start()


def remove(server: PostgresServer) -> None:
    server.stop("immediate")
    shutil.rmtree(server.folder, ignore_errors=True)
