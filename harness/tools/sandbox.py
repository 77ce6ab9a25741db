"""Run a piece of model-written Python in a sandbox: a fresh process with no network, no view of the
user's files, resource limits and a wall-clock timeout, and a typed result.

    sandbox = Sandbox(SandboxConfig(timeout_seconds=2), hide=[run_dir])  # refuses if unavailable
    result = sandbox.run("print(sum(range(10)))")   # thread-safe: one Sandbox, many threads
    result.reason, result.stdout, result.wall_seconds   # "ok", "45\\n", 0.06

Each call starts util-linux's ``unshare`` with new PID, mount, network, IPC and UTS namespaces;
its first process (:mod:`.sandbox_init`) builds a root that shows only the system directories and
the interpreter's, read-only, with a writable /tmp, drops every privilege, applies the limits and
runs the program as ``python main.py`` in /tmp/work. When the program ends, times out or floods
its output, everything it started is killed with its namespace, and its files go with it. What
the machine cannot provide is refused with :class:`SandboxUnavailable`, never relaxed;
``isolation: none`` (trusted code only) runs the same way without the namespaces. The guide
``docs/guide/sandbox.md`` says what is and is not guaranteed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from ..errors import SixblanksError
from .limits import SandboxConfig, SandboxResult
from .machine import Isolation, probe
from .process import SETUP_ALLOWANCE, Call

INIT = Path(__file__).with_name("sandbox_init.py")
WORKDIR = "/tmp/work"
"""The program's working directory inside the namespaces: the same path on every call, so its
tracebacks (``File "/tmp/work/main.py"``) do not depend on a random directory name."""

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""What the program sees of the host besides the interpreter's directories, read-only."""

UID_BASE, UID_SPAN = 1 << 30, 1 << 29
"""Under root, each call runs under a uid drawn from [2^30, 2^30 + 2^29): one no account or other
call holds, so RLIMIT_NPROC (counted per uid) caps this call's processes alone."""


class SandboxUnavailable(SixblanksError):
    """The machine cannot provide the isolation the configuration asks for, or the sandbox could
    not be set up: the message says what is missing."""


