"""Rungs 5, 7 and 8: one axis of the arm varied, everything else at the arm's setting, each
setting trained under the rung budget and compared with the nominal one on the same validation
instances (:func:`~sixblanks.harness.studies.ladder.stats.judge_compare`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .context import RungContext, Variants
from .rows import ADVANTAGE, CLIP_KL_LR, CREDIT, RungId, RungResult

if TYPE_CHECKING:
    from .short_run import ShortRun


def compare_settings(
    ctx: RungContext, rung: int, name: str, variants: Variants, nominal_key: str
) -> list[RungResult]:
    """Trains each setting of ``variants`` under the rung budget, then judges them against the
    nominal setting (``nominal_key``): rows and the rung's verdict."""

    from .stats import judge_compare  # numpy: loaded when a rung compares

    outs: dict[str, ShortRun] = {}
    for label, kw in variants.items():
        ctx.log(f"ladder rung {rung} ({name}): {label}")
        outs[label] = ctx.train(
            seed=ctx.seeds[0], name=f"ladder rung {rung} ({name}) {label}", **kw
        )
    return judge_compare(RungId(rung, name), outs, nominal_key)


def vary(
    ctx: RungContext, rung: RungId, blank: str, field: str, values: list, label: str
) -> list[RungResult]:
    """One field of one blank varied over ``values``, everything else at the arm's setting."""

    nominal = ctx.spec.blanks[blank][field]
    key = f"{label}={nominal} (nominal)"
    variants: Variants = {key: {}}
    for value in values:
        if value != nominal:
            variants[f"{label}={value}"] = {"blanks_over": {blank: {field: value}}}
    return ctx.compare(*rung, variants, key)


def advantage(ctx: RungContext) -> list[RungResult]:
    """Rung 5: the advantage estimators of ``ladder.advantage_variants``."""

    values = ctx.cfg.ladder.advantage_variants
    return vary(ctx, ADVANTAGE, "advantage", "estimator", values, "advantage")


def clip_kl_lr(ctx: RungContext) -> list[RungResult]:
    """Rung 7: the learning rate times ``ladder.lr_factors``, the trust region on the ratio's own
    scale (:func:`trust_region_variants`) and the loss KL coefficients of ``ladder.kl_variants``."""

    lad = ctx.cfg.ladder
    lr0 = ctx.spec.optimizer["lr"]
    key = f"lr={lr0:g} (nominal)"
    variants: Variants = {key: {}}
    for f in lad.lr_factors:
        if f != 1.0:
            variants[f"lr={lr0 * f:g} (x{f:g})"] = {"lr": lr0 * f}
    variants |= trust_region_variants(ctx.spec.blanks["weight"], lad)
    kl0 = ctx.spec.blanks["regularizer"]["loss_kl_coef"]
    for kl in lad.kl_variants:
        if kl != kl0:
            variants[f"loss_kl={kl:g}"] = {"blanks_over": {"regularizer": {"loss_kl_coef": kl}}}
    return ctx.compare(*CLIP_KL_LR, variants, key)


def trust_region_variants(w: dict[str, Any], lad) -> Variants:
    """Rung 7's trust regions for the weight blank ``w``: a token-level clip takes the pairs of
    ``ladder.clip_variants``; a sequence ratio's clip (its bounds, or its multiples of the
    spread) and SAPO's temperatures are scaled by ``ladder.scale_factors``, on their own scale."""

    variants: Variants = {}
    sequence = w["ratio"] in ("sequence", "gspo_token")
    if w["trust_region"] == "clip" and not sequence:
        for lo, hi in lad.clip_variants:
            if (lo, hi) != (w["eps_low"], w["eps_high"]):
                over = {"weight": {"eps_low": lo, "eps_high": hi}}
                variants[f"clip=[{lo:g},{hi:g}]"] = {"blanks_over": over}
    elif w["trust_region"] == "clip" and w.get("clip_scale"):  # multiples of the spread
        for f in lad.scale_factors:
            lo, hi = w["clip_scale"]["low"] * f, w["clip_scale"]["high"] * f
            if f != 1.0:
                over = {"weight": {"clip_scale": {"low": lo, "high": hi}}}
                label = f"clip=[{lo:.3g},{hi:.3g}] x spread (x{f:g}, sequence scale)"
                variants[label] = {"blanks_over": over}
    elif w["trust_region"] == "clip":  # a sequence ratio: its own bounds, scaled
        for f in lad.scale_factors:
            lo, hi = w["eps_low"] * f, w["eps_high"] * f
            if f != 1.0 and lo < 1:
                over = {"weight": {"eps_low": lo, "eps_high": hi}}
                variants[f"clip=[{lo:.3g},{hi:.3g}] (x{f:g}, sequence scale)"] = {
                    "blanks_over": over
                }
    elif w["trust_region"] == "sapo":  # the soft gate's temperatures, scaled
        for f in lad.scale_factors:
            pos, neg = w["tau_pos"] * f, w["tau_neg"] * f
            if f != 1.0:
                over = {"weight": {"tau_pos": pos, "tau_neg": neg}}
                variants[f"tau=[{pos:.3g},{neg:.3g}] (x{f:g})"] = {"blanks_over": over}
    return variants


def credit(ctx: RungContext) -> list[RungResult]:
    """Rung 8: credit added by the advantage blank alone: each preset of
    ``ladder.credit_variants`` lends the arm its advantage blank; every other blank stays the
    arm's (one axis). A variant that cannot apply to the arm is its own inconclusive row."""

    from sixblanks.algorithms.presets import resolve  # torch: loaded when the rung runs

    blanks = ctx.spec.blanks
    key = f"advantage={blanks['advantage']['estimator']} (nominal)"
    variants: Variants = {key: {}}
    skipped: list[RungResult] = []
    for name in ctx.cfg.ladder.credit_variants:
        adv = resolve(name).advantage.model_dump(mode="json")
        if adv == blanks["advantage"]:
            continue  # the arm's own credit
        label = f"+{adv['estimator']} credit ({name}'s advantage blank)"
        why = _credit_not_applicable(ctx, adv)
        if why:
            skipped.append(CREDIT.row(label, "inconclusive", why))
            continue
        variants[label] = {"blanks_over": {"advantage": adv}}
    if len(variants) == 1:
        why = "no credit variant differs from the arm's advantage blank (ladder.credit_variants)"
        return [*skipped, CREDIT.verdict("inconclusive", why)]
    return skipped + ctx.compare(*CREDIT, variants, key)


def _credit_not_applicable(ctx: RungContext, adv: dict[str, Any]) -> str | None:
    """Why the advantage blank ``adv`` cannot replace the arm's (None: it can)."""

    from sixblanks.algorithms.blanks import deep_merge
    from sixblanks.algorithms.presets import resolve

    from ...tasks import make_task

    task = ctx.spec.task
    labels = make_task(task["name"], task["params"]).has_step_labels
    if adv["estimator"] == "prm" and adv["prm"]["scorer"] == "trained" and not labels:
        return f"a trained PRM needs step labels; task '{task['name']}' gives none"
    try:
        resolve(ctx.spec.preset, deep_merge(ctx.spec.blanks, {"advantage": adv}))
    except ValueError as exc:  # e.g. a critic with overlong shaping
        return f"not applicable to this arm: {exc}"
    return None
