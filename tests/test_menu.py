"""The current menu against its published formulas, by hand, in float64: CISPO, DPPO's binary
masks, IcePop and KPop, the rollout corrections in decoupled and bypass form, the token-sum,
prompt-, task- and turn-level normalizations, the batch-std advantage and the straight-through k3.

The shared example: two sequences of three tokens, the last of the second padding. Every number
below was computed from the formulas of the papers and frameworks (MiniMax-M1's CISPO; the DPPO
paper's binary TV/KL; Ring-1T's IcePop; verl's rollout-correction presets; ScaleRL's prompt-mean),
not by running this code.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from sixblanks.algorithms import compute_advantages, policy_loss
from sixblanks.algorithms.advantages import group_mean_batch_std
from sixblanks.algorithms.loss import behavior_mask
from sixblanks.algorithms.normalization import loss_weights
from sixblanks.algorithms.offpolicy import binary_kl_max
from sixblanks.algorithms.presets import get_preset, resolve
from sixblanks.algorithms.regularizers import kl_estimate
from sixblanks.algorithms.weights import mismatch_stats

D = torch.float64
LP = [[-1.0, -0.5, -0.3], [-0.9, -1.6, -3.0]]  # log pi_theta
LO = [[-1.2, -0.4, -2.0], [-1.0, -0.9, -2.0]]  # log pi_old (recomputed)
LR = [[-1.1, -0.45, -3.8], [-0.2, -1.3, -1.4]]  # log pi_rollout
A = [[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]]
M = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
N = 5.0  # valid tokens


def t(x):
    return torch.tensor(x, dtype=D)


def loss_and_grad(blanks, weights=None, mask=None, old=LO):
    """(loss, dL/dlog pi ``[2, 3]``) of ``blanks`` on the shared example (token-mean Z over the
    original mask unless ``weights``)."""

    m = t(M) if mask is None else mask
    w = weights if weights is not None else t(M) / N
    logp = t(LP).requires_grad_()
    loss, met = policy_loss(blanks, logp, t(old), t(A), m, w, behavior_logp=t(LR))
    (g,) = torch.autograd.grad(loss, logp)
    return float(loss.detach()), g, met


PPO = {"weight": {"eps_low": 0.2, "eps_high": 0.2, "dual_clip_c": 3.0}, "advantage": {}}
"""verl's vanilla PPO-clip (eps 0.2, dual clip 3): per token [[-1.2, -0.904837, -1.2],
[0.552585, 0.4, .]], token-mean -0.470450."""


def ppo(**weight):
    return resolve(
        "grpo", {"weight": {**PPO["weight"], **weight}, "regularizer": {"loss_kl_coef": 0}}
    )


def test_the_reference_ppo_loss():
    loss, _, _ = loss_and_grad(ppo())
    assert loss == pytest.approx(-0.470450, abs=1e-6)


# ---------------------------------------------------------------------------------------- CISPO


@pytest.mark.parametrize(
    "eps_low, eps_high, weights, value, clipped",
    [
        (0.2, 0.2, [[1.2, 0.904837, 1.2], [1.105171, 0.8, 0]], 0.175018, 3),  # verl's default
        (10.0, 0.2, [[1.2, 0.904837, 1.2], [1.105171, 0.496585, 0]], 0.223565, 2),  # its example
        (1.0, 4.0, [[1.221403, 0.904837, 5.0], [1.105171, 0.496585, 0]], 0.455845, 1),  # [0, 5]
    ],
)
def test_cispo_clips_the_weight_not_the_token(eps_low, eps_high, weights, value, clipped):
    """l = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi: the value and the gradient
    -clip(r) A / N on every token, the clipped ones included."""

    b = resolve("cispo", {"weight": {"eps_low": eps_low, "eps_high": eps_high}})
    loss, g, met = loss_and_grad(b)
    assert loss == pytest.approx(value, abs=1e-6)
    want = -t(weights) * t(A) * t(M) / N
    assert torch.allclose(g, want, atol=1e-6)
    assert met["clip_count"] == clipped  # the tokens whose weight was clipped


def test_cispo_preset_is_the_zero_to_five_band():
    w = get_preset("cispo").blanks.weight
    assert (max(1 - w.eps_low, 0.0), 1 + w.eps_high) == (0.0, 5.0)


# ----------------------------------------------------------------------------------------- DPPO


def test_dppo_tv_anchored_on_pi_old_verl():
    """verl's dppo_tv, delta 0.15, anchor pi_old, C = 3: keep [[1,1,0],[1,0,.]]."""

    b = resolve(
        "dppo",
        {"weight": {"ratio": "token", "eps_low": 0.15, "eps_high": 0.15, "ratio_cap": 3.0}},
    )
    loss, g, met = loss_and_grad(b)
    assert loss == pytest.approx(0.235299, abs=1e-6)
    w = t([[1.221403, 0.904837, 0], [1.105171, 0, 0]])
    assert torch.allclose(g, -w * t(A) / N, atol=1e-6)
    assert met["clip_count"] == 2


