"""`sixblanks recommend`: the selection matrix as data, one test per row through the CLI, the
starter experiment it writes, and the README table kept equal to the data."""

from __future__ import annotations

import copy
import functools
import io
import itertools
import json
from pathlib import Path

import pytest
import yaml

from sixblanks.algorithms.blanks import deep_merge
from sixblanks.algorithms.presets import PRESETS, resolve
from sixblanks.harness import recommend as R
from sixblanks.harness.config import parse_yaml, validate_mapping
from sixblanks.harness.errors import SixblanksError

ROOT = Path(__file__).resolve().parents[1]

# each row reached by its own flags: (row id, flags, preset, rung)
CASES = [
    ("preference", ["--signal", "preference"], "dpo", 2),
    ("demonstrations_only", ["--signal", "none"], "sft", 3),
    ("changing_single_turn", ["--state", "changing"], "reinforce_baseline", 5),
    ("changing_state", ["--state", "changing", "--horizon", "multi"], "sao", 8),
    ("risky_environment", ["--risk", "high"], "grpo", 7),
    ("asynchronous", ["--asynchronous", "yes"], "grpo", 9),
    ("process_labels", ["--horizon", "multi", "--intermediate", "labels"], "prm_grpo", 8),
    ("potential_shaping", ["--horizon", "multi", "--intermediate", "potential"], "turn_grpo", 8),
    ("recurring_states", ["--horizon", "multi", "--intermediate", "states"], "gigpo", 8),
    ("multi_turn_expensive", ["--horizon", "multi", "--sampling", "expensive"], "ppo_turn", 8),
    ("multi_turn", ["--horizon", "multi"], "turn_grpo", 8),
    ("learned_reward", ["--signal", "learned"], "ppo", 7),
    ("length_bias", ["--concern", "length"], "dr_grpo", 6),
    ("clip_fraction", ["--concern", "clipping"], "sapo", 7),
    ("open_reasoning", ["--concern", "entropy"], "dapo", 4),
    ("mixture_of_experts", ["--model", "moe"], "gspo", 7),
    ("expensive_sampling", ["--sampling", "expensive"], "rloo", 5),
    ("default", [], "rloo", 5),
]
CASE_IDS = [c[0] for c in CASES]

NEW_QUESTIONS = ("state", "model", "concern")
NEW_ROWS = ("changing_single_turn", "changing_state", "length_bias", "clip_fraction")
NEW_ROWS += ("mixture_of_experts", "open_reasoning")
"""The questions and rows added for one sample per changing state, REINFORCE with a baseline,
Dr. GRPO, SAPO, GSPO and the open reasoning-RL recipe (DAPO): their defaults must leave every
earlier situation's row unchanged."""


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
    for key, value in row.ladder.items():  # the rung's variants, where the defaults do not fit
        assert getattr(cfg.ladder, key) == value
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
    """The rung names the matrix shows are the ladder registry's own, not a copy."""

    from sixblanks.harness.studies.ladder import RUNG_NAMES, RUNGS

    assert R.RUNG_NAMES is RUNG_NAMES
    assert R.RUNG_NAMES == {r.number: r.name for r in RUNGS}


def test_defaults_are_reported_when_nothing_can_be_asked(cli):
    data = _json(cli)
    assert data["defaults_used"] == [q.name for q in R.QUESTIONS]
    assert data["answers"] == R.DEFAULTS
    assert data["row"] == "default" and data["preset"] == "rloo"
    data = _json(cli, "--signal", "learned", "--demos", "plenty")
    assert "signal" not in data["defaults_used"] and "demos" not in data["defaults_used"]
    code, out, _ = cli("recommend", "--risk", "high")
    assert code == 0
    assert "risk high, model dense (default)" in out and "demos some (default)" in out
    assert "defaults used (not a terminal, nothing asked): --demos some" in out
    assert "--risk high" not in out.split("defaults used")[1]


