"""The current menu's presets run end to end on real rollouts: the data filters are counted in the
census and the ledger by reason, a retired prompt is never drawn again, the bypass form computes no
pi_old, and each correction's drops are logged."""

import json
from pathlib import Path

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.training.collectors.pool import PromptPool
from tests.short_runs import golden_initial, short_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def initial():
    return golden_initial()


def test_scalerl_filters_without_resampling_and_retires_solved_prompts(initial):
    """Zero-variance groups are dropped in the one round a step samples (never resampled) and
    discarded as 'zero_variance_filter'; prompts whose pass rate reached the threshold are retired;
    the ledger balances."""

    trainer, res = short_run(
        initial, "scalerl", budget=1200, data={"prompt_pool": 6, "retire_pass_rate": 0.5}
    )
    led = res.ledger
    assert all(c["rounds"] == 1 and not c["cap_hit"] for c in res.census)
    dropped = sum(sum(c["groups_dropped"].values()) for c in res.census)
    assert dropped > 0 and led.discarded_by_reason["zero_variance_filter"] > 0
    assert led.discarded_by_reason["dynamic_sampling"] == 0
    assert led.counters["launched_tokens"] == pytest.approx(
        led.counters["accepted_tokens"] + sum(led.discarded_by_reason.values())
    )
    pool = trainer.collector.prompt_pool
    retired = sum(c["prompts_retired"] for c in res.census)
    assert retired == len(pool.retired) > 0
    for seed in pool.retired:  # retired by its own history
        assert pool.passes[seed] / pool.samples[seed] >= 0.5
    assert res.steps[-1]["pool.retired"] == len(pool.retired)


def test_a_retired_prompt_is_never_drawn_again():
    """ScaleRL's example: 16/16 and 15/16 correct retire at 0.9, 8/16 stays."""

    import random

    pool = PromptPool(3, seed=0, rng=random.Random(0), retire_at=0.9)
    seeds = pool.draw(3)
    rewards = torch.tensor([1.0] * 16 + [1.0] * 15 + [0.0] + [1.0] * 8 + [0.0] * 8)
    groups = torch.arange(3).repeat_interleave(16)
    assert pool.record(seeds, rewards, groups) == 2
    assert pool.retired == {seeds[0], seeds[1]}
    assert all(pool.draw(2) == [seeds[2]] for _ in range(5))  # only the live one, every time
    # its pass rate over all its samples: (8 + 64) / (16 + 64) = 0.9
    assert pool.record([seeds[2]], torch.ones(64), torch.zeros(64, dtype=torch.long)) == 1
    with pytest.raises(Exception, match="every prompt of the pool"):
        pool.draw(1)


def test_bypass_icepop_runs_without_a_pi_old_forward(initial, monkeypatch):
    """verl's bypass IcePop (REINFORCE weighed by rho 1[0.5 <= rho <= 5], two epochs) takes pi_old
    from the rollout: the trainer's batched pi_old forward is
    never called, the mismatch is measured on the training forward, and the gate's zeroed
    tokens are logged."""

    from sixblanks.harness.config.sections import MismatchConfig
    from sixblanks.harness.training.context import RunContext

    calls = []
    real = RunContext.batched_logprobs
    monkeypatch.setattr(
        RunContext, "batched_logprobs", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )
    _, res = short_run(
        initial,
        "icepop",
        budget=600,
        weight={"ratio": "none", "trust_region": "none", "old_policy": "rollout"},
        data={"epochs": 2},
        rollout={"mismatch": MismatchConfig(logit_noise=2.0)},
    )
    trained = [m for m in res.steps if not m.get("skipped")]
    assert trained and not calls
    assert all(0 < m["mismatch.ess"] < 1 and m["mismatch.kl"] > 1e-3 for m in trained)
    # the gate zeroes tokens outside [0.5, 5] in the loss, and says how many
    assert all(0 < m["bypass.zeroed_frac"] < 1 for m in trained)
    assert res.ledger.check_invariants() == []


@pytest.mark.parametrize("preset", ["cispo", "dppo", "lite_ppo", "icepop"])
def test_preset_trains(initial, preset):
    _, res = short_run(initial, preset, budget=500)
    trained = [m for m in res.steps if not m.get("skipped")]
    assert trained and all(torch.isfinite(torch.tensor(m["loss"])) for m in trained)
    assert res.ledger.check_invariants() == []
    if preset == "icepop":  # the gate's share of zeroed tokens, before any truncation
        assert all(m["gate.masked_frac"] == 0.0 for m in trained)  # no mismatch: nothing out
        assert all("gate.log_ratio_p99" in m for m in trained)


def test_truncated_is_logs_how_often_it_caps(initial):
    """A cap below every ratio (0.5 < k = 1) truncates every token: tis.truncated_frac is 1."""

    _, res = short_run(initial, "grpo", budget=400, weight={"tis_cap": 0.5})
    trained = [m for m in res.steps if not m.get("skipped")]
    assert trained and all(m["tis.truncated_frac"] == 1.0 for m in trained)


