"""What the chapter warns against, caught: the cautions `validate` and `run` print, and DAPO's
overlong penalty measured on correct answers (the proxy a soft penalty must not become)."""

import json

import pytest

from tests.golden.record import CONFIG
from tests.short_runs import golden_initial, short_run


@pytest.fixture(scope="module")
def initial():
    return golden_initial()


def test_validate_cautions_rloo_with_two_samples_and_a_batch_mean_over_prompts(cli, write_yaml):
    cfg = {
        "name": "c",
        "task": {"name": "arithmetic"},
        "eval": {"size": 16},  # within the 25 held-out problems of 1-digit arithmetic
        "rollout": {"group_size": 2},
        "arms": {
            "rloo": {"preset": "rloo"},
            "bm": {"preset": "reinforce_baseline", "blanks": {"data": {"group_size": 1}}},
            "grpo": {"preset": "grpo"},
            "rloo4": {"preset": "rloo", "blanks": {"data": {"group_size": 4}}},
        },
    }
    code, out, _ = cli("validate", write_yaml(json.dumps(cfg)), "--json")
    assert code == 0
    notes = _arm_cautions(out)
    assert len(notes) == 2
    assert notes[0].startswith("arms.rloo: RLOO with 2 samples") and "A = +-(R1 - R2)" in notes[0]
    assert notes[1].startswith("arms.bm: advantage.estimator 'batch_mean' with one sample")
    code, _, err = cli("validate", write_yaml(json.dumps(cfg)))
    assert code == 0 and err.count("caution:") == 2


def test_validate_cautions_gigpo_with_one_sample_per_prompt(cli, write_yaml):
    cfg = {
        "name": "c",
        "task": {"name": "guess_number"},
        "arms": {
            "g1": {"preset": "gigpo", "blanks": {"data": {"group_size": 1}}},
            "g8": {"preset": "gigpo"},
        },
    }
    code, out, _ = cli("validate", write_yaml(json.dumps(cfg)), "--json")
    assert code == 0
    notes = _arm_cautions(out)
    assert len(notes) == 1 and notes[0].startswith("arms.g1: GiGPO with one sample per prompt")


def test_validate_cautions_absolute_bounds_under_a_measured_scale(cli, write_yaml):
    cfg = {
        "name": "c",
        "task": {"name": "arithmetic"},
        "arms": {
            "g": {"preset": "gspo", "blanks": {"weight": {"eps_high": 0.01}}},
            "p": {"preset": "gspo_paper", "blanks": {"weight": {"eps_high": 0.01}}},
            "s": {"preset": "gspo", "blanks": {"weight": {"clip_scale": {"low": 1, "high": 1}}}},
        },
    }
    code, out, _ = cli("validate", write_yaml(json.dumps(cfg)), "--json")
    notes = _arm_cautions(out)
    assert code == 0 and len(notes) == 2
    assert notes[0].startswith("arms.g: weight.eps_low/eps_high with weight.clip_scale")
    assert notes[1].startswith("arms.p: absolute clip bounds on a sequence ratio")


def _dapo(initial, cache):
    _, res = short_run(initial, "dapo", 500, data={"overlong_shaping": {"cache": cache}})
    return [m for m in res.steps if not m.get("skipped")]


def test_dapo_overlong_penalty_on_correct_answers_is_measured(initial):
    """max_new_tokens 6 and arithmetic's correct answers of 2 or 3 tokens ("12" and a newline),
    which the verifier also accepts padded with whitespace: a 4-token window starts penalizing at
    3 tokens (a correct "12\\n" loses 0.25); the default experiment's 2-token window starts past
    4 tokens and penalizes no correct answer here."""

    wide = _dapo(initial, 4)
    assert max(m["overlong_penalty_correct_frac"] for m in wide) > 0
    fitted = _dapo(initial, 2)
    assert all(m["overlong_penalty_correct_frac"] == 0 for m in fitted)


def test_within_sequence_spread_and_outlier_token_sequences_by_hand():
    """d = log pi - log pi_old on the shared example: rows [0.2, -0.1, 1.7] and [0.1, -0.7].
    Row 1: mean 0.6 (ratio 1.82, out of [0.8, 1.2]), std sqrt(0.62); without its 1.7 the mean is
    0.05, inside: one outlier token pushed it out. Row 2: mean -0.3, std 0.4; without either token
    it stays out (-0.7) or is the other's: not one outlier's doing."""

    import math

    import torch

    from sixblanks.algorithms.weights import sequence_ratio_counts

    D = torch.float64
    lp = torch.tensor([[-1.0, -0.5, -0.3], [-0.9, -1.6, -3.0]], dtype=D)
    lo = torch.tensor([[-1.2, -0.4, -2.0], [-1.0, -0.9, -2.0]], dtype=D)
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=D)
    got = sequence_ratio_counts(lp, lo, m, 0.2, 0.2)
    assert got["seq_count"] == 2 and got["seq_outlier_count"] == 1
    assert got["seq_logratio_std_sum"] == pytest.approx(math.sqrt(0.62) + 0.4, abs=1e-12)


