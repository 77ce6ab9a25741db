"""The command line read in a log file, a pipe or a narrow terminal: marks that stay without
colour, ``--version``, flags shown without a value placeholder, one exit code per class of error,
numbers as a person reads them, counts in agreement with their nouns, and ``ui`` printing its
address only once the server answers."""

import json
import os
import re
import socket
import sys
from importlib.metadata import version

import pytest

from sixblanks.harness.cli.app import app, human, plural
from sixblanks.harness.version import CODE_VERSION

ANSI = re.compile(r"\x1b\[")


def _rows(out: str, field: str) -> list[str]:
    return [line for line in out.splitlines() if f"│ {field} " in line]


def test_explain_piped_marks_the_fields_that_differ_without_colour(cli):
    code, out, _ = cli("explain", "grpo", "dapo")
    assert code == 0 and not ANSI.search(out)  # captured: no colour at all
    assert "fields that differ marked ≠" in out and "differences in yellow" not in out
    (differs,) = _rows(out, "eps_high")  # grpo 0.2, dapo 0.28
    (same,) = _rows(out, "eps_low")  # 0.2 both
    assert differs.split("│")[-2].strip() == "≠" and same.split("│")[-2].strip() == ""
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    marked = {row[2].strip() for row in rows if row[-2].strip() == "≠"}
    data = json.loads(cli("explain", "grpo", "dapo", "--json")[1])
    assert marked - {""} == {key.partition(".")[2] for key in data["differs"]}
    # one column compares nothing: no mark, no column for it
    code, out, _ = cli("explain", "grpo")
    assert code == 0 and "≠" not in out and "differs" not in out


