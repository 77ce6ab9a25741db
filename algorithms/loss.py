"""The template, assembled from the blanks:

    grad J = 1/Z * sum_{i,t} m * w * A * grad log pi(x_{i,t} | h_{i,t})  -  grad R

:func:`compute_advantages` fills A (and the reward-side parts of m and R: overlong
shaping and filtering, KL in the reward); :func:`policy_loss` fills w, Z and the
loss-side R. Both take plain tensors, so they can be used without the harness::

    from sixblanks.algorithms import compute_advantages, policy_loss, loss_weights, resolve
    blanks = resolve("grpo")
    adv, mask, _ = compute_advantages(blanks, rewards, mask, group_ids)
    w = loss_weights(mask, blanks.normalization.mode)
    loss, metrics = policy_loss(blanks, logp, old_logp, adv, mask, w, ref_logp=ref_logp)
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from . import advantages as adv_mod
from .blanks import Blanks, flatten
from .data import overlong_filter_mask, overlong_penalty, potential_shaping
from .normalization import aggregate
from .offpolicy import dis, is_mask, ratio_gate, sequence_is_weight
from .registry import Registry, Variant
from .regularizers import kl_estimate
from .weights import RATIOS, TRUST_REGIONS, sequence_ratio_counts, truncated_is_weight


def _as_blanks(blanks: Blanks | str) -> Blanks:
    if isinstance(blanks, str):
        from .presets import get_preset

        return get_preset(blanks).blanks
    return blanks


def compute_advantages(
    blanks: Blanks | str,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    *,
    old_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    turn_rewards: torch.Tensor | None = None,
    turn_ids: torch.Tensor | None = None,
    baseline_rewards: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    l_max: int | None = None,
    state_keys: torch.Tensor | None = None,
    potentials: torch.Tensor | None = None,
    levels: torch.Tensor | None = None,
    step_labels: torch.Tensor | None = None,
    step_scores: torch.Tensor | None = None,
    process_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Advantages ``[B, T]`` for a preset or blanks, and the mask ``[B, T]`` after data filters.

    Args:
        rewards: ``[B]`` outcome rewards. mask: ``[B, T]`` action mask.
        group_ids: ``[B]`` prompt group of each sample (group estimators).
        old_logp, ref_logp: ``[B, T]`` log-probs under pi_old and pi_ref (KL in the reward).
        turn_rewards: ``[B, K]``, turn_ids: ``[B, T]`` (turn_return, gigpo).
        state_keys: ``[B, K]`` environment state key before each turn (gigpo's anchor states).
        potentials: ``[B, K + 1]`` Phi before each turn, 0 from the end on (potential shaping).
        levels: ``[B, K]`` each turn's level, 0 high / 1 low, -1 none (hierarchical).
        step_labels: ``[B, K]`` the environment's step labels, NaN none (hierarchical: subgoals).
        step_scores: ``[B, K]`` a process reward model's score of each step, NaN none (prm).
        process_rewards: ``[B, T]`` token process rewards, e.g. PRIME's beta log(pi_phi/pi_ref).
        baseline_rewards: ``[B]`` rewards of the greedy rollouts (remax).
        truncated: ``[B]`` bool (overlong filtering and shaping).
        l_max: generation budget in tokens (overlong shaping).

    Returns:
        ``(advantages [B, T], mask [B, T], info)``; ``info`` has the shaped rewards and the KL in
        the reward.
    """

    b = _as_blanks(blanks)
    a = b.advantage
    mask = mask.float()
    rewards = rewards.double().clone()
    info: dict[str, Any] = {}
    rewards, turn_rewards = _shaped(b, rewards, mask, turn_rewards, potentials, l_max, info)
    if b.mask.overlong_filter and truncated is not None:
        mask = overlong_filter_mask(mask, truncated)
    rewards, token_penalty = _kl_in_reward(b, rewards, mask, old_logp, ref_logp, info)
    info["shaped_rewards"] = rewards
    estimator = adv_mod.ESTIMATORS[a.estimator]
    tensors = {
        "rewards": rewards,
        "mask": mask,
        "group_ids": group_ids if group_ids is not None else torch.arange(rewards.shape[0]),
        "token_penalty": token_penalty,
        "baseline_rewards": baseline_rewards,
        "turn_rewards": turn_rewards,
        "turn_ids": turn_ids,
        "state_keys": state_keys,
        "levels": levels,
        "step_labels": step_labels,
        "step_scores": step_scores,
        "process_rewards": process_rewards,
    }
    _check_inputs(estimator, tensors)
    adv = estimator.call(tensors, flatten(b))  # exactly its declared inputs and advantage fields
    if a.estimator == "gigpo":  # how many steps found an anchor group of two or more
        _, reached, _ = adv_mod.turn_returns(turn_rewards, mask, turn_ids, a.gamma)
        _, size = adv_mod.anchor_groups(tensors["group_ids"], state_keys, reached)
        info["gigpo_anchor_frac"] = (
            float((size[reached] > 1).double().mean()) if reached.any() else 0.0
        )
    return adv.detach() * mask, mask, info


