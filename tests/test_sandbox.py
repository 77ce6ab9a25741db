"""The code sandbox (harness/tools/sandbox.py) against plain programs and a hostile-code corpus: a
fork bomb, an infinite loop, a memory bomb, a flood of output, writes outside the working
directory, reads of the run directory and of the home directory, a socket to 127.0.0.1, a daemon
that tries to outlive its call, a sleep past the timeout. For each: the reason it ended, a bounded
wall time, no process of it left afterwards (each call's processes carry a marker in their
environment, looked for in /proc) and nothing changed outside its own temporary directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sixblanks.harness.tools import (
    REASONS,
    Isolation,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    audit_flag,
    probe,
    run_code,
)
from sixblanks.harness.tools.process import SETUP_ALLOWANCE
from sixblanks.harness.tools.sandbox import SYSTEM_PATHS

ROOT = Path(__file__).resolve().parents[1]
MARK = "SIXBLANKS_SANDBOX_TEST_MARK"
BOUND = 3.0
"""Seconds a call may take past its timeout (start-up and teardown of the namespace are ~0.1 s;
the margin is for a loaded machine)."""


def marked(marker: str) -> list[int]:
    """Live processes whose environment carries ``MARK=marker``: every process of a call that
    did not clear its environment (forks and execs keep it)."""

    needle = f"{MARK}={marker}".encode()
    pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    return [p for p in pids if needle in _environ(p).split(b"\0")]


@pytest.fixture
def box(tmp_path):
    """A sandbox factory with small limits and a fresh marker; the run directory (a pytest tmp
    directory) is hidden as an agent loop would hide it. After the test no marked process may be
    alive."""

    marker = uuid.uuid4().hex
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def make(**limits) -> Sandbox:
        cfg = {"timeout_seconds": 2.0, "cpu_seconds": 5, "memory_bytes": 256 << 20}
        cfg.update(limits)
        cfg["env"] = {MARK: marker, **cfg.get("env", {})}
        return Sandbox(SandboxConfig(**cfg), hide=[run_dir])

    make.marker, make.run_dir = marker, run_dir
    yield make
    left = marked(marker)
    kill(left)
    assert not left, f"processes of the sandbox outlived the test: {left}"


def kill(pids: list[int]) -> None:
    """SIGKILL, then wait (up to 5 s) until they are gone: a signal is delivered asynchronously,
    and a dead process's (a zombie's) environment reads empty."""

    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(_environ(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:  # gone
        return b""


def timed(sandbox: Sandbox, source: str, stdin: str = ""):
    start = time.monotonic()
    result = sandbox.run(source, stdin)
    return result, time.monotonic() - start


# --------------------------------------------------------------------------- the machine


def test_this_machine_provides_the_namespaces():
    found = probe()
    assert found.namespaces, found.problems
    assert found.unshare and (found.privileged or found.user_namespace)
    assert not found.privileged or os.geteuid() == 0  # only root makes them without a user ns


def test_root_without_cap_sys_admin_is_refused(monkeypatch):
    """Root that can make namespaces only through a user namespace would run the program as the
    host's root, whom the kernel exempts from RLIMIT_NPROC: refused, not relaxed."""

    from sixblanks.harness.tools import machine as probing

    real = probing._try
    monkeypatch.setattr(probing, "_try", lambda cmd: "EPERM" if "--user" not in cmd else real(cmd))
    monkeypatch.setattr(probing.os, "getuid", lambda: 0)
    monkeypatch.setattr(probing.os, "geteuid", lambda: 0)
    found = probing.probe()
    assert (found.privileged, found.user_namespace, found.namespaces) == (False, True, False)
    assert found.problems[-1].startswith("the harness runs as root without the right")


def test_a_machine_without_namespaces_is_refused_with_what_is_missing():
    lacking = Isolation(None, False, False, "6.1", "x86_64", ("util-linux's unshare is missing",))
    with pytest.raises(SandboxUnavailable) as err:
        Sandbox(SandboxConfig(), machine=lacking)
    assert err.value.problems[0] == (
        "sandbox (isolation: namespaces): util-linux's unshare is missing"
    )
    assert "isolation: none" in err.value.problems[-1]
    # the explicit trusted mode runs there, and says it is unguarded
    sandbox = Sandbox(SandboxConfig(isolation="none"), machine=lacking)
    assert sandbox.run("print(6 * 7)").stdout == "42\n"
    assert audit_flag(sandbox.config).startswith("sandbox: isolation none")
    assert audit_flag(SandboxConfig()) is None


def test_hiding_the_interpreter_is_refused():
    with pytest.raises(SandboxUnavailable, match="holds the interpreter's directory"):
        Sandbox(SandboxConfig(), hide=[sys.prefix])


