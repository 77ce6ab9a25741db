"""A sequence ratio's clip on its own scale (weight.clip_scale) and a turn as the sequence of a
multi-turn episode (weight.sequence: turn): values and gradients computed by hand, the spread
measured when and as documented, and GSPO's presets with scaled and with the paper's bounds."""

import copy
import math

import numpy as np
import pytest
import torch

from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.loss import policy_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.presets import resolve
from sixblanks.harness.training.objectives import policy_gradient as pg
from sixblanks.harness.training.objectives.clip_scale import ClipScale
from tests.short_runs import golden_initial, short_run

# one episode of two turns: 2 tokens, then 3; d = log pi - log pi_old per token
D = [0.1, 0.3, -0.2, 0.0, 0.5]
TURNS = [0, 0, 1, 1, 1]
A = [1.0, 1.0, 2.0, 2.0, 2.0]  # per-turn credit (turn_grpo-like)


def _turn_case(ratio: str, sequence: str):
    b = resolve(
        "gspo_paper",
        {"weight": {"ratio": ratio, "eps_low": 0.9, "eps_high": 9.0, "sequence": sequence}},
    )
    old = torch.zeros(1, 5, dtype=torch.float64)
    logp = torch.tensor([D], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 5, dtype=torch.float64)
    turns = torch.tensor([TURNS])
    w = loss_weights(mask, b.normalization.mode, 5)
    loss, met = policy_loss(
        b, logp, old, torch.tensor([A], dtype=torch.float64), mask, w, turn_ids=turns
    )
    loss.backward()
    return float(loss.detach()), logp.grad[0].tolist()


@pytest.mark.parametrize("ratio", ["sequence", "gspo_token"])
def test_a_turn_is_its_own_sequence(ratio):
    """Per turn: s_k = exp(mean of d over turn k's tokens), the advantage is the turn's mean, and
    with seq-mean-token-mean weights 1/5 the loss is -(1/5) sum_k n_k A_k s_k and the gradient on
    a token of turn k is -(1/5) A_k s_k (the mean's 1/n_k times the turn's n_k tokens)."""

    s0, s1 = math.exp((0.1 + 0.3) / 2), math.exp((-0.2 + 0.0 + 0.5) / 3)
    loss, grad = _turn_case(ratio, "turn")
    assert loss == pytest.approx(-(2 * 1.0 * s0 + 3 * 2.0 * s1) / 5, abs=1e-12)
    want = [-s0 / 5, -s0 / 5, -2 * s1 / 5, -2 * s1 / 5, -2 * s1 / 5]
    assert grad == pytest.approx(want, abs=1e-12)


def test_the_trajectory_sequence_spans_both_turns():
    """Per trajectory (the default): one s = exp(mean d) = exp(0.14) and, for the sequence form,
    one mean advantage 1.6 on all five tokens."""

    s = math.exp(sum(D) / 5)
    loss, grad = _turn_case("sequence", "trajectory")
    assert loss == pytest.approx(-1.6 * s, abs=1e-12)
    assert grad == pytest.approx([-1.6 * s / 5] * 5, abs=1e-12)