def test_on_a_terminal_the_missing_answers_are_asked(cli, monkeypatch):
    monkeypatch.setattr("sixblanks.harness.cli.describe._is_terminal", lambda: True)
    # horizon and intermediate are missing: an invalid answer is asked again, then accepted
    monkeypatch.setattr("sys.stdin", io.StringIO("sideways\nmulti\nstates\n"))
    flags = ["--demos", "some", "--signal", "verifiable", "--sampling", "cheap"]
    flags += ["--asynchronous", "no", "--risk", "low", "--state", "repeatable"]
    flags += ["--model", "dense", "--concern", "none"]
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
    assert "horizon" not in data["defaults_used"]
    assert len(data["defaults_used"]) == len(R.QUESTIONS) - 1


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


@functools.cache
def _fewest_changes() -> dict[str, dict[str, str]]:
    """{row id: the answers that select it with the fewest answers changed from their defaults}
    (ties: the first in answer order), over every situation not refused."""

    names = [q.name for q in R.QUESTIONS]
    best: dict[str, tuple[int, dict[str, str]]] = {}
    for combo in itertools.product(*(q.choices for q in R.QUESTIONS)):
        answers = dict(zip(names, combo, strict=True))
        if any(R.matches(c.when, answers) for c in R.CONFLICTS):
            continue
        changed = sum(answers[k] != R.DEFAULTS[k] for k in names)
        row_id = R.match(answers).id
        if row_id not in best or changed < best[row_id][0]:
            best[row_id] = (changed, answers)
    return {row_id: answers for row_id, (_, answers) in best.items()}


@pytest.mark.parametrize("row", R.ROWS, ids=[r.id for r in R.ROWS])
def test_every_row_is_recommended_for_some_answers_and_its_starter_validates(row):
    answers = _fewest_changes().get(row.id)
    assert answers is not None, f"no situation selects row '{row.id}'"
    assert all(answers[q] in accepted for q, accepted in row.when.items())
    rec = R.recommend(answers)
    assert rec.row.id == row.id
    text = R.starter_yaml(rec)
    cfg = validate_mapping(parse_yaml(text, "starter.yaml"), "starter.yaml")
    assert list(cfg.arms) == [row.arm_name, R.BASELINE]
    assert cfg.arms[row.arm_name].preset == row.preset and cfg.ladder.arm == row.arm_name


def test_with_no_answers_the_simplest_estimator_rloo(cli):
    rec = R.recommend(R.DEFAULTS)
    assert (rec.row.id, rec.row.preset, dict(rec.row.overrides)) == ("default", "rloo", {})
    assert "simplest estimator" in rec.row.why and rec.notes == []
    assert _json(cli)["preset"] == "rloo"


def test_the_new_questions_at_their_defaults_leave_every_earlier_situation_alone():
    """The questions added for SAO, REINFORCE with a baseline, Dr. GRPO, SAPO and GSPO default to
    the answers every earlier situation implied: with them at their defaults, no new row matches and
    no earlier row is shadowed, and only the notes that read no row are given."""

    assert {q: R.DEFAULTS[q] for q in NEW_QUESTIONS} == {
        "state": "repeatable",
        "model": "dense",
        "concern": "none",
    }
    earlier_questions = [q for q in R.QUESTIONS if q.name not in NEW_QUESTIONS]
    earlier_rows = [r for r in R.ROWS if r.id not in NEW_ROWS]
    unrestricted = {n.text for n in R.NOTES if not n.rows}
    for combo in itertools.product(*(q.choices for q in earlier_questions)):
        answers = R.DEFAULTS | dict(zip((q.name for q in earlier_questions), combo, strict=True))
        expected = next(r for r in earlier_rows if R.matches(r.when, answers))
        assert R.match(answers).id == expected.id, answers
        if not any(R.matches(c.when, answers) for c in R.CONFLICTS):
            assert set(R.recommend(answers).notes) <= unrestricted, answers


