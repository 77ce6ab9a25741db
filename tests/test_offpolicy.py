"""Off-policy corrections: V-trace, sequence IS weights and masks, ratio gates, DIS, staleness, lag.

Values are worked by hand (arithmetic in comments) or checked against a second method, in float64.
"""

import math

import pytest
import torch

from sixblanks.algorithms.critic import gae
from sixblanks.algorithms.offpolicy import (
    dis,
    is_mask,
    lag_stats,
    quantiles,
    ratio_gate,
    sequence_is_weight,
    staleness_capacity,
    vtrace,
    within_staleness,
)
from sixblanks.algorithms.weights import mismatch_stats

D = torch.float64
L2 = math.log(2.0)
K3_UP = 2.0 - 1.0 - L2  # k3 at d = +log 2: e^d - 1 - d = 0.306853
K3_DOWN = 0.5 - 1.0 + L2  # k3 at d = -log 2: 0.193147


def t(x):
    return torch.tensor(x, dtype=D)


def lg(x):
    return t(x).log()


# ---------------------------------------------------------------- V-trace


def test_vtrace_three_steps_by_hand():
    # gamma 0.9, lam 1, bars 1; pi/mu = [0.5, 2, 0.8] -> rho = c = [0.5, 1, 0.8]; terminal
    # (bootstrap 0)
    vs, pg = vtrace(
        t([[0.0, 0.0, 1.0]]),
        t([[0.5, 0.6, 0.7]]),
        t([0.0]),
        lg([[0.5, 2.0, 0.8]]),
        t([[1, 1, 1]]),
        gamma=0.9,
    )
    # s=2: delta = 0.8 (1 + 0.9*0 - 0.7) = 0.24;  v2 = 0.7 + 0.24 + 0.9*0.8*(0 - 0) = 0.94
    #      pg2 = min(1, 0.8) (1 + 0.9*0 - 0.7) = 0.24
    # s=1: delta = 1 (0 + 0.9*0.7 - 0.6) = 0.03;  v1 = 0.6 + 0.03 + 0.9*1*(0.94 - 0.7) = 0.846
    #      pg1 = 1 (0 + 0.9*0.94 - 0.6) = 0.246
    # s=0: delta = 0.5 (0 + 0.9*0.6 - 0.5) = 0.02;  v0 = 0.5 + 0.02 + 0.9*0.5*(0.846 - 0.6) = 0.6307
    #      pg0 = 0.5 (0 + 0.9*0.846 - 0.5) = 0.1307
    assert torch.allclose(vs, t([[0.6307, 0.846, 0.94]]))
    assert torch.allclose(pg, t([[0.1307, 0.246, 0.24]]))


def test_vtrace_skips_observations_and_bootstraps_by_hand():
    # action | observation | action; the observation's reward, value and log-rho are ignored
    # (NaN here)
    nan = float("nan")
    vs, pg = vtrace(
        t([[0.1, nan, 1.0]]),
        t([[0.5, nan, 0.7]]),
        t([0.3]),  # a time-limit cut: V(x_T) = v_T = 0.3
        t([[0.0, nan, math.log(0.5)]]),
        t([[1, 0, 1]]),
        gamma=0.9,
    )
    # s=2 (rho = c = 0.5): delta = 0.5 (1 + 0.9*0.3 - 0.7) = 0.285;
    #      v2 = 0.7 + 0.285 + 0.9*0.5*(0.3 - 0.3) = 0.985;  pg2 = 0.5 (1 + 0.9*0.3 - 0.7) = 0.285
    # s=0 (next action token is 2, rho = c = 1): delta = 0.1 + 0.9*0.7 - 0.5 = 0.23
    #      v0 = 0.5 + 0.23 + 0.9*(0.985 - 0.7) = 0.9865;  pg0 = 0.1 + 0.9*0.985 - 0.5 = 0.4865
    assert torch.allclose(vs, t([[0.9865, 0.0, 0.985]]))
    assert torch.allclose(pg, t([[0.4865, 0.0, 0.285]]))


