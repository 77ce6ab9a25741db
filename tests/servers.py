"""Real servers for the tests, started and stopped by them: an MLflow tracking server and a
PostgreSQL server, each on 127.0.0.1 and a free port, in a process group of its own (so ``kill``
ends it as a crash would, and nothing outlives the test).

PostgreSQL comes from Debian's ``postgresql`` package, which ``make test`` installs with apt where
it is missing (Makefile, the system dependencies). PostgreSQL refuses to run as root: under root the
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

    def start(self, timeout: float = 90.0, wait: bool = True) -> None:
        """Start it; with ``wait=False`` return at once (``wait()`` before the first use), so that
        its ~8 s start overlaps other set-up."""

        cmd = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            self.backend,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job workers
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=log, env=env, start_new_session=True
            )
        if wait:
            self.wait(timeout)

    def wait(self, timeout: float = 90.0, retries: int = 3) -> None:
        """Until it answers. A port taken between :func:`free_port` and the server's bind (another
        server, a Ray node starting meanwhile) is a race, not a failure: the server restarts on a
        fresh port (``url`` changes: read it after this returns)."""

        for attempt in range(retries + 1):
            try:
                _wait(self._healthy, self.proc, self.log, "mlflow server", timeout)
                return
            except AssertionError:
                taken = (
                    self.proc.poll() is not None
                    and "address already in use" in (self.log.read_text()[-2000:])
                )
                if not taken or attempt == retries:
                    raise
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
                self.start(wait=False)

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
            subprocess.run(
                self._cmd(
                    postgres_bin("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ),
                check=True,
                capture_output=True,
                cwd=self.root,
            )
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                self._cmd(
                    postgres_bin("postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.root),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                ),
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=self.root,
            )
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


class RayCluster:
    """A Ray cluster of several nodes on this machine, as on a real one: ``ray start --head``, then
    ``ray start --address`` for each further node, each with ports of its own. Its processes carry
    ``SIXBLANKS_TEST_CLUSTER`` (``stop`` ends exactly them) and a worker tag of their own, so the
    per-test stray check does not count the cluster's long-lived workers against the test that
    first used them (the end-of-run check still does)."""

    def __init__(self, root: Path):
        import uuid

        self.root, self.tag = root, uuid.uuid4().hex
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.ray = str(Path(sys.executable).parent / "ray")
        self.env = {
            **os.environ,
            "SIXBLANKS_TEST_CLUSTER": self.tag,
            "SIXBLANKS_TEST_WORKER": f"cluster-{self.tag}",
            "RAY_USAGE_STATS_ENABLED": "0",
            # a test cluster on loopback: no token authentication (Ray 2.60 enables it on a
            # head where ~/.ray/auth_token exists, but not on a joining node, which is refused)
            "RAY_AUTH_MODE": "disabled",
        }

    def _ports(self) -> list[str]:
        names = (
            "--node-manager-port",
            "--object-manager-port",
            "--dashboard-agent-listen-port",
            "--dashboard-agent-grpc-port",
            "--metrics-export-port",
            "--runtime-env-agent-port",
        )
        return [a for n in names for a in (n, str(free_port()))]

    def add_node(self, num_cpus: int = 1, num_gpus: int = 0, head: bool = False) -> None:
        where = (
            ["--head", "--port", str(self.port), "--include-dashboard=false"]
            if head
            else ["--address", self.address]
        )
        cmd = [
            self.ray,
            "start",
            *where,
            "--num-cpus",
            str(num_cpus),
            "--num-gpus",
            str(num_gpus),
            "--disable-usage-stats",
            *self._ports(),
        ]
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )

    def nodes(self, expected: int, timeout: float = 60.0) -> list[dict]:
        """The live nodes, once ``expected`` of them have joined (asked from a child process, so
        this process never holds a Ray connection of its own)."""

        probe = (
            "import json, ray; ray.init(address=%r, log_to_driver=False); "
            "print(json.dumps([n for n in ray.nodes() if n['Alive']])); ray.shutdown()"
        )
        t0 = time.time()
        while True:
            out = subprocess.run(
                [sys.executable, "-c", probe % self.address],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            import json

            found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else []
            if len(found) >= expected or time.time() - t0 > timeout:
                assert len(found) == expected, (found, out.stderr[-2000:])
                return found
            time.sleep(1.0)

    def stop(self) -> None:
        from sixblanks.harness.orchestration.processes import descendants, running

        from .strays import processes

        # the tagged processes and everything below them (Ray's agents, children of a raylet, do
        # not always keep the environment), gathered before any of them dies and is re-parented
        tagged = processes("SIXBLANKS_TEST_CLUSTER", self.tag)
        mine = tagged | {c for p in tagged for c in descendants(p)}
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            for p in mine:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
            deadline = time.time() + wait
            while time.time() < deadline and any(running(p) for p in mine):
                time.sleep(0.2)
            mine = {p for p in mine if running(p)}
            if not mine:
                break
        # `ray start --head` recorded this cluster as the machine's current one (as `ray stop`
        # does, forget it: a later `ray.init()` without an address would try to join it)
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        try:
            if current.read_text().strip().endswith(f":{self.port}"):
                current.unlink()
        except OSError:
            pass