# what each new row must say: phrases of its why, of its main warning and of its rung's why
KEY_POINTS = {
    "changing_single_turn": (
        ["no group", "batch's mean reward", "no critic"],
        ["variance", "(N-1)/N", "learning rate alone"],
        ["advantage_variants", "return (no baseline)"],
    ),
    "changing_state": (
        ["cannot be sampled G times", "one rollout per prompt", "critic", "DIS"],
        ["critic", "explained_variance", "dropped.dis_tokens"],
        ["credit_variants", "reinforce_baseline", "critic earns its cost"],
    ),
    "length_bias": (
        ["|o|", "std", "constant denominator", "the ablation"],
        ["gradient clip", "scale-matched", "response_length_incorrect"],
        ["normalization blank alone", "seq-mean-token-mean"],
    ),
    "clip_fraction": (
        ["high clip fraction", "soft trust region", "tau_neg", "tau_pos"],
        ["temperatures", "tau_neg >= tau_pos", "not on PPO's scale"],
        ["SAPO's temperatures"],
    ),
    "mixture_of_experts": (
        ["mixture-of-experts", "one ratio per sequence"],
        ["sequence ratio's scale", "token clip (0.2)", "mechanically"],
        ["ratio's own scale", "never the token pairs"],
    ),
    "open_reasoning": (
        ["clip-higher", "dynamic sampling", "token-level loss", "overlong shaping", "No KL"],
        ["pays for the groups it drops", "max_sampling_rounds", "overlong_penalty_correct_frac"],
        ["before dynamic sampling drops", "clip-higher"],
    ),
}


@pytest.mark.parametrize("row_id", NEW_ROWS)
def test_the_new_rows_name_their_key_point(row_id):
    row = R.ROW_BY_ID[row_id]
    why, warning, rung_why = KEY_POINTS[row_id]
    for text, phrases in ((row.why, why), (row.warning, warning), (row.rung_why, rung_why)):
        missing = [p for p in phrases if p not in text]
        assert not missing, f"{row_id}: {missing} not in {text!r}"


GROUP_CREDIT = ("gigpo", "prm", "turn_return", "group_norm", "group_mean", "loo")
"""Credit that compares the samples of one prompt's group: none at one sample per prompt."""


@pytest.mark.parametrize("row", R.ROWS, ids=[r.id for r in R.ROWS])
def test_the_rung_checked_first_varies_what_its_why_says(row):
    """Each row's first rung, as harness/studies/ladder/ runs it on the starter's arm, has
    something to compare: rung 5 estimators and rung 8 credit the arm can learn with (validated as
    the arm, so no group estimator at one sample per prompt), rung 6 another normalization, rung 7
    a trust region it varies (a sequence clip on its own scale, SAPO's temperatures), rung 9 a
    lagged or concurrent arm."""

    rec = R.recommend(_fewest_changes()[row.id])
    mapping = R.starter_mapping(rec)
    cfg = validate_mapping(copy.deepcopy(mapping))
    arm = row.arm_name
    blanks = cfg.resolved_blanks(arm)
    group = blanks.data.group_size or cfg.rollout.group_size

    def as_arm(over):  # the starter with the arm's blanks changed as the rung changes them
        m = copy.deepcopy(mapping)
        m["arms"][arm]["blanks"] = deep_merge(m["arms"][arm].get("blanks", {}), over)
        return validate_mapping(m)

    if row.rung == 5:
        variants = [v for v in cfg.ladder.advantage_variants if v != blanks.advantage.estimator]
        assert variants
        for v in variants:
            as_arm({"advantage": {"estimator": v}})
    elif row.rung == 4:  # the share of groups with unequal rewards: groups the arm samples
        assert blanks.data.source == "rollouts" and group >= 2
    elif row.rung == 6:
        assert any(v != blanks.normalization.mode for v in cfg.ladder.normalization_variants)
    elif row.rung == 7:
        assert blanks.weight.trust_region in ("clip", "sapo")
        if blanks.weight.ratio in ("sequence", "gspo_token"):
            assert "own scale" in row.rung_why
        if blanks.weight.trust_region == "sapo":
            assert "temperatures" in row.rung_why
    elif row.rung == 8:
        own = blanks.advantage.model_dump(mode="json")
        lent = [resolve(n).advantage.model_dump(mode="json") for n in cfg.ladder.credit_variants]
        lent = [a for a in lent if a != own]
        valid = []
        for adv in lent:
            if group == 1:
                assert adv["estimator"] not in GROUP_CREDIT, adv["estimator"]
            try:
                valid.append(as_arm({"advantage": adv}))
            except SixblanksError:
                continue  # refused (a critic with shaping): the rung says inconclusive for it
        assert valid, f"row '{row.id}': no credit variant of rung 8 can run as its arm"
    elif row.rung == 9:
        assert blanks.data.concurrent is not None or blanks.data.lag