def test_vtrace_truncated_rhos_by_hand():
    # pi/mu = [4, 3], rho_bar 2, c_bar 1, rho_bar_pg 1.5
    #   -> rho = [2, 2], c = [1, 1], rho_pg = [1.5, 1.5]
    args = (t([[0.0, 1.0]]), t([[0.2, 0.4]]), t([0.0]), lg([[4.0, 3.0]]), t([[1, 1]]))
    vs, pg = vtrace(*args, rho_bar=2.0, c_bar=1.0, rho_bar_pg=1.5)
    # s=1: delta = 2 (1 - 0.4) = 1.2; v1 = 0.4 + 1.2 = 1.6; pg1 = 1.5 (1 - 0.4) = 0.9
    # s=0: delta = 2 (0 + 0.4 - 0.2) = 0.4; v0 = 0.2 + 0.4 + 1*(1.6 - 0.4) = 1.8;
    #      pg0 = 1.5 (1.6 - 0.2) = 2.1
    assert torch.allclose(vs, t([[1.8, 1.6]])) and torch.allclose(pg, t([[2.1, 0.9]]))
    # without truncation (rho = c = rho_pg = pi/mu): v1 = 0.4 + 3*0.6 = 2.2, pg1 = 3*0.6 = 1.8
    inf = math.inf
    vs_u, pg_u = vtrace(*args, rho_bar=inf, c_bar=inf, rho_bar_pg=inf)
    assert math.isclose(float(vs_u[0, 1]), 2.2) and math.isclose(float(pg_u[0, 1]), 1.8)


def test_vtrace_rejects_rho_bar_below_c_bar():
    x = t([[0.0]])
    with pytest.raises(ValueError, match="rho_bar >= c_bar"):
        vtrace(x, x, t([0.0]), x, t([[1]]), rho_bar=0.9, c_bar=1.0)


def random_batch(g, B=7, T=10):
    """Random inputs; masks with gaps and different row lengths, one empty row, NaN off the mask."""

    mask = (torch.rand(B, T, generator=g) < 0.7).double()
    mask[0] = 0.0  # no action token
    mask[1, 4:] = 0.0  # short row
    mask[2] = 1.0  # full row
    r = torch.randn(B, T, generator=g, dtype=D)
    v = torch.randn(B, T, generator=g, dtype=D)
    lr = 1.5 * torch.randn(B, T, generator=g, dtype=D)
    off = mask == 0
    v[off] = float("nan")
    lr[off] = float("nan")
    return r, v, torch.randn(B, generator=g, dtype=D), lr, mask


def loop_vtrace(r, v, boot, lr, mask, gamma, lam, rho_bar, c_bar, rho_bar_pg):
    """A plain per-row loop over the action tokens (the second method)."""

    vs = torch.zeros_like(r)
    pg = torch.zeros_like(r)
    for b in range(r.shape[0]):
        steps = [i for i in range(r.shape[1]) if mask[b, i] > 0]
        nv = nvs = float(boot[b])  # V(x_{s+1}) and v_{s+1} after the last step
        for i in reversed(steps):
            w = math.exp(float(lr[b, i]))
            rho, c, rho_pg = min(rho_bar, w), lam * min(c_bar, w), min(rho_bar_pg, w)
            ri, vi = float(r[b, i]), float(v[b, i])
            x = vi + rho * (ri + gamma * nv - vi) + gamma * c * (nvs - nv)
            pg[b, i] = rho_pg * (ri + gamma * nvs - vi)
            vs[b, i] = x
            nv, nvs = vi, x
    return vs, pg


