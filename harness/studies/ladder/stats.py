"""What the ablation ladder's evidence can show: pure judgments over per-instance scores.

Every rung ends in exactly one verdict row (``variant == "verdict"``): pass, fail or inconclusive
and a short reason. A rung passes only on evidence that could have failed it:

- rung 3 (no update): a policy that scores the reward floor (or the ceiling) on every instance
  cannot show drift, since a response that changes but stays wrong (right) scores the same:
  inconclusive;
- rung 6 (normalization) also runs each Z whose gradient scale differs from the arm's scale-matched
  (:func:`explain_scale`): a Z that wins both as is and scale-matched shows estimator bias, one that
  wins only as is a changed step size;
- rungs 5-8 (one axis varied): a variant is compared with the nominal setting on the same validation
  instances by a paired bootstrap interval of (variant - nominal). It fails the rung when the lower
  bound exceeds MARGIN, passes it when the upper bound stays at or under MARGIN, and is inconclusive
  otherwise, and whenever both runs give the same score on every instance (an interval of width 0
  that only says the runs did not tell the settings apart).

Each row keeps its measurements in ``detail``; ``split`` names the held-out split they were scored
on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .rows import SPLIT, RungId, RungResult

if TYPE_CHECKING:
    from .short_run import ShortRun

Gain = tuple[float, float, float]  # a run's mean (final - start) and its 95% interval

MARGIN = 0.05
"""A variant fails a rung when its paired interval over the nominal lies above this; it passes one
when the interval's upper bound does not exceed it."""


