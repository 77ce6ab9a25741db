"""The diagnostics that do not depend on an arm's loss normalization
(harness/training/diagnostics.py): values computed by hand on small batches, the same entropy under
two normalizations, and the gradient-noise probe on a frozen policy."""

import math

import pytest
import torch

from sixblanks.algorithms.loss import policy_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.presets import PRESETS
from sixblanks.harness.training.diagnostics import (
    ENTROPY_SUM,
    GradNoiseProbe,
    entropy_token_sum,
    kept_group_frac,
    lengths_by_outcome,
)
from sixblanks.harness.training.objectives.accumulate import finish, merge

# two samples: 2 and 4 action tokens; entropies 1, 3 and 0.5 x 4 (the masked ones are never read)
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
ENTROPY = torch.tensor([[1.0, 3.0, 7.0, 7.0], [0.5, 0.5, 0.5, 0.5]])


def test_entropy_token_sum_reads_the_action_tokens_only():
    assert entropy_token_sum(ENTROPY, MASK) == 1.0 + 3.0 + 4 * 0.5
    assert entropy_token_sum(ENTROPY, torch.zeros_like(MASK)) == 0.0


def _step_metrics(mode: str) -> dict[str, float]:
    """One update of the batch under normalization ``mode`` in two micro-batches (one row each),
    summed and finished as the minibatch routine does."""

    blanks = PRESETS["grpo"].blanks
    weights = loss_weights(MASK, mode, l_max=4)
    sums: dict[str, float] = {}
    for rows in ([0], [1]):
        logp = torch.zeros(1, 4, requires_grad=True)
        _, met = policy_loss(
            blanks,
            logp,
            torch.zeros(1, 4),
            torch.ones(1, 4),
            MASK[rows],
            weights[rows],
            ref_logp=torch.zeros(1, 4),
            entropy=ENTROPY[rows],
        )
        met[ENTROPY_SUM] = entropy_token_sum(ENTROPY[rows], MASK[rows])
        merge(sums, met)
    return finish(sums, 1)


def test_entropy_token_mean_is_the_same_under_every_normalization():
    """The Z-weighted entropy of the same batch: token-mean (1 + 3 + 2) / 6 = 1, seq-mean-token-mean
    (2 + 0.5) / 2 = 1.25, constant (Dr. GRPO, L_max 4) 6 / (2 x 4) = 0.75; the plain token mean is
    6 / 6 = 1 under all three."""

    want = {"token-mean": 1.0, "seq-mean-token-mean": 1.25, "constant": 0.75}
    for mode, z_weighted in want.items():
        m = _step_metrics(mode)
        assert m["entropy"] == pytest.approx(z_weighted), mode
        assert m["entropy_token_mean"] == pytest.approx(1.0), mode
        assert ENTROPY_SUM not in m and "action_tokens" not in m


def test_entropy_token_mean_is_absent_where_no_micro_step_reports_it():
    sums: dict[str, float] = {}
    merge(sums, {"action_tokens": 4.0, "clip_count": 1.0, "ratio_sum": 4.0, "pg_loss": 0.5})
    out = finish(sums, 1)
    assert "entropy_token_mean" not in out and out["clip_frac"] == 0.25


def test_response_lengths_by_outcome():
    """Lengths 2, 4, 5, 1 with rewards 1, 0, 0.5, -1: correct (> 0) rows 0 and 2, (2 + 5) / 2 =
    3.5; incorrect (<= 0) rows 1 and 3, (4 + 1) / 2 = 2.5."""

    mask = torch.zeros(4, 6)
    for i, n in enumerate((2, 4, 5, 1)):
        mask[i, :n] = 1
    got = lengths_by_outcome(torch.tensor([1.0, 0.0, 0.5, -1.0]), mask)
    assert got == {"response_length_correct": 3.5, "response_length_incorrect": 2.5}
    # a step with no correct sample has no correct length (absent, not 0)
    assert lengths_by_outcome(torch.zeros(4), mask) == {"response_length_incorrect": 3.0}


def test_trainable_group_frac_kept_counts_the_groups_that_entered_the_gradient():
    """Groups of 2: group 0 varied, 1 all correct, 2 all wrong but masked out entirely (not in the
    gradient), 3 varied: 2 of the 3 trained groups are varied."""

    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 1.0])
    mask = torch.ones(8, 3)
    mask[4:6] = 0
    assert kept_group_frac(rewards, groups, mask, 2) == {"trainable_group_frac_kept": 2 / 3}
    mask[4:6] = 1  # the all-wrong group trained too: 2 of 4
    assert kept_group_frac(rewards, groups, mask, 2) == {"trainable_group_frac_kept": 0.5}
    assert kept_group_frac(rewards, groups, mask, 1) == {}  # G = 1: no group to compare
    assert kept_group_frac(rewards, groups, torch.zeros(8, 3), 2) == {}