@pytest.mark.parametrize(
    "gamma, lam, rho_bar, c_bar, rho_bar_pg",
    [(1.0, 1.0, 1.0, 1.0, 1.0), (0.95, 0.9, 1.3, 0.9, 1.1), (0.8, 0.0, 2.0, 2.0, 0.5)],
)
def test_vtrace_matches_a_per_row_loop(gamma, lam, rho_bar, c_bar, rho_bar_pg):
    g = torch.Generator().manual_seed(17)
    for _ in range(5):
        r, v, boot, lr, mask = random_batch(g)
        vs, pg = vtrace(r, v, boot, lr, mask, gamma, lam, rho_bar, c_bar, rho_bar_pg)
        vs2, pg2 = loop_vtrace(r, v, boot, lr, mask, gamma, lam, rho_bar, c_bar, rho_bar_pg)
        assert torch.allclose(vs, vs2) and torch.allclose(pg, pg2)
        assert not vs[0].any() and not pg[0].any()  # the empty row


def next_on_mask(x, mask, after_last):
    """x at the next action token of each action token (``after_last`` after a row's last one)."""

    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        nxt = float(after_last[b])
        for i in reversed(range(x.shape[1])):
            if mask[b, i] > 0:
                out[b, i] = nxt
                nxt = float(x[b, i])
    return out


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.9, 0.8), (0.97, 0.0)])
def test_vtrace_on_policy_is_gae(gamma, lam):
    """On-policy (log-rho 0, bars 1): rho = 1, c = lam, so v_s - V_s follows GAE's recursion and
    v_s are the GAE(lam) returns. Then pg_s = r_s + gamma v_{s+} - V_s
    = [r_s + gamma V_{s+} - V_s] + gamma (v_{s+} - V_{s+}) = TD error + gamma A_{s+}
    = A_s + gamma (1 - lam) A_{s+}: the GAE advantage at lam = 1; at lam = 0 (A = TD errors) the
    two-step advantage delta_s + gamma delta_{s+}, not the one-step TD error."""

    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        r, v, boot, _, mask = random_batch(g)
        v = torch.nan_to_num(v)
        vs, pg = vtrace(r, v, boot, torch.zeros_like(r), mask, gamma, lam)
        adv, ret = gae(r, v, mask, gamma, lam, bootstrap=boot)
        assert torch.allclose(vs, ret)
        td = (r + gamma * next_on_mask(v, mask, boot) - v) * mask
        adv_next = next_on_mask(adv, mask, torch.zeros_like(boot))
        assert torch.allclose(pg, (td + gamma * adv_next) * mask)
        assert torch.allclose(pg, (adv + gamma * (1 - lam) * adv_next) * mask)
        if lam == 1.0:
            assert torch.allclose(pg, adv)
        if lam == 0.0:
            td_next = next_on_mask(td, mask, torch.zeros_like(boot))
            assert torch.allclose(pg, (td + gamma * td_next) * mask)
            assert not torch.allclose(pg, td)


def test_vtrace_is_detached_and_keeps_the_dtype():
    g = torch.Generator().manual_seed(0)
    r, v, boot, lr, mask = (x.float() for x in random_batch(g))
    v = torch.nan_to_num(v).requires_grad_()
    lr = torch.nan_to_num(lr).requires_grad_()
    vs, pg = vtrace(r, v, boot, lr, mask)
    assert not vs.requires_grad and not pg.requires_grad
    assert vs.dtype == pg.dtype == torch.float32


# ---------------------------------------------------------------- sequence IS weight and IS masks


