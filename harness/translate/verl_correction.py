"""verl's rollout correction (``algorithm.rollout_correction``, trainer/ppo/rollout_corr_helper.py)
as the weight blank's correction: importance weights as a truncated weight or IcePop's gate,
rejection sampling as a gate in mask mode.
"""

from __future__ import annotations

from typing import Any

from .builder import Builder
from .verl_fields import CORRECTION


def correction(b: Builder, bypass: bool, bypass_loss: str) -> None:
    """weight.tis_cap, tis_form and gate from rollout_is and rollout_rs (one gate: IcePop's
    weights win over a rejection criterion)."""

    f = b.f
    isl = f.text(CORRECTION + "rollout_is", ("token", "sequence"))
    rs = f.text(CORRECTION + "rollout_rs")
    src = b.src(
        CORRECTION + "rollout_is", CORRECTION + "rollout_is_threshold", CORRECTION + "bypass_mode"
    )
    if f.flag(CORRECTION + "rollout_is_batch_normalize") and isl:
        b.lacks(
            CORRECTION + "rollout_is_batch_normalize",
            "importance weights rescaled to mean 1 over "
            "the batch: sixblanks' weights are not renormalized",
        )
    if isl and bypass and bypass_loss == "ppo_clip":
        b.notes.append(
            "rollout_is in bypass ppo_clip mode only logs its weights: the PPO ratio "
            "pi/pi_rollout already corrects (core_algos.py:2530-2540)"
        )
        isl = None
    tis, gate = _importance(b, isl) if isl else (None, None)
    gate_src = src
    spec = _rejection(b, rs, gate) if rs else None
    if spec is not None:
        gate, gate_src = spec, b.src(CORRECTION + "rollout_rs", CORRECTION + "rollout_rs_threshold")
        if not bypass:
            b.notes.append(
                "rollout_rs in decoupled mode overwrites response_mask: rejected "
                "tokens leave the numerator and the denominator, as a gate in "
                "mask mode"
            )
    if tis is not None:
        b.set("weight.tis_cap", tis[0], *src)
        b.set("weight.tis_form", tis[1], *src)
    else:
        b.set("weight.tis_cap", None, *src)
    b.set("weight.gate", gate, *gate_src)


def _importance(b: Builder, isl: str) -> tuple[tuple[float, str] | None, dict[str, Any] | None]:
    """rollout_is at level ``isl``: (tis_cap, tis_form) for a threshold with no lower bound, TIS's
    clamp(max=C) (rollout_corr_helper.py:595-596); else IcePop's gate, k kept in [lo, hi] and 0
    outside (:597-605)."""

    key = CORRECTION + "rollout_is_threshold"
    lo, hi = _threshold(b, key, b.f.raw(key))
    if hi is None:
        return None, None
    if lo is None:
        return (hi, "token" if isl == "token" else "sequence"), None
    level = "token" if isl == "token" else "sequence_sum"
    return None, {"level": level, "metric": "ratio", "mode": "weight", "low": lo, "high": hi}


def _rejection(b: Builder, rs: str, gate: dict[str, Any] | None) -> dict[str, Any] | None:
    """rollout_rs as a gate in mask mode, or None: sixblanks has one gate, so a second criterion
    is named and dropped, and rejection on top of IcePop's weights keeps the weights."""

    options = [o.strip() for o in rs.split(",") if o.strip()]
    spec = _rs_gate(b, options[0], b.f.raw(CORRECTION + "rollout_rs_threshold"))
    for extra in options[1:]:
        b.lacks(
            CORRECTION + "rollout_rs",
            f"a second rejection criterion ('{extra}'): sixblanks "
            "has one gate; the arm keeps the first",
            rs,
        )
    if spec is not None and gate is not None:
        b.lacks(
            CORRECTION + "rollout_rs",
            "rejection sampling on top of IcePop weights: sixblanks "
            "has one gate (the arm keeps the IcePop weights)",
            rs,
        )
        return None
    return spec


def _threshold(b: Builder, key: str, value: Any) -> tuple[float | None, float | None]:
    """A threshold as (lower, upper): "lo_hi" or a number (upper only)."""

    if isinstance(value, str) and "_" in value:
        lo, _, hi = value.partition("_")
        try:
            return float(lo), float(hi)
        except ValueError:
            pass
    else:
        try:
            return None, float(value)
        except (TypeError, ValueError):
            pass
    b.f.problems.append(f"{b.f.source}: {key}: {value!r} is not a number or a 'lower_upper' pair")
    return None, None


def _rs_gate(b: Builder, option: str, threshold: Any) -> dict[str, Any] | None:
    """One rollout_rs option as a gate in mask mode. The k1 modes bound -log k, so their
    'lo_hi' bounds apply to 1/k (rollout_corr_helper.py:263): the gate's band is [1/hi, 1/lo]."""

    key = CORRECTION + "rollout_rs_threshold"
    if threshold is None:
        b.lacks(CORRECTION + "rollout_rs", f"'{option}' without rollout_rs_threshold", option)
        return None
    lo, hi = _threshold(b, key, threshold)
    if hi is None:
        return None
    levels = {"token": "token", "seq_sum": "sequence_sum", "seq_mean": "sequence"}
    where, _, kind = option.rpartition("_")
    if kind == "k1" and where in levels:
        lo = 1.0 / hi if lo is None else lo  # a single number: the lower bound is its reciprocal
        return {
            "level": levels[where],
            "metric": "ratio",
            "mode": "mask",
            "low": 1.0 / hi,
            "high": 1.0 / lo,
        }
    if kind == "k3" and where in ("token", "seq_mean"):
        return {"level": levels[where], "metric": "kl", "mode": "mask", "low": 0.5, "high": hi}
    b.lacks(
        CORRECTION + "rollout_rs",
        f"'{option}' has no sixblanks gate (token_k1, seq_sum_k1, "
        "seq_mean_k1, token_k3 and seq_mean_k3 do)",
        option,
    )
    return None
