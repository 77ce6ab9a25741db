"""The advantage blank filled for a batch, with the reward-side parts of m and R: reward shaping
(overlong, potential-based), overlong filtering and KL in the reward, then the estimator the blanks
name, given exactly the tensors and fields it declares. Pure torch, no I/O."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from . import advantages as adv_mod
from .blanks import Blanks, flatten
from .data import overlong_filter_mask, overlong_penalty, potential_shaping
from .registry import Variant
from .regularizers import kl_estimate


def as_blanks(blanks: Blanks | str) -> Blanks:
    """``blanks`` itself, or the blanks of the preset it names."""

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
    """Advantages ``[B, T]`` for a preset or blanks, the mask ``[B, T]`` after data filters, and
    ``info`` (the shaped rewards, the KL in the reward): ``(advantages, mask, info)``.

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
        truncated: ``[B]`` bool; l_max: the generation budget in tokens (overlong shaping).
    """

    b = as_blanks(blanks)
    info: dict[str, Any] = {}
    rewards, mask, turn_rewards, token_penalty = _rewards_and_mask(
        b, rewards, mask, turn_rewards, potentials, truncated, l_max, old_logp, ref_logp, info
    )
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
    adv = _estimate(b, tensors, info)
    return adv.detach() * mask, mask, info


def _rewards_and_mask(
    b: Blanks,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    turn_rewards: torch.Tensor | None,
    potentials: torch.Tensor | None,
    truncated: torch.Tensor | None,
    l_max: int | None,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    info: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The reward-side blanks before the estimator: shaping, overlong filtering and KL in the
    reward. Returns (rewards ``[B]`` float64, mask ``[B, T]``, turn rewards ``[B, K]``, the token
    KL penalty ``[B, T]`` or None); the shaped rewards go to ``info``."""

    mask = mask.float()
    rewards = rewards.double().clone()
    rewards, turn_rewards = _shaped(b, rewards, mask, turn_rewards, potentials, l_max, info)
    if b.mask.overlong_filter and truncated is not None:
        mask = overlong_filter_mask(mask, truncated)
    rewards, token_penalty = _kl_in_reward(b, rewards, mask, old_logp, ref_logp, info)
    info["shaped_rewards"] = rewards
    return rewards, mask, turn_rewards, token_penalty


def _estimate(b: Blanks, tensors: dict[str, Any], info: dict[str, Any]) -> torch.Tensor:
    """The advantage estimator's output ``[B, T]``, given exactly its declared inputs and advantage
    fields; GiGPO's anchor-group coverage goes to ``info``."""

    a = b.advantage
    estimator = adv_mod.ESTIMATORS[a.estimator]
    _check_inputs(estimator, tensors)
    adv = estimator.call(tensors, flatten(b))
    if a.estimator == "gigpo":
        info["gigpo_anchor_frac"] = _anchor_frac(tensors, a.gamma)
    return adv


def _anchor_frac(tensors: dict[str, Any], gamma: float) -> float:
    """The share of the steps reached that found an anchor group of two or more (GiGPO)."""

    turn_rewards, mask, turn_ids = tensors["turn_rewards"], tensors["mask"], tensors["turn_ids"]
    _, reached, _ = adv_mod.turn_returns(turn_rewards, mask, turn_ids, gamma)
    _, size = adv_mod.anchor_groups(tensors["group_ids"], tensors["state_keys"], reached)
    return float((size[reached] > 1).double().mean()) if reached.any() else 0.0


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
