"""One writer per output directory (issue 22): a second run, sweep or ladder on a busy output
directory is refused at once with exit code 3, naming the holder; a lock left by a killed holder
is taken over with a message."""

import json
import os
import signal
import subprocess
import sys

import pytest

from sixblanks.harness.outlock import LOCK_NAME, DirectoryBusy, OutDirLock

HOLD = (
    "import sys, time\n"
    "from sixblanks.harness.outlock import OutDirLock\n"
    "OutDirLock(sys.argv[1], 'run').__enter__()\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)

EXPERIMENT = """
arms: {grpo: {preset: grpo}}
task: {name: arithmetic}
seeds: [0]
budget: {launched_tokens: 200}
"""


@pytest.fixture
def holder(tmp_path):
    """A separate process holding the lock of tmp_path/out until killed."""

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        yield out, proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("command", ["run", "sweep", "ladder"])
def test_a_second_writer_is_refused_with_exit_code_3_naming_the_holder(
    holder, command, cli, write_yaml
):
    out, proc = holder
    code, _, err = cli(command, write_yaml(EXPERIMENT), "--out", str(out))
    assert code == 3, err
    assert "in use by `sixblanks run`" in err and f"pid {proc.pid} " in err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing else was written


def test_a_lock_left_by_a_killed_holder_is_taken_over_with_a_message(holder):
    out, proc = holder
    with pytest.raises(DirectoryBusy):
        with OutDirLock(out, "run"):
            pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    said = []
    with OutDirLock(out, "sweep", log=said.append):
        info = json.loads((out / LOCK_NAME).read_text())
        assert info["pid"] == os.getpid() and info["command"] == "sweep"
        with OutDirLock(out, "run"):  # re-entrant in the holding process
            pass
        assert (out / LOCK_NAME).read_text()  # still held after the inner exit
    assert len(said) == 1 and f"pid {proc.pid} " in said[0] and "no longer running" in said[0]
    assert (out / LOCK_NAME).read_text() == ""  # a clean release leaves nothing to take over
    said.clear()
    with OutDirLock(out, "run", log=said.append):
        pass
    assert said == []
