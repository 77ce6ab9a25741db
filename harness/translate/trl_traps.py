"""TRL's known traps, one function each, with when a configuration triggers it.

They are CISPO's cap below 1, the batch std of raw rewards, vLLM samples with no correction, the
default aggregation, half of Dr. GRPO, 'dapo' as a name only, and a sequence ratio under a token
clip range.
"""

from __future__ import annotations

from dataclasses import dataclass

from .builder import Builder
from .fields import Fields
from .traps import Trap, shared_trap
from .trl_fields import Loss


@dataclass(frozen=True)
class _Seen:
    """What the traps look at: the loss as read, and the fields read once for all of them."""

    c: Loss
    vllm: bool
    corrected: bool
    steps: int  # optimizer steps each generation batch feeds
    eps: float
    cap_key: str


def traps(b: Builder, c: Loss) -> list[Trap]:
    """TRL's traps, in the order the report lists them, each with whether it fires."""

    f = b.f
    vllm, corrected = f.flag("use_vllm"), f.flag("vllm_importance_sampling_correction")
    ga = f.whole("gradient_accumulation_steps") or 1
    mu = f.whole("num_iterations") or 1
    spg = f.whole("steps_per_generation") or ga
    seen = _Seen(
        c=c,
        vllm=vllm,
        corrected=corrected,
        steps=max(1, spg // ga) * mu,
        eps=f.num("epsilon") or 0.2,
        cap_key="epsilon_high" if f.given("epsilon_high") else "epsilon (epsilon_high unset)",
    )
    return [trap(f, seen) for trap in _TRAPS]


def _cispo_cap(f: Fields, s: _Seen) -> Trap:
    loss, cap = s.c.loss, s.c.eps_high
    if loss != "cispo":
        detail = f"loss_type={loss!r}: not CISPO"
    elif cap <= 1:
        detail = (
            f"the weight is min(r, {cap:g}) from {s.cap_key}: every gradient scaled by <= {cap:g}"
        )
    else:
        detail = f"{s.cap_key}={cap:g}: min(r, {cap:g}) is the band [0, {cap:g}]"
    return shared_trap("cispo_cap", loss == "cispo" and cap <= 1, detail)


def _batch_std(f: Fields, s: _Seen) -> Trap:
    scale = s.c.scale
    detail = f"scale_rewards={scale!r}" + (
        ": the std of the raw rewards (advantage.batch_std: rewards)" if scale == "batch" else ""
    )
    return shared_trap("batch_std", scale == "batch", detail)


def _off_policy_uncorrected(f: Fields, s: _Seen) -> Trap:
    if s.vllm and not s.corrected:
        detail = "use_vllm with vllm_importance_sampling_correction=false: nothing weighs " + (
            f"pi_old/pi_vllm, and each generation batch feeds {s.steps} optimizer steps"
            if s.steps > 1
            else "pi_vllm (pi_old is the trainer's detached log-probs: ratio 1)"
        )
    elif s.vllm:
        detail = "use_vllm with vllm_importance_sampling_correction on"
    else:
        detail = "no vLLM: the trainer samples with its own weights" + (
            f" (each batch feeds {s.steps} steps; the ratio to pi_old corrects it)"
            if s.steps > 1
            else ""
        )
    return shared_trap("off_policy_uncorrected", s.vllm and not s.corrected, detail)


def _default_aggregation(f: Fields, s: _Seen) -> Trap:
    unset = not f.given("loss_type")
    detail = "loss_type unset: 'dapo', a token-mean" if unset else f"loss_type={s.c.loss!r}"
    return shared_trap("default_aggregation", unset, detail)


def _dr_grpo_half(f: Fields, s: _Seen) -> Trap:
    loss, scale = s.c.loss, s.c.scale
    half = (loss == "dr_grpo") != (scale == "none")
    detail = _half(loss, scale) if half else f"loss_type={loss!r}, scale_rewards={scale!r}"
    return shared_trap("dr_grpo_half", half, detail)


def _half(loss: str, scale: str) -> str:
    """Which half of Dr. GRPO a TRL configuration has, in the words of what it sets."""

    head = f"loss_type={loss!r}, scale_rewards={scale!r}: "
    if loss != "dr_grpo":
        return head + "no std, with a length-dependent denominator"
    kept = {
        "group": "the group std kept (each group's rewards divided by their std)",
        "batch": "the batch std kept (every advantage divided by the std of the batch's raw "
        "rewards, Lite PPO's scale)",
    }[scale]
    return head + "the constant denominator with " + kept


def _dapo_name_only(f: Fields, s: _Seen) -> Trap:
    dapo = s.c.loss == "dapo" and not f.given("epsilon_high")
    return Trap(
        "dapo_name_only",
        "TRL's loss_type 'dapo' (the default) is only DAPO's token-level aggregation: no "
        "clip-higher unless epsilon_high is set, no dynamic sampling, no overlong shaping.",
        dapo,
        f"loss_type={s.c.loss!r}" + (", epsilon_high unset: clip 0.2/0.2" if dapo else ""),
    )


def _gspo_clip_range(f: Fields, s: _Seen) -> Trap:
    return shared_trap(
        "gspo_clip_range",
        s.c.ratio == "sequence" and min(s.eps, s.c.eps_high) >= 0.01,
        f"importance_sampling_level={f.raw('importance_sampling_level')!r}, epsilon={s.eps:g}",
    )


_TRAPS = (
    _cispo_cap,
    _batch_std,
    _off_policy_uncorrected,
    _default_aggregation,
    _dr_grpo_half,
    _dapo_name_only,
    _gspo_clip_range,
)
"""TRL's traps in the order the report lists them."""
