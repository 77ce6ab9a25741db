"""A claim's runs: the finding files, the arms' settings and their differences, the per-seed values
of the claim's metric from the results store, what the runs consumed, the audit's flags and the
scores from the warm start to the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...config.finding_file import Finding
from ...errors import ConfigError, SixblanksError
from ...store.database import connect


def finding_files(paths: list[str | Path]) -> list[Path]:
    """Finding files named, or every ``*.yaml`` of a named directory (sorted)."""

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.yaml"))
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such finding file or directory")
    if not out:
        raise ConfigError(f"no finding files in {', '.join(map(str, paths))}")
    return out


def _flat(prefix: str, v: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(v, dict):
        for k, x in v.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), x, out)
    else:
        out[prefix] = v
    return out


def arm_settings(cfg, arm: str) -> dict[str, Any]:
    """Every setting of ``arm`` that can differ between arms, flattened, as the arm runs with it
    (an arm restating the experiment's value does not differ from one that inherits it): its
    resolved blanks (``weight.clip_high``, ...), its optimizer and rollout (``optimizer.lr``,
    ``rollout.temperature``) and its other arm keys (``seed_offset``, ``fault.rewards``, ...)."""

    out = _flat("", cfg.resolved_blanks(arm).model_dump(mode="json"), {})
    effective = {
        "optimizer": cfg.optimizer_for(arm).model_dump(mode="json"),
        "rollout": cfg.rollout_for(arm).model_dump(mode="json"),
    }
    keys = cfg.arms[arm].model_dump(mode="json", exclude={"preset", "blanks", *effective})
    return _flat("", {**keys, **effective}, out)


def undeclared_differences(cfg, a: str, b: str, about: list[str]) -> list[str]:
    """Settings in which arms ``a`` and ``b`` differ that no entry of ``about`` covers."""

    sa, sb = arm_settings(cfg, a), arm_settings(cfg, b)
    differ = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
    covered = [k for k in differ if any(k == p or k.startswith(p + ".") for p in about)]
    return [f"{k}: {sa.get(k)!r} vs {sb.get(k)!r}" for k in differ if k not in covered]


def per_seed_values(out: Path, f: Finding) -> tuple[dict[str, dict[int, np.ndarray]], str]:
    """``{arm: {seed: values}}`` of the claim's metric in the finished runs of ``out``: the
    per-instance outcomes of the last evaluation (``final_score``) or one aggregate of a training
    metric (shape ``[1]``); and the metric's label."""

    m = f.finding
    con = connect(out, read_only=True)
    try:
        runs = con.execute(
            "SELECT run_id, arm, seed FROM runs WHERE status = 'finished'"
        ).fetchall()
        values: dict[str, dict[int, np.ndarray]] = {}
        for rid, arm, seed in runs:
            if m.metric == "final_score":
                row = con.execute(
                    "SELECT detail FROM evals WHERE run_id = ? AND split = 'test' "
                    "ORDER BY step DESC LIMIT 1",
                    [rid],
                ).fetchone()
                if row is None:
                    continue
                v = np.concatenate([np.asarray(x, float) for x in json.loads(row[0]).values()])
            else:
                pts = con.execute(
                    "SELECT m.value, l.launched_tokens FROM metrics m LEFT JOIN ledger l "
                    "USING (run_id, step) WHERE m.run_id = ? AND m.name = ? ORDER BY m.step",
                    [rid, m.metric],
                ).fetchall()
                if not pts:
                    continue
                v = np.array([aggregate([p[0] for p in pts], [p[1] for p in pts], m.aggregate)])
            values.setdefault(arm, {})[int(seed)] = v
    finally:
        con.close()
    label = m.metric if m.metric == "final_score" else f"{m.aggregate} of {m.metric}"
    return values, label


def aggregate(values: list[float], launched: list[float | None], how: str) -> float:
    """One number per run from a per-step series: its mean, last value, or slope per 1000
    launched tokens (least squares)."""

    v = np.asarray(values, dtype=float)
    if how == "mean":
        return float(np.nanmean(v))
    if how == "last":
        return float(v[-1])
    x = np.asarray([np.nan if c is None else c for c in launched], dtype=float) / 1000.0
    ok = np.isfinite(x) & np.isfinite(v)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0:
        return float("nan")
    return float(np.polyfit(x[ok], v[ok], 1)[0])


def experiment_mapping(
    f: Finding, axis: str, budget: dict[str, float], seeds: int
) -> dict[str, Any]:
    data = json.loads(json.dumps(f.experiment))
    data["name"] = f"{f.name}-{axis}"
    data["budget"] = dict(budget)
    data["seeds"] = list(range(seeds))
    return data


def differences(f: Finding, axis: str, values, label: str, n: int, a: str, b: str) -> np.ndarray:
    """``[n]`` per-seed differences ``a`` − ``b`` of the claim's metric, each a run's mean over the
    evaluation's instances (or its one aggregate); a missing or non-finite value refused by name."""

    missing = [f"{x} seed {s}" for x in (a, b) for s in range(n) if s not in values.get(x, {})]
    if missing:
        raise SixblanksError(
            f"{f.name} ({axis}): no {label} recorded for {', '.join(missing)} (is the metric "
            "logged by these arms? see the results store's metrics table)"
        )
    per_seed = {x: np.array([values[x][s].mean() for s in range(n)]) for x in (a, b)}
    bad = [f"{x} seed {s}" for x, v in per_seed.items() for s in range(n) if not np.isfinite(v[s])]
    if bad:
        raise SixblanksError(
            f"{f.name} ({axis}): {label} is not a number for {', '.join(bad)} (a slope needs "
            "two steps or more; a metric absent from every step has no mean)"
        )
    return per_seed[a] - per_seed[b]


def audit_flags(out: Path, *arms: str) -> list[str]:
    """The fairness audit's flags on the claim's arms (``item: reason``): a difference the claim is
    about shows here too (a planted fault), and so does a run that consumed under 90% of its
    budget; the report prints them beside the verdict."""

    con = connect(out, read_only=True)
    try:
        rows = con.execute(
            "SELECT DISTINCT arm, item, reason FROM fairness WHERE flagged ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()
    return [f"{arm}: {item}: {reason}" for arm, item, reason in rows if arm in arms or arm is None]


def consumed(
    out: Path, budget: dict[str, float], seeds, exclude: list[str] = ()
) -> dict[str, float]:
    """What the runs of ``seeds`` in ``out`` consumed of each counter of ``budget``, but the runs
    ``exclude`` (runs taken over from another claim: their cost is in that claim's ledger)."""

    con = connect(out, read_only=True)
    try:
        wanted, skip = list(seeds), list(exclude) or [""]
        rows = con.execute(
            "SELECT b.counter, sum(b.consumed) FROM budgets b JOIN runs r USING (run_id) "
            f"WHERE r.seed IN ({', '.join('?' * len(wanted))}) "
            f"AND r.run_id NOT IN ({', '.join('?' * len(skip))}) GROUP BY b.counter",
            wanted + skip,
        ).fetchall()
    finally:
        con.close()
    got = {k: float(v) for k, v in rows}
    # time is measured; every other counter is whole units
    return {k: (got.get(k, 0.0) if "seconds" in k else round(got.get(k, 0.0))) for k in budget}


def start_scores(out: Path, f: Finding, seeds: int) -> dict[str, Any]:
    """Each arm's held-out score at the start (the warm start's, step 0) and at the end, averaged
    over seeds, for a ``final_score`` claim; and the flags: no arm moved off the warm start (each
    arm's per-seed change has a 95% t interval containing 0), an arm that ends below it (its
    interval lies below 0)."""

    m = f.finding
    if m.metric != "final_score":
        return {"flags": []}
    con = connect(out, read_only=True)
    try:
        rows = con.execute(
            "SELECT r.arm, r.seed, e.step, e.score FROM evals e JOIN runs r USING (run_id) "
            "WHERE e.split = 'test' AND r.status = 'finished' AND r.seed < ? ORDER BY e.step",
            [seeds],
        ).fetchall()
    finally:
        con.close()
    first: dict[tuple[str, int], float] = {}
    last: dict[tuple[str, int], float] = {}
    for arm, seed, _, score in rows:
        first.setdefault((arm, seed), score)
        last[(arm, seed)] = score
    out_: dict[str, Any] = {"arms": {}, "flags": []}
    moved = []
    for arm in m.claim_arms():
        keys = [(arm, s) for s in range(seeds) if (arm, s) in first]
        if not keys:
            continue
        change = np.array([last[k] - first[k] for k in keys])
        lo, hi = _t_interval(change)
        out_["arms"][arm] = {
            "start": float(np.mean([first[k] for k in keys])),
            "end": float(np.mean([last[k] for k in keys])),
            "change_low": lo,
            "change_high": hi,
        }
        moved.append(not (lo <= 0 <= hi))
        if hi < 0:
            out_["flags"].append(f"{arm} ends below its warm start ({lo:+.3f} to {hi:+.3f})")
    if moved and not any(moved):
        out_["flags"].append("no arm moved off the warm start")
    return out_


def _t_interval(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    from scipy import stats

    if len(x) < 2:
        return float("-inf"), float("inf")
    se = float(np.std(x, ddof=1) / np.sqrt(len(x)))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1)) * se
    return float(x.mean() - half), float(x.mean() + half)
