"""`sixblanks recommend`: the selection matrix as data, one test per row through the CLI, the
starter experiment it writes, and the README table kept equal to the data."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from sixblanks.algorithms.blanks import deep_merge
from sixblanks.algorithms.presets import PRESETS, resolve
from sixblanks.harness import recommend as R
from sixblanks.harness.config import parse_yaml, validate_mapping

ROOT = Path(__file__).resolve().parents[1]

# each row reached by its own flags: (row id, flags, preset, rung)
CASES = [
    ("preference", ["--signal", "preference"], "dpo", 2),
    ("demonstrations_only", ["--signal", "none"], "sft", 3),
    ("risky_environment", ["--risk", "high"], "grpo", 7),
    ("asynchronous", ["--asynchronous", "yes"], "grpo", 9),
    ("process_labels", ["--horizon", "multi", "--intermediate", "labels"], "prm_grpo", 8),
    ("potential_shaping", ["--horizon", "multi", "--intermediate", "potential"], "turn_grpo", 8),
    ("recurring_states", ["--horizon", "multi", "--intermediate", "states"], "gigpo", 8),
    ("multi_turn_expensive", ["--horizon", "multi", "--sampling", "expensive"], "ppo_turn", 8),
    ("multi_turn", ["--horizon", "multi"], "turn_grpo", 8),
    ("learned_reward", ["--signal", "learned"], "ppo", 7),
    ("expensive_sampling", ["--sampling", "expensive"], "rloo", 5),
    ("default", [], "rloo", 5),
]
CASE_IDS = [c[0] for c in CASES]


@pytest.fixture(autouse=True)
def _not_a_terminal(monkeypatch):
    """Deterministic: no question is asked unless a test says stdin is a terminal."""

    monkeypatch.setattr("sixblanks.harness.cli.describe._is_terminal", lambda: False)


def _json(cli, *args):
    code, out, err = cli("recommend", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_cases_cover_every_row_once():
    assert CASE_IDS == [r.id for r in R.ROWS]


@pytest.mark.parametrize(("row_id", "flags", "preset", "rung"), CASES, ids=CASE_IDS)
def test_each_row_through_the_cli(cli, row_id, flags, preset, rung):
    data = _json(cli, *flags)
    row = R.ROW_BY_ID[row_id]
    assert (data["row"], data["preset"], data["rung"]["number"]) == (row_id, preset, rung)
    assert data["rung"]["name"] == R.RUNG_NAMES[rung]
    assert data["overrides"] == dict(row.overrides)
    assert data["arm"] == row.arm_name
    assert data["warning"] == row.warning and data["why"] == row.why
    assert data["explain"] == f"sixblanks explain {preset}"
    given = {flags[i].lstrip("-") for i in range(0, len(flags), 2)}
    assert set(data["defaults_used"]) == {q.name for q in R.QUESTIONS} - given

    code, out, err = cli("recommend", *flags)
    assert code == 0, err
    assert f"row: {row_id} " in out
    assert f"start with: preset {preset}" in out
    assert f"check first: ladder rung {rung} ({R.RUNG_NAMES[rung]})" in out
    assert f"main warning: {row.warning}" in out
    assert f"sixblanks explain {preset}" in out


@pytest.mark.parametrize(("row_id", "flags", "preset", "rung"), CASES, ids=CASE_IDS)
def test_each_rows_starter_experiment_validates(cli, tmp_path, row_id, flags, preset, rung):
    path = tmp_path / "experiments.yaml"
    code, out, err = cli("recommend", *flags, "--write", str(path))
    assert code == 0, err
    assert f"starter experiment: {path}" in out
    text = path.read_text()
    cfg = validate_mapping(parse_yaml(text, str(path)), str(path))
    row = R.ROW_BY_ID[row_id]
    arm = row.arm_name
    assert list(cfg.arms) == [arm, R.BASELINE]
    assert cfg.arms[arm].preset == preset and cfg.arms[R.BASELINE].preset == R.BASELINE
    assert cfg.ladder.arm == arm
    # the arm is the row's preset with the row's overrides (plus matched updates where they apply)
    over = dict(cfg.arms[arm].blanks)
    assert cfg.resolved_blanks(arm) == resolve(preset, over)
    assert deep_merge(over, dict(row.overrides)) == over
    assert cfg.budget == dict(row.budget)
    # the header names the row, its warning and the rung to check first
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    flat = " ".join(line.lstrip("# ").strip() for line in header.splitlines())
    assert f"matrix row '{row_id}'" in header
    assert row.warning in flat
    assert f"ladder rung {rung} ({R.RUNG_NAMES[rung]})" in flat
    assert f"sixblanks ladder {path} --arm {arm} --all" in flat
    # the task fits the horizon
    task = cfg.tasks[0].name
    multi = "--horizon" in flags and flags[flags.index("--horizon") + 1] == "multi"
    labels = "labels" in flags
    assert task == ("chain_arithmetic" if labels else "guess_number" if multi else "arithmetic")
    code, out, err = cli("validate", str(path))
    assert code == 0, err
    assert "valid" in out


def test_matrix_data_is_consistent():
    assert R.check_matrix() == []


@pytest.mark.parametrize("row", R.ROWS, ids=[r.id for r in R.ROWS])
def test_every_rows_preset_exists_and_its_overrides_resolve(row):
    assert row.preset in PRESETS
    resolved = resolve(row.preset, dict(row.overrides))
    base = resolve(row.preset)
    assert (resolved == base) == (not row.overrides)  # overrides change something


def test_every_row_is_reachable_and_every_situation_has_a_row():
    reached = R.reachable_rows()
    assert set(reached) == {r.id for r in R.ROWS}
    for row_id, answers in reached.items():
        assert R.match(answers).id == row_id
    assert not R.ROWS[-1].when  # the last row catches every situation


def test_a_shadowed_row_is_reported(monkeypatch):
    """The reachability check can fail: a row below a broader one never matches."""

    shadowed = R.Row(
        "shadowed",
        {"signal": ("preference",), "horizon": ("multi",)},
        "never reached",
        "turn_grpo",
        "why",
        "warning",
        8,
        "rung why",
    )
    rows = (R.ROWS[0], shadowed, *R.ROWS[1:])
    monkeypatch.setattr(R.advice, "ROWS", rows)  # where the matcher reads it
    assert R.check_matrix() == ["row 'shadowed': shadowed by the rows above it"]


def test_a_row_with_a_bad_override_or_answer_is_reported(monkeypatch):
    bad = R.Row(
        "bad",
        {"signal": ("verifiable",), "risk": ("extreme",)},
        "broken",
        "grpo",
        "why",
        "warning",
        12,
        "rung why",
        overrides={"data": {"group_sise": 4}},
    )
    monkeypatch.setattr(R.advice, "ROWS", (bad, *R.ROWS))
    problems = "\n".join(R.check_matrix())
    assert "row 'bad': risk: unknown answers ['extreme']" in problems
    assert "row 'bad': preset grpo with its overrides" in problems and "group_sise" in problems
    assert "row 'bad': unknown ladder rung 12" in problems


def test_rung_names_are_the_ladders():
    from sixblanks.harness.studies.ladder import RUNGS

    assert R.RUNG_NAMES == dict(RUNGS)


def test_defaults_are_reported_when_nothing_can_be_asked(cli):
    data = _json(cli)
    assert data["defaults_used"] == [q.name for q in R.QUESTIONS]
    assert data["answers"] == R.DEFAULTS
    assert data["row"] == "default"
    data = _json(cli, "--signal", "learned", "--demos", "plenty")
    assert "signal" not in data["defaults_used"] and "demos" not in data["defaults_used"]
    code, out, _ = cli("recommend", "--risk", "high")
    assert code == 0
    assert "risk high\n" in out and "demos some (default)" in out
    assert "defaults used (not a terminal, nothing asked): --demos some" in out
    assert "--risk high" not in out.split("defaults used")[1]


def test_on_a_terminal_the_missing_answers_are_asked(cli, monkeypatch):
    monkeypatch.setattr("sixblanks.harness.cli.describe._is_terminal", lambda: True)
    # horizon and intermediate are missing: an invalid answer is asked again, then accepted
    monkeypatch.setattr("sys.stdin", io.StringIO("sideways\nmulti\nstates\n"))
    flags = ["--demos", "some", "--signal", "verifiable", "--sampling", "cheap"]
    flags += ["--asynchronous", "no", "--risk", "low"]
    code, out, err = cli("recommend", *flags, "--json")
    assert code == 0, err
    data = json.loads(out)  # the questions go to stderr: stdout stays JSON
    assert data["row"] == "recurring_states" and data["defaults_used"] == []
    assert R.QUESTION_BY_NAME["horizon"].prompt in err
    assert R.QUESTION_BY_NAME["intermediate"].prompt in err
    assert "single, multi" in err and "sideways" in err
    assert R.QUESTION_BY_NAME["demos"].prompt not in err


def test_defaults_flag_asks_nothing_on_a_terminal(cli, monkeypatch):
    monkeypatch.setattr("sixblanks.harness.cli.describe._is_terminal", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    data = _json(cli, "--defaults", "--horizon", "multi")
    assert data["row"] == "multi_turn"
    assert "horizon" not in data["defaults_used"] and len(data["defaults_used"]) == 6


def test_an_invalid_answer_lists_the_valid_ones(cli):
    code, out, err = cli("recommend", "--signal", "reward", "--horizon", "multiple")
    assert code != 0 and out == ""
    assert "error: --signal: 'reward' is not an answer" in err
    assert "(valid: verifiable, learned, preference, none)" in err
    assert "--horizon: 'multiple' is not an answer; did you mean 'multi'?" in err
    assert "(valid: single, multi)" in err


def test_nothing_to_learn_from_is_refused(cli):
    code, _, err = cli("recommend", "--signal", "none", "--demos", "none")
    assert code != 0
    assert "nothing to learn from" in err and "--demos some or plenty" in err


def test_notes(cli, tmp_path):
    data = _json(cli, "--demos", "none")
    assert data["row"] == "default"
    assert any("no warm start" in n and "warm_start.enabled: false" in n for n in data["notes"])
    data = _json(cli, "--intermediate", "labels")  # single-turn: the answer is not used
    assert data["row"] == "default"
    assert any("--intermediate" in n and "not used" in n for n in data["notes"])
    assert _json(cli)["notes"] == []
    path = tmp_path / "start.yaml"
    code, _, err = cli("recommend", "--demos", "none", "--horizon", "multi", "--write", str(path))
    assert code == 0, err
    cfg = validate_mapping(parse_yaml(path.read_text()))
    assert cfg.warm_start.enabled is False
    path2 = tmp_path / "plenty.yaml"
    code, _, err = cli("recommend", "--demos", "plenty", "--write", str(path2))
    assert code == 0, err
    assert validate_mapping(parse_yaml(path2.read_text())).warm_start.steps == 300


def test_write_refuses_to_overwrite(cli, tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text("mine: true\n")
    code, out, err = cli("recommend", "--write", str(path))
    assert code != 0
    assert "already exists" in err and "--force" in err
    assert path.read_text() == "mine: true\n"
    code, out, err = cli("recommend", "--write", str(path), "--force", "--json")
    assert code == 0, err
    assert json.loads(out)["starter"] == str(path)
    assert validate_mapping(yaml.safe_load(path.read_text())).name == "recommend-default"


def test_matched_updates_only_where_every_arm_has_a_ratio():
    rec = R.recommend(R.DEFAULTS)
    arms = R.starter_mapping(rec)["arms"]
    assert all(a["blanks"]["data"]["minibatches"] == 2 for a in arms.values())
    assert arms["rloo"]["blanks"]["data"] is not arms["grpo"]["blanks"]["data"]
    sft = R.starter_mapping(R.recommend(R.DEFAULTS | {"signal": "none"}))["arms"]
    assert all("blanks" not in a for a in sft.values())  # sft has no ratio: batches not reused


def test_the_guide_lists_the_matrix():
    readme = (ROOT / "docs" / "guide" / "recommend.md").read_text()
    assert "# Where to start: `sixblanks recommend`" in readme
    assert R.markdown_table() in readme, (
        "the guide's matrix table differs from the matrix in harness/recommend/: regenerate it with "
        "python -c 'from sixblanks.harness.recommend import markdown_table; print(markdown_table())'"
    )
    section = readme.split("# Where to start: `sixblanks recommend`")[1].split("\n## ")[0]
    for r in R.ROWS:
        assert f"| `{r.id}` |" in section and f"`{r.preset}`" in section
    for q in R.QUESTIONS:
        line = next(li for li in section.splitlines() if li.startswith(f"| `--{q.name}` |"))
        assert f"**{q.default}**" in line
        assert all(c in line for c in q.choices)