def test_rollouts_piped_mark_the_action_tokens_without_colour(cli, write_yaml, tmp_path):
    path = write_yaml("arms: {a: {preset: grpo}}\nrollout: {max_new_tokens: 4}\n")
    code, out, err = cli(
        "rollouts",
        path,
        "--n",
        "1",
        "--group",
        "2",
        "--no-warm-start",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, err
    episodes = [line for line in out.splitlines() if line.startswith("[")]
    assert len(episodes) == 2 and all("⟦" in e and "⟧" in e for e in episodes)
    assert "⟦action tokens⟧ (mask 1" in out and not ANSI.search(out)


def test_version(cli):
    code, out, _ = cli("--version")
    assert code == 0
    assert out == f"sixblanks {version('sixblanks')} (code release {CODE_VERSION})\n"


def _commands() -> list[str]:
    return sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_flags_show_no_value_placeholder(cli):
    """``--json <bool>`` read as though the flag took a value: every command's flags show none,
    while options that take a value keep theirs."""

    code, out, _ = cli("--help")
    assert code == 0 and "<bool>" not in out and re.search(r"--version\s+Print", out)
    for command in _commands():
        code, out, _ = cli(command, "--help")
        assert code == 0 and "<bool>" not in out, command
        assert re.search(r"--help\s+Show this message", out), command
    out = cli("run", "--help")[1]
    assert re.search(r"--out\s+<path>", out) and re.search(r"--no-progress\s+No live", out)
    out = cli("rollouts", "--help")[1]
    assert re.search(r"--n\s+<int range>", out)


@pytest.mark.parametrize(
    "args, said",
    [
        (["run", "--bogus"], "No such option: --bogus"),
        (["status"], "Missing argument 'directory'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["rollouts", "--n", "many"], "Invalid value for '--n'"),
        (["explain", "grpo", "--json=yes"], "does not take a value"),
    ],
)
def test_usage_errors_exit_2_like_configuration_errors(cli, args, said):
    """A command line that cannot be parsed is the caller's to fix, like a bad experiment file:
    exit 2 (it was 1, a failure's code), the usage and the problem said, no exception name."""

    code, out, err = cli(*args)
    assert code == 2 and said in err, err
    assert "NoSuchOption" not in err and "UsageError" not in err and "--debug" not in err


def test_each_class_of_error_has_its_exit_code(cli, write_yaml, tmp_path):
    assert cli("validate", write_yaml("arms: {a: {preset: nope}}"))[0] == 2  # configuration
    assert cli("status", str(tmp_path))[0] == 2  # not an experiment directory: a usage error
    assert cli("--version")[0] == 0


def test_a_ctrl_c_a_library_wrapped_is_still_an_interruption(cli, monkeypatch):
    """Ctrl-C landing in a callback pydantic's serializer runs (a configuration's serializer, while
    the command starts) comes out as pydantic's own error with the KeyboardInterrupt as its cause:
    the command says it was interrupted and exits 130, as for any Ctrl-C, not 1 with the library's
    error. The same error without a Ctrl-C behind it stays a failure."""

    from pydantic import BaseModel, model_serializer

    import sixblanks.harness.cli as cli_module

    class Interrupted(BaseModel):
        @model_serializer(mode="wrap")
        def _dump(self, handler):
            raise KeyboardInterrupt

    class Broken(BaseModel):
        @model_serializer(mode="wrap")
        def _dump(self, handler):
            raise RuntimeError("a bug")

    for model, code, said in ((Interrupted, 130, "interrupted"), (Broken, 1, "a bug")):
        monkeypatch.setattr(cli_module, "app", lambda model=model, **kw: model().model_dump())
        got, _, err = cli("validate", "x.yaml")
        assert (got, err.strip().splitlines()[-1].startswith("error:")) == (code, code == 1), err
        assert said in err, err


def test_the_exit_codes_are_documented():
    from .conftest import ROOT

    page = (ROOT / "docs" / "reference" / "commands.md").read_text()
    table = page[page.index("## Exit codes") :]
    for code in ("0", "1", "2", "3", "4", "130"):
        assert re.search(rf"^\| {code} \|", table, re.M), code
    assert "usage" in table.split("| 2 |")[1].split("\n")[0]


def test_numbers_read_as_a_person_reads_them():
    assert human(5242880.0) == "5,242,880" and human(5.24288e06) == "5,242,880"
    assert human(0) == "0" and human(12) == "12" and human(-3.0) == "-3"
    assert human(0.123456) == "0.1235" and human(12.3456) == "12.35"
    assert human(1234.56) == "1,235" and human(None) == "-"
    assert human(float("nan")) == "nan"
    assert plural(1, "arm") == "1 arm" and plural(2, "arm") == "2 arms"
    assert plural(0, "seed") == "0 seeds" and plural(1, "run") == "1 run"


def test_validate_says_counts_in_agreement_and_budgets_in_full(cli, write_yaml):
    path = write_yaml("arms: {a: {preset: grpo}}\nseeds: [0]\nbudget: {launched_tokens: 5242880}\n")
    code, out, _ = cli("validate", path)
    assert code == 0
    assert "launched_tokens <= 5,242,880" in out and "e+06" not in out
    assert "1 run: 1 arm x 1 task(s) x 1 seed" in out


def test_status_budget_cells_in_full(cli, tmp_path):
    from sixblanks.harness.layout import ExperimentDir, write_json

    exp = ExperimentDir(tmp_path / "exp")
    exp.path.mkdir()
    write_json(exp.experiment, {"runs": ["r1"]})
    exp.run("r1").path.mkdir(parents=True)
    limits = {"launched_tokens": 5242880, "device_seconds": 3600}
    write_json(
        exp.run("r1").status,
        {
            "state": "running",
            "arm": "a",
            "task": "t",
            "seed": 0,
            "step": 3,
            "counters": {"launched_tokens": 2621440, "device_seconds": 12.25},
            "limits": limits,
        },
    )
    code, out, _ = cli("status", str(exp.path))
    assert code == 0 and "e+06" not in out
    assert "launched_tokens 2,621,440/5,242,880, device_seconds 12.25/3,600" in out


# ----------------------------------------------------------------------------- ui

FAKE_UI = """
import http.server, os, sys, time
mode, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
open(log, "w").write(str(os.getpid()))
if mode == "exits":
    sys.exit(3)
if mode == "silent":
    time.sleep(600)
time.sleep(1.5)  # as MLflow's UI, slow to answer
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"OK")
        with open(log, "a") as f:
            f.write(" served " + self.path)
    def log_message(self, *a):
        pass
server = http.server.HTTPServer(("127.0.0.1", port), Health)
server.handle_request()  # the health check, then it ends (as a UI stopped by its user)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fake_ui(tmp_path, monkeypatch):
    """An experiment directory with an MLflow store file and, in place of MLflow's UI, a small
    server of the given behaviour; returns (run the command, the server's log file)."""

    from sixblanks.harness.cli import experiment_runs

    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "mlflow.db").write_bytes(b"")
    script = tmp_path / "fake_ui.py"
    script.write_text(FAKE_UI)
    log = tmp_path / "ui.log"
    mode = {}
    monkeypatch.setattr(
        experiment_runs,
        "ui_command",
        lambda db, port: [sys.executable, str(script), mode["mode"], str(port), str(log)],
    )

    def run(cli, behaviour: str, *args: str):
        mode["mode"] = behaviour
        port = _free_port()
        return port, cli("ui", str(exp), "--port", str(port), *args)

    return run, log


def test_ui_prints_its_address_once_the_server_answers(cli, fake_ui):
    run, log = fake_ui
    port, (code, out, err) = run(cli, "answers")
    assert code == 0, err
    assert "starting the MLflow UI" in err
    assert out == f"MLflow UI on http://127.0.0.1:{port} (Ctrl-C to stop)\n"
    assert log.read_text().endswith(" served /health")  # asked, and answered, before it said so


def test_ui_says_when_the_server_exits_before_answering(cli, fake_ui):
    run, _ = fake_ui
    port, (code, out, err) = run(cli, "exits")
    assert code == 1 and out == ""
    assert (
        f"error: the MLflow UI exited (code 3) before it answered at http://127.0.0.1:{port}" in err
    )


def test_ui_gives_up_on_a_server_that_never_answers_and_stops_it(cli, fake_ui):
    run, log = fake_ui
    port, (code, out, err) = run(cli, "silent", "--wait", "2")
    assert code == 1 and out == ""
    assert f"did not answer at http://127.0.0.1:{port} within 2 s and was stopped" in err
    pid = int(log.read_text())
    with pytest.raises(ProcessLookupError):  # nothing left behind
        os.kill(pid, 0)


def test_ui_refuses_a_port_already_taken(cli, fake_ui, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code, out, err = cli("ui", str(tmp_path / "exp"), "--port", str(port))
    assert code == 2 and f"--port {port}: something already listens" in err


CONSOLE = """
import atexit, sys, threading, time
from sixblanks.harness.cli import console
atexit.register(lambda: print("an atexit handler ran", flush=True))
def late():
    while threading.main_thread().is_alive():  # until the exit begins: alive when console() ends
        time.sleep(0.01)
    print("a thread that is no daemon ended", flush=True)
class Teardown:
    def __del__(self):
        print("the interpreter's teardown ran", flush=True)
kept = Teardown()  # freed only by the teardown
if sys.argv[2] == "thread":
    threading.Thread(target=late).start()
sys.stdout.write("buffered, never flushed by hand\\n")
sys.argv = ["sixblanks", "validate", sys.argv[1]]
console()
print("never reached")
"""


@pytest.mark.parametrize("case", ["good", "bad", "thread"])
def test_the_program_exits_with_its_code_and_everything_said(case, write_yaml, tmp_path):
    """The ``sixblanks`` program ends without the interpreter's teardown (a global's finalizer
    never runs), after what that teardown must do: the command's exit code, its buffered output
    written (a pipe here), every atexit handler run; a thread that is no daemon is waited for, by
    the ordinary exit."""

    import subprocess

    path = tmp_path / "bad.yaml" if case == "bad" else write_yaml("arms:\n  a: {preset: grpo}\n")
    if case == "bad":
        path.write_text("arms: {a: {preset: no_such_preset}}\n")
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE, str(path), case], capture_output=True, text=True
    )
    assert done.returncode == (2 if case == "bad" else 0), done.stderr
    assert done.stdout.startswith("buffered, never flushed by hand\n")
    assert "an atexit handler ran" in done.stdout and "never reached" not in done.stdout
    assert ("a thread that is no daemon ended" in done.stdout) == (case == "thread")
    assert ("the interpreter's teardown ran" in done.stdout) == (case == "thread")
    if case == "bad":
        assert "no_such_preset" in done.stderr
    else:
        assert "2 runs: 1 arm x 1 task(s) x 2 seeds\n" in done.stdout