# --------------------------------------------------------------------------- plain programs


def test_a_program_prints_reads_stdin_and_exits(box):
    sandbox = box()
    ok, wall = timed(sandbox, "print(sum(range(10)))")
    assert (ok.reason, ok.stdout, ok.stderr, ok.exit_code, ok.signal) == ("ok", "45\n", "", 0, None)
    assert not ok.truncated and ok.isolation == "namespaces"
    assert 0 < ok.wall_seconds <= wall and 0 < ok.cpu_seconds < 5
    lines = "3 4\n10 -2\n"
    echo = sandbox.run("import sys\nfor l in sys.stdin: print(sum(map(int, l.split())))", lines)
    assert echo.stdout == "7\n8\n"
    code = sandbox.run("import sys; print('x'); sys.exit(3)")
    assert (code.reason, code.exit_code, code.stdout, code.detail) == (
        "error",
        3,
        "x\n",
        "exit code 3",
    )
    crash = sandbox.run("1 / 0")
    assert crash.reason == "error" and crash.exit_code == 1
    assert crash.stderr.endswith("ZeroDivisionError: division by zero\n")
    assert 'File "/tmp/work/main.py", line 1' in crash.stderr  # the same path on every call


def test_output_is_cut_at_the_limit_and_flooding_stops_the_call(box):
    sandbox = box(output_bytes=100)
    exact = sandbox.run("print('a' * 99)")
    assert (exact.reason, exact.stdout, exact.truncated) == ("ok", "a" * 99 + "\n", False)
    over = sandbox.run(
        "import sys; sys.stdout.write('b' * 101); sys.stdout.flush(); print('!', file=sys.stderr)"
    )
    assert (over.reason, over.stdout, over.truncated) == ("output_limit", "b" * 100, True)
    assert over.detail.startswith("stdout passed 100 bytes")
    err = sandbox.run("import sys; sys.stderr.write('é' * 60)")  # 120 bytes; the 50th char is cut
    assert err.reason == "output_limit" and err.stderr == "é" * 50 and err.stdout == ""


def test_a_program_over_the_size_limit_is_refused_unrun(box):
    sandbox = box(source_bytes=20, stdin_bytes=3)
    result = sandbox.run("print('0123456789012345')")  # 25 bytes
    assert (result.reason, result.exit_code, result.stdout) == ("refused", None, "")
    assert result.detail == "the program is 25 bytes; the limit is 20"
    assert sandbox.run("print(1)", stdin="abcd").detail == "the input is 4 bytes; the limit is 3"
    surrogate = sandbox.run("print('\udc80')")  # a lone surrogate
    assert (surrogate.reason, surrogate.detail) == (
        "refused",
        "not valid Unicode text: surrogates not allowed",
    )
    assert set(REASONS) == {"ok", "error", "timeout", "killed", "output_limit", "refused"}


def _tmp_binds() -> set[str]:
    """The first part under /tmp of each interpreter directory that lies there: the sandbox binds
    those inside its own /tmp, read-only, where the host's /tmp is otherwise not seen."""

    prefixes = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    parts = [Path(os.path.realpath(p)).parts for p in prefixes]
    return {q[2] for q in parts if len(q) > 2 and q[1] == "tmp"}


def test_the_program_sees_only_system_and_interpreter_directories(box):
    """The root holds what the sandbox binds (what exists of the system paths, the first part
    of each interpreter directory) and its own /dev, /proc, /tmp; the program has no capability
    and, under root, a uid of its own; the harness's environment does not reach it."""

    os.environ["SIXBLANKS_SANDBOX_SECRET"] = "s3cret"
    try:
        result = box().run(
            "import os\n"
            "print(sorted(os.listdir('/')))\n"
            "print(os.getcwd(), sorted(os.listdir('/tmp')), os.listdir('.'))\n"
            "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]\n"
            "print(set(caps), os.getuid() != 0 or os.geteuid() == 0)\n"
            "print('SIXBLANKS_SANDBOX_SECRET' in os.environ, os.listdir('/proc').count('1'))"
        )
    finally:
        del os.environ["SIXBLANKS_SANDBOX_SECRET"]
    prefixes = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    tops = {Path(os.path.realpath(p)).parts[1] for p in prefixes}
    tops |= {p.strip("/") for p in SYSTEM_PATHS if os.path.lexists(p)} | {"dev", "proc", "tmp"}
    lines = result.stdout.splitlines()
    assert lines[0] == str(sorted(tops))
    # an interpreter under /tmp (a checkout cloned there) is bound inside the sandbox's own /tmp
    assert lines[1] == f"/tmp/work {sorted({'work'} | _tmp_binds())} ['main.py']"
    assert lines[2] == "{'0000000000000000'} True"
    assert lines[3] == "False 1"  # no secret; its own /proc, where pid 1 is its init