def paired_diff_ci(
    a: list[float], b: list[float], resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of a - b over paired instances with a 95% bootstrap interval."""

    d = np.asarray(a, float) - np.asarray(b, float)
    if len(d) < 2:
        return float(d.mean()) if len(d) else float("nan"), float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    boots = d[idx].mean(1)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)


# ---------------------------------------------------------------- rung 3: no update


def judge_no_update(
    per_instance: list[list[float]], bump_at: int, reward_range: tuple[float, float]
) -> tuple[str, str, str, dict[str, Any]]:
    """Per-instance scores of one unchanged policy evaluated repeatedly on the same instances; the
    evaluations from index ``bump_at`` on follow an engine version bump (same weights).

    Compares every instance across every evaluation: the repeats among themselves, and each one
    after the bump with the last one before it. Returns (status, row evidence, verdict reason,
    detail)."""

    pre, post = per_instance[:bump_at], per_instance[bump_at:]
    k, n = len(per_instance), len(per_instance[0])
    scores = [round(float(np.mean(p)), 6) if p else float("nan") for p in per_instance]
    detail: dict[str, Any] = {"scores": scores, "n": n, "evaluations": k, "bump_at": bump_at}
    if any(len(p) != n for p in per_instance):
        sizes = [len(p) for p in per_instance]
        reason = f"the evaluations scored different numbers of instances {sizes}"
        return "fail", "environment drift: " + reason, reason, detail
    repeat = [i for i in range(n) if any(p[i] != pre[0][i] for p in pre[1:])]
    bumped = [i for i in range(n) if any(p[i] != pre[-1][i] for p in post)]
    changed = sorted(set(repeat) | set(bumped))
    lo, hi = reward_range
    floor = sum(all(p[i] == lo for p in per_instance) for i in range(n))
    ceiling = sum(all(p[i] == hi for p in per_instance) for i in range(n))
    detail |= {
        "instances_changed": len(changed),
        "changed_between_repeats": len(repeat),
        "changed_after_bump": len(bumped),
        "changed_instances": changed[:20],
        "at_floor": floor,
        "at_ceiling": ceiling,
    }
    where = (
        f"{len(repeat)} of {n} instances changed between the {len(pre)} repeats, {len(bumped)} "
        "after the engine version bump"
    )
    if changed:
        what = "environment drift" if repeat else "engine drift (same weights, new version)"
        ev = f"{what}: the same policy on the same {n} validation seeds scored {scores} ({where})"
        return "fail", ev, f"{what}: {where}", detail
    status, ev, reason = _judge_unchanged(n, scores, floor, ceiling, reward_range)
    return status, ev, reason, detail


def _judge_unchanged(
    n: int, scores: list[float], floor: int, ceiling: int, reward_range: tuple[float, float]
) -> tuple[str, str, str]:
    """(status, row evidence, verdict reason) where no instance changed across the evaluations
    (their mean ``scores``): a pass unless every instance sat at the reward floor (``floor``
    counts those) or at the ceiling, where a changed response could score the same."""

    k, (lo, hi) = len(scores), reward_range
    for count, value, end, stays in (
        (floor, lo, "floor", "wrong"),
        (ceiling, hi, "ceiling", "right"),
    ):
        if count == n:
            reason = (
                f"every one of the {n} validation instances scored {value:g} (the reward {end}) in "
                f"all {k} evaluations: a response that changed but stayed {stays} scores the same, "
                "so drift could not show"
            )
            return "inconclusive", reason + f" (scores {scores})", reason
    ev = (
        f"identical per-instance scores on all {n} validation instances across {k} evaluations "
        f"(repeats and after an engine version bump), scores {scores}; {n - floor} of {n} "
        f"instances above the reward floor, {n - ceiling} below the ceiling"
    )
    reason = (
        f"no instance changed across {k} evaluations, before and after the version bump "
        f"({n - floor} of {n} validation instances above the floor)"
    )
    return "pass", ev, reason


# ---------------------------------------------------------------- rungs 5-8: one axis varied


def _identical(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def _same_everywhere(a: list[float], b: list[float]) -> str:
    """Why identical per-instance scores a, b tell nothing: one phrase."""

    values = set(a) | set(b)
    if len(values) == 1:
        return f"every score is {next(iter(values)):.3f}"
    return "the same score on every instance"


def _run_summary(o: ShortRun, gain: Gain) -> str:
    d, lo, hi = gain
    gn = f" grad norm mean {o.grad_norm:.3g} max {o.grad_norm_max:.3g}" if o.grad_norm else ""
    score = f"score {o.start_score:.3f} -> {o.final:.3f}"
    return f"{score} (gain {d:+.3f} [{lo:+.3f}, {hi:+.3f}]){gn}"


def _row_detail(o: ShortRun, gain: Gain | None = None) -> dict[str, Any]:
    """What a setting's row keeps of its run: all but the per-instance sequences, and its gain."""

    out = {k: v for k, v in o.as_dict().items() if k not in ("scores", "start", "trainable")}
    return out if gain is None else out | {"gain": gain}


def _judge_nominal(rung: RungId, key: str, o: ShortRun, gain: Gain) -> RungResult:
    """The nominal run against its own warm start (the reference the variants are compared with)."""

    d, lo, hi = gain
    summary = _run_summary(o, gain)
    if _identical(o.scores, o.start):
        status = "inconclusive"
        why = f"unchanged from the warm start ({_same_everywhere(o.scores, o.start)})"
    elif lo > 0:
        status, why = "pass", "a measurable gain over the warm start"
    else:
        status, why = "inconclusive", "no gain over the warm start that the interval can show"
    return rung.row(key, status, f"{why}: {summary}", (lo, hi), _row_detail(o, gain))


def _judge_variant(
    rung: RungId, label: str, o: ShortRun, gain: Gain | None, nominal: ShortRun
) -> RungResult:
    """One variant against the nominal setting on the same instances (nominal not diverged)."""

    if o.diverged:
        why = f"diverged ({o.error}) while the nominal setting did not: no better than it"
        return rung.row(label, "pass", why, detail=_row_detail(o))
    d, lo, hi = paired_diff_ci(o.scores, nominal.scores)
    vs = f"vs nominal {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    detail = _row_detail(o, gain) | {"vs_nominal": [d, lo, hi]}
    if _identical(o.scores, nominal.scores):
        status = "inconclusive"
        same = _same_everywhere(o.scores, nominal.scores)
        why = f"{same} for both: the runs cannot tell the settings apart"
    elif not np.isfinite(lo):
        status, why = "inconclusive", f"{vs}: too few instances for an interval"
    elif lo > MARGIN:
        status, why = "fail", f"beats the nominal by {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    elif hi <= MARGIN:
        status, why = "pass", f"{vs}: does not beat it by more than {MARGIN:g}"
    else:
        status, why = "inconclusive", f"{vs}: the interval reaches past the margin {MARGIN:g}"
    return rung.row(label, status, f"{why}; {_run_summary(o, gain)}", (lo, hi), detail)


def _judge_after_divergence(
    rung: RungId, label: str, o: ShortRun, gain: Gain | None, is_nominal: bool, any_live: bool
) -> RungResult:
    """A row of a rung whose nominal setting diverged: a setting that trains on is the evidence."""

    if o.diverged:
        status = "fail" if is_nominal and any_live else "inconclusive"
        return rung.row(label, status, f"diverged: {o.error}", detail=_row_detail(o))
    _, lo, hi = gain
    ev = f"does not diverge where the nominal does: {_run_summary(o, gain)}"
    return rung.row(label, "fail", ev, (lo, hi), _row_detail(o, gain))


def judge_compare(rung: RungId, outs: dict[str, ShortRun], nominal_key: str) -> list[RungResult]:
    """Rows and the verdict of a rung that varies one axis. ``outs`` maps each setting's label to
    its short run (:class:`~.short_run.ShortRun`: per-instance final and warm-start scores on the
    validation split, or diverged with its error).

    The nominal row judges the nominal run against its warm start; each variant row judges that
    variant against the nominal; the verdict judges the rung."""

    live = {k: o for k, o in outs.items() if not o.diverged}
    # each finished run's gain over its warm start (mean, interval)
    gains = {k: paired_diff_ci(o.scores, o.start) for k, o in live.items()}
    nominal = outs[nominal_key]
    n = len(next(iter(live.values())).scores or []) if live else 0
    held = "/".join(sorted({str(o.split or SPLIT) for o in outs.values()}))
    split = {"split": held, "n": n}
    if nominal.diverged:
        rows = [
            _judge_after_divergence(rung, k, o, gains.get(k), k == nominal_key, bool(live))
            for k, o in outs.items()
        ]
        return rows + [_verdict_after_divergence(rung, nominal_key, nominal, live, split)]
    rows = [_judge_nominal(rung, nominal_key, nominal, gains[nominal_key])]
    variants = {k: o for k, o in outs.items() if k != nominal_key}
    rows += [_judge_variant(rung, k, o, gains.get(k), nominal) for k, o in variants.items()]
    return rows + [_verdict_of_compare(rung, rows, live, gains, split)]


def _verdict_after_divergence(
    rung: RungId,
    nominal_key: str,
    nominal: ShortRun,
    live: dict[str, ShortRun],
    split: dict[str, Any],
) -> RungResult:
    """The verdict of a rung whose nominal setting diverged: a failure where another setting
    trains on (it names the best), inconclusive where every setting diverged."""

    if not live:
        reason = f"every setting of this rung diverged ({nominal.error}): the cause lies elsewhere"
        return rung.verdict("inconclusive", reason, **split)
    best = max(live, key=lambda k: live[k].final)
    reason = (
        f"the nominal {nominal_key} diverged ({nominal.error}); {best} does not and reaches "
        f"{live[best].final:.3f} on {split['n']} {split['split']} instances"
    )
    return rung.verdict("fail", reason, **split, best=best)


def _verdict_of_compare(
    rung: RungId,
    rows: list[RungResult],
    live: dict[str, ShortRun],
    gains: dict[str, Gain],
    split: dict[str, Any],
) -> RungResult:
    """The verdict of a rung whose nominal setting trained (``rows``: the nominal's row first, then
    each variant's; ``gains``: each finished run's over its warm start): the best winning variant
    fails it; it passes when every variant passes."""

    nominal_key, variants = rows[0].variant, rows[1:]
    on = f"on the same {split['n']} {split['split']} instances"
    fails = [r for r in variants if r.status == "fail"]
    if fails:
        best = max(fails, key=lambda r: r.detail["vs_nominal"][0])
        d, lo, hi = best.detail["vs_nominal"]
        by = f"by {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        reason = f"{best.variant} beats the nominal {nominal_key} {by} {on}"
        return rung.verdict("fail", reason, (lo, hi), **split, best=best.variant)
    if not variants:
        reason = "no variant of this axis is configured (ladder section): nothing to compare"
        return rung.verdict("inconclusive", reason, **split)
    if all(g[0] <= 0 for g in gains.values()):
        values = {v for o in live.values() for v in [*o.scores, *o.start]}
        what = (
            f"every score of every run is {next(iter(values)):.3f}, before and after training"
            if len(values) == 1
            else "no setting improves on the warm start within the rung budget"
        )
        reason = f"{what}: the runs cannot tell the settings apart"
        return rung.verdict("inconclusive", reason, **split)
    unsure = [r for r in variants if r.status != "pass"]
    if unsure:
        why = "; ".join(f"{r.variant}: {r.evidence.split(';')[0]}" for r in unsure)
        return rung.verdict("inconclusive", "cannot tell: " + why, **split)
    top = max((r.ci_high for r in variants if r.ci_high is not None), default=None)
    bound = f" (largest upper bound {top:+.3f})" if top is not None else ""
    reason = f"no setting beats the nominal {nominal_key} by more than {MARGIN:g} {on}{bound}"
    return rung.verdict("pass", reason, **split)


# ---------------------------------------------------------------- rung 6: weighting vs scale


def explain_scale(
    rows: list[RungResult], scale: dict[str, dict[str, Any]], grad_clip: float | None
) -> list[RungResult]:
    """Rung 6's rows with its verdict saying which variant is which, and what their results
    separate. ``scale``: for each plain variant's label (``Z=<mode>``), ``ratio`` (its total loss
    weight over the nominal's on one batch; None: not measured) and ``matched`` (the label of its
    scale-matched variant; None: none, its scale is the nominal's or unmeasured).

    A plain variant changes both the weighting of the tokens (the estimator) and the gradient's
    scale; its scale-matched twin changes the weighting only. Plain fails and matched fails:
    estimator bias. Plain fails and matched passes: a changed step size. Matched fails alone: the
    weighting helps once the step size is matched."""

    status = {r.variant: r.status for r in rows}
    rows = _with_scale_roles(rows, scale, grad_clip)
    *body, final = rows
    said, found = [], []
    for plain, s in scale.items():
        said.append(_what_it_changes(plain, s, grad_clip))
        twin = s.get("matched")
        if s.get("unmatchable") or s.get("ratio") is None or twin is None:
            continue
        if plain in status and twin in status:
            found += _what_separates(plain, twin, status[plain], status[twin])
    if not said:
        return rows
    text = "; ".join(said) + "."
    if found:
        text += " " + "; ".join(found) + "."
    final = replace(
        final, evidence=f"{final.evidence}. {text}", detail=final.detail | {"scale": scale}
    )
    return [*body, final]


def _with_scale_roles(
    rows: list[RungResult], scale: dict[str, dict[str, Any]], grad_clip: float | None
) -> list[RungResult]:
    """``rows`` with each variant row's ``scale_ratio`` (its mode's scale over the nominal's) and
    ``scale_matched`` (whether its gradient scale is the nominal's) in its detail."""

    roles = {}
    for plain, s in scale.items():
        same = s.get("matched") is None and (s.get("ratio") is not None or grad_clip is None)
        same = same and not s.get("unmatchable")
        roles[plain] = {"scale_ratio": s.get("ratio"), "scale_matched": same}
        if s.get("matched"):
            roles[s["matched"]] = {"scale_ratio": s["ratio"], "scale_matched": True}
    return [
        replace(r, detail=r.detail | roles[r.variant]) if r.variant in roles else r for r in rows
    ]


def _what_it_changes(plain: str, s: dict[str, Any], grad_clip: float | None) -> str:
    """What the plain variant ``plain`` changes (the weighting, the gradient scale), and its
    scale-matched twin, in one phrase."""

    c, twin = s.get("ratio"), s.get("matched")
    if s.get("unmatchable"):
        return (
            f"{plain} changes the weighting and the gradient scale (total loss weight "
            f"x{c:.3g} of the nominal's), with no scale-matched twin: the arm's critic steps "
            "under the same gradient clip and its value loss does not follow Z, so no clip "
            "rescales the policy's gradient alone"
        )
    if c is None:
        return (
            f"{plain} changes the weighting only (optimizer.grad_clip off: AdamW's steps do not "
            "change with a constant gradient scale)"
            if grad_clip is None
            else f"{plain}: its gradient scale could not be measured (no trained token)"
        )
    if twin is None:
        return f"{plain} changes the weighting only (the same total loss weight)"
    return (
        f"{plain} changes the weighting and the gradient scale (total loss weight x{c:.3g} of "
        f"the nominal's), {twin} the weighting only"
    )


def _what_separates(plain: str, twin: str, plain_status: str, twin_status: str) -> list[str]:
    """What a plain variant's and its scale-matched twin's statuses separate: estimator bias or a
    changed step size (nothing where neither wins)."""

    p_fail, m_fail = plain_status == "fail", twin_status == "fail"
    if p_fail and m_fail:
        return [f"{plain} wins with its step size matched too: estimator bias"]
    if p_fail and twin_status == "pass":
        return [
            f"{plain} wins only with its own gradient scale ({twin} passes): a changed step "
            "size, not estimator bias"
        ]
    if p_fail:
        return [
            f"{plain} wins with its own gradient scale; scale-matched the runs cannot tell: "
            "a changed step size or estimator bias"
        ]
    if m_fail:
        return [f"{twin} wins: its weighting helps once its step size is matched"]
    return []