def test_notes_name_the_answers_a_row_did_not_use(cli):
    assert _json(cli, "--model", "moe")["notes"] == []  # the gspo row reads it
    notes = _json(cli, "--model", "moe", "--horizon", "multi")["notes"]
    assert any(n.startswith("--model moe") and "gspo" in n for n in notes)
    data = _json(cli, "--model", "moe", "--concern", "clipping")
    assert data["row"] == "clip_fraction"
    assert any(n.startswith("--model moe") for n in data["notes"])
    data = _json(cli, "--concern", "length", "--signal", "learned")
    assert data["row"] == "learned_reward"
    assert any(n.startswith("--concern length was not used") for n in data["notes"])
    assert _json(cli, "--concern", "length", "--signal", "preference")["notes"] == []
    data = _json(cli, "--state", "changing", "--risk", "high")
    assert data["row"] == "changing_single_turn"
    assert any(n.startswith("--risk high") and "sandbox" in n for n in data["notes"])
    data = _json(cli, "--state", "changing", "--asynchronous", "yes")
    assert data["row"] == "changing_state"
    assert any("data.concurrent" in n and "rung 9" in n for n in data["notes"])
    data = _json(cli, "--concern", "length", "--sampling", "expensive")
    assert data["row"] == "length_bias"
    assert any("data.group_size: 4" in n for n in data["notes"])


def test_a_changing_state_that_recurs_is_refused(cli):
    flags = ["--state", "changing", "--horizon", "multi", "--intermediate", "states"]
    code, _, err = cli("recommend", *flags)
    assert code != 0 and "contradict" in err
    assert _json(cli, *flags[:4])["row"] == "changing_state"


def test_a_note_for_an_unknown_row_is_reported(monkeypatch):
    note = R.Note({"risk": ("high",)}, "a note", rows=("nowhere",))
    monkeypatch.setattr(R.advice, "NOTES", (*R.NOTES, note))
    assert R.check_matrix() == ["note 'a note...': unknown rows ['nowhere']"]


