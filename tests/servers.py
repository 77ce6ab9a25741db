"""Real servers for the tests, started and stopped by them: an MLflow tracking server and a
PostgreSQL server, each on 127.0.0.1 and a free port, in a process group of its own (so ``kill``
ends it as a crash would, and nothing outlives the test).

PostgreSQL comes from Debian's ``postgresql`` package, which ``make test`` installs with apt where it
is missing (Makefile, the system dependencies). PostgreSQL refuses to run as root: under root the
server runs as the package's ``postgres`` user, on a data directory that user owns."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(ready, proc: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited ({proc.returncode}): {log.read_text()[-2000:]}")
        if ready():
            return
        time.sleep(0.25)
    raise AssertionError(f"{what} not up after {timeout}s: {log.read_text()[-2000:]}")


def _killpg(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class MlflowServer:
    """A local `mlflow server` with a database backend (sqlite under ``root`` unless
    ``backend`` names another, e.g. the PostgreSQL server's URL)."""

    def __init__(self, root: Path, backend: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backend = backend or f"sqlite:///{root / 'mlflow-server.db'}"
        self.log, self.proc = root / "mlflow-server.log", None

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def start(self, timeout: float = 90.0) -> None:
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend,
               "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]  # fmt: skip
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job workers
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env,
                                         start_new_session=True)  # fmt: skip
        _wait(self._healthy, self.proc, self.log, "mlflow server", timeout)

    def kill(self) -> None:
        _killpg(self.proc)
        self.proc = None


def postgres_bin(name: str) -> str:
    """A PostgreSQL server program (initdb, postgres, pg_isready) from Debian's package."""

    found = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4])
    )
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise AssertionError(
            f"PostgreSQL's {name} is not installed: `make test` installs Debian's postgresql "
            "package (apt-get install postgresql)"
        )
    return path


class PostgresServer:
    """A fresh PostgreSQL cluster (initdb, trust authentication for 127.0.0.1) on a free port.
    ``url(db)`` is a SQLAlchemy URL for database ``db`` (made by ``create``)."""

    def __init__(self):
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sixblanks-pg-"))
        self.data, self.log, self.proc = self.root / "data", self.root / "postgres.log", None
        self.as_user = os.geteuid() == 0  # root: run as the package's postgres user
        if self.as_user:
            import pwd

            pw = pwd.getpwnam("postgres")
            self.owner = (pw.pw_uid, pw.pw_gid)
            os.chmod(self.root, 0o755)
            os.chown(self.root, *self.owner)

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if self.as_user else list(args)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{db}"

    def _ready(self) -> bool:
        probe = [postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"]
        return subprocess.run(probe, capture_output=True).returncode == 0

    def start(self, timeout: float = 60.0) -> None:
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(self._cmd(postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                                     "--auth=trust", "-E", "UTF8", "--no-sync"),
                           check=True, capture_output=True, cwd=self.root)  # fmt: skip
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                self._cmd(postgres_bin("postgres"), "-D", str(self.data), "-p", str(self.port),
                          "-k", str(self.root), "-c", "listen_addresses=127.0.0.1",
                          "-c", "fsync=off"),
                stdout=log, stderr=log, start_new_session=True, cwd=self.root,
            )  # fmt: skip
        _wait(self._ready, self.proc, self.log, "postgres", timeout)

    def create(self, db: str) -> str:
        import sqlalchemy

        engine = sqlalchemy.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as con:
            con.execute(sqlalchemy.text(f'CREATE DATABASE "{db}"'))
        engine.dispose()
        return self.url(db)

    def kill(self) -> None:
        _killpg(self.proc)
        self.proc = None

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
