"""What the command line prints where a person reads it: an output location that cannot be written
is a plain sentence naming the path and what is wrong with it (no exception name, no errno), and
tables written to a file or a pipe keep every column and identifier whole."""

import json
from pathlib import Path

import pytest

from sixblanks.harness.layout import ExperimentDir, write_json

EXPERIMENT = {
    "name": "outputs",
    "task": {"name": "arithmetic", "eval_size": 8},
    "arms": {"grpo": {"preset": "grpo"}},
    "seeds": [0],
    "tracking": {"mlflow": False},
}


def _plain(err: str) -> str:
    """The one error line of ``err``, checked free of what a person cannot act on."""

    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    for jargon in ("Errno", "Error:", "--debug", "Traceback"):
        assert jargon not in line, line
    return line


def test_an_output_directory_under_a_file_is_named_with_the_file(cli, write_yaml, tmp_path):
    blocker = tmp_path / "results.txt"
    blocker.write_text("not a directory\n")
    path = write_yaml(json.dumps(EXPERIMENT))
    for out in (blocker / "exp", blocker):  # beneath the file, and the file itself
        code, _, err = cli("run", path, "--out", str(out))
        line = _plain(err)
        assert code == 2
        assert line == (
            f"error: output directory {out}: cannot be created or written: {blocker} is a file, "
            "not a directory; choose another output directory (--out)"
        )
    assert blocker.read_text() == "not a directory\n"  # left as it was


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc")
def test_an_output_directory_where_nothing_can_be_made_is_said_plainly(cli, write_yaml):
    code, _, err = cli("run", write_yaml(json.dumps(EXPERIMENT)), "--out", "/proc/sixblanks-out")
    assert code == 2
    assert _plain(err) == (
        "error: output directory /proc/sixblanks-out: cannot be created or written: /proc takes "
        "no new files or directories (a special or read-only file system); choose another output "
        "directory (--out)"
    )


def test_the_python_api_refuses_an_unwritable_output_directory_the_same_way(tmp_path):
    import sixblanks
    from sixblanks.harness.orchestration.outlock import OutputUnwritable

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputUnwritable, match=f"{blocker} is a file, not a directory"):
        sixblanks.run(EXPERIMENT, blocker / "exp")


def test_any_other_file_that_cannot_be_written_is_named_in_a_sentence(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = cli("schema", "-o", str(blocker / "schema.json"))
    assert code == 1
    assert _plain(err) == f"error: {blocker / 'schema.json'}: {blocker} is a file, not a directory"


RUN_IDS = ["8c512c84e44b0d1f", "f00dfeedc0ffee42", "0123456789abcdef"]
LIMITS = {
    "launched_tokens": 60,
    "accepted_tokens": 100000,
    "rollouts_launched": 100000,
    "verifier_calls": 100000,
    "optimizer_steps": 1000,
}


def test_the_status_table_piped_keeps_every_column_and_run_id_whole(cli, tmp_path):
    """Three runs with five budgeted counters: far wider than the 80 columns a console assumes
    without a terminal. Captured (no terminal), every header, run id and counter is whole."""

    exp = ExperimentDir(tmp_path / "exp")
    exp.path.mkdir()
    write_json(exp.experiment, {"runs": RUN_IDS})
    for i, rid in enumerate(RUN_IDS):
        exp.run(rid).path.mkdir(parents=True)
        write_json(
            exp.run(rid).status,
            {
                "state": "finished",
                "arm": f"arm_with_a_long_name_{i}",
                "task": "arithmetic",
                "seed": i,
                "step": 4,
                "counters": {k: v // 2 for k, v in LIMITS.items()},
                "limits": LIMITS,
                "last_eval": {"score": 0.125, "step": 4},
            },
        )
    code, out, _ = cli("status", str(exp.path))
    assert code == 0
    assert "…" not in out
    (header,) = [line for line in out.splitlines() if "┃ run" in line]
    for column in ("run", "arm", "task", "seed", "state", "step", "budget", "last eval", "ETA"):
        assert f" {column} " in header
    for i, rid in enumerate(RUN_IDS):
        (row,) = [line for line in out.splitlines() if f" {rid} " in line]
        assert f" arm_with_a_long_name_{i} " in row
        used = ", ".join(f"{k} {v // 2:,}/{v:,}" for k, v in LIMITS.items())  # 50,000/100,000
        assert used in row  # the whole budget cell on the run's one line


def test_explain_piped_cuts_no_field_or_preset_name(cli):
    code, out, _ = cli("explain", "grpo", "dapo", "sapo", "ppo", "cispo", "--all")
    assert code == 0 and "…" not in out
    header = next(line for line in out.splitlines() if "┃ blank" in line)
    for name in ("grpo", "dapo", "sapo", "ppo", "cispo"):
        assert f" {name} " in header


def test_a_table_on_a_narrow_terminal_folds_long_values_rather_than_cutting_them():
    """On a terminal the table fits its width: a value too long for its column (an identifier with
    no space to break at) continues on the next line, every character of it shown."""

    import io

    from rich.console import Console
    from rich.table import Table

    from sixblanks.harness.cli.app import show

    buf = io.StringIO()
    table = Table()
    for column in ("run", "state"):
        table.add_column(column)
    long_id = "-".join(RUN_IDS)  # 50 characters, no space
    table.add_row(long_id, "finished")
    show(table, console=Console(file=buf, force_terminal=True, width=40, color_system=None))
    lines = buf.getvalue().splitlines()
    assert "…" not in buf.getvalue() and max(len(line) for line in lines) <= 40
    cells = "".join(line.split("│")[1].strip() for line in lines if line.startswith("│"))
    assert cells == long_id  # all of it, in order