def test_on_a_terminal_the_new_questions_are_asked(cli, monkeypatch):
    monkeypatch.setattr("sixblanks.harness.cli.describe._is_terminal", lambda: True)
    monkeypatch.setattr("sys.stdin", io.StringIO("changing\nmoe\nlength\n"))
    flags = ["--demos", "some", "--signal", "verifiable", "--sampling", "cheap"]
    flags += ["--horizon", "multi", "--intermediate", "none", "--asynchronous", "no"]
    code, out, err = cli("recommend", *flags, "--risk", "low", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["row"] == "changing_state" and data["defaults_used"] == []
    assert (data["answers"]["model"], data["answers"]["concern"]) == ("moe", "length")
    for name in NEW_QUESTIONS:
        assert R.QUESTION_BY_NAME[name].prompt in err


def test_the_guide_lists_the_matrix():
    readme = (ROOT / "docs" / "guide" / "recommend.md").read_text()
    assert "# Where to start: `sixblanks recommend`" in readme
    assert R.markdown_table() in readme, (
        "the guide's matrix table differs from the matrix in harness/recommend/: regenerate it "
        "with python -c "
        "'from sixblanks.harness.recommend import markdown_table; print(markdown_table())'"
    )
    section = readme.split("# Where to start: `sixblanks recommend`")[1].split("\n## ")[0]
    for r in R.ROWS:
        assert f"| `{r.id}` |" in section and f"`{r.preset}`" in section
    for q in R.QUESTIONS:
        line = next(li for li in section.splitlines() if li.startswith(f"| `--{q.name}` |"))
        assert f"**{q.default}**" in line
        assert all(c in line for c in q.choices)


def test_the_open_reasoning_row_is_the_recipe_and_its_baseline_lacks_each_part():
    """The row's arm carries the open reasoning-RL recipe's four parts (clip-higher, dynamic
    sampling, a token-level loss, overlong shaping) and no KL, the grpo baseline none of them; the
    starter leaves a right answer (at most 3 tokens) outside the overlong penalty's window."""

    row = R.ROW_BY_ID["open_reasoning"]
    rec = R.recommend(R.DEFAULTS | {"concern": "entropy"})
    assert rec.row is row and rec.notes == []
    cfg = validate_mapping(R.starter_mapping(rec))
    arm, base = cfg.resolved_blanks(row.arm_name), cfg.resolved_blanks(R.BASELINE)
    assert arm.weight.eps_high > arm.weight.eps_low and base.weight.eps_high == base.weight.eps_low
    assert arm.data.dynamic_sampling and not base.data.dynamic_sampling
    assert arm.normalization.mode == "token-mean" != base.normalization.mode
    assert arm.data.overlong_shaping.enabled and not base.data.overlong_shaping.enabled
    assert arm.regularizer.loss_kl_coef == 0 < base.regularizer.loss_kl_coef
    # the recipe's numbers, as the row's why states them, are the preset's
    assert f"eps_high {arm.weight.eps_high:g} above eps_low {arm.weight.eps_low:g}" in row.why
    # the penalty starts past max_new_tokens - cache tokens: a right answer takes at most 3
    assert cfg.rollout.max_new_tokens - arm.data.overlong_shaping.cache >= 3


def test_an_unused_entropy_concern_names_the_recipe(cli):
    data = _json(cli, "--concern", "entropy", "--horizon", "multi")
    assert data["row"] == "multi_turn"
    notes = [n for n in data["notes"] if n.startswith("--concern entropy was not used")]
    assert len(notes) == 1
    assert "preset dapo" in notes[0] and "weight.eps_high" in notes[0]
    assert "data.dynamic_sampling" in notes[0] and "rung 4" in notes[0]
    # DPO and SFT train on no groups of their own: no note there
    assert _json(cli, "--concern", "entropy", "--signal", "preference")["notes"] == []


def test_the_preference_advice_says_where_the_starters_pairs_come_from():
    """The starter's dpo arm has no pairs file, so its collector makes pairs from rollouts of the
    reference policy every step (harness/training/collectors/pairs.py); the advice says so, and
    says what they cost, instead of claiming DPO has no rollouts."""

    from sixblanks.harness.training.collectors import pairs

    row = R.ROW_BY_ID["preference"]
    rec = R.recommend(R.DEFAULTS | {"signal": "preference"})
    blanks = validate_mapping(R.starter_mapping(rec)).resolved_blanks(row.arm_name)
    assert blanks.data.source == "preference_pairs" and blanks.data.pairs.file is None
    assert "scored rollouts (no ``data.pairs.file``)" in pairs.__doc__
    text = " ".join((row.why, row.warning, row.rung_why))
    assert "no rollouts" not in text
    assert "rollouts of each prompt by the reference policy" in row.why
    assert "pair_selection" in row.warning and "no_preference" in row.warning
    assert "reference policy's rollouts" in row.rung_why and "rung 1" in row.rung_why
