"""verl's known traps, one function each, with when a configuration triggers it.

They are CISPO's default band, samples from the rollout engine with no correction, the default
aggregation, a denominator that drifts or grows with the batch, aggregation modes ignored, DPPO's
truncation, half of Dr. GRPO, clip_ratio alone, bypass mode's own loss, the default dual clip, and
a sequence ratio under a token clip range.
"""

from __future__ import annotations

from dataclasses import dataclass

from .builder import Builder
from .fields import Fields
from .traps import Trap, shared_trap
from .verl_fields import ACTOR, CORRECTION, ROLLOUT, Choice


@dataclass(frozen=True)
class _Seen:
    """What the traps look at: the loss fields as read, the loss verl computes, and
    norm_adv_by_std_in_grpo."""

    c: Choice
    loss: str
    norm: bool


def traps(b: Builder, c: Choice, loss: str, norm: bool) -> list[Trap]:
    """verl's traps, in the order the report lists them, each with whether it fires."""

    seen = _Seen(c, loss, norm)
    return [trap(b.f, seen) for trap in _TRAPS]


def _set_clip(f: Fields) -> bool:
    """Whether either clip bound is given (clip_ratio alone sets neither)."""

    return f.given(ACTOR + "clip_ratio_low") or f.given(ACTOR + "clip_ratio_high")


def _cispo_cap(f: Fields, s: _Seen) -> Trap:
    low, high = s.c.low or 0.2, s.c.high or 0.2
    default = s.loss == "cispo" and not _set_clip(f)
    if default:
        detail = (
            "loss_mode 'cispo' with clip_ratio_low/high at their defaults: band "
            f"[{1 - low:g}, {1 + high:g}]"
        )
    elif s.loss == "cispo":
        detail = f"loss_mode 'cispo', band [{max(0.0, 1 - low):g}, {1 + high:g}]"
    else:
        detail = f"loss_mode '{s.c.mode}': not CISPO"
    return shared_trap("cispo_cap", default, detail)


def _off_policy_uncorrected(f: Fields, s: _Seen) -> Trap:
    corrected = (
        bool(f.raw(CORRECTION + "rollout_is") or f.raw(CORRECTION + "rollout_rs")) or s.c.bypass
    )
    asyncm = f.text("trainer.v1.trainer_mode") not in (None, "sync")
    if not corrected:
        detail = (
            "rollouts come from the rollout engine "
            f"({f.raw(ROLLOUT + 'name')}) and algorithm.rollout_correction has neither "
            "rollout_is nor rollout_rs (nor bypass_mode): the ratio is pi/pi_old(recomputed) "
            "and nothing weighs pi_old/pi_rollout"
            + ("; the asynchronous trainer mode adds staleness" if asyncm else "")
        )
    elif s.c.bypass:
        detail = "bypass_mode: pi_old is the rollout's log-probs"
    else:
        detail = "rollout_correction weighs pi_old/pi_rollout"
    return shared_trap("off_policy_uncorrected", not corrected, detail)


def _default_aggregation(f: Fields, s: _Seen) -> Trap:
    given = f.given(ACTOR + "loss_agg_mode")
    forced = s.loss in ("gspo", "sapo")
    return shared_trap(
        "default_aggregation",
        not given and not forced,
        "loss_agg_mode "
        + (f"set to {s.c.agg!r}" if given else "unset: token-mean")
        + (" (gspo and sapo aggregate seq-mean-token-mean anyway)" if forced else ""),
    )


def _norm_length_unstable(f: Fields, s: _Seen) -> Trap:
    factor = f.raw(ACTOR + "loss_scale_factor")
    return Trap(
        "norm_length_unstable",
        "verl's seq-mean-token-sum-norm with loss_scale_factor null divides by the padded "
        "length of each micro-batch, which changes with the batch (and with dynamic "
        "batching): the gradient's scale drifts; set loss_scale_factor to a constant.",
        s.c.agg == "seq-mean-token-sum-norm" and factor is None,
        f"loss_agg_mode={s.c.agg!r}, loss_scale_factor={factor!r}",
    )


def _token_sum_scale(f: Fields, s: _Seen) -> Trap:
    return Trap(
        "token_sum_scale",
        "verl's token-sum does not divide by anything: the gradient grows with the number of "
        "tokens in a mini-batch, so a learning rate tuned under token-mean is too large.",
        s.c.agg == "token-sum" and s.loss not in ("gspo", "sapo"),
        f"loss_agg_mode={s.c.agg!r}",
    )


