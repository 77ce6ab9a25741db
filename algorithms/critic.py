"""Actor-critic credit: GAE (skipping observations), V-trace targets for samples of a lagged
behaviour policy, clipped value loss, diagnostics. Pure torch.

Conventions (``[B, T]`` unless stated):

- ``values[:, t]`` is V of the state in which action token t is generated.
- ``token_rewards[:, t]`` is the reward received after token t (outcome and turn rewards sit on the
  last action token of their turn; KL-in-reward penalties on every action token).
- ``mask`` is 1 on action tokens. Observation tokens (mask 0) are skipped: values and the lambda
  chain are carried across them unchanged, so gamma counts action tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .blanks import Blanks
    from .specs import RegularizerSpec


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float | torch.Tensor = 1.0,
    bootstrap: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016) over action tokens only.

    ``lam`` is one number or one per sample (``[B]``, SAO's length-adaptive lambda).

    For an action token t whose next action token is t+:  delta_t = r_t + gamma V_{t+} - V_t,
    A_t = delta_t + gamma lam A_{t+}. After the last action token the next value is ``bootstrap``
    (``[B]``; e.g. V of the state after a time-limit truncation) or 0 (terminal).

    Returns:
        ``(advantages [B, T], returns [B, T])``, returns = advantages + values, zero off the mask.
    """

    r, v, m = token_rewards.double(), values.double(), mask > 0
    B, T = r.shape
    next_v = (
        bootstrap.double().clone() if bootstrap is not None else torch.zeros(B, dtype=torch.float64)
    )
    next_a = torch.zeros(B, dtype=torch.float64)
    if isinstance(lam, torch.Tensor):
        lam = lam.double()
    adv = torch.zeros_like(r)
    for t in range(T - 1, -1, -1):
        mt = m[:, t]
        delta = r[:, t] + gamma * next_v - v[:, t]
        a = delta + gamma * lam * next_a
        adv[:, t] = torch.where(mt, a, torch.zeros_like(a))
        next_v = torch.where(mt, v[:, t], next_v)
        next_a = torch.where(mt, a, next_a)
    ret = (adv + v) * m.double()
    return adv.to(values.dtype), ret.to(values.dtype)