def test_dppo_kl_anchored_on_pi_old_verl():
    """Binary KL to pi_old [[0.009846, 0.008718, 0.811689], [0.003137, 0.108754]]; at delta 0.05
    the same tokens as TV 0.15 are dropped."""

    b = resolve(
        "dppo",
        {
            "weight": {
                "ratio": "token",
                "trust_region": "dppo_kl",
                "eps_low": 0.05,
                "eps_high": 0.05,
                "ratio_cap": 3.0,
            }
        },
    )
    loss, _, _ = loss_and_grad(b)
    assert loss == pytest.approx(0.235299, abs=1e-6)
    p, mu = t(LP).exp(), t(LO).exp()
    kl = mu * torch.log(mu / p) + (1 - mu) * torch.log((1 - mu) / (1 - p))
    assert torch.allclose(
        kl[t(M) > 0], t([0.009846, 0.008718, 0.811689, 0.003137, 0.108754]), atol=1e-6
    )


def test_dppo_preset_is_the_authors_stable_rl_form():
    """Anchor pi_rollout for the ratio and the mask, delta 0.2, C = 10: keep [[1,1,0],[0,1,.]]."""

    loss, g, _ = loss_and_grad(get_preset("dppo").blanks)
    assert loss == pytest.approx(0.197626, abs=1e-6)
    w = t([[1.105171, 0.951229, 0], [0, 0.740818, 0]])
    assert torch.allclose(g, -w * t(A) / N, atol=1e-6)


# ------------------------------------------------------------------------------- IcePop and KPop


def test_icepop_weighs_kept_tokens_by_k_and_keeps_the_rest_in_z():
    """M(k) = k 1[0.5 <= k <= 5] times verl's PPO-clip: -0.288061 over all 5 tokens (-0.480101
    would mean the masked tokens left the denominator)."""

    b = ppo(gate={"level": "token", "metric": "ratio", "mode": "weight", "low": 0.5, "high": 5.0})
    m, dropped, met = behavior_mask(b, t(LO), t(LR), t(M))
    assert torch.equal(m, t(M))  # the tokens stay in Z (and in the ledger's accepted tokens)
    assert "masking" not in dropped and met["gate.masked_frac"] == pytest.approx(2 / 5)
    loss, _, _ = loss_and_grad(b)
    assert loss == pytest.approx(-0.288061, abs=1e-6)
    icepop = get_preset("icepop").blanks.weight.gate
    assert (icepop.mode, icepop.low, icepop.high) == ("weight", 0.5, 5.0)


def test_kpop_binary_kl_keeps_the_same_tokens():
    got = binary_kl_max(t(LO), t(LR))[t(M) > 0]
    want = t([0.002339, 0.002380, 0.137432, 0.495276, 0.041776])
    assert torch.allclose(got, want, atol=1e-6)
    b = ppo(gate={"level": "token", "metric": "binary_kl", "mode": "weight", "high": 0.1})
    loss, _, _ = loss_and_grad(b)
    assert loss == pytest.approx(-0.288061, abs=1e-6)


# ------------------------------------------------------------------ verl's rollout corrections


def decoupled(b):
    """The harness's order: the masking corrections once per batch, then Z on what is left."""

    m, _, _ = behavior_mask(b, t(LO), t(LR), t(M))
    return loss_and_grad(b, weights=m / m.sum(), mask=m)


