"""One writer per output directory: a second run, sweep or ladder on a busy output
directory is refused at once with exit code 3, naming the holder; a lock left by a killed holder
is taken over with a message."""

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from sixblanks.harness.orchestration.outlock import LOCK_NAME, DirectoryBusy, OutDirLock

HOLD = (
    "import sys, time\n"
    "from sixblanks.harness.orchestration.outlock import OutDirLock\n"
    "OutDirLock(sys.argv[1], 'run').__enter__()\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)

EXPERIMENT = """
arms: {grpo: {preset: grpo}}
task: {name: arithmetic}
seeds: [0]
budget: {launched_tokens: 1000}  # above one step (768): validate refuses less
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
    holder, command, cli, write_yaml, chaos
):
    out, proc = holder
    chaos.fault(f"a second writer (`{command}`) on a busy output directory")
    code, _, err = cli(command, write_yaml(EXPERIMENT), "--out", str(out))
    assert code == 3, err
    assert "in use by `sixblanks run`" in err and f"pid {proc.pid} " in err
    assert "Traceback" not in err
    chaos.rows(len(list(out.iterdir())), 1, "files in the directory (the lock only)")


def test_a_lock_left_by_a_killed_holder_is_taken_over_with_a_message(holder, chaos):
    out, proc = holder
    chaos.fault("the lock's holder SIGKILLed")
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


CHANGED = """
arms: {grpo: {preset: grpo}, dapo: {preset: dapo}}
task: {name: arithmetic, eval_size: 8}
rollout: {max_new_tokens: 4, prompts_per_step: 2, group_size: 4}
warm_start: {steps: 5, num_demos: 50}
seeds: [0]
tracking: {mlflow: false}
"""


@pytest.mark.slow
def test_a_changed_experiment_is_refused_in_an_old_output_directory_unless_added(
    tmp_path, cli, write_yaml, chaos
):
    """An output directory belongs to one experiment definition: a changed budget and a new arm
    are refused (exit 2, naming both, nothing written); with --add the store and the report hold
    the new definition's runs only. Where runs go (executor) is not part of the definition."""

    from ..conftest import query

    out = str(tmp_path / "out")
    first = CHANGED.replace("dapo: {preset: dapo}", "") + "budget: {launched_tokens: 64}\n"
    code, _, err = cli("run", write_yaml(first, "a.yaml"), "--out", out, "--no-progress")
    assert code == 0, err
    assert query(out, "SELECT count(*) FROM runs") == [(1,)]

    # the same experiment on other executor and tracking settings: the same definition
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.definition import claim

    same = yaml.safe_load(first) | {"executor": {"workers": 1}, "tracking": {"mlflow": True}}
    assert claim(out, validate_mapping(same), "run")["history"] == []
    before = (tmp_path / "out" / "results.duckdb").read_bytes()

    changed = CHANGED + "budget: {launched_tokens: 80}\n"
    chaos.fault("a changed experiment run into an old output directory")
    code, _, err = cli("run", write_yaml(changed, "c.yaml"), "--out", out, "--no-progress")
    assert code == 2, err
    line = " ".join(err.split())
    assert "holds another definition of the experiment" in line
    assert "budget.launched_tokens: 64 -> 80" in line and "arm 'dapo' added" in line
    assert "--add" in line and "Traceback" not in err
    assert (tmp_path / "out" / "results.duckdb").read_bytes() == before  # nothing written
    code, _, err = cli("sweep", write_yaml(changed, "c.yaml"), "--out", out)
    assert code == 2 and "holds another definition" in err  # whichever command

    code, _, err = cli("run", write_yaml(changed, "c.yaml"), "--out", out, "--no-progress", "--add")
    assert code == 0, err
    assert "--add" in err and "rebuilt" in err
    rows = query(out, "SELECT arm, limit_value FROM runs JOIN budgets USING (run_id) ORDER BY arm")
    assert rows == [("dapo", 80.0), ("grpo", 80.0)]  # the old definition's run is not in the store
    chaos.rows(len(rows), 2, "runs of the current definition in the store")
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 3  # but its directory stays
    hist = json.loads((tmp_path / "out" / "definition.json").read_text())["history"]
    assert len(hist) == 1 and "budget.launched_tokens: 64 -> 80" in hist[0]["changes"]
