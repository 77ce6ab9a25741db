"""A worker fork server kept between commands (`sixblanks run --keep-warm MINUTES`): a later
process of the same code forks its workers from it (its imports not made again), each worker with
that process's environment and working directory; a process told 0 uses its own; the keeper ends
once no user has been alive for its idle time, and at once when stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sixblanks.harness.orchestration.processes import running

PROBE = """
import json, multiprocessing.forkserver as fs, os, signal, sys, time
from sixblanks.harness.orchestration import kept_server
from sixblanks.harness.orchestration.local_workers import local_pool
with local_pool(1) as pool:
    got = {
        "ppid": pool.submit(os.getppid).result(),
        "cwd": pool.submit(os.getcwd).result(),
        "probe": pool.submit(os.getenv, "PROBE").result(),
        "own_server": fs._forkserver._forkserver_pid,
        "wrote": pool.submit(os.write, 2, b"said by the worker\\n").result(),
        "state": kept_server.find(),
    }
time.sleep(float(sys.argv[1]))  # a user still alive for this long after its pool ended
got["alive_at_exit"] = kept_server.find() is not None
print(json.dumps(got))
"""


def _probe(tmp_path, name: str, keep: str | None, linger: float = 0.0) -> dict:
    cwd = tmp_path / name
    cwd.mkdir()
    env = {**os.environ, "SIXBLANKS_CACHE": str(tmp_path / "cache"), "PROBE": name}
    env.pop("SIXBLANKS_KEEP_WARM", None)
    if keep is not None:
        env["SIXBLANKS_KEEP_WARM"] = keep
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(linger)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    got["cwd_expected"] = str(cwd)
    got["stderr"] = done.stderr
    return got


@pytest.mark.slow
def test_a_kept_server_serves_later_processes_until_idle_or_stopped(tmp_path):
    from sixblanks.harness.orchestration import kept_server

    states: list[dict] = []
    try:
        first = _probe(tmp_path, "a", keep="1")  # one idle minute
        state = first["state"]
        states.append(state)
        assert state is not None and first["own_server"] is None  # no server of its own
        assert first["ppid"] == state["server"]  # forked from the kept server
        assert (first["probe"], first["cwd"]) == ("a", first["cwd_expected"])
        assert "said by the worker" in first["stderr"]  # the command's stderr, not the keeper's
        assert running(state["keeper"]) and running(state["server"])  # outlived the process

        later = _probe(tmp_path, "b", keep=None)  # no option: the live one of its code is used
        assert later["state"] == state and later["own_server"] is None
        assert later["ppid"] == state["server"]
        assert (later["probe"], later["cwd"]) == ("b", later["cwd_expected"])  # its own
        assert "said by the worker" in later["stderr"]

        own = _probe(tmp_path, "c", keep="0")  # told none: a server of its own, started now
        assert own["state"] == state  # still there, not used
        assert own["own_server"] is not None and own["ppid"] == own["own_server"]
        assert own["ppid"] != state["server"]

        # idle time cut to 1.2 s: kept while a user lives (3 s), then gone within a few seconds
        idle = _probe(tmp_path, "d", keep=repr(1.2 / 60), linger=3.0)
        assert idle["ppid"] == state["server"] and idle["alive_at_exit"]
        deadline = time.time() + 20
        while time.time() < deadline and (running(state["keeper"]) or running(state["server"])):
            time.sleep(0.1)
        assert not running(state["keeper"]) and not running(state["server"])
        assert not (tmp_path / "cache" / "kept-workers" / f"{state['key']}.json").exists()

        # stopped on request (`--keep-warm 0`): keeper and server end at once
        env = {"SIXBLANKS_CACHE": str(tmp_path / "cache")}
        code = (
            "import json; from sixblanks.harness.orchestration import kept_server as k\n"
            "print(json.dumps(k.start(60.0, key='k')))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        state = json.loads(out.stdout)
        states.append(state)
        os.environ["SIXBLANKS_CACHE"], saved = env["SIXBLANKS_CACHE"], os.environ["SIXBLANKS_CACHE"]
        try:
            assert kept_server.find("k") == state
            assert kept_server.stop("k") is True
            assert kept_server.find("k") is None and kept_server.stop("k") is False
        finally:
            os.environ["SIXBLANKS_CACHE"] = saved
        assert not running(state["keeper"]) and not running(state["server"])
    finally:
        for s in states:
            for pid in (s["keeper"], s["server"]):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