def test_the_report_shows_the_spread_beside_the_clip_fraction(initial):
    """A GSPO run logs the spread and the outlier share (plain means over sequences), which the
    report's diagnostics list beside the clip fraction."""

    from sixblanks.reports.diagnostics import NAMES

    _, res = short_run(initial, "gspo", 400)
    trained = [m for m in res.steps if not m.get("skipped")]
    assert trained and all(
        m["ratio.seq_logratio_std"] >= 0 and 0 <= m["ratio.outlier_seq_frac"] <= 1 for m in trained
    )
    assert max(m["ratio.seq_logratio_std"] for m in trained) > 0  # minibatches 2..4 moved
    i = NAMES.index("clip_frac")
    assert NAMES[i + 1 : i + 4] == (
        "ratio.seq_logratio_spread",
        "ratio.seq_logratio_std",
        "ratio.outlier_seq_frac",
    )


@pytest.mark.parametrize(
    "preset, want",
    [
        ("grpo", {"clip=[0.2,0.28]"}),  # token-level pairs (its own 0.2/0.2 is the nominal)
        (
            "gspo_paper",
            {
                "clip=[0.00015,0.0002] (x0.5, sequence scale)",
                "clip=[0.0006,0.0008] (x2, sequence scale)",
            },
        ),
        (
            "gspo",
            {
                "clip=[1,1.33] x spread (x0.5, sequence scale)",
                "clip=[4,5.33] x spread (x2, sequence scale)",
            },
        ),
        ("sapo", {"tau=[0.5,0.525] (x0.5)", "tau=[2,2.1] (x2)"}),
    ],
)
def test_rung_7_varies_bounds_on_the_ratios_own_scale(tmp_path, preset, want, monkeypatch):
    """Token-scale clip pairs (0.2/0.28) would be a 600x change of GSPO's sequence bounds: a
    sequence ratio's bounds are scaled instead, and a SAPO arm's temperatures."""

    from sixblanks.algorithms.presets import get_preset
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.runspec import RunSpec
    from sixblanks.harness.studies.ladder import Ladder

    cfg = validate_mapping({**CONFIG, "arms": {"a": {"preset": preset}}})
    ladder = Ladder(cfg, tmp_path)
    blanks = get_preset(preset).blanks.model_dump(mode="json")  # what the rung reads of the spec
    ladder.spec = RunSpec("e", "a", preset, 0, {}, blanks, {"lr": 3e-4}, {}, {}, {}, {}, "k", "c")
    monkeypatch.setattr(ladder, "_compare", lambda rung, name, variants, key: variants)
    got = ladder.rung_clip_kl_lr()
    clip = {k for k in got if k.startswith(("clip=", "tau="))}
    assert clip == want


def test_a_user_tasks_helpers_at_any_depth_are_in_the_run_id(tmp_path, monkeypatch):
    """A user task whose verify calls a helper that calls a helper of its own, in other modules of
    the user's tree: the deepest helper is hashed into the task's inputs and so into the run id, so
    an edit to it alone (the task module and the first helper untouched) changes both, and only
    its hash."""

    import importlib
    import sys

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.orchestrator import build_specs

    pkg = "usertask_edit"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "task.py").write_text(
        "from sixblanks.harness.tasks import Instance, Task, TaskParams\n"
        f"from {pkg}.helpers import check\n\n"
        "class T(Task):\n"
        "    name = 't'\n"
        "    Params = TaskParams\n"
        "    def make_instance(self, seed):\n"
        "        return Instance(seed, 'say 1:', {'answer': '1'})\n"
        "    def verify(self, instance, response):\n"
        "        return check(response)\n"
    )
    (root / "helpers.py").write_text("from .deep import ok\n\ndef check(r):\n    return ok(r)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    for rule in ("== '1'", "in ('1', '01')"):  # the edit: the deepest helper alone
        (root / "deep.py").write_text(f"def ok(r):\n    return float(r.strip() {rule})\n")
        for m in (f"{pkg}.task", f"{pkg}.helpers", f"{pkg}.deep"):
            sys.modules.pop(m, None)
        importlib.invalidate_caches()
        cfg = validate_mapping({**CONFIG, "task": {"name": f"{pkg}.task:T"}})
        (spec,) = [s for s in build_specs(cfg, "k", code="c") if s.seed == 0]
        modules = spec.task_inputs["modules"]
        assert set(modules) == {pkg, f"{pkg}.task", f"{pkg}.helpers", f"{pkg}.deep"}
        seen.append((modules, spec.run_id))
    for m in (pkg, f"{pkg}.task", f"{pkg}.helpers", f"{pkg}.deep"):
        sys.modules.pop(m, None)
    (before, id_before), (after, id_after) = seen
    assert id_before != id_after
    assert {m for m in before if before[m] != after[m]} == {f"{pkg}.deep"}


def _arm_cautions(out: str) -> list[str]:
    """validate's cautions about the arms (a tiny task's held-out space may add one about the
    evaluation's size, which these tests are not about)."""

    notes = json.loads(out)["cautions"]
    return [n for n in notes if not n.startswith("task '")]