@pytest.mark.parametrize(
    "weight, value",
    [
        ({"tis_cap": 2.0}, -0.718402),  # token TIS
        ({"tis_cap": 2.0, "tis_form": "sequence"}, -1.194228),  # sequence TIS
        (  # Seq-MIS: sequence TIS + rejection on the product of the ratios, rejected leave Z
            {
                "tis_cap": 2.0,
                "tis_form": "sequence",
                "gate": {"level": "sequence_sum", "mode": "mask", "low": 0.5, "high": 2.0},
            },
            0.319269,
        ),
        ({"gate": {"level": "sequence", "low": 0.8, "high": 1.25}}, 0.476293),  # geometric RS
        ({"gate": {"level": "sequence", "metric": "kl", "high": 0.2}}, 0.476293),  # K3 RS
        (  # OpenRLHF seq-mask-tis: geometric mean in [0.5, 5], then the raw token k
            {"gate": {"level": "sequence", "mode": "weight", "low": 0.5, "high": 5.0}},
            -1.690318,
        ),
    ],
)
def test_decoupled_corrections(weight, value):
    loss, _, _ = decoupled(ppo(**weight))
    assert loss == pytest.approx(value, abs=1e-6)


def test_bypass_ppo_clip_uses_the_rollout_as_pi_old():
    """weight.old_policy: rollout: PPO-clip on rho = pi/pi_rollout, per token
    [[-1.105171, -0.951229, -1.2], [0.4, 0.4]]: -0.491280; no pi_old is read."""

    b = ppo(old_policy="rollout")
    loss, _, _ = loss_and_grad(b, old=[[float("nan")] * 3] * 2)
    assert loss == pytest.approx(-0.491280, abs=1e-6)


def test_bypass_pg_is_weighs_reinforce_by_the_capped_sequence_ratio():
    """verl's bypass_pg_is(2.0): REINFORCE with w = min(prod rho, 2) = [2, 0.367879]; the gradient
    -w A / N (verl's value -A w log pi is 0.628030; the template's ratio form has this gradient)."""

    b = resolve(
        "reinforce",
        {"weight": {"tis_cap": 2.0, "tis_form": "sequence", "old_policy": "rollout"}},
    )
    _, g, _ = loss_and_grad(b)
    w = t([[2.0] * 3, [math.exp(-1.0)] * 3]) * t(M)
    assert torch.allclose(g, -w * t(A) / N, atol=1e-6)
    assert float((-w * t(A) * t(LP)).sum() / N) == pytest.approx(0.628030, abs=1e-6)


def test_bypass_masks_zero_tokens_but_keep_them_in_z():
    """In the bypass form a gate reads pi_theta/pi_rollout in each micro-batch and the tokens it
    rejects stay in Z (verl's bypass mode), unlike the decoupled form where they leave it."""

    b = ppo(old_policy="rollout", gate={"level": "token", "low": 0.8, "high": 1.25})
    loss, g, _ = loss_and_grad(b)
    rho = torch.exp(t(LP) - t(LR))
    keep = ((rho >= 0.8) & (rho <= 1.25)).to(D) * t(M)
    per_token = torch.maximum(-t(A) * rho, -t(A) * rho.clamp(0.8, 1.2))
    per_token = torch.where((t(A) < 0) & (per_token > -3 * t(A)), -3 * t(A), per_token)
    assert loss == pytest.approx(float((per_token * keep).sum() / N), abs=1e-9)
    assert torch.equal(g[keep == 0], torch.zeros_like(g[keep == 0]))


@pytest.mark.parametrize(
    "weight",
    [
        {"ratio": "behavior", "old_policy": "rollout"},
        {"tis_cap": 2.0, "old_policy": "rollout"},
        {"gate": {"mode": "clamp"}, "old_policy": "rollout"},
        {"gate": {"mode": "weight", "low": 0.5, "high": 5.0}, "old_policy": "rollout"},
    ],
)
def test_correcting_twice_is_refused(weight):
    with pytest.raises(ValueError, match="old_policy|twice"):
        resolve("grpo", {"weight": weight})


# --------------------------------------------------------------------------------- normalization


def menu_batch():
    L = t([[1, 2, 3], [4, 0, 0], [1, 1, 0], [5, 0, 0]])
    m = t([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]])
    return L, m, torch.tensor([0, 0, 1, 1]), torch.where(m > 0, 0, -1)


@pytest.mark.parametrize(
    "mode, value",
    [
        ("token-mean", 17 / 7),
        ("token-sum", 17.0),
        ("seq-mean-token-sum", 4.25),
        ("seq-mean-token-mean", 3.0),
        ("prompt-mean", (10 / 4 + 7 / 3) / 2),  # ScaleRL: token-mean inside each group
        ("task-mean", 3.0),  # the mean of per-sequence means: seq-mean-token-mean here
        ("turn-mean", 3.0),  # one turn a sequence: seq-mean-token-mean
    ],
)
def test_normalization_modes_on_the_menu_batch(mode, value):
    L, m, g, turns = menu_batch()
    w = loss_weights(m, mode, group_ids=g, turn_ids=turns)
    assert float((w * L).sum()) == pytest.approx(value, abs=1e-12)