def test_the_spread_of_turn_sequences_is_one_value_a_turn():
    """Per turn: two rows, turns (0, 0, 1) and (0, 1, 1) with one token masked: the sequences'
    log-ratios are [0.2, 0.6], [-0.4, 0.3] (the masked token out), clamped at 0.5."""

    from sixblanks.harness.training.objectives.clip_scale import sequence_values

    d = torch.tensor([[0.1, 0.3, 0.6], [-0.4, 0.3, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    turns = torch.tensor([[0, 0, 1], [0, 1, 1]])
    old = torch.zeros_like(d)
    got = sequence_values(d, old, mask, turns, "turn", 0.5).tolist()
    assert got == pytest.approx([0.2, 0.5, -0.4, 0.3])
    rows = sequence_values(d, old, mask, turns, "trajectory", 0.5).tolist()
    assert rows == pytest.approx([1.0 / 3, -0.05])


def test_clip_scale_and_turn_sequences_need_a_sequence_ratio():
    with pytest.raises(ValueError, match="weight.clip_scale: scales the clip bounds of a sequence"):
        Blanks.model_validate({"weight": {"clip_scale": {"low": 2.0, "high": 3.0}}})
    with pytest.raises(ValueError, match="weight.sequence: 'turn'"):
        Blanks.model_validate({"weight": {"sequence": "turn"}})
    with pytest.raises(ValueError, match="clip_scale"):
        resolve("gspo", {"weight": {"trust_region": "sapo"}})
    with pytest.raises(ValueError, match="weight.clip_scale: measures how far one update"):
        resolve("gspo", {"weight": {"old_policy": "rollout"}})
    with pytest.raises(ValueError, match="actor-critic arm"):
        resolve("gspo", {"advantage": {"estimator": "gae"}})


def test_gspo_scales_its_bounds_and_gspo_paper_keeps_the_papers():
    assert resolve("gspo").weight.clip_scale.low == 2.0
    assert resolve("gspo_token").weight.clip_scale.high == pytest.approx(8 / 3)
    for name in ("gspo_paper", "gspo_token_paper"):
        w = resolve(name).weight
        assert w.clip_scale is None and (w.eps_low, w.eps_high) == (3e-4, 4e-4)


@pytest.fixture(scope="module")
def initial():
    return golden_initial()


def test_the_spread_is_measured_once_after_the_first_step_and_sets_the_bounds(initial, monkeypatch):
    """The measurement runs once the optimizer has stepped and the policy moved; sigma is the
    population std over sequences of mean_t(log pi - log pi_old), recomputed here row by row in
    numpy; the bounds are 2 and 8/3 sigma, logged on every step from then on and used by the
    loss (GSPO's clip fraction then lands in the token arms' range instead of the paper bounds'
    ~0.3 on this policy)."""

    calls = []
    measure = ClipScale.measure

    def spy(self, batch, rows, mask, old_logp):
        steps = {int(s["step"]) for s in self.ctx.optimizer.state.values()}
        sub = batch.select(rows)
        logp = self.ctx.batched_logprobs(self.ctx.model, sub).double().numpy()
        old, m = old_logp[rows].double().numpy(), mask[rows].double().numpy()
        means = [(logp[i] - old[i])[m[i] > 0].mean() for i in range(len(rows)) if m[i].sum() > 0]
        measure(self, batch, rows, mask, old_logp)
        calls.append((steps, float(np.std(means)), dict(self.measured or {})))

    monkeypatch.setattr(ClipScale, "measure", spy)
    trainer, res = short_run(initial, "gspo", budget=1500)
    # tried on each minibatch after an optimizer step until the policy has moved (a minibatch
    # whose advantages are all 0 moves nothing: a spread of 0 measures nothing), then never again
    assert len(calls) >= 1
    for k, (steps, sigma0, got0) in enumerate(calls[:-1]):
        assert steps == {k + 1} and sigma0 == 0 and got0 == {}
    steps, sigma, got = calls[-1]
    assert steps == {len(calls)} and got["step"] == 0
    assert got["sigma"] == pytest.approx(sigma, rel=1e-9) and sigma > 0
    assert got["eps_low"] == pytest.approx(2 * sigma) and got["eps_high"] == pytest.approx(
        8 / 3 * sigma
    )
    trained = [m for m in res.steps if not m.get("skipped")]
    assert len(trained) >= 2
    for m in trained:
        assert m["clip_scale.sigma"] == got["sigma"]
        assert m["ratio.seq_logratio_spread"] > 0
    # the measurement survives a resume: the objective's state carries it
    state = copy.deepcopy(trainer.objective.state_dict())
    fresh = pg.PolicyGradient(trainer.ctx)
    fresh.load_state_dict(state)
    assert fresh.clip_scale.scaled(trainer.ctx.blanks).weight.eps_low == pytest.approx(2 * sigma)
    # the paper's absolute bounds on this policy: the same batches clip far more
    _, paper = short_run(initial, "gspo_paper", budget=1500)
    clip = np.mean([m["clip_frac"] for m in trained])
    clip_paper = np.mean([m["clip_frac"] for m in paper.steps if not m.get("skipped")])
    assert clip < 0.1 < clip_paper


def test_turn_sequences_on_single_turn_data_equal_trajectories(initial):
    """Single-turn episodes have one turn: sequence 'turn' trains as 'trajectory' (to float
    rounding: the per-turn mean sums in another order)."""

    t1, r1 = short_run(initial, "gspo_paper", budget=800, weight={"sequence": "turn"})
    t2, r2 = short_run(initial, "gspo_paper", budget=800)
    assert [m["loss"] for m in r1.steps] == pytest.approx(
        [m["loss"] for m in r2.steps], rel=1e-3, abs=1e-6
    )
    for a, b in zip(t1.model.parameters(), t2.model.parameters()):
        assert torch.allclose(a, b, atol=1e-5)


def test_turn_sequences_on_real_multi_turn_episodes():
    """Episodes of guess_number (three turns each, observations between them): the loss with
    weight.sequence turn equals a row-by-row numpy computation of each turn's own s and mean
    advantage over the batch's own turn ids, and differs from one ratio per trajectory."""

    from sixblanks.harness.config.sections import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task
    from tests.test_worldmodel import _episodes

    task = make_task("guess_number", {"low": 1, "high": 8, "max_turns": 4})
    torch.manual_seed(0)
    _, tok = load_policy(ModelConfig(), [task])
    batch = _episodes(task, tok, [1, 2], g=2)
    assert int(batch.turn_ids.max()) >= 1  # several turns per row
    gen = torch.Generator().manual_seed(0)
    shape = batch.action_mask.shape
    old = -torch.rand(shape, generator=gen, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)
    adv = torch.randn(shape, generator=gen, dtype=torch.float64)
    mask = batch.action_mask.double()
    w = loss_weights(mask, "seq-mean-token-mean", shape[1])

    def loss(sequence):
        b = resolve(
            "gspo_paper", {"weight": {"eps_low": 0.99, "eps_high": 99.0, "sequence": sequence}}
        )
        return float(policy_loss(b, logp, old, adv, mask, w, turn_ids=batch.turn_ids)[0])

    want = 0.0
    d, a, m, t = (x.numpy() for x in (logp - old, adv, mask, batch.turn_ids))
    ww = w.numpy()
    for i in range(shape[0]):
        for k in set(t[i][m[i] > 0].tolist()):
            on = (t[i] == k) & (m[i] > 0)
            want -= ww[i][on].sum() * a[i][on].mean() * math.exp(d[i][on].mean())
    assert loss("turn") == pytest.approx(want, rel=1e-10)
    assert abs(loss("trajectory") - want) > 1e-6


def test_the_spread_is_measured_at_the_full_learning_rate(initial):
    """With a warm-up of 3 steps the first two steps run at 1/3 and 2/3 of the learning rate:
    the spread is measured at step 2, the first at the full rate. A learning rate of 0 never
    moves the policy: nothing is measured, and no extra forward is paid for trying."""

    cfg, task, model0, tok = initial
    warm = (cfg, task, model0, tok)
    _, res = short_run(warm, "gspo", budget=1500, optimizer={"warmup_steps": 3})
    steps = [m for m in res.steps if "clip_scale.step" in m]
    assert steps and steps[0]["clip_scale.step"] == 2.0 and steps[0]["step"] == 2
    _, frozen = short_run(warm, "gspo", budget=600, optimizer={"lr": 0.0})
    assert not any("clip_scale.sigma" in m for m in frozen.steps)


def test_the_spread_validate_compares_absolute_bounds_with_is_the_golden_runs():
    """validate's caution quotes the sequence log-ratio spread of the built-in tiny policy: the
    smallest and largest per-step spread of the golden fixture's GSPO runs (to the rounding it
    prints), at the learning rate and the minibatches those runs used."""

    import json

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.config.checks import TINY_SEQ_SPREAD, TINY_SEQ_SPREAD_LR
    from tests.golden.record import CONFIG, GOLDEN_JSON

    presets = json.loads(GOLDEN_JSON.read_text())["presets"]
    spreads = [
        m["ratio.seq_logratio_spread"]
        for name in ("gspo", "gspo_paper")
        for m in presets[name]["steps"]
        if m.get("ratio.seq_logratio_spread", 0) > 0
    ]
    assert TINY_SEQ_SPREAD[0] == pytest.approx(min(spreads), rel=0.01)
    assert TINY_SEQ_SPREAD[1] == pytest.approx(max(spreads), rel=0.01)
    cfg = validate_mapping(CONFIG)
    assert cfg.model.path is None and cfg.model.gguf is None  # the built-in tiny policy
    assert cfg.optimizer.lr == TINY_SEQ_SPREAD_LR
    assert resolve("gspo_paper").data.minibatches == resolve("gspo").data.minibatches == 4