def test_gradient_noise_probe_by_hand():
    """Step gradients (1, 0), (3, 2), (2, 1): squared norms 1, 13, 5. After two, mean (2, 1) and
    squared deviations 1 + 1 + 1 + 1 = 4 over n - 1 = 1: tr(Cov) 4; the signal |mean|^2 - tr(Cov)
    / n = 5 - 2 = 3: 4 / 3. After three, the mean is still (2, 1), the deviations add 0: tr(Cov)
    = 4 / 2 = 2, the signal 5 - 2 / 3 = 13 / 3, and 2 / (13 / 3) = 6 / 13."""

    probe = GradNoiseProbe()
    first = probe.add(torch.tensor([1.0, 0.0]))
    assert first == {"grad.sq_norm": 1.0}  # one gradient has no covariance
    assert probe.add(torch.tensor([3.0, 2.0])) == {
        "grad.sq_norm": 13.0,
        "grad.noise_to_signal": pytest.approx(4 / 3),
    }
    third = probe.add(torch.tensor([2.0, 1.0]))
    assert third["grad.sq_norm"] == 5.0 and third["grad.noise_to_signal"] == pytest.approx(6 / 13)
    # a checkpointed probe goes on with the same accumulation: (2, 1) once more adds no deviation,
    # tr(Cov) = 4 / 3, over 5 - (4 / 3) / 4 = 14 / 3
    again = GradNoiseProbe()
    again.load_state_dict(probe.state_dict())
    assert again.add(torch.tensor([2.0, 1.0]))["grad.noise_to_signal"] == pytest.approx(2 / 7)
    assert probe.n == 3 and probe.mean.tolist() == [2.0, 1.0]  # the copy is its own


def test_a_steps_gradient_is_the_mean_of_its_optimizer_steps():
    """Two optimizer steps in one step (two minibatches), gradients (2, 0 | 4) and (0, 2 | None =
    0): the step's gradient is their mean (1, 1, 2), read before clipping."""

    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    probe = GradNoiseProbe()
    a.grad, b.grad = torch.tensor([2.0, 0.0]), torch.tensor([4.0])
    probe.add_update([a, b])
    a.grad, b.grad = torch.tensor([0.0, 2.0]), None
    probe.add_update([a, b])
    assert probe.end_step() == {"grad.sq_norm": 1.0 + 1.0 + 4.0}
    assert probe.end_step() == {}  # no optimizer step since: nothing added
    assert probe.mean.tolist() == [1.0, 1.0, 2.0]


# --------------------------------------------------------------------------- through the trainer


def _trainer(preset: str, **rollout):
    """A golden-fixture trainer (tests/golden/record.py: the stored initial policy, seed 0)."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer
    from tests.golden.record import BUDGET, CONFIG, EVAL_SIZE, INITIAL_DIR

    torch.set_num_threads(1)
    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    settings = RunSettings(
        blanks=PRESETS[preset].blanks,
        rollout=cfg.rollout.model_copy(update=rollout),
        optimizer=cfg.optimizer,
        budget=dict(BUDGET),
        seed=0,
        eval_size=EVAL_SIZE,
        name=preset,
    )
    return Trainer(settings, make_task("arithmetic"), model, tok)


def test_two_normalizations_log_one_entropy_token_mean_on_the_same_batch():
    """grpo (seq-mean-token-mean) and dr_grpo (constant Z) sample the same first batch from the same
    policy and seed: their Z-weighted entropies differ, their token means do not."""

    first = {p: _trainer(p).step() for p in ("grpo", "dr_grpo")}
    assert first["grpo"]["entropy"] != pytest.approx(first["dr_grpo"]["entropy"], rel=0.1)
    assert first["grpo"]["entropy_token_mean"] == pytest.approx(
        first["dr_grpo"]["entropy_token_mean"], rel=1e-6
    )
    for m in first.values():
        assert {"response_length_correct", "response_length_incorrect"} <= set(m)
        assert m["trainable_group_frac_kept"] == m["trainable_group_frac"]  # nothing filtered


def test_dynamic_sampling_keeps_only_trainable_groups():
    """DAPO drops the groups whose rewards are all equal: every group that enters its gradient is
    trainable, while trainable_group_frac counts the launched ones."""

    m = _trainer("dapo").step()
    assert m["trainable_group_frac_kept"] == 1.0 and m["trainable_group_frac"] < 1.0


def test_the_probe_on_a_frozen_policy():
    """optimizer.lr 0 freezes the policy (its weights never move); the probe logs every step's
    squared gradient norm and, from the second step, the noise-to-signal ratio where the estimated
    signal is positive (over three steps of the tiny model, it may well not be)."""

    from dataclasses import replace

    from sixblanks.harness.models import state_hash

    tr = _trainer("grpo", grad_noise_probe=True)
    opt = tr.settings.optimizer.model_copy(update={"lr": 0.0})
    tr.ctx.settings = replace(tr.settings, optimizer=opt)
    before = state_hash(tr.model)
    steps = [tr.step() for _ in range(3)]
    assert state_hash(tr.model) == before
    assert all(s["grad.sq_norm"] > 0 for s in steps)
    assert "grad.noise_to_signal" not in steps[0]
    assert all(math.isfinite(s.get("grad.noise_to_signal", 1.0)) for s in steps[1:])
    state = tr.objective.state_dict()["grad_noise_probe"]
    assert state["n"] == 3
    # the last step's ratio from the accumulation: tr(Cov) over |mean|^2 - tr(Cov) / n
    noise = float(state["m2"].sum()) / 2
    signal = float(state["mean"] @ state["mean"]) - noise / 3
    if signal > 0:
        assert steps[2]["grad.noise_to_signal"] == pytest.approx(noise / signal)
    else:
        assert "grad.noise_to_signal" not in steps[2]
