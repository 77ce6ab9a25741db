"""Rung 9, asynchrony: the arm's asynchronous setting (``data.lag``, or a concurrent collector)
against its synchronous one at the matched budget, paired on the same instances: the rung fails
when asynchrony loses."""

from __future__ import annotations

from typing import Any

from .context import RungContext
from .rows import ASYNCHRONY, VERDICT, RungResult


def asynchrony(ctx: RungContext) -> list[RungResult]:
    d = ctx.spec.blanks["data"]
    lag, conc = d.get("lag", 0), d.get("concurrent")
    if not lag and conc is None:
        reason = (
            "not applicable: the arm is synchronous (data.lag 0, no data.concurrent), there "
            "is no asynchronous setting to compare with synchronous parity"
        )
        return [
            ASYNCHRONY.row("synchronous arm", "inconclusive", reason),
            ASYNCHRONY.verdict("inconclusive", reason),
        ]
    if lag:
        key = f"lag={lag} (nominal)"
    else:
        how = f", each group as it finishes, partial {conc.get('partial')}"
        key = f"concurrent queue={conc['queue']}{how if conc.get('consume') == 'episode' else ''}"
        key += " (nominal)"
    # synchronous: no lag, no collector, the weights sent to the sampler every step
    sync = {"blanks_over": {"data": {"lag": 0, "concurrent": None, "broadcast_every": 1}}}
    out = ctx.compare(*ASYNCHRONY, {key: {}, "lag=0 (synchronous)": sync}, key)
    # the nominal run's lag figures, as its row keeps them
    nominal = next((r.detail for r in out if r.variant == key), {})
    split = nominal.get("staleness_split") or {}
    if split.get("inflight_behind") is not None:  # the split says where the lag came from
        dropped = {r: n for r, n in (nominal.get("async_dropped") or {}).items() if n}
        note = _where_the_lag_passed(nominal, split, dropped)
        for r in out:
            if r.variant == VERDICT:
                r.evidence += note
                r.detail["staleness_split"] = {**split, "dropped": dropped}
    return out


def _where_the_lag_passed(
    nominal: dict[str, Any], split: dict[str, Any], dropped: dict[str, float]
) -> str:
    """A sentence on the nominal run's lag: versions passed while its samples were generated and
    while they waited, the versions its tokens spanned, the tokens it dropped."""

    span = split.get("version_span")
    return (
        f" Its samples were {nominal.get('versions_behind', 0.0):.2f} versions behind on "
        f"average: {split['inflight_behind']:.2f} passed while they were generated, "
        f"{split.get('queue_behind') or 0.0:.2f} while they waited to be consumed"
        + (f"; their tokens spanned {span:.2f} versions" if span else "")
        + (
            "; dropped tokens: " + ", ".join(f"{r} {n:.0f}" for r, n in sorted(dropped.items()))
            if dropped
            else ""
        )
        + "."
    )
