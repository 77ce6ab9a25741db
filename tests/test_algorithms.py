"""The six blanks against values computed by hand from the published formulas, in float64."""

import math

import pytest
import torch

from sixblanks.algorithms import advantages as A
from sixblanks.algorithms.blanks import Blanks
from sixblanks.algorithms.data import (
    DynamicSampler,
    minibatches,
    overlong_filter_mask,
    overlong_penalty,
)
from sixblanks.algorithms.loss import compute_advantages, dpo_loss, policy_loss, sft_loss
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.presets import PRESETS, UnknownNameError, diff, get_preset, resolve
from sixblanks.algorithms.regularizers import kl_estimate
from sixblanks.algorithms.weights import (
    clip_surrogate,
    gspo_token_ratio,
    sapo_surrogate,
    sequence_ratio,
    truncated_is_weight,
)

D = torch.float64


def t(x, dtype=D):
    return torch.tensor(x, dtype=dtype)


# ----------------------------------------------------------------------------- advantages

REWARDS = t([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
MASK = torch.ones(8, 3, dtype=D)


def test_group_norm_by_hand():
    adv = A.group_norm(REWARDS, MASK, GROUPS, std_ddof=1, std_eps=1e-6)
    std = math.sqrt((4 * 0.25) / 3)  # ddof 1
    want = [0.5 / (std + 1e-6), -0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.5 / (std + 1e-6)] + [
        0.0
    ] * 4
    assert torch.allclose(adv[:, 0].double(), t(want), atol=1e-6)
    assert adv[4:].eq(0).all()  # an equal-reward group carries no signal, exactly
    # ddof 0 rescales by sqrt(G/(G-1))
    adv0 = A.group_norm(REWARDS, MASK, GROUPS, std_ddof=0, std_eps=0.0)
    assert torch.allclose(adv0[:4, 0].double(), t([1.0, -1.0, -1.0, 1.0]), atol=1e-6)
    assert torch.allclose(adv[:4, 0].double() * math.sqrt(4 / 3), adv0[:4, 0].double(), atol=1e-5)


def test_group_norm_equal_nonbinary_rewards_in_float32_give_exact_zero():
    r = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float32)
    adv = A.group_norm(r, torch.ones(3, 2), torch.zeros(3, dtype=torch.long))
    assert adv.eq(0).all()


def test_singleton_rules():
    r, m, g = t([0.7]), torch.ones(1, 2, dtype=D), torch.tensor([0])
    assert A.group_norm(r, m, g, singleton="zero").eq(0).all()
    assert torch.allclose(
        A.group_norm(r, m, g, singleton="raw").double(), t([[0.7, 0.7]]), atol=1e-6
    )
    assert A.leave_one_out(r, m, g, singleton="zero").eq(0).all()
    assert torch.allclose(
        A.leave_one_out(r, m, g, singleton="raw").double(), t([[0.7, 0.7]]), atol=1e-6
    )


def test_leave_one_out_two_ways():
    adv = A.leave_one_out(REWARDS, MASK, GROUPS)[:, 0].double()
    # R_i - mean of the others
    assert torch.allclose(adv[:4], t([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3]), atol=1e-6)
    # N/(N-1) (R_i - mean R)
    assert torch.allclose(adv[:4], 4 / 3 * (REWARDS[:4] - 0.5), atol=1e-6)
    assert adv[4:].eq(0).all()


def test_mean_baselines_and_return():
    assert torch.allclose(
        A.batch_mean(REWARDS, MASK, GROUPS)[:, 0].double(), t([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    )
    ungrouped = torch.arange(8)
    assert torch.allclose(
        A.batch_mean(REWARDS, MASK, ungrouped)[:, 0].double(), REWARDS - REWARDS.mean()
    )
    assert torch.allclose(
        A.group_mean(REWARDS, MASK, GROUPS)[:, 0].double(), t([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    )
    m = t([[1, 1, 0], [0, 1, 1]])
    assert torch.equal(A.outcome_return(t([2.0, -1.0]), m).double(), t([[2, 2, 0], [0, -1, -1]]))
    assert torch.equal(
        A.remax(t([1.0, 0.0]), m, baseline_rewards=t([0.0, 1.0])).double(),
        t([[1, 1, 0], [0, -1, -1]]),
    )


def test_reinforce_pp_by_hand():
    mask = t([[1, 1, 1, 0], [1, 1, 0, 0]])
    pen = t([[0.1, 0.0, 0.2, 0.0], [0.0, 0.3, 0.0, 0.0]])
    adv = A.reinforce_pp(t([1.0, 0.0]), mask, token_penalty=pen, gamma=1.0).double()
    # r~: row0 = [-0.1, 0, 1-0.2]; returns [0.7, 0.8, 0.8]; row1 = [0, -0.3]; returns [-0.3, -0.3]
    g = [0.7, 0.8, 0.8, -0.3, -0.3]
    mu = sum(g) / 5
    sd = math.sqrt(sum((x - mu) ** 2 for x in g) / 5 + 1e-8)  # ddof 0
    want = t(
        [
            [(0.7 - mu) / sd, (0.8 - mu) / sd, (0.8 - mu) / sd, 0],
            [(-0.3 - mu) / sd, (-0.3 - mu) / sd, 0, 0],
        ]
    )
    assert torch.allclose(adv, want, atol=1e-5)


def test_reinforce_pp_baseline_by_hand():
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    adv = A.reinforce_pp_baseline(t([1.0, 0.0, 0.4]), mask, torch.tensor([0, 0, 1])).double()
    # A' = [0.5, -0.5, 0 (singleton group: R - mean = 0)] broadcast -> tokens [.5,.5,-.5,0,0,0]
    vals = [0.5, 0.5, -0.5, 0.0, 0.0, 0.0]
    mu = sum(vals) / 6
    sd = math.sqrt(sum((x - mu) ** 2 for x in vals) / 6 + 1e-8)
    assert torch.allclose(adv[0, :2], t([(0.5 - mu) / sd] * 2), atol=1e-5)
    assert torch.allclose(adv[1, 0], t((-0.5 - mu) / sd), atol=1e-5)
    assert adv[0, 2] == 0 and adv[1, 1:].eq(0).all()


def test_reinforce_pp_baseline_honours_singleton_by_hand():
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    rewards, groups = t([1.0, 0.0, 0.4]), torch.tensor([0, 0, 1])
    raw = A.reinforce_pp_baseline(rewards, mask, groups, singleton="raw").double()
    # raw: the singleton keeps A' = R = 0.4 before whitening -> tokens [.5, .5, -.5, .4, .4, .4]
    vals = [0.5, 0.5, -0.5, 0.4, 0.4, 0.4]
    mu = sum(vals) / 6
    sd = math.sqrt(sum((x - mu) ** 2 for x in vals) / 6 + 1e-8)
    want = t([[0.5, 0.5, 0], [-0.5, 0, 0], [0.4, 0.4, 0.4]])
    want = torch.where(mask > 0, (want - mu) / sd, torch.zeros_like(want))
    assert torch.allclose(raw, want, atol=1e-5)
    # through compute_advantages: advantage.singleton reaches the estimator (it used to be dropped)
    for rule, expect in (("raw", want), ("zero", A.reinforce_pp_baseline(rewards, mask, groups))):
        blanks = resolve("reinforce_pp_baseline", {"advantage": {"singleton": rule}})
        adv, _, _ = compute_advantages(blanks, rewards, mask, groups)
        assert torch.allclose(adv.double(), expect.double(), atol=1e-5), rule
    zero = A.reinforce_pp_baseline(rewards, mask, groups).double()
    assert zero[2].eq(zero[2, 0]).all() and not torch.allclose(zero, raw, atol=1e-3)


def test_turn_returns_take_kl_in_the_reward_per_turn():
    # one sample, tokens: obs, a0, a0, obs, a1; KL penalties on action tokens go to their turn
    turn_ids = torch.tensor([[-1, 0, 0, -1, 1]])
    mask = (turn_ids >= 0).double()
    old = t([[0.0, -1.0, -1.0, 0.0, -1.0]])
    ref = t([[0.0, -1.5, -1.2, 5.0, -0.7]])  # k1 = old - ref = [., .5, .2, (obs), -.3]
    blanks = resolve(
        "grpo",
        {
            "advantage": {"estimator": "turn_return", "turn_baseline": "none", "gamma": 0.5},
            "regularizer": {"reward_kl_coef": 0.1, "reward_kl_estimator": "k1"},
        },
    )
    adv, _, _ = compute_advantages(
        blanks,
        t([1.0]),
        mask,
        old_logp=old,
        ref_logp=ref,
        turn_rewards=t([[0.0, 1.0]]),
        turn_ids=turn_ids,
    )
    # turn rewards [0 - 0.1*(0.5+0.2), 1 - 0.1*(-0.3)] = [-0.07, 1.03]; G = [-0.07 + 0.5*1.03, 1.03]
    g0, g1 = -0.07 + 0.5 * 1.03, 1.03
    assert torch.allclose(adv.double(), t([[0, g0, g0, 0, g1]]), atol=1e-6)


def test_turn_returns_by_hand():
    # two samples of one group, three turns each; tokens: obs, a0, a0, obs, a1, obs, a2
    turn_ids = torch.tensor([[-1, 0, 0, -1, 1, -1, 2]] * 2)
    mask = (turn_ids >= 0).double()
    turn_rewards = t([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    adv = A.turn_return(
        t([1.0, 1.0]),
        mask,
        turn_rewards,
        turn_ids,
        torch.tensor([0, 0]),
        gamma=0.5,
        turn_baseline="none",
    ).double()
    # G = [[0.25, 0.5, 1], [0.5, 1, 0]]
    assert torch.allclose(adv[0], t([0, 0.25, 0.25, 0, 0.5, 0, 1.0]))
    assert torch.allclose(adv[1], t([0, 0.5, 0.5, 0, 1.0, 0, 0.0]))
    base = A.turn_return(
        t([1.0, 1.0]), mask, turn_rewards, turn_ids, torch.tensor([0, 0]), gamma=0.5
    ).double()
    # group mean per turn index: [0.375, 0.75, 0.5]
    assert torch.allclose(base[0], t([0, -0.125, -0.125, 0, -0.25, 0, 0.5]))
    assert torch.allclose(base[1], t([0, 0.125, 0.125, 0, 0.25, 0, -0.5]))


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(UnknownNameError, match="did you mean 'group_norm'.*valid: "):
        A.get_estimator("group_nrom")


def test_kl_in_reward_sequence_vs_token_level():
    mask = t([[1, 1], [1, 1]])
    old, ref = (
        t([[-1.0, -1.0], [-1.0, -1.0]]),
        t([[-1.5, -1.0], [-1.0, -0.5]]),
    )  # k1 = [[.5, 0], [0, -.5]]
    rloo = resolve("rloo", {"regularizer": {"reward_kl_coef": 0.1}})
    adv, _, info = compute_advantages(
        rloo, t([1.0, 0.0]), mask, torch.tensor([0, 0]), old_logp=old, ref_logp=ref
    )
    # sequence rewards: [1 - 0.1*0.5, 0 - 0.1*(-0.5)] = [0.95, 0.05]; LOO: ±0.9
    assert torch.allclose(info["shaped_rewards"], t([0.95, 0.05]))
    assert torch.allclose(adv.double(), t([[0.9, 0.9], [-0.9, -0.9]]), atol=1e-6)


# ----------------------------------------------------------------------------- weights


def test_clip_surrogate_values_and_zero_gradient_outside_trust_region():
    logp = t([math.log(1.5), math.log(0.5), math.log(1.1), math.log(5.0)]).requires_grad_()
    old = torch.zeros(4, dtype=D)
    adv = t([1.0, -1.0, 1.0, -1.0])
    ratio = torch.exp(logp - old)
    loss, clipped = clip_surrogate(ratio, adv, 0.2, 0.28, dual_clip_c=3.0)
    # A>0, r=1.5 > 1.28: clipped at -1.28;  A<0, r=0.5 < 0.8: 0.8;  inside: -1.1;
    # A<0, r=5: dual cap 3
    assert torch.allclose(loss, t([-1.28, 0.8, -1.1, 3.0]))
    assert clipped.tolist() == [1.0, 1.0, 0.0, 1.0]
    (g,) = torch.autograd.grad(loss.sum(), logp)
    assert g[0] == 0 and g[1] == 0 and g[3] == 0
    assert torch.allclose(g[2], t(-1.1))  # d(-A r)/dlogp = -A r


def test_sapo_gradient_weight_is_one_at_ratio_one_for_any_temperature():
    for tau_pos, tau_neg in [(1.0, 1.05), (0.3, 2.0), (5.0, 0.1)]:
        for a in (1.0, -1.0, 0.0):
            logp = t([0.3]).requires_grad_()
            ratio = torch.exp(logp - logp.detach())
            adv = t([a])
            (g,) = torch.autograd.grad(sapo_surrogate(ratio, adv, tau_pos, tau_neg).sum(), logp)
            assert torch.allclose(g, t([-a]))  # w = 1: gradient -A
    # and away from r = 1 the weight is 4 p (1 - p) r
    logp = t([math.log(1.4)]).requires_grad_()
    r = torch.exp(logp)
    (g,) = torch.autograd.grad(sapo_surrogate(r, t([1.0]), 2.0, 1.0).sum(), logp)
    p = 1 / (1 + math.exp(-2.0 * 0.4))
    assert torch.allclose(g, t([-4 * p * (1 - p) * 1.4]))


def test_gspo_sequence_ratio_is_a_geometric_mean():
    logp = t([[math.log(2.0), math.log(0.5), math.log(4.0)]])
    mask = torch.ones(1, 3, dtype=D)
    s = sequence_ratio(logp, torch.zeros_like(logp), mask)
    assert torch.allclose(s[0, 0], t((2.0 * 0.5 * 4.0) ** (1 / 3)))
    assert torch.allclose(gspo_token_ratio(logp, torch.zeros_like(logp), mask), s)


def _grad_of(preset_blanks, logp0, old, adv, mask):
    logp = logp0.clone().requires_grad_()
    w = loss_weights(mask, preset_blanks.normalization.mode)
    loss, _ = policy_loss(preset_blanks, logp, old, adv, mask, w)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g


def test_gspo_and_gspo_token_equal_with_sequence_advantages_differ_with_token_advantages():
    torch.manual_seed(0)
    mask = t([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    old = torch.randn(3, 4, dtype=D) * 0.1 - 1
    logp0 = old + torch.randn(3, 4, dtype=D) * 0.05
    seq_adv = t([1.0, -0.5, 0.3])[:, None] * mask
    wide = {"weight": {"eps_low": 0.2, "eps_high": 0.2}}
    for over in (wide, {}):  # inside the trust region and with the paper's tiny clip range
        gspo, gspo_tok = resolve("gspo", over), resolve("gspo_token", over)
        l1, g1 = _grad_of(gspo, logp0, old, seq_adv, mask)
        l2, g2 = _grad_of(gspo_tok, logp0, old, seq_adv, mask)
        assert torch.allclose(l1, l2) and torch.allclose(g1, g2, atol=1e-12)
    tok_adv = torch.randn(3, 4, dtype=D) * mask
    _, g1 = _grad_of(resolve("gspo", wide), logp0, old, tok_adv, mask)
    _, g2 = _grad_of(resolve("gspo_token", wide), logp0, old, tok_adv, mask)
    assert not torch.allclose(g1, g2, atol=1e-6)


def test_truncated_importance_weight():
    old, beh = t([0.0, 0.0, -1.0]), t([-2.0, 0.5, -1.0])
    assert torch.allclose(truncated_is_weight(old, beh, 2.0), t([2.0, math.exp(-0.5), 1.0]))


def test_pure_reinforce_weight_is_one():
    mask = t([[1, 1]])
    logp0 = t([[-0.7, -1.2]])
    _, g = _grad_of(resolve("reinforce"), logp0, logp0 - 0.3, t([[2.0, 2.0]]), mask)
    # w = 1 whatever pi_old is: gradient -A / Z with Z = 2 tokens (token-mean)
    assert torch.allclose(g, t([[-1.0, -1.0]]))


# ----------------------------------------------------------------------------- normalization

NMASK = t([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
NLOSS = t([[1, 2, 3, 9], [4, 9, 9, 9], [9, 9, 9, 9]])


@pytest.mark.parametrize(
    "mode,kw,want",
    [
        ("token-mean", {}, (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", {}, (6 / 3 + 4 / 1) / 2),
        ("seq-mean-token-sum", {}, (6 + 4) / 2),
        ("constant", {"l_max": 8}, (6 + 4) / (2 * 8)),
        ("seq-mean-token-sum", {"count_empty_rows": True}, (6 + 4) / 3),
        ("seq-mean-token-mean", {"count_empty_rows": True}, (6 / 3 + 4 / 1) / 3),
    ],
)
def test_normalization_by_hand(mode, kw, want):
    w = loss_weights(NMASK, mode, **kw)
    assert math.isclose(float((w * NLOSS).sum()), want, rel_tol=1e-12)


@pytest.mark.parametrize(
    "preset", ["grpo", "dapo", "dr_grpo", "gspo", "sapo", "reinforce_pp", "rloo"]
)
def test_micro_batching_does_not_change_the_gradient(preset):
    torch.manual_seed(1)
    B, T = 6, 5
    mask = (torch.rand(B, T, dtype=D) > 0.3).double()
    mask[:, 0] = 1
    old = torch.randn(B, T, dtype=D) * 0.1 - 1
    logp0 = old + torch.randn(B, T, dtype=D) * 0.02
    ref = old + torch.randn(B, T, dtype=D) * 0.02
    adv = torch.randn(B, T, dtype=D) * mask
    blanks = resolve(preset, {"normalization": {"l_max": 5}} if preset == "dr_grpo" else {})
    w = loss_weights(mask, blanks.normalization.mode, l_max=5)
    full = logp0.clone().requires_grad_()
    loss, _ = policy_loss(blanks, full, old, adv, mask, w, ref_logp=ref)
    (g_full,) = torch.autograd.grad(loss, full)
    split = logp0.clone().requires_grad_()
    total = 0
    naive_total = 0
    for rows in ([0, 1], [2, 3, 4], [5]):
        lo, _ = policy_loss(
            blanks, split[rows], old[rows], adv[rows], mask[rows], w[rows], ref_logp=ref[rows]
        )
        total = total + lo
        w_local = loss_weights(mask[rows], blanks.normalization.mode, l_max=5)
        ln, _ = policy_loss(
            blanks, split[rows], old[rows], adv[rows], mask[rows], w_local, ref_logp=ref[rows]
        )
        naive_total = naive_total + ln / 3  # per-micro-batch mean x 1/grad_accum (the legacy bug)
    (g_split,) = torch.autograd.grad(total, split, retain_graph=True)
    assert torch.allclose(loss, total) and torch.allclose(g_full, g_split, atol=1e-12)
    (g_naive,) = torch.autograd.grad(naive_total, split)
    assert not torch.allclose(g_full, g_naive, atol=1e-6)


# ----------------------------------------------------------------------------- regularizers


def test_kl_estimators_by_hand():
    logp, ref = t([-1.0, -2.0]), t([-1.5, -1.0])  # d = [0.5, -1.0]
    assert torch.allclose(kl_estimate(logp, ref, "k1"), t([0.5, -1.0]))
    assert torch.allclose(kl_estimate(logp, ref, "k2"), t([0.125, 0.5]))
    assert torch.allclose(
        kl_estimate(logp, ref, "k3"), t([math.exp(-0.5) - 1 + 0.5, math.exp(1.0) - 1 - 1.0])
    )
    assert (kl_estimate(logp, ref, "k3") >= 0).all()
    with pytest.raises(UnknownNameError):
        kl_estimate(logp, ref, "k4")


def test_kl_loss_pulls_toward_the_reference_and_entropy_bonus_sign():
    # with A = 0 only the KL term acts; its gradient on log pi must have the sign of d (descent
    # lowers d)
    mask = t([[1.0, 1.0]])
    logp = t([[-0.5, -2.0]]).requires_grad_()
    ref = t([[-1.0, -1.0]])
    for est in ("k2", "k3"):
        blanks = resolve("grpo", {"regularizer": {"loss_kl_coef": 1.0, "loss_kl_estimator": est}})
        loss, met = policy_loss(
            blanks,
            logp,
            logp.detach(),
            torch.zeros(1, 2, dtype=D),
            mask,
            loss_weights(mask, "token-mean"),
            ref_logp=ref,
        )
        (g,) = torch.autograd.grad(loss, logp)
        assert g[0, 0] > 0 and g[0, 1] < 0 and met["kl"] > 0
    ent = t([[0.3, 0.5]])
    blanks = resolve("grpo", {"regularizer": {"loss_kl_coef": 0.0, "entropy_coef": 0.1}})
    loss, met = policy_loss(
        blanks,
        logp,
        logp.detach(),
        torch.zeros(1, 2, dtype=D),
        mask,
        loss_weights(mask, "seq-mean-token-mean"),
        entropy=ent,
    )
    assert math.isclose(float(loss.detach()), -0.1 * 0.4, rel_tol=1e-9) and math.isclose(
        met["entropy"], 0.4
    )


def test_sft_and_dpo_losses_by_hand():
    logp, mask = t([[-1.0, -3.0, -9.0]]), t([[1.0, 1.0, 0.0]])
    assert math.isclose(float(sft_loss(logp, mask)), 2.0)
    loss, met = dpo_loss(t([-2.0]), t([-3.0]), t([-2.5]), t([-2.5]), beta=0.1)
    h = (-2.0 + 2.5) - (-3.0 + 2.5)  # 1.0
    assert math.isclose(float(loss), -math.log(1 / (1 + math.exp(-0.1 * h))), rel_tol=1e-12)
    ls, _ = dpo_loss(t([-2.0]), t([-3.0]), t([-2.5]), t([-2.5]), beta=0.1, label_smoothing=0.2)
    s = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert math.isclose(float(ls), -0.8 * math.log(s(0.1)) - 0.2 * math.log(s(-0.1)), rel_tol=1e-12)
    assert met["dpo_accuracy"] == 1.0


# ----------------------------------------------------------------------------- data


def test_overlong_shaping_and_filter():
    # L_max 20, cache 4: 0 up to 16, linear to -1 at 20, -1 beyond
    pen = overlong_penalty(t([10, 16, 17, 20, 25]), 20, 4, 1.0)
    assert torch.allclose(pen, t([0, 0, -0.25, -1.0, -1.0]))
    m = overlong_filter_mask(torch.ones(3, 2), torch.tensor([False, True, False]))
    assert m.tolist() == [[1, 1], [0, 0], [1, 1]]
    dapo = resolve("dapo", {"mask": {"overlong_filter": True}})
    mask = torch.ones(4, 6, dtype=D)
    mask[0, 4:] = 0
    adv, new_mask, info = compute_advantages(
        dapo,
        t([1.0, 0.0, 1.0, 0.0]),
        mask,
        torch.tensor([0, 0, 0, 0]),
        truncated=torch.tensor([False, False, True, True]),
        l_max=6,
    )
    # lengths [4, 6, 6, 6] with L_max 6, cache 4: start 2 -> penalties [-0.5, -1, -1, -1]
    assert torch.allclose(info["overlong_penalty"], t([-0.5, -1.0, -1.0, -1.0]))
    assert new_mask[2:].eq(0).all() and adv[2:].eq(0).all()


def test_dynamic_sampling_census_accounts_for_every_group():
    sampler = DynamicSampler(target_groups=3, max_rounds=4)
    rounds = [
        (
            t([1, 1, 0, 0, 1, 0]),
            torch.tensor([0, 0, 1, 1, 2, 2]),
        ),  # g0 all correct; g1 all wrong; g2 keep
        (t([1, 0, 0.5, 0.5, 1, 0]), torch.tensor([3, 3, 4, 4, 5, 5])),  # keep, zero variance, keep
        (t([1, 0, 1, 0, 1, 1]), torch.tensor([6, 6, 7, 7, 8, 8])),  # never reached
    ]
    for rewards, gids in rounds:
        if sampler.done:
            break
        sampler.add_round(rewards, gids, torch.full((6,), 3))
    c = sampler.census
    assert sampler.kept == [2, 3, 5]
    assert c.rounds == 2 and c.groups_launched == 6 and c.groups_kept == 3
    assert c.groups_dropped == {
        "all_correct": 1,
        "all_wrong": 1,
        "zero_variance": 1,
        "accuracy": 0,
        "surplus": 0,
    }
    assert c.responses_launched == 12 and c.responses_accepted == 6
    assert c.tokens_launched == 36 and c.tokens_accepted == 18 and c.balanced() and not c.cap_hit
    # the trainable-group fraction counts launched groups before filtering: g2, g3, g5 of 6
    assert c.groups_varied == 3 and c.trainable_group_frac == 0.5
    off = DynamicSampler(target_groups=3, max_rounds=1, enabled=False)  # no filtering: same count
    off.add_round(*rounds[0], torch.full((6,), 3))
    assert off.census.groups_kept == 3 and off.census.trainable_group_frac == 1 / 3
    capped = DynamicSampler(target_groups=2, max_rounds=2)
    for _ in range(2):
        capped.add_round(t([1, 1, 1, 0, 1, 0]), torch.tensor([0, 0, 1, 1, 2, 2]), torch.ones(6))
    assert capped.census.cap_hit is False  # round 1 kept 2 already
    assert (
        capped.census.rounds == 2
        and capped.census.groups_dropped["surplus"] == 2
        and capped.census.balanced()
    )
    starved = DynamicSampler(target_groups=2, max_rounds=2)
    while not starved.done:
        starved.add_round(t([1, 1]), torch.tensor([0, 0]), torch.ones(2))
    assert starved.census.cap_hit and starved.census.groups_kept == 0 and starved.census.balanced()


def test_ratio_and_clip_diagnostics_are_plain_means_over_action_tokens():
    # constant-Z (dr_grpo) weights are far from uniform; the diagnostics must not be weighted by
    # them
    blanks = resolve("dr_grpo")
    mask = t([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    old = torch.zeros(2, 3, dtype=D)
    logp = t([[math.log(1.5), 0.0, 5.0], [math.log(0.5), 0.0, 0.0]]).requires_grad_()
    adv = t([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    w = loss_weights(mask, "constant", l_max=8)
    _, met = policy_loss(blanks, logp, old, adv, mask, w)
    # ratios on the 3 action tokens: 1.5, 1.0, 0.5 (the masked 5.0 is not one of them)
    assert met["action_tokens"] == 3 and math.isclose(met["ratio_sum"], 3.0)
    assert math.isclose(met["ratio_max"], 1.5) and math.isclose(met["ratio_min"], 0.5)
    # eps 0.2: 1.5 with A > 0 is clipped, 0.5 with A < 0 is clipped, 1.0 is not
    assert met["clip_count"] == 2
    from sixblanks.harness.training.objectives.accumulate import finish, merge

    total: dict[str, float] = {}
    merge(total, met)
    merge(
        total,
        {
            **met,
            "action_tokens": 1.0,
            "clip_count": 0.0,
            "ratio_sum": 1.0,
            "ratio_max": 1.0,
            "ratio_min": 1.0,
            "pg_loss": 0.0,
        },
    )
    out = finish(total, n_minibatches=2)
    assert math.isclose(out["ratio_mean"], 4.0 / 4) and math.isclose(out["clip_frac"], 2 / 4)
    assert out["ratio_max"] == 1.5 and out["ratio_min"] == 0.5
    assert math.isclose(out["pg_loss"], met["pg_loss"] / 2)
    # a micro-batch without action tokens reports no extremes (its 1.0 would widen the range)
    _, empty = policy_loss(blanks, logp, old, adv, torch.zeros_like(mask), w)
    assert "ratio_max" not in empty and "ratio_min" not in empty and empty["action_tokens"] == 0


def test_minibatches_cover_each_sample_once_per_epoch():
    g = torch.Generator().manual_seed(0)
    seen = {}
    for epoch, idx in minibatches(10, 3, 2, g):
        seen.setdefault(epoch, []).extend(idx)
    assert sorted(seen[0]) == list(range(10)) and sorted(seen[1]) == list(range(10))
    assert len(list(minibatches(10, 3, 2, g))) == 6


# ----------------------------------------------------------------------------- presets


def test_every_preset_is_valid_and_states_its_variant():
    expected = {
        "sft",
        "reinforce",
        "reinforce_baseline",
        "reinforce_loo",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "remax",
        "grpo",
        "dr_grpo",
        "dapo",
        "gspo",
        "gspo_token",
        "sapo",
        "dpo",
    }
    assert expected <= set(PRESETS)
    for name, p in PRESETS.items():
        assert isinstance(p.blanks, Blanks) and p.summary and p.notes, name
    assert get_preset("dapo").blanks.weight.eps_high == 0.28
    assert get_preset("grpo").blanks.normalization.mode == "seq-mean-token-mean"
    assert get_preset("grpo").blanks.regularizer.loss_kl_coef == 0.04
    assert get_preset("dr_grpo").blanks.normalization.mode == "constant"
    assert get_preset("gspo").blanks.weight.ratio == "sequence"
    with pytest.raises(UnknownNameError, match="did you mean 'dapo'"):
        get_preset("dapoo")


def test_diff_names_exactly_the_differing_fields():
    d = diff(get_preset("grpo").blanks, get_preset("dapo").blanks)
    assert d["weight.eps_high"] == (0.2, 0.28)
    assert d["normalization.mode"] == ("seq-mean-token-mean", "token-mean")
    assert d["data.dynamic_sampling"] == (False, True)
    assert "weight.eps_low" not in d and "advantage.estimator" not in d
    assert diff(get_preset("grpo").blanks, get_preset("grpo").blanks) == {}


def test_explain_cli_json(cli):
    import json

    code, out, _ = cli("explain", "grpo", "dapo", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data["blanks"]) == {"grpo", "dapo"} and "weight.eps_high" in data["differs"]
    code, _, err = cli("explain", "grpoo")
    assert code == 1 and "did you mean 'grpo'" in err


def test_critic_arms_refuse_overlong_shaping_they_would_ignore():
    for over in (
        {"data": {"overlong_shaping": {"enabled": True}}},
        {"mask": {"overlong_filter": True}},
    ):
        with pytest.raises(ValueError, match="not implemented for the critic"):
            resolve("ppo", over)
    assert resolve(
        "grpo", {"data": {"overlong_shaping": {"enabled": True}}}
    ).data.overlong_shaping.enabled


def test_sapo_clip_fraction_counts_tokens_whose_gate_passes_under_half_the_gradient():
    from sixblanks.algorithms.weights import TRUST_REGIONS, sapo_gate_weight

    ratio = t([[1.0, 3.0, 6.0, 0.2]])
    adv = t([[1.0, 1.0, 1.0, -1.0]])
    w = sapo_gate_weight(ratio, adv, 1.0, 1.05)
    # a second method: the gradient of f(r) = (4/tau) sigmoid(tau (r - 1)) with respect to log r
    logr = ratio.log().requires_grad_()
    tau = torch.where(adv > 0, t(1.0), t(1.05))
    ((4 / tau) * torch.sigmoid(tau * (logr.exp() - 1))).sum().backward()
    assert torch.allclose(w, logr.grad) and math.isclose(float(w[0, 0]), 1.0)
    _, gated = TRUST_REGIONS["sapo"].call(
        {"ratio": ratio, "adv": adv}, {"weight.tau_pos": 1.0, "weight.tau_neg": 1.05}
    )
    # by hand: 1.0 -> 1; 3.0 -> 4 s(2)(1 - s(2)) 3 = 1.26; 6.0 -> 0.159; 0.2 (A < 0) -> 0.168
    assert gated.tolist() == [[0.0, 0.0, 1.0, 1.0]]