def _loss_agg_ignored(f: Fields, s: _Seen) -> Trap:
    return Trap(
        "loss_agg_ignored",
        "verl's gspo and sapo losses aggregate seq-mean-token-mean whatever loss_agg_mode says "
        "(core_algos.py:1605, 1688).",
        s.loss in ("gspo", "sapo")
        and f.given(ACTOR + "loss_agg_mode")
        and s.c.agg != "seq-mean-token-mean",
        f"loss_mode={s.c.mode!r}, loss_agg_mode={s.c.agg!r}",
    )


def _dppo_truncation(f: Fields, s: _Seen) -> Trap:
    given = f.given(ACTOR + "clip_ratio_c")
    return Trap(
        "dppo_truncation",
        "verl's DPPO truncates the detached ratio at clip_ratio_c, 3.0 by default: the "
        "config.get('clip_ratio_c', 20.0) fallback is never reached, and the authors use 10.",
        s.loss in ("dppo_tv", "dppo_kl") and not given,
        f"loss_mode={s.c.mode!r}, clip_ratio_c={f.raw(ACTOR + 'clip_ratio_c')!r}"
        + ("" if given else " (default)"),
    )


def _dr_grpo_half(f: Fields, s: _Seen) -> Trap:
    est, agg = s.c.est, s.c.agg
    return shared_trap(
        "dr_grpo_half",
        est in ("grpo", "grpo_vectorized") and (not s.norm) != (agg == "seq-mean-token-sum-norm"),
        f"adv_estimator={est!r}, norm_adv_by_std_in_grpo={s.norm}, loss_agg_mode={agg!r}",
    )


def _clip_ratio_ignored(f: Fields, s: _Seen) -> Trap:
    return Trap(
        "clip_ratio_ignored",
        "verl's clip_ratio_low and clip_ratio_high default to 0.2, not to clip_ratio: "
        "setting clip_ratio alone changes nothing.",
        f.given(ACTOR + "clip_ratio")
        and not _set_clip(f)
        and (f.num(ACTOR + "clip_ratio") or 0.2) != 0.2,
        f"clip_ratio={f.raw(ACTOR + 'clip_ratio')!r}, clip_ratio_low={s.c.low!r}, "
        f"clip_ratio_high={s.c.high!r}",
    )


def _bypass_replaces_loss(f: Fields, s: _Seen) -> Trap:
    return Trap(
        "bypass_replaces_loss",
        "verl's bypass_mode replaces policy_loss.loss_mode with its own loss (PPO-clip or "
        "REINFORCE against the rollout's log-probs, rollout_corr_helper.py:1144).",
        s.c.bypass and s.c.mode not in ("vanilla", "bypass_mode"),
        f"bypass_mode={s.c.bypass}, loss_mode={s.c.mode!r}",
    )


def _dual_clip_default(f: Fields, s: _Seen) -> Trap:
    return Trap(
        "dual_clip_default",
        "verl's vanilla PPO loss always applies the dual clip at clip_ratio_c = 3 for "
        "negative advantages (the GRPO and PPO papers have none).",
        s.loss in ("vanilla", "bypass_ppo_clip"),
        f"loss_mode={s.c.mode!r}, clip_ratio_c={f.raw(ACTOR + 'clip_ratio_c')!r}",
    )


def _gspo_clip_range(f: Fields, s: _Seen) -> Trap:
    low, high = s.c.low, s.c.high
    return shared_trap(
        "gspo_clip_range",
        s.loss == "gspo" and min(low or 0.2, high or 0.2) >= 0.01,
        f"loss_mode={s.c.mode!r}, clip_ratio_low={low!r}, clip_ratio_high={high!r}",
    )


_TRAPS = (
    _cispo_cap,
    _off_policy_uncorrected,
    _default_aggregation,
    _norm_length_unstable,
    _token_sum_scale,
    _loss_agg_ignored,
    _dppo_truncation,
    _dr_grpo_half,
    _clip_ratio_ignored,
    _bypass_replaces_loss,
    _dual_clip_default,
    _gspo_clip_range,
)
"""verl's traps in the order the report lists them."""