def _shaped(
    b: Blanks,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    turn_rewards: torch.Tensor | None,
    potentials: torch.Tensor | None,
    l_max: int | None,
    info: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rewards ``[B]`` (and turn rewards ``[B, K]``) after overlong shaping (a penalty by
    response length, ``mask [B, T]``) and potential-based shaping; what each added goes to
    ``info``."""

    shaping = b.data.overlong_shaping
    if shaping.enabled:
        if l_max is None:
            raise ValueError("overlong shaping needs l_max (the generation budget in tokens)")
        pen = overlong_penalty(mask.sum(1), l_max, shaping.cache, shaping.factor)
        rewards = rewards + pen
        info["overlong_penalty"] = pen
    ps = b.data.potential_shaping
    if ps.enabled:  # gamma Phi(s') - Phi(s) on each turn's reward, and their sum on R
        if potentials is None or turn_rewards is None:
            raise ValueError("potential shaping needs turn_rewards and potentials (Phi per state)")
        gamma = b.advantage.gamma if ps.gamma is None else ps.gamma
        shaped = potential_shaping(turn_rewards, potentials, gamma)
        added = (shaped - turn_rewards.double()).sum(1)
        rewards, turn_rewards = rewards + added, shaped
        info["potential_shaping"] = added
    return rewards, turn_rewards


def _kl_in_reward(
    b: Blanks,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    info: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """KL to the reference in the reward: per token ``[B, T]`` for the estimators that take it so
    (returned as the token penalty), else subtracted from the sequence reward ``[B]``. Its mean
    per sequence goes to ``info["reward_kl"]``."""

    reg = b.regularizer
    if reg.reward_kl_coef <= 0:
        return rewards, None
    if old_logp is None or ref_logp is None:
        raise ValueError("KL in the reward needs old_logp and ref_logp")
    kl_tok = kl_estimate(old_logp.detach(), ref_logp.detach(), reg.reward_kl_estimator) * mask
    info["reward_kl"] = float((kl_tok.sum(1)).mean())
    if b.advantage.estimator in adv_mod.TOKEN_LEVEL:
        return rewards, reg.reward_kl_coef * kl_tok
    return rewards - reg.reward_kl_coef * kl_tok.double().sum(1), None


def _check_inputs(estimator: Variant, tensors: dict[str, torch.Tensor | None]) -> None:
    """Raise ValueError if ``estimator`` takes a tensor that is not given and has no default."""

    absent = [name for name in estimator.inputs or () if name not in tensors]
    if absent:  # gae: token rewards and values come from the value model
        raise ValueError(
            f"the '{estimator.name}' estimator needs a value model ({', '.join(absent)}): "
            "use the critic trainer (ppo presets)"
        )
    params = inspect.signature(estimator.fn).parameters
    missing = [
        name
        for name in estimator.inputs or ()
        if tensors[name] is None and params[name].default is inspect.Parameter.empty
    ]
    if missing:
        raise ValueError(
            f"the '{estimator.name}' estimator needs "
            + "; ".join(f"{name} ({adv_mod.INPUTS[name]})" for name in missing)
        )


def behavior_weight(
    blanks: Blanks,
    old_logp: torch.Tensor,
    behavior_logp: torch.Tensor | None,
    mask: torch.Tensor,
) -> torch.Tensor | float:
    """The detached per-token weight of the off-policy corrections that weigh: truncated IS in its
    token or sequence form (``weight.tis_cap``, ``weight.tis_form``) and a gate in clamp or weight
    mode (``weight.gate``; weight: IcePop/KPop's k on the kept tokens, 0 outside). ``[B, T]``, or
    1.0 when none applies. ``old_logp`` is pi_old, or pi_theta detached in the bypass form."""

    w_spec, out = blanks.weight, 1.0
    if w_spec.tis_cap is not None and w_spec.tis_form == "token":
        out = out * truncated_is_weight(old_logp, behavior_logp, w_spec.tis_cap)
    elif w_spec.tis_cap is not None and w_spec.tis_form == "sequence":
        out = out * sequence_is_weight(old_logp, behavior_logp, mask, w_spec.tis_cap)[:, None]
    g = w_spec.gate
    if g is not None and g.mode in ("clamp", "weight"):
        gated, _ = ratio_gate(
            old_logp, behavior_logp, mask, g.low, g.high, g.level, g.metric, g.mode
        )
        out = out * gated
    return out.to(old_logp.dtype) if isinstance(out, torch.Tensor) else out


def correction_stats(
    blanks: Blanks, old_logp: torch.Tensor, behavior_logp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The share of action tokens whose truncated-IS weight hit its cap (``tis.truncated_frac``),
    for the forms that weigh (the masking forms report their drops in :func:`behavior_mask`).
    ``[B, T]`` inputs; empty without truncated IS or action tokens."""

    w = blanks.weight
    m = mask > 0
    if w.tis_cap is None or w.tis_form.endswith("_mask") or not bool(m.any()):
        return {}
    log_cap = math.log(w.tis_cap)
    d = (old_logp.detach().double() - behavior_logp.detach().double()).masked_fill(~m, 0.0)
    if w.tis_form == "token":
        hit = d > log_cap
    else:
        hit = (d.sum(1) > log_cap)[:, None].expand_as(d)
    return {"tis.truncated_frac": float((hit & m).sum() / m.sum())}


def behavior_mask(
    blanks: Blanks, old_logp: torch.Tensor, behavior_logp: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, tuple[float, int]], dict[str, float]]:
    """The off-policy corrections that mask, applied once per batch before Z is computed (so the
    tokens they drop leave the gradient and Z): truncated IS in a mask form, a gate in mask mode
    (reason ``masking``) and SAO's DIS band at the batch's start (reason ``dis``: pi_theta is pi_old
    then; the loss keeps enforcing the band as pi_theta moves). A gate in weight mode leaves the
    mask: its tokens stay in Z and are accepted (trained with weight 0); the share it weighs 0 is
    the metric ``gate.masked_frac``, not a discard.

    Args: ``[B, T]`` log-probs of pi_old (recomputed by the trainer) and of the behaviour policy,
    and the mask. Returns (the mask ``[B, T]``, {reason: (tokens dropped, rows left with none)},
    metrics).
    """

    w_spec, metrics = blanks.weight, {}
    dropped: dict[str, tuple[float, int]] = {}

    def drop(reason: str, before: torch.Tensor, after: torch.Tensor) -> None:
        tokens, rows = dropped.get(reason, (0.0, 0))
        gone = (before.sum(1) > 0) & (after.sum(1) == 0)
        dropped[reason] = (tokens + float(before.sum() - after.sum()), rows + int(gone.sum()))

    m = mask
    if w_spec.tis_cap is not None and w_spec.tis_form.endswith("_mask"):
        level = w_spec.tis_form.removesuffix("_mask")
        after = m * is_mask(old_logp, behavior_logp, m, w_spec.tis_cap, level).to(m.dtype)
        drop("masking", m, after)
        m = after
    g = w_spec.gate
    if g is not None:
        gated, info = ratio_gate(
            old_logp, behavior_logp, m, g.low, g.high, g.level, g.metric, g.mode
        )
        metrics.update({f"gate.{k}": float(v) for k, v in info.items()})
        if g.mode == "mask":
            after = gated.to(m.dtype)
            drop("masking", m, after)
            m = after

    if w_spec.trust_region == "dis":
        keep, _ = dis(old_logp, behavior_logp, m, w_spec.eps_low, w_spec.eps_high)
        after = m * keep.to(m.dtype)
        drop("dis", m, after)
        m = after
    return m, dropped, metrics


def policy_loss(
    blanks: Blanks | str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    *,
    behavior_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    turn_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of the template for ``blanks`` on (a micro-batch of) the optimizer-step batch.

    Args:
        logp: ``[B, T]`` log pi_theta (requires grad). old_logp: ``[B, T]`` log pi_old (detached).
        advantages: ``[B, T]``. mask: ``[B, T]``.
        weights: ``[B, T]`` Z weights from :func:`sixblanks.algorithms.normalization.loss_weights`,
            computed on the *whole* optimizer-step batch and sliced like the other tensors; summing
            this function's loss over micro-batches gives the full-batch loss.
        behavior_logp: ``[B, T]`` rollout-engine log-probs (truncated IS, gates, the ratio
            'behavior' and the bypass form ``weight.old_policy: rollout``, where they replace
            ``old_logp``).
        ref_logp: ``[B, T]`` reference log-probs (KL in the loss). entropy: ``[B, T]`` (entropy
            bonus).
        turn_ids: ``[B, T]`` the environment turn of each token (a per-turn sequence ratio,
            ``weight.sequence: turn``).

    Returns:
        ``(loss, metrics)``; pg_loss, kl and entropy are Z-weighted sums, so they add up over
        micro-batches; the ratio diagnostics are plain counts over action tokens (``action_tokens``,
        ``clip_count``, ``ratio_sum``) and extremes (``ratio_max``, ``ratio_min``), whatever Z is:
        ``clip_frac = clip_count / action_tokens`` and ``ratio_mean = ratio_sum / action_tokens``.
    """

    b = _as_blanks(blanks)
    w_spec = b.weight
    fields = flatten(b)
    m = mask.to(logp.dtype)
    adv = advantages.detach().to(logp.dtype)
    if behavior_logp is None and (
        w_spec.ratio == "behavior" or w_spec.tis_cap is not None or w_spec.gate is not None
    ):
        raise ValueError(
            "weight.ratio 'behavior', weight.tis_cap and weight.gate need behavior_logp "
            "(the rollout engine's log-probs)"
        )
    # padding (m = 0) may hold NaN or inf log-probs (an engine's, or ART-style NaN old log-probs):
    # zeroed before any product, since a NaN times a zero weight (or a zero gradient) is NaN
    on = mask > 0
    old_logp, behavior_logp, ref_logp = (
        None if x is None else torch.where(on, x, torch.zeros_like(x))
        for x in (old_logp, behavior_logp, ref_logp)
    )
    bypass = w_spec.old_policy == "rollout"
    if bypass and behavior_logp is None:
        raise ValueError("weight.old_policy 'rollout' needs behavior_logp (the rollout log-probs)")
    if bypass:  # pi_old := pi_rollout; the corrections read pi_theta (detached) in its place
        old_logp = behavior_logp
    inputs = {"logp": logp, "old_logp": old_logp, "adv": adv, "mask": mask}
    extra = {"behavior_logp": behavior_logp, "turn_ids": turn_ids}
    ratio, adv = RATIOS[w_spec.ratio].call({**inputs, **extra}, fields)
    anchor = behavior_logp if w_spec.ratio == "behavior" else old_logp
    tok_loss, clipped = TRUST_REGIONS[w_spec.trust_region].call(
        {"ratio": ratio, "adv": adv, "logp": logp, "anchor_logp": anchor}, fields
    )
    corr_old = logp.detach() if bypass else old_logp
    corr = behavior_weight(b, corr_old, behavior_logp, mask)
    tok_loss = tok_loss * corr
    zeroed = None
    if bypass:  # the masking corrections zero tokens in each micro-batch; Z keeps them (verl)
        kept, _, _ = behavior_mask(b, corr_old, behavior_logp, mask.to(logp.dtype))
        tok_loss = tok_loss * kept.to(logp.dtype)
        zeroed = (kept == 0) | (corr == 0) if isinstance(corr, torch.Tensor) else kept == 0
    weights = weights.to(logp.dtype)
    pg = aggregate(tok_loss * m, weights)
    total = pg
    reg = b.regularizer
    metrics: dict[str, float] = {"pg_loss": float(pg.detach())}
    with torch.no_grad():  # plain counts over action tokens, whatever Z weighs them by
        on = m > 0
        r = ratio.detach().expand_as(m)
        metrics["action_tokens"] = float(on.sum())
        metrics["clip_count"] = float((clipped.expand_as(m) * on).sum())
        metrics["ratio_sum"] = float((r * on).sum())
        if bool(on.any()):  # extremes of the tokens there are (none: nothing to widen the range)
            metrics["ratio_max"] = float(r[on].max())
            metrics["ratio_min"] = float(r[on].min())
        metrics.update(sequence_ratio_counts(logp, old_logp, mask, w_spec.eps_low, w_spec.eps_high))
        if zeroed is not None:  # the bypass form's corrections, measured where they act
            metrics["bypass_zeroed_count"] = float((zeroed & on).sum())
            capped = correction_stats(b, corr_old, behavior_logp, mask)
            if capped:
                metrics["tis_capped_count"] = capped["tis.truncated_frac"] * float(on.sum())
    if ref_logp is not None:
        kl_tok = kl_estimate(logp, ref_logp.detach(), reg.loss_kl_estimator) * m
        kl = aggregate(kl_tok, weights)
        metrics["kl"] = float(kl.detach())
        if reg.loss_kl_coef > 0:
            total = total + reg.loss_kl_coef * kl
    elif reg.loss_kl_coef > 0:
        raise ValueError("KL in the loss (regularizer.loss_kl_coef > 0) needs ref_logp")
    if entropy is not None:
        ent = aggregate(entropy * m, weights)
        metrics["entropy"] = float(ent.detach())
        if reg.entropy_coef > 0:
            total = total - reg.entropy_coef * ent
    metrics["loss"] = float(total.detach())
    return total, metrics


def sft_loss(
    logp: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """NLL of the masked tokens: -sum(w m log pi), token-mean over the batch by default.
    ``[B, T]`` inputs."""

    m = mask.to(logp.dtype)
    if weights is None:
        weights = m / m.sum().clamp(min=1.0)
    return -(logp * m * weights.to(logp.dtype)).sum()


def dpo_loss(
    chosen_logp: torch.Tensor,
    rejected_logp: torch.Tensor,
    ref_chosen_logp: torch.Tensor,
    ref_rejected_logp: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO on sequence log-prob *sums* ``[N]``: the mean over pairs of
    -(1-eps) log sigma(beta h) - eps log sigma(-beta h), where

    h = [log pi(y_w) - log pi_ref(y_w)] - [log pi(y_l) - log pi_ref(y_l)].
    """

    h = (chosen_logp - ref_chosen_logp.detach()) - (rejected_logp - ref_rejected_logp.detach())
    losses = -(1 - label_smoothing) * torch.nn.functional.logsigmoid(beta * h) - label_smoothing * (
        torch.nn.functional.logsigmoid(-beta * h)
    )
    loss = losses.mean()
    return loss, {
        "loss": float(loss.detach()),
        "dpo_margin": float(h.detach().mean()),
        "dpo_accuracy": float((h.detach() > 0).float().mean()),
    }


OBJECTIVES = Registry("objective")
"""objective -> its loss, and the spec fields that apply to it. The harness binds each loss's
arguments (``inputs`` None), so ``reads`` is empty and every field is in ``applies``."""

OBJECTIVES.add(
    Variant(
        "pg",
        policy_loss,
        inputs=None,
        applies=(
            "mask.overlong_filter",  # compute_advantages
            "weight.ratio",
            "weight.trust_region",
            "weight.gate",
            "advantage.estimator",
            "normalization.mode",
            "regularizer.reward_kl_coef",
            "regularizer.loss_kl_coef",
            "regularizer.loss_kl_estimator",  # also the logged kl metric when the coefficient is 0
            "regularizer.entropy_coef",
            "data.source",
            "data.group_size",
            "data.dynamic_sampling",
            "data.zero_variance_filter",
            "data.prompt_pool",
            "data.epochs",
            "data.minibatches",
            "data.overlong_shaping.enabled",
            "data.potential_shaping.enabled",
            "data.staleness",
            "data.lag",
            "data.broadcast_every",
            "data.replay",
            "data.concurrent",
            "data.branching",
            "data.self_play",
            "data.world_model",
        ),
    )
)
OBJECTIVES.add(
    Variant(
        "sft",
        sft_loss,
        inputs=None,
        applies=("data.source", "data.group_size", "data.epochs", "data.minibatches"),
    )
)
OBJECTIVES.add(
    Variant(
        "dpo",
        dpo_loss,
        inputs=None,
        applies=(
            "data.source",
            "data.group_size",
            "regularizer.dpo_beta",
            "regularizer.dpo_label_smoothing",
        ),
    )
)