def test_an_uncorrected_arm_under_injected_mismatch_is_flagged():
    """The behaviour-policy mistake's other face: a sampler corrupted on purpose and no blank that
    reads the rollout's log-probs. Each correcting arm passes; no mismatch, no flag."""

    from sixblanks.algorithms.presets import get_preset
    from sixblanks.harness.fairness.audit import uncorrected_flags

    noisy = {"mismatch": {"logit_noise": 1.0}}

    from sixblanks.harness.runspec import RunSpec

    def spec(arm, blanks, rollout):  # what the check reads; the rest is a placeholder
        blanks = blanks.model_dump(mode="json")
        return RunSpec("e", arm, "grpo", 0, {}, blanks, {}, rollout, {}, {}, {}, "k", "c")

    specs = [
        spec("plain", get_preset("grpo").blanks, noisy),
        spec("plain", get_preset("grpo").blanks, noisy),  # a second seed: one flag per arm
        spec("tis", resolve("grpo", {"weight": {"tis_cap": 2.0}}), noisy),
        spec("icepop", get_preset("icepop").blanks, noisy),
        spec("dppo", get_preset("dppo").blanks, noisy),
        spec("bypass", resolve("grpo", {"weight": {"old_policy": "rollout"}}), noisy),
        spec("clean", get_preset("grpo").blanks, {}),
        spec("lagged", resolve("grpo", {"data": {"lag": 2}}), {}),
        spec("lagged_tis", resolve("grpo", {"data": {"lag": 2}, "weight": {"tis_cap": 2}}), {}),
    ]
    flags = uncorrected_flags(specs)
    assert [(f.arm, f.item) for f in flags] == [
        ("plain", "correction"),
        ("lagged", "correction"),
    ]
    assert "logit_noise 1.0" in flags[0].reason and "data.lag 2" in flags[1].reason


def test_icepop_under_injected_mismatch_zeroes_tokens_and_the_ledger_balances(initial):
    """With noise on the sampler's logits, IcePop's gate weighs some tokens 0; they stay accepted
    (trained with weight 0, in Z), so launched = accepted + discarded still holds."""

    from sixblanks.harness.config.sections import MismatchConfig

    _, res = short_run(
        initial, "icepop", budget=500, rollout={"mismatch": MismatchConfig(logit_noise=2.0)}
    )
    trained = [m for m in res.steps if not m.get("skipped")]
    assert res.ledger.check_invariants() == []
    assert trained and max(m["gate.masked_frac"] for m in trained) > 0
    assert all(m["mismatch.kl"] > 1e-3 and m["mismatch.ess"] < 1 for m in trained)


def test_rung_one_checks_the_clean_sampler_and_reports_the_injected_mismatch(initial):
    """Rung 1 checks the contract on the clean sampler (it passes under the mismatch lab) and
    reports the training sampler's mismatch: float noise when none is injected."""

    from sixblanks.harness.config.sections import MismatchConfig
    from sixblanks.harness.rollout.backends import make_engine
    from sixblanks.harness.studies.ladder.contract import contract_rung

    cfg, task, model, tok = initial
    noisy = cfg.rollout.model_copy(update={"mismatch": MismatchConfig(logit_noise=1.0)})
    rows = contract_rung(make_engine(noisy, model, tok), model, tok, task, noisy, 4, 0)
    assert [r.status for r in rows] == ["pass", "pass"]
    fig = rows[0].detail["mismatch"]
    assert fig["injected"]["logit_noise"] == 1.0 and fig["mismatch.kl"] > 1e-3
    assert "injected mismatch: KL" in rows[0].evidence
    clean = contract_rung(make_engine(cfg.rollout, model, tok), model, tok, task, cfg.rollout, 4, 0)
    assert clean[0].detail["mismatch"]["injected"] is None
    assert clean[0].detail["mismatch"]["mismatch.kl"] < 1e-10


def test_the_mismatch_experiment_reports_its_diagnostics_per_arm(tmp_path, cli):
    """experiments/mismatch.yaml, shrunk (one seed, a small budget), end to end: every arm runs
    under the same injected mismatch and the report's mismatch section has a row per arm; the
    uncorrected arm is flagged."""

    import yaml

    cfg = yaml.safe_load((ROOT / "experiments" / "mismatch.yaml").read_text())
    cfg.update(seeds=[0], budget={"launched_tokens": 1200})
    cfg["warm_start"]["steps"] = 40
    cfg["task"]["eval_size"] = cfg["eval"]["size"] = 16
    cfg["eval"]["every"] = 1200
    path = tmp_path / "mismatch.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, out, err = cli("run", str(path), "--out", str(tmp_path / "out"))
    assert code == 0, err
    report = (tmp_path / "out" / "report" / "report.md").read_text()
    section = report.split("## Rollout/trainer mismatch over training")[1].split("\n## ")[0]
    for arm in cfg["arms"]:
        assert f"| {arm} |" in section
    assert "ESS, tokens" in section and "TIS capped" in section and "gate drops" in section
    flags = json.loads((tmp_path / "out" / "fairness.json").read_text())["flags"]
    assert ("no_correction", "correction") in {(f["arm"], f["item"]) for f in flags}


def test_the_pool_visits_every_prompt_once_a_pass():
    """Pool 5, 3 a draw: after 5 draws (15 = 3 passes) every prompt was drawn exactly 3 times."""

    import collections
    import random

    pool = PromptPool(5, seed=1, rng=random.Random(1), retire_at=None)
    counts = collections.Counter(s for _ in range(5) for s in pool.draw(3))
    assert sorted(counts.values()) == [3] * 5 and pool.epochs == 3