def test_a_hidden_path_inside_a_visible_one_is_covered(box, tmp_path):
    shared = tmp_path / "shared"  # under /tmp: bound inside the sandbox's own /tmp
    (shared / "secret").mkdir(parents=True)
    (shared / "open.txt").write_text("visible")
    (shared / "secret" / "key.txt").write_text("hidden")
    sandbox = box(visible=(str(shared),), hide=(str(shared / "secret"),))
    result = sandbox.run(
        f"import os\nprint(open('{shared}/open.txt').read(), os.listdir('{shared}/secret'))\n"
        f"open('{shared}/new.txt', 'w')"
    )
    assert result.stdout == "visible []\n"
    assert result.stderr.endswith(
        f"OSError: [Errno 30] Read-only file system: '{shared}/new.txt'\n"
    )
    assert sorted(p.name for p in shared.iterdir()) == ["open.txt", "secret"]


def test_calls_from_many_threads_keep_their_own_results(box):
    sandbox = box()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: sandbox.run(f"print({i} * {i})"), range(8)))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(8)]


# --------------------------------------------------------------------------- the hostile corpus


FORKS = """import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)
"""


def test_a_fork_bomb_is_capped_and_nothing_survives(box):
    """RLIMIT_NPROC under the call's own uid (or its user namespace) refuses the 16th process;
    the children left asleep die with the namespace when the program exits."""

    result, wall = timed(box(processes=16), FORKS)
    assert (result.reason, result.stdout) == ("ok", "15\n")
    assert wall < BOUND
    assert marked(box.marker) == []  # at once: the call returns after the namespace is empty
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result, wall = timed(box(processes=16, timeout_seconds=0.5, cpu_seconds=30), bomb)
    assert result.reason == "timeout" and result.detail == "stopped after 0.5 s of wall-clock time"
    assert 0.5 <= wall < 0.5 + BOUND
    assert marked(box.marker) == []


def test_an_infinite_loop_is_killed_at_its_cpu_limit(box):
    result, wall = timed(box(cpu_seconds=1, timeout_seconds=10.0), "while True:\n    pass")
    assert (result.reason, result.signal, result.exit_code) == ("killed", signal.SIGXCPU, None)
    assert result.detail == "killed by SIGXCPU (its CPU time limit, 1 s)"
    assert 0.9 <= result.cpu_seconds < 2.0 and wall < 10.0  # rusage and the limit tick apart
    assert marked(box.marker) == []


def test_a_memory_bomb_fails_at_the_memory_limit(box):
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))"
    result, wall = timed(box(memory_bytes=128 << 20), grow)
    assert (result.reason, result.exit_code) == ("error", 1)
    assert result.stderr.endswith("MemoryError\n") and wall < BOUND
    big = box(memory_bytes=128 << 20).run("b = bytearray(64 << 20); print(len(b))")
    assert big.stdout == f"{64 << 20}\n"  # under the limit it works


def test_a_flood_of_output_is_stopped(box):
    result, wall = timed(box(output_bytes=4096), "while True:\n    print('y' * 1000)")
    assert (result.reason, result.truncated) == ("output_limit", True)
    assert result.stdout == ("y" * 1000 + "\n") * 4 + "y" * 92
    assert wall < BOUND and marked(box.marker) == []
    disk = box(file_bytes=1 << 20).run("open('big', 'wb').write(b'x' * (2 << 20))")
    assert disk.reason == "error" and disk.stderr.endswith("OSError: [Errno 27] File too large\n")


def test_writes_outside_the_working_directory_change_nothing(box):
    tag = uuid.uuid4().hex
    home, repo = Path.home(), ROOT
    targets = {
        "tmp": Path(tempfile.gettempdir()) / f"sixblanks-canary-{tag}",
        "home": home / f".sixblanks-canary-{tag}",
        "run": box.run_dir / f"canary-{tag}",
        "repo": repo / f"canary-{tag}",
        "etc": Path("/etc") / f"canary-{tag}",
        "venv": Path(sys.prefix) / f"canary-{tag}",
    }
    before = sorted(box.run_dir.iterdir())
    source = (
        "import os\n"
        f"for name, path in { ({k: str(v) for k, v in targets.items()})!r}.items():\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        open(path, 'w').write('x')\n"
        "        print(name, 'written')\n"
        "    except OSError as e:\n"
        "        print(name, e.strerror)\n"
    )
    try:
        result = box().run(source)
        outcome = dict(line.split(" ", 1) for line in result.stdout.splitlines())
        # /tmp and the run directory (under /tmp here) are the sandbox's own fresh /tmp; the
        # others are on its read-only root
        binds = _tmp_binds()
        bound = {k for k, v in targets.items() if v.parts[1:2] == ("tmp",) and v.parts[2] in binds}
        tmp_like = {k for k, v in targets.items() if str(v).startswith("/tmp/")} - bound
        for name in targets:
            if name in bound:  # under an interpreter bound read-only inside the sandbox's /tmp
                assert outcome[name] != "written", (name, outcome)
                continue
            expected = "written" if name in tmp_like else "Read-only file system"
            assert outcome[name] == expected, (name, outcome)
        assert [p for p in targets.values() if p.exists()] == []
        assert sorted(box.run_dir.iterdir()) == before
    finally:
        for p in targets.values():
            if p.is_file():
                p.unlink()