def verl_agg_loss(loss_mat, mask, mode):
    """verl's agg_loss (core_algos.py), one data-parallel rank, written from its definition."""

    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss_mat * mask).sum()
    if mode == "seq-mean-token-sum":
        return (loss_mat * mask).sum(-1).sum() / (mask.sum(-1) > 0).sum()
    if mode == "seq-mean-token-mean":
        seq = (loss_mat * mask).sum(-1) / (mask.sum(-1) + 1e-8)
        return seq.sum() / (mask.sum(-1) > 0).sum()
    raise ValueError(mode)


@pytest.mark.parametrize(
    "mode", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"]
)
def test_aggregation_agrees_with_verl(mode):
    g = torch.Generator().manual_seed(0)
    L = torch.randn(9, 7, generator=g, dtype=D)
    m = (torch.rand(9, 7, generator=g) < 0.7).to(D)
    m[3] = 0
    ours = (loss_weights(m, mode) * L).sum()
    assert float(ours) == pytest.approx(float(verl_agg_loss(L, m, mode)), abs=1e-6)


def test_prompt_mean_equals_skyrl_advantage_scaling():
    """SkyRL's prompt_mean scales each sample's loss by 1/(P tokens_g) and sums: a second method."""

    g = torch.Generator().manual_seed(1)
    L = torch.randn(8, 5, generator=g, dtype=D)
    m = (torch.rand(8, 5, generator=g) < 0.6).to(D)
    m[:, 0] = 1
    groups = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
    P = 3
    tok = {int(k): float(m[groups == k].sum()) for k in groups.unique()}
    scale = torch.tensor([1 / (P * tok[int(k)]) for k in groups], dtype=D)
    want = (L * m * scale[:, None]).sum()
    assert float((loss_weights(m, "prompt-mean", group_ids=groups) * L).sum()) == pytest.approx(
        float(want), abs=1e-12
    )


def test_task_mean_equals_seq_mean_token_mean_for_equal_groups_only():
    """TRL #5375: the mean over prompts of per-sequence means is seq-mean-token-mean when groups are
    equal; with unequal groups it is not; prompt-mean differs unless lengths are equal in a
    group."""

    g = torch.Generator().manual_seed(2)
    L = torch.randn(6, 4, generator=g, dtype=D)
    m = torch.ones(6, 4, dtype=D)
    m[0, 2:] = 0
    m[4, 1:] = 0
    equal = torch.tensor([0, 0, 1, 1, 2, 2])
    unequal = torch.tensor([0, 0, 0, 0, 1, 2])

    def agg(mode, ids):
        return float((loss_weights(m, mode, group_ids=ids) * L).sum())

    assert agg("task-mean", equal) == pytest.approx(agg("seq-mean-token-mean", equal), abs=1e-12)
    assert agg("task-mean", unequal) != pytest.approx(agg("seq-mean-token-mean", unequal))
    assert agg("prompt-mean", equal) != pytest.approx(agg("task-mean", equal))


def test_turn_mean_weighs_each_turn_alike():
    """Two rows: turns of 2 and 1 tokens, and one turn of 3 tokens: each turn 1/3."""

    L = t([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]])
    m = torch.ones(2, 3, dtype=D)
    turns = torch.tensor([[0, 0, 1], [0, 0, 0]])
    w = loss_weights(m, "turn-mean", turn_ids=turns)
    assert float((w * L).sum()) == pytest.approx((2.0 + 5.0 + 4.0) / 3, abs=1e-12)


def test_modes_that_need_groups_say_so():
    with pytest.raises(ValueError, match="prompt-mean.*group_ids"):
        loss_weights(torch.ones(2, 2), "prompt-mean")


def test_underscores_name_the_same_mode():
    assert (
        resolve("grpo", {"normalization": {"mode": "token_sum"}}).normalization.mode == "token-sum"
    )


# -------------------------------------------------------------------------------------- advantage