def place_rewards(
    mask: torch.Tensor,
    turn_ids: torch.Tensor,
    turn_rewards: torch.Tensor,
    penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token rewards ``[B, T]``: each turn's reward on its last action token, minus ``penalty``.

    A reward that would land on an observation token is moved to the turn's last action token, so
    it is never silently lost.
    """

    B, T = mask.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    valid = (mask > 0) & (turn_ids >= 0)
    pos = torch.arange(T).expand(B, T)
    for k in range(turn_rewards.shape[1]):
        in_turn = valid & (turn_ids == k)
        has = in_turn.any(1)
        last = torch.where(in_turn, pos, torch.full_like(pos, -1)).max(1).values
        rows = torch.nonzero(has).flatten()
        out[rows, last[rows]] += turn_rewards[rows, k].double()
    if penalty is not None:
        out = out - penalty.double() * mask.double()
    return out


def whiten_population(
    adv: torch.Tensor,
    mask: torch.Tensor,
    population: str,
    group_ids: torch.Tensor | None = None,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Whiten advantages over a declared population: "batch" (all valid tokens), "group" (the valid
    tokens of each prompt group), or "none". ddof 0, (var + eps)^-1/2."""

    if population == "none":
        return adv * mask
    m = mask.double()
    a = adv.double()
    if population == "batch" or group_ids is None:
        n = m.sum().clamp(min=1)
        mu = (a * m).sum() / n
        var = (((a - mu) ** 2) * m).sum() / n
        return ((a - mu) * torch.rsqrt(var + eps) * m).to(adv.dtype)
    if population == "group":
        out = torch.zeros_like(a)
        for g in torch.unique(group_ids).tolist():
            rows = group_ids == g
            mg = m[rows]
            n = mg.sum().clamp(min=1)
            mu = (a[rows] * mg).sum() / n
            var = (((a[rows] - mu) ** 2) * mg).sum() / n
            out[rows] = (a[rows] - mu) * torch.rsqrt(var + eps) * mg
        return out.to(adv.dtype)
    raise ValueError(f"unknown whitening population '{population}' (valid: batch, group, none)")


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token value loss ``[B, T]``: 1/2 max((V - R)^2, (V_clip - R)^2), where
    V_clip = V_old + clip(V - V_old, ±clip).

    Without ``clip``: 1/2 (V - R)^2. Also returns the indicator ``[B, T]`` that the clipped term is
    active.
    """

    unclipped = (values - returns.detach()) ** 2
    if clip is None:
        return 0.5 * unclipped, torch.zeros_like(unclipped)
    v_clip = old_values.detach() + (values - old_values.detach()).clamp(-clip, clip)
    clipped = (v_clip - returns.detach()) ** 2
    return 0.5 * torch.maximum(unclipped, clipped), (clipped > unclipped).to(values.dtype)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over the valid tokens (nan when Var[R] = 0)."""

    m = mask > 0
    if m.sum() < 2:
        return float("nan")
    r, v = returns[m].double(), values[m].double()
    var_r = r.var(unbiased=False)
    if var_r == 0:
        return float("nan")
    return float(1 - (r - v).var(unbiased=False) / var_r)


def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """mean((r - 1) - log r) over valid tokens: Stable-Baselines3's low-variance estimate of
    KL(old||new)."""

    m = mask > 0
    if not m.any():
        return 0.0
    log_r = (logp.detach() - old_logp.detach())[m].double()
    return float(((torch.exp(log_r) - 1) - log_r).mean())


def target_kl_exceeded(kl: float, target_kl: float | None, factor: float = 1.5) -> bool:
    """Early stop rule: stop the update epochs once approx_kl > factor * target_kl."""

    return target_kl is not None and kl > factor * target_kl


def sao_policy_lambda(mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """SAO's per-sample lambda for the policy's GAE: 1 - 1/(alpha l), l the number of action tokens
    of the sample; a sample without any gets 0. ``[B]`` from the mask ``[B, T]``."""

    length = (mask > 0).sum(1).double()
    return torch.where(
        length > 0, 1.0 - 1.0 / (alpha * length.clamp(min=1.0)), torch.zeros_like(length)
    )


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap: torch.Tensor | None,
    log_rhos: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    rho_bar_pg: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018).

    With pi/mu = exp(log_rhos) at step s (the target policy over the behaviour policy that sampled
    the token), s+ the next action token of the row and x_{s+} its state:

        rho_s = min(rho_bar, pi/mu),  c_s = lam min(c_bar, pi/mu)
        delta_s = rho_s (r_s + gamma V(x_{s+}) - V(x_s))
        v_s = V(x_s) + delta_s + gamma c_s (v_{s+} - V(x_{s+}))
        pg_s = min(rho_bar_pg, pi/mu) (r_s + gamma v_{s+} - V(x_s))

    After a row's last action token, V(x_T) = v_T = ``bootstrap`` (``[B]``; None means 0). Each row
    is one episode: pass bootstrap 0 for a terminal end (the discount is 0 there) and V of the next
    state for a time-limit cut, as with :func:`sixblanks.algorithms.critic.gae`. The advantage uses
    v_{s+}, as in the paper and IMPALA (rlax instead mixes lam into that bootstrap:
    lam v_{s+} + (1 - lam) V(x_{s+})). On-policy (log_rhos = 0, bars >= 1), v_s are the GAE(lam)
    returns and pg_s = delta_s + gamma A_{s+} = A_s + gamma (1 - lam) A_{s+}, with delta the
    one-step TD error and A the GAE(lam) advantages (0 after the last step): A_s itself only at
    lam = 1; at lam = 0 the two-step advantage delta_s + gamma delta_{s+}.

    Args:
        rewards, values, log_rhos, mask: ``[B, T]``; log_rhos = log pi - log mu, sampled tokens.
        bootstrap: ``[B]`` or None.

    Returns:
        ``(vs [B, T], pg_advantages [B, T])``, detached, zero off the mask, in ``values.dtype``.

    Raises:
        ValueError: ``rho_bar < c_bar`` (the trace would weigh a step more than its correction).
    """

    if rho_bar < c_bar:
        raise ValueError(f"V-trace needs rho_bar >= c_bar, got rho_bar={rho_bar}, c_bar={c_bar}")
    m = mask > 0
    r = rewards.detach().double()
    v = values.detach().double()
    pi_mu = torch.exp(torch.where(m, log_rhos.detach().double(), torch.zeros_like(r)))
    rho = pi_mu.clamp(max=rho_bar)
    c = lam * pi_mu.clamp(max=c_bar)
    rho_pg = pi_mu.clamp(max=rho_bar_pg)
    if bootstrap is None:
        next_v = torch.zeros(r.shape[0], dtype=torch.float64)
    else:
        next_v = bootstrap.detach().double().clone()
    vs, pg = _vtrace_backward(r, v, m, rho, c, rho_pg, next_v, gamma)
    return vs.to(values.dtype), pg.to(values.dtype)


def _vtrace_backward(
    r: torch.Tensor,
    v: torch.Tensor,
    m: torch.Tensor,
    rho: torch.Tensor,
    c: torch.Tensor,
    rho_pg: torch.Tensor,
    next_v: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace's recursion from each row's last action token back to its first, in float64:
    (v_s, pg_s) ``[B, T]``, zero off the bool mask ``m``. ``r``, ``v`` and the truncated traces
    ``rho``, ``c``, ``rho_pg`` are ``[B, T]``; ``next_v`` ``[B]`` is the bootstrap V(x_T)."""

    B, T = r.shape
    next_vs = next_v.clone()  # v_T = V(x_T)
    vs = torch.zeros_like(r)
    pg = torch.zeros_like(r)
    zero = torch.zeros(B, dtype=torch.float64)
    for t in range(T - 1, -1, -1):
        mt = m[:, t]
        delta = rho[:, t] * (r[:, t] + gamma * next_v - v[:, t])
        vs_t = v[:, t] + delta + gamma * c[:, t] * (next_vs - next_v)
        pg_t = rho_pg[:, t] * (r[:, t] + gamma * next_vs - v[:, t])
        vs[:, t] = torch.where(mt, vs_t, zero)
        pg[:, t] = torch.where(mt, pg_t, zero)
        next_v = torch.where(mt, v[:, t], next_v)
        next_vs = torch.where(mt, vs_t, next_vs)
    return vs, pg


def ppo_checklist(blanks: Blanks) -> list[tuple[str, str]]:
    """A critic arm's answer to each choice that PPO implementations make differently and that
    changes results (value granularity, truncation bootstrap, advantage normalization, value
    clipping, epochs, clip symmetry, KL placement, loss denominator, GAE); empty with no critic."""

    a = blanks.advantage
    if a.estimator != "gae":
        return []
    c, n, d = a.critic, blanks.normalization, blanks.data
    kl = _kl_placement(blanks.regularizer)
    return [
        ("value granularity", _value_granularity(blanks)),
        (
            "truncation bootstrap",
            "V(next state) where a limit cut the episode; 0 at terminal states"
            if c.bootstrap_truncated
            else "none: 0 after the last token",
        ),
        ("advantage normalization population", c.whiten),
        (
            "value clipping and its reference",
            f"±{c.value_clip:g} around V_old (the rollout-time value)" if c.value_clip else "off",
        ),
        ("epochs / minibatches", f"{d.epochs} / {d.minibatches}"),
        ("clip symmetry and target-KL", _clip_form(blanks)),
        ("KL placement", "; ".join(kl) if kl else "none"),
        (
            "global loss denominator",
            f"{n.mode} over the whole optimizer-step batch (all micro-batches)",
        ),
        (
            "GAE",
            f"gamma {a.gamma:g}, lambda {a.lam:g}, skip-observation (gamma counts action tokens)",
        ),
    ]


def _kl_placement(r: RegularizerSpec) -> list[str]:
    """Where the KL to the reference enters: the reward, the loss, both or neither."""

    kl = []
    if r.reward_kl_coef > 0:
        kl.append(
            f"in the reward ({r.reward_kl_estimator}, beta {r.reward_kl_coef:g}, from pi_old)"
        )
    if r.loss_kl_coef > 0:
        kl.append(f"in the loss ({r.loss_kl_estimator}, beta {r.loss_kl_coef:g}, on pi_theta)")
    return kl


def _value_granularity(blanks: Blanks) -> str:
    """Where values are predicted, by which trunk, and SAO's per-sample policy lambda if set."""

    a = blanks.advantage
    c = a.critic
    trunk = {
        "separate": "separate critic",
        "shared": "shared trunk",
        "frozen_attention": "separate critic, attention frozen, MLPs trained",
    }[c.trunk]
    lam = (
        f"; the policy's lambda per sample, 1 - 1/({c.policy_lambda_alpha:g} l), l its length; "
        f"the critic's {a.lam:g}"
        if c.policy_lambda_alpha is not None
        else ""
    )
    return f"{c.granularity} ({trunk}){lam}"


def _clip_form(blanks: Blanks) -> str:
    """The trust region's bounds, their symmetry, the dual clip and the target-KL stop."""

    w = blanks.weight
    if w.trust_region == "dis":  # SAO's band masks both tails, for either sign of A
        band = "symmetric" if w.eps_low == w.eps_high else "asymmetric"
        clip = f"DIS band ({band}, strict, both tails masked)"
    else:
        clip = "symmetric" if w.eps_low == w.eps_high else "asymmetric (clip-higher)"
    return (
        f"{clip}: [1-{w.eps_low:g}, 1+{w.eps_high:g}]"
        + (f", dual clip c={w.dual_clip_c:g}" if w.dual_clip_c else "")
        + (
            f"; early stop at approx_kl > 1.5 x {w.target_kl:g}"
            if w.target_kl
            else "; no target-KL stop"
        )
    )