def _interpreter_dirs(python: str) -> list[str]:
    """The directories an interpreter reads: its prefixes (a virtual environment's and the base
    installation's) and its executable's."""

    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        names = "sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix"
        code = f"import sys, json; print(json.dumps([{names}]))"
        try:
            out = subprocess.run([python, "-I", "-c", code], capture_output=True, timeout=30)
            prefixes = json.loads(out.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(
                f"sandbox: the interpreter {python} could not be started: {exc}"
            ) from exc
    return [*prefixes, os.path.dirname(os.path.realpath(python))]


def _outermost(paths: Iterable[str]) -> list[str]:
    """Paths not inside another of them, sorted (binding a parent after its child would cover
    it)."""

    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@lru_cache(maxsize=1)
def _machine() -> Isolation:
    """The probe, once per process: what the machine provides does not change while it runs."""

    return probe()


class Sandbox:
    """A configured sandbox, checked against the machine once; :meth:`run` may be called from many
    threads at once (each call has its own processes, pipes and directory; nothing is shared)."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        hide: Iterable[str | os.PathLike[str]] = (),
        machine: Isolation | None = None,
    ):
        self.config = config or SandboxConfig()
        self.machine = machine if machine is not None else _machine()
        self.python = os.path.abspath(self.config.python or sys.executable)
        if self.config.isolation == "namespaces" and not self.machine.namespaces:
            raise SandboxUnavailable(
                [f"sandbox (isolation: namespaces): {p}" for p in self.machine.problems]
                + ["set isolation: none only for code you trust"]
            )
        self.hidden = [os.path.realpath(p) for p in (*self.config.hide, *hide)]
        self.visible: list[str] = []
        if self.config.isolation == "namespaces":
            interpreter = [os.path.realpath(p) for p in _interpreter_dirs(self.python)]
            for h in self.hidden:
                clash = [d for d in interpreter if _inside(d, h)]
                if clash:
                    raise SandboxUnavailable(
                        f"sandbox: the hidden path {h} holds the interpreter's directory "
                        f"{clash[0]}: the program could not start"
                    )
            extra = [os.path.realpath(p) for p in self.config.visible]
            for p in [*interpreter, *extra]:
                if _inside(p, "/proc") or _inside(p, "/dev") or p == "/tmp":
                    raise SandboxUnavailable(
                        f"sandbox: {p} cannot be shown: the sandbox has its own /proc, /dev "
                        "and /tmp"
                    )
            self.visible = _outermost([*SYSTEM_PATHS, *interpreter, *extra])
            # a hidden path matters only where something visible would show it
            self.hidden = [h for h in self.hidden if any(_inside(h, v) for v in self.visible)]

    # ------------------------------------------------------------------ one call

    def run(self, source: str, stdin: str = "") -> SandboxResult:
        """Run ``source`` as ``python main.py`` with ``stdin`` on its standard input."""

        start = time.monotonic()
        cfg = self.config
        try:
            size, stdin_size = len(source.encode()), len(stdin.encode())
        except UnicodeEncodeError as exc:  # a lone surrogate: no file can hold it
            return self._result("refused", start, detail=f"not valid Unicode text: {exc.reason}")
        refusal = None
        if size > cfg.source_bytes:
            refusal = f"the program is {size} bytes; the limit is {cfg.source_bytes}"
        elif stdin_size > cfg.stdin_bytes:
            refusal = f"the input is {stdin_size} bytes; the limit is {cfg.stdin_bytes}"
        if refusal:
            return self._result("refused", start, detail=refusal)
        namespaces = cfg.isolation == "namespaces"
        workdir = WORKDIR if namespaces else tempfile.mkdtemp(prefix="sixblanks-sandbox-")
        try:
            return self._call(source, stdin, workdir, start)
        finally:
            if not namespaces:
                shutil.rmtree(workdir, ignore_errors=True)

    def _plan(self, source: str, stdin: str, workdir: str) -> dict:
        cfg = self.config
        namespaces = cfg.isolation == "namespaces"
        bindir = os.path.dirname(self.python)
        env = {
            "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": "/tmp" if namespaces else workdir,
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            # output up to a kill is kept; the same program prints the same thing (set order)
            "PYTHONUNBUFFERED": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            # one thread per numerical library: threads count against the process limit
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            **cfg.env,
        }
        python = self.python
        if namespaces:
            # the directories are bound at their real paths (a symlinked home is not recreated);
            # the file's own link stays, for a virtual environment is found through it
            python = os.path.join(os.path.realpath(bindir), os.path.basename(python))
        privileged = namespaces and self.machine.privileged
        # RLIMIT_NPROC counts the processes of a uid (of a user namespace's uid, for a user
        # namespace). Under root the call's own uid has only the program's. In a user namespace
        # unshare and the init are its root too, so they are added. Without namespaces it would
        # count every process of the user: no limit is set.
        processes = None
        if namespaces:
            processes = cfg.processes + (0 if privileged else 2)
        return {
            "isolation": cfg.isolation,
            "python": python,
            "source": source,
            "stdin": stdin,
            "workdir": workdir,
            "env": env,
            "visible": self.visible,
            "hidden": self.hidden,
            "uid": UID_BASE + secrets.randbelow(UID_SPAN) if privileged else None,
            "disk_bytes": cfg.disk_bytes,
            "timeout": cfg.timeout_seconds,
            "limits": {
                "cpu": cfg.cpu_seconds,
                "memory": cfg.memory_bytes,
                "file": cfg.file_bytes,
                "open_files": cfg.open_files,
                "processes": processes,
            },
        }

    def _call(self, source: str, stdin: str, workdir: str, start: float) -> SandboxResult:
        plan = json.dumps(self._plan(source, stdin, workdir)).encode()
        command = [sys.executable, "-I", "-S", str(INIT)]
        if self.config.isolation == "namespaces":
            command = self.machine.unshare_command() + command
        plan_r, plan_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [*command, str(plan_r), str(status_w)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(plan_r, status_w),
                start_new_session=True,  # a terminal's Ctrl-C reaches the harness, not the program
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"},
            )
        except OSError:
            for fd in (plan_w, status_r):
                os.close(fd)
            raise
        finally:
            os.close(plan_r)
            os.close(status_w)
        group = self.config.isolation == "none"
        call = Call(proc, status_r, self.config.output_bytes, group)
        try:
            try:
                with open(plan_w, "wb") as f:
                    f.write(plan)
            except BrokenPipeError:
                pass  # the init is gone: its stderr says why, read below
            call.collect(start + self.config.timeout_seconds + SETUP_ALLOWANCE)
        finally:
            call.finish()
        return self._outcome(call, start)

    def _outcome(self, call: Call, start: float) -> SandboxResult:
        cfg = self.config
        final = next((r for r in call.records if "status" in r), None)
        error = next((r["error"] for r in call.records if "error" in r), None)
        out = {k: bytes(v).decode("utf-8", errors="replace") for k, v in call.output.items()}
        if error is not None or (final is None and call.stopped is None):
            why = error or f"the sandbox ended before the program did: {out['stderr'][-400:]}"
            raise SandboxUnavailable(f"sandbox ({cfg.isolation}): {why}")
        kw = {"stdout": out["stdout"], "stderr": out["stderr"], "truncated": call.truncated}
        kw["cpu_seconds"] = final["cpu_seconds"] if final else 0.0
        if call.stopped == "output_limit":
            detail = f"{call.flooded} passed {cfg.output_bytes} bytes: stopped, the first ones kept"
            return self._result("output_limit", start, detail=detail, **kw)
        if call.stopped == "timeout" or final["timed_out"]:
            detail = f"stopped after {cfg.timeout_seconds:g} s of wall-clock time"
            return self._result("timeout", start, detail=detail, **kw)
        status = final["status"]
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            detail = f"killed by {signal.Signals(sig).name}" + {
                signal.SIGXCPU: f" (its CPU time limit, {cfg.cpu_seconds} s)",
                signal.SIGXFSZ: f" (its file size limit, {cfg.file_bytes} bytes)",
                signal.SIGKILL: " (its hard CPU limit, or the kernel)",
            }.get(sig, "")
            return self._result("killed", start, detail=detail, signal=sig, **kw)
        code = os.WEXITSTATUS(status)
        reason = "ok" if code == 0 else "error"
        return self._result(reason, start, detail=f"exit code {code}", exit_code=code, **kw)

    def _result(self, reason: str, start: float, **kw) -> SandboxResult:
        base = {"stdout": "", "stderr": "", "exit_code": None, "signal": None, "truncated": False}
        base.update({"cpu_seconds": 0.0, "detail": ""}, **kw)
        wall = time.monotonic() - start
        return SandboxResult(
            reason=reason, wall_seconds=wall, isolation=self.config.isolation, **base
        )


def run_code(
    source: str,
    config: SandboxConfig | None = None,
    *,
    stdin: str = "",
    hide: Iterable[str | os.PathLike[str]] = (),
) -> SandboxResult:
    """Run ``source`` once in a sandbox (see :class:`Sandbox`); raises :class:`SandboxUnavailable`
    when the machine cannot provide the isolation ``config`` asks for."""

    return Sandbox(config, hide=hide).run(source, stdin)