def test_sequence_is_weight_by_hand():
    old = t([[0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [9.0, 9.0, 9.0]])
    behav = torch.zeros_like(old)
    mask = t([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    # sums: 0.1 + 0.2 = 0.3 (the 0.3 is off the mask), 1.5, 0 (empty row)
    # summed: min(e^0.3, 2) = 1.349859, min(e^1.5 = 4.4817, 2) = 2, min(e^0, 2) = 1
    w = sequence_is_weight(old, behav, mask, cap=2.0)
    assert torch.allclose(w, t([math.exp(0.3), 2.0, 1.0]))
    # per-token geometric mean: e^(0.3/2) = 1.161834, e^(1.5/3) = 1.648721 (under the cap now), 1
    w = sequence_is_weight(old, behav, mask, cap=2.0, normalize=True)
    assert torch.allclose(w, t([math.exp(0.15), math.exp(0.5), 1.0]))
    assert not sequence_is_weight(old.requires_grad_(), behav, mask, 2.0).requires_grad


def test_is_mask_token_and_sequence_by_hand():
    # ratios pi_old/pi_behav: row 0 [3, 2, 1.5], row 1 [3, 1, (9 off the mask)]; cap 2
    old = lg([[3.0, 2.0, 1.5], [3.0, 1.0, 9.0]])
    behav = torch.zeros_like(old)
    mask = t([[1, 1, 1], [1, 1, 0]])
    # token: drop 3 > 2; keep 2 (equal to the cap), 1.5, 1
    assert torch.equal(is_mask(old, behav, mask, 2.0), t([[0, 1, 1], [0, 1, 0]]))
    # sequence, summed: row 0 ratio 3*2*1.5 = 9 > 2, row 1 3*1 = 3 > 2: both dropped
    assert torch.equal(is_mask(old, behav, mask, 2.0, level="sequence"), torch.zeros_like(mask))
    # sequence, geometric mean: row 0 9^(1/3) = 2.08 > 2 dropped; row 1 3^(1/2) = 1.73 kept
    m = is_mask(old, behav, mask, 2.0, level="sequence", normalize=True)
    assert torch.equal(m, t([[0, 0, 0], [1, 1, 0]]))
    with pytest.raises(ValueError):
        is_mask(old, behav, mask, 2.0, level="turn")


# ---------------------------------------------------------------- ratio gates


def gate_inputs():
    # ratios pi_train/pi_roll [0.4, 0.5, 1, 2, 2.5, (10 off the mask)]
    train = lg([[0.4, 0.5, 1.0, 2.0, 2.5, 10.0]])
    return train, torch.zeros_like(train), t([[1, 1, 1, 1, 1, 0]])


def test_token_gate_mask_by_hand():
    train, roll, mask = gate_inputs()
    out, info = ratio_gate(train, roll, mask, 0.5, 2.0)
    # [0.5, 2] is closed: drop 0.4 and 2.5, keep the bounds; 2 of 5 action tokens masked
    assert torch.equal(out, t([[0, 1, 1, 1, 0, 0]]))
    assert info["masked_frac"] == pytest.approx(2 / 5) and info["clamped_frac"] == 0.0


def test_token_gate_clamp_by_hand():
    train, roll, mask = gate_inputs()
    before = mask.clone()
    w, info = ratio_gate(train, roll, mask, 0.5, 2.0, mode="clamp")
    # the ratio clamped into [0.5, 2]; 0 off the mask; the mask itself unchanged
    assert torch.allclose(w, t([[0.5, 0.5, 1.0, 2.0, 2.0, 0.0]]))
    assert torch.equal(mask, before)
    assert info["clamped_frac"] == pytest.approx(2 / 5) and info["masked_frac"] == 0.0
    assert not ratio_gate(train.requires_grad_(), roll, mask, 0.5, 2.0, mode="clamp")[
        0
    ].requires_grad


def test_sequence_gate_by_hand():
    train = lg([[4.0, 4.0, 1.0], [1.5, 0.8, 50.0], [0.1, 1.0, 1.0]])
    roll = torch.zeros_like(train)
    mask = t([[1, 1, 0], [1, 1, 0], [1, 1, 0]])
    # sequence ratios (geometric means): row 0 4; row 1 (1.5*0.8)^(1/2) = 1.2^(1/2) = 1.095445
    # (the 50 is off the mask); row 2 0.1^(1/2) = 0.316228. Band [0.5, 2]: keep row 1 only.
    out, info = ratio_gate(train, roll, mask, 0.5, 2.0, level="sequence")
    assert torch.equal(out, t([[0, 0, 0], [1, 1, 0], [0, 0, 0]]))
    assert info["masked_frac"] == pytest.approx(4 / 6)
    assert info["seq_log_ratio_p50"] == pytest.approx(0.5 * math.log(1.2))
    # clamp: every token of a row carries its clamped sequence ratio: 2, 1.095445, 0.5
    w, info = ratio_gate(train, roll, mask, 0.5, 2.0, level="sequence", mode="clamp")
    assert torch.allclose(w, t([[2.0, 2.0, 0], [1.2**0.5, 1.2**0.5, 0], [0.5, 0.5, 0]]))
    assert info["clamped_frac"] == pytest.approx(4 / 6)


def test_kl_gate_by_hand():
    # d = log pi_train - log pi_roll; k3 = e^d - 1 - d: 0 at d = 0, 0.306853 at log 2, 0.193147
    # at -log 2
    train = t([[L2, -L2], [0.0, L2]])
    roll = torch.zeros_like(train)
    mask = t([[1, 1], [1, 1]])
    # token, high 0.25: drop only the log 2 tokens (0.3069 > 0.25)
    out, info = ratio_gate(train, roll, mask, 0.0, 0.25, metric="kl")
    assert torch.equal(out, t([[0, 1], [1, 0]]))
    assert info["kl_max"] == pytest.approx(K3_UP) and info["masked_frac"] == pytest.approx(0.5)
    # sequence, high 0.2: row 0 mean (0.306853 + 0.193147)/2 = 0.25 > 0.2 dropped; row 1 mean
    # 0.306853/2 = 0.153426 kept, although its second token alone exceeds 0.2
    out, info = ratio_gate(train, roll, mask, 0.0, 0.2, level="sequence", metric="kl")
    assert torch.equal(out, t([[0, 0], [1, 1]]))
    assert info["kl_mean"] == pytest.approx((0.25 + K3_UP / 2) / 2)
    with pytest.raises(ValueError, match="metric='ratio'"):
        ratio_gate(train, roll, mask, 0.0, 0.2, metric="kl", mode="clamp")
    with pytest.raises(ValueError):
        ratio_gate(train, roll, mask, 0.5, 2.0, level="turn")


def test_gate_percentiles_are_before_truncation():
    g = torch.Generator().manual_seed(5)
    train = 2.0 * torch.randn(4, 50, generator=g, dtype=D)
    roll = torch.zeros_like(train)
    mask = (torch.rand(4, 50, generator=g) < 0.8).double()
    d = train[mask > 0]  # the second method: torch.quantile on the raw log-ratios
    expect = torch.quantile(d, t([0.01, 0.5, 0.99]))
    for mode in ("mask", "clamp"):
        _, info = ratio_gate(train, roll, mask, 0.5, 2.0, mode=mode)
        got = [info["log_ratio_p1"], info["log_ratio_p50"], info["log_ratio_p99"]]
        assert torch.allclose(t(got), expect)
        assert info["log_ratio_p99"] > math.log(2.0)  # reported past the truncation
    assert quantiles(t([]), (0.5,))[0] != quantiles(t([]), (0.5,))[0]  # NaN when empty


# ---------------------------------------------------------------- DIS (SAO)


def test_dis_band_is_strict_by_hand():
    # eps 0.3 / 0.5: band (0.7, 1.5), open. rho = [0.7, 0.71, 1, 1.5, 1.49, 3, (1.2 off the mask)]
    logp = lg([[0.7, 0.71, 1.0, 1.5, 1.49, 3.0, 1.2]])
    roll = torch.zeros_like(logp)
    keep, rho = dis(logp, roll, t([[1, 1, 1, 1, 1, 1, 0]]), 0.3, 0.5)
    assert torch.equal(keep, t([[0, 1, 1, 0, 1, 0, 0]]))  # both bounds excluded
    assert torch.allclose(rho[0, :6], t([0.7, 0.71, 1.0, 1.5, 1.49, 3.0]))


def _dis_loss(logp, roll, adv, mask, eps_low, eps_high):
    """The harness's DIS (weight.ratio behavior, trust_region dis) through policy_loss, summed
    over the tokens (Z = 1 per token), and its per-token loss."""

    from sixblanks.algorithms import policy_loss
    from sixblanks.algorithms.presets import resolve

    b = resolve(
        "grpo",
        {
            "weight": {
                "ratio": "behavior",
                "trust_region": "dis",
                "eps_low": eps_low,
                "eps_high": eps_high,
            },
            "regularizer": {"loss_kl_coef": 0.0},
        },
    )
    loss, _ = policy_loss(b, logp, torch.zeros_like(logp), adv, mask, mask, behavior_logp=roll)
    return loss


def test_dis_loss_value_and_both_tails_for_either_sign():
    # rho = 1.2 inside (0.7, 1.5), A = 2: l = -1[band] rho A = -2.4, gradient -rho A = -2.4
    logp = lg([[1.2, 3.0, 0.5, 3.0, 0.5]]).requires_grad_()
    adv = t([[2.0, -1.0, -1.0, 1.0, 1.0]])
    loss = _dis_loss(logp, torch.zeros_like(logp), adv, t([[1, 1, 1, 1, 1]]), 0.3, 0.5)
    assert math.isclose(float(loss.detach()), -2.4)
    loss.backward()
    # tokens above (3) and below (0.5) the band get no gradient for A < 0 and for A > 0 (PPO's clip
    # would pass A < 0 above the band and A > 0 below it)
    assert torch.equal(logp.grad[0, 1:], torch.zeros(4, dtype=D))
    assert math.isclose(float(logp.grad[0, 0]), -1.2 * 2.0)


def test_dis_gradient_is_band_rho_adv():
    g = torch.Generator().manual_seed(11)
    B, T = 5, 12
    logp = (0.6 * torch.randn(B, T, generator=g, dtype=D)).requires_grad_()
    roll = 0.3 * torch.randn(B, T, generator=g, dtype=D)
    adv = torch.randn(B, T, generator=g, dtype=D)
    mask = (torch.rand(B, T, generator=g) < 0.8).double()
    roll = torch.where(mask > 0, roll, float("nan"))  # padding may be garbage
    adv = torch.where(mask > 0, adv, 0.0)
    loss = _dis_loss(logp, roll, adv, mask, 0.2, 0.28)
    loss.backward()
    with torch.no_grad():  # the hand formula, in ratio space: 1[band] rho A (ascent direction)
        rho = torch.exp(logp - torch.where(mask > 0, roll, 0.0))
        band = (rho > 0.8) & (rho < 1.28) & (mask > 0)
        expect = torch.where(band, rho * adv, torch.zeros_like(rho))
    assert 0 < int(band.sum()) < int((mask > 0).sum())  # both kinds present
    assert torch.allclose(-logp.grad, expect)
    assert torch.isfinite(loss)


# ---------------------------------------------------------------- staleness and lag


def test_within_staleness_by_hand():
    behind = torch.tensor([0, 1, 2, 3])
    assert within_staleness(behind, 2).tolist() == [True, True, True, False]
    assert within_staleness(behind, 0).tolist() == [True, False, False, False]  # synchronous
    with pytest.raises(ValueError):
        within_staleness(torch.tensor([-1]), 2)
    with pytest.raises(ValueError):
        within_staleness(behind, -1)


def test_staleness_capacity_by_hand_and_its_fifo_guarantee():
    # (eta + i + 1) B - (accepted + running) = (2 + 3 + 1)*4 - (20 + 3) = 24 - 23 = 1
    assert staleness_capacity(2, 3, 4, 20, 3) == 1
    # eta 0, version 0: one batch; full once B are running
    assert staleness_capacity(0, 0, 4, 0, 0) == 4 and staleness_capacity(0, 0, 4, 0, 4) == 0
    g = torch.Generator().manual_seed(7)
    for _ in range(100):  # a producer it gates, finishing in launch order: nothing ever stale
        eta, B = (
            int(torch.randint(0, 4, (1,), generator=g)),
            int(torch.randint(1, 5, (1,), generator=g)),
        )
        version, accepted, running, behind = 0, 0, [], []
        for _tick in range(40):
            running += [version] * max(
                0, staleness_capacity(eta, version, B, accepted, len(running))
            )
            k = int(torch.randint(0, len(running) + 1, (1,), generator=g))  # finished, in order
            if len(running) >= B and k >= B:
                behind += [version - v for v in running[:B]]
                running, accepted, version = running[B:], accepted + B, version + 1
        assert behind and max(behind) <= eta


def test_staleness_properties_random():
    """200 random cases: within_staleness admits exactly the ages within the bound, and a consumer
    guarded by it (samples finishing out of order, several versions behind) never trains on a
    stale one and drops exactly the others."""

    g = torch.Generator().manual_seed(2026)

    def ri(lo, hi):  # an int in [lo, hi]
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    for _ in range(200):
        eta, B = ri(0, 4), ri(1, 4)
        behind = torch.randint(0, 9, (ri(0, 12),), generator=g)
        keep = within_staleness(behind, eta)
        assert bool((behind[keep] <= eta).all()) and bool((behind[~keep] > eta).all())

        version, consumed, dropped, made = 0, [], 0, 0
        buffer = []  # generation versions of finished samples
        for _tick in range(60):
            # a producer with no admission rule: each tick finishes up to 3 samples made by a
            # version up to 5 behind the trainer
            for _ in range(ri(0, 3)):
                buffer.append(max(0, version - ri(0, 5)))
                made += 1
            ok = within_staleness(version - torch.tensor(buffer, dtype=torch.long), eta)
            dropped += int((~ok).sum())
            buffer = [v for v, k in zip(buffer, ok.tolist()) if k]
            if len(buffer) >= B:
                consumed += [version - v for v in buffer[:B]]
                buffer = buffer[B:]
                version += 1
        assert not consumed or max(consumed) <= eta
        assert len(consumed) + dropped + len(buffer) == made  # every sample counted once


def test_lag_stats_by_hand():
    # behaviour log-probs 0, current d: row 0 [log 2, 0] -> k3 [0.306853, 0], mean 0.153426
    # row 1 [-log 2, (NaN off the mask)] -> 0.193147;
    # row 2 [log 2, -log 2] -> (0.306853 + 0.193147)/2 = 0.25;
    # row 3 has no action token (kl 0, left out of the KL summaries)
    cur = t([[L2, 0.0], [-L2, float("nan")], [L2, -L2], [1.0, 1.0]])
    mask = t([[1, 1], [1, 0], [1, 1], [0, 0]])
    out = lag_stats(torch.zeros_like(cur), cur, mask, torch.tensor([0, 2, 4, 2]))
    kls = [K3_UP / 2, K3_DOWN, 0.25]
    assert torch.allclose(out["kl"], t(kls + [0.0]))
    assert out["versions_behind_mean"] == 2.0 and out["versions_behind_max"] == 4.0
    assert out["kl_mean"] == pytest.approx(sum(kls) / 3)
    # sorted 0.153426, 0.193147, 0.25: p50 the middle one; p90 at position 0.9*2 = 1.8
    assert out["kl_p50"] == pytest.approx(K3_DOWN)
    assert out["kl_p90"] == pytest.approx(K3_DOWN + 0.8 * (0.25 - K3_DOWN))
    assert out["kl_max"] == pytest.approx(0.25)
    # second method: weights.mismatch_stats' k3 (KL(pi_roll || pi_train), tokens from pi_roll) on
    # row 2
    ms = mismatch_stats(cur[2:3], torch.zeros(1, 2, dtype=D), mask[2:3])
    assert out["kl"][2] == pytest.approx(ms["mismatch.kl"])