def test_the_run_directory_and_the_home_directory_cannot_be_read(box):
    tag = uuid.uuid4().hex
    run_canary = box.run_dir / "result.json"
    home_canary = Path.home() / f".sixblanks-canary-{tag}"
    run_canary.write_text(f"run-{tag}")
    home_canary.write_text(f"home-{tag}")
    try:
        paths = [str(run_canary), str(home_canary), str(ROOT / "pyproject.toml")]
        result = box().run(
            "for p in " + repr(paths) + ":\n"
            "    try:\n"
            "        print(open(p).read())\n"
            "    except OSError as e:\n"
            "        print(e.strerror)\n"
        )
        assert result.stdout == "No such file or directory\n" * 3
        assert run_canary.read_text() == f"run-{tag}" and home_canary.read_text() == f"home-{tag}"
    finally:
        home_canary.unlink()


def test_no_connection_reaches_the_host():
    """A socket to a port the test listens on, on 127.0.0.1: the sandbox's network namespace has
    only a loopback that is down, so the connection fails there and nothing arrives here."""

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        port = server.getsockname()[1]
        result = run_code(
            "import socket, errno\ns = socket.socket()\ns.settimeout(1)\n"
            f"try:\n    s.connect(('127.0.0.1', {port}))\n    print('connected')\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno])",
            SandboxConfig(timeout_seconds=3.0),
        )
        assert result.stdout == "ENETUNREACH\n"
        with pytest.raises(BlockingIOError):
            server.accept()


DAEMON = """import os, sys, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, b"up")
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"])
    os._exit(0)
os.wait()
print(os.read(r, 2).decode())
"""


def test_a_daemon_does_not_outlive_its_call(box):
    result, wall = timed(box(), DAEMON)
    assert (result.reason, result.stdout) == ("ok", "up\n") and wall < BOUND
    assert marked(box.marker) == []


def test_a_daemon_outlives_a_call_without_isolation(box):
    """The marker check can fail: without namespaces a double-forked daemon escapes the program's
    process group (why isolation none is for trusted code only). It is killed here."""

    result = box(isolation="none").run(DAEMON)
    assert result.stdout == "up\n" and result.isolation == "none"
    left = marked(box.marker)
    assert len(left) == 1
    kill(left)


def test_the_sandbox_dies_with_the_harness(box):
    """A harness killed outright (SIGKILL: no clean-up of its own) leaves nothing running: the
    sandbox's init sees its status pipe close and kills the namespace."""

    harness = (
        "from sixblanks.harness.tools import Sandbox, SandboxConfig\n"
        f"cfg = SandboxConfig(timeout_seconds=60, env={{'{MARK}': '{box.marker}'}})\n"
        "Sandbox(cfg).run('import time; time.sleep(60)')"
    )
    proc = subprocess.Popen([sys.executable, "-c", harness])
    try:
        deadline = time.monotonic() + 10
        while not marked(box.marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(marked(box.marker)) == 1  # the program is asleep
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 2
        while marked(box.marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marked(box.marker) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_sleep_past_the_timeout_is_stopped(box):
    result, wall = timed(box(timeout_seconds=1.0), "import time\nprint('a')\ntime.sleep(30)")
    assert (result.reason, result.stdout, result.exit_code) == ("timeout", "a\n", None)
    assert 1.0 <= result.wall_seconds <= wall < 1.0 + BOUND
    assert marked(box.marker) == []
    assert SETUP_ALLOWANCE > BOUND  # the parent's own backstop never pre-empts the init's timeout


def test_without_isolation_the_limits_still_hold_and_the_directory_goes(box, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    sandbox = box(isolation="none", timeout_seconds=0.5)
    here = sandbox.run("import os; open('f', 'w'); print(sorted(os.listdir('.')))")
    assert (here.reason, here.stdout) == ("ok", "['f', 'main.py']\n")
    assert sandbox.run("import time; time.sleep(30)").reason == "timeout"
    assert box(isolation="none", output_bytes=10).run("print('z' * 11)").reason == "output_limit"
    assert list((tmp_path / "tmp").iterdir()) == []