def test_batch_std_advantages_roll_trl_and_areal():
    r = t([1, 0, 0, 0, 1, 1, 1, 0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    m = torch.ones(8, 1, dtype=D)
    roll = group_mean_batch_std(r, m, g)[:2, 0]
    areal = group_mean_batch_std(r, m, g, batch_std="centered")[:2, 0]
    assert torch.allclose(roll.double(), t([1.403122, -0.467707]), atol=1e-6)
    assert torch.allclose(areal.double(), t([1.620185, -0.540062]), atol=1e-6)
    lite = get_preset("lite_ppo").blanks
    adv, _, _ = compute_advantages(lite, r, m, g)
    assert torch.allclose(adv[:2, 0].double(), t([1.403122, -0.467707]), atol=1e-6)


# ---------------------------------------------------------------------------------- regularizer


def verl_kl_penalty(logp, ref, straight_through):
    """verl's kl_penalty for 'low_var_kl' and its '+' form, written from its definition."""

    kl = (ref - logp).clamp(-20, 20)
    k3 = (torch.exp(kl) - kl - 1).clamp(-10, 10)
    if not straight_through:
        return k3
    k2 = 0.5 * (logp - ref) ** 2
    return k2 - k2.detach() + k3.detach()


@pytest.mark.parametrize("estimator, plus", [("k3", False), ("k3+", True)])
def test_straight_through_k3_against_verl(estimator, plus):
    g = torch.Generator().manual_seed(3)
    lp0 = -torch.rand(4, 6, generator=g, dtype=D) * 3
    ref = lp0 + 0.5 * torch.randn(4, 6, generator=g, dtype=D)
    ours_lp, verl_lp = lp0.clone().requires_grad_(), lp0.clone().requires_grad_()
    ours = kl_estimate(ours_lp, ref, estimator)
    verl = verl_kl_penalty(verl_lp, ref, plus)
    assert torch.allclose(ours, verl, atol=1e-6)
    (go,) = torch.autograd.grad(ours.sum(), ours_lp)
    (gv,) = torch.autograd.grad(verl.sum(), verl_lp)
    assert torch.allclose(go, gv, atol=1e-6)


def test_straight_through_k3_far_from_the_reference_keeps_k2s_gradient():
    """At d = log pi - log pi_ref = +-25 (past the +-20 clamp): the value is k3's clamped 10 (verl's
    low_var_kl clamps d to +-20, then k3 to 10), the gradient k2's d itself, +-25 per token, as
    verl's straight-through form gives (its k2 part is unclamped); plain k3's gradient there
    is 0."""

    ref = t([-30.0, -5.0, -1.0])
    lp = t([-5.0, -30.0, -1.0 + 25.0])  # d = +25, -25, +25
    ours_lp, verl_lp = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    ours = kl_estimate(ours_lp, ref, "k3+")
    verl = verl_kl_penalty(verl_lp, ref, True)
    assert ours.detach().tolist() == pytest.approx([10.0, 10.0, 10.0])
    assert torch.allclose(ours, verl)
    (go,) = torch.autograd.grad(ours.sum(), ours_lp)
    (gv,) = torch.autograd.grad(verl.sum(), verl_lp)
    assert go.tolist() == pytest.approx([25.0, -25.0, 25.0])
    assert torch.allclose(go, gv)
    plain_lp = lp.clone().requires_grad_()
    (g3,) = torch.autograd.grad(kl_estimate(plain_lp, ref, "k3").sum(), plain_lp)
    assert g3.tolist() == [0.0, 0.0, 0.0]


def test_straight_through_k3_by_hand():
    """lp = -1, ref = -1.3: value 0.040818 for both; dL/dlp 0.259182 (k3) and 0.3 (k3+)."""

    for est, grad in (("k3", 0.259182), ("k3+", 0.3)):
        lp = t([-1.0]).requires_grad_()
        v = kl_estimate(lp, t([-1.3]), est)
        (g,) = torch.autograd.grad(v.sum(), lp)
        assert float(v.detach()) == pytest.approx(0.040818, abs=1e-6)
        assert float(g) == pytest.approx(grad, abs=1e-6)


# ------------------------------------------------------------------------------------- mismatch


def test_mismatch_figures_by_hand():
    """d = log pi_old - log pi_rollout on the 5 tokens: k = [0.904837, 1.051271, 6.049647,
    0.449329, 1.491825]."""

    k = t([0.904837, 1.051271, 6.049647, 0.449329, 1.491825])
    got = mismatch_stats(t(LO), t(LR), t(M))
    assert got["mismatch.ratio_abs_dev"] == pytest.approx(float((k - 1).abs().mean()), abs=1e-6)
    assert got["mismatch.ess"] == pytest.approx(float(k.sum() ** 2 / (5 * (k**2).sum())), abs=1e-6)
    seq = t([0.904837 * 1.051271 * 6.049647, 0.449329 * 1.491825])
    assert got["mismatch.seq_ess"] == pytest.approx(
        float(seq.sum() ** 2 / (2 * (seq**2).sum())), abs=1e-5
    )
    assert got["mismatch.ratio_p50"] == pytest.approx(1.051271, abs=1e-6)
    assert got["mismatch.ratio_out_frac"] == pytest.approx(2 / 5)
    same = mismatch_stats(t(LO), t(LO), t(M))
    assert same["mismatch.kl"] == 0 and same["mismatch.ratio_abs_dev"] == 0
    assert same["mismatch.ess"] == 1.0


# -------------------------------------------------------------------------------------- explain


def test_explain_names_the_caps_and_prints_each_modes_weights(cli):
    """explain cispo names the frameworks' CISPO caps; the weights table is computed by hand on
    the example (prompts of 3+1 and 2+1 tokens)."""

    code, out, _ = cli("explain", "cispo", "dppo", "--json")
    assert code == 0
    data = json.loads(out)
    assert any("verl [0.8, 1.2]" in n and "[0, 5]" in n for n in data["value_notes"]["cispo"])
    assert any("pi_rollout" in n and "= 10" in n for n in data["value_notes"]["dppo"])
    w = data["normalization_weights"]
    assert w["prompt-mean"] == pytest.approx([1 / 8, 1 / 8, 1 / 6, 1 / 6])
    assert w["task-mean"] == pytest.approx([1 / 12, 1 / 4, 1 / 8, 1 / 4])
    assert w["token-sum"] == [1.0] * 4 and w["token-mean"] == pytest.approx([1 / 7] * 4)
    assert w["constant"] == pytest.approx([1 / 16] * 4)
    assert any("one name, two estimators" in e for e in data["normalization_equivalences"])
    code, out, _ = cli("explain", "scalerl")
    rows = [line for line in out.splitlines() if line.startswith("│ prompt-mean")]
    assert code == 0 and len(rows) == 1 and "scal" in rows[0]  # the arm's mode is marked


def test_bypass_is_may_reuse_a_batch():
    """verl's bypass_pg_is over several minibatches: the weight min(prod pi_theta/pi_rollout, C),
    recomputed in each micro-batch, corrects the reuse; without it reuse needs a ratio."""

    weight = {"tis_cap": 2.0, "tis_form": "sequence", "old_policy": "rollout"}
    assert resolve("reinforce", {"weight": weight, "data": {"minibatches": 4}})
    with pytest.raises(ValueError, match="needs an importance ratio"):
        resolve("reinforce", {"data": {"minibatches": 4}})


def test_trl_sequence_mask_weighs_kept_rows_by_their_product():
    """TRL's sequence_mask, C = 3: w = prod k where <= 3, else 0, every token in Z: [0, 0.670320];
    with TRL's PPO (no dual clip) the loss is 0.127707."""

    b = ppo(
        dual_clip_c=None,
        gate={"level": "sequence_sum", "mode": "weight", "low": 0.0, "high": 3.0},
    )
    loss, g, _ = loss_and_grad(b)
    assert loss == pytest.approx(0.127707, abs=1e-6)
    assert torch.equal(g[0], torch.zeros(3, dtype=D))  # the first sequence (prod k = 5.75) is out


@pytest.mark.parametrize("preset", ["cispo", "dppo", "icepop", "grpo"])
def test_nan_padding_never_reaches_the_loss_or_its_gradient(preset):
    """NaN in the padded positions of pi_old, pi_rollout and pi_ref (ART-style missing log-probs)
    changes nothing: the same loss and gradient as with zeros there."""

    def run(pad):
        old, beh, ref = t(LO), t(LR), t(LO)
        for x in (old, beh, ref):
            x[1, 2] = pad
        logp = t(LP).requires_grad_()
        b = resolve(preset, {"regularizer": {"loss_kl_coef": 0.1}})
        loss, _ = policy_loss(b, logp, old, t(A), t(M), t(M) / N, behavior_logp=beh, ref_logp=ref)
        (g,) = torch.autograd.grad(loss, logp)
        return float(loss.detach()), g

    (l0, g0), (l1, g1) = run(0.0), run(float("nan"))
    assert math.isfinite(l1) and l1 == l0 and torch.equal(g0, g1)
