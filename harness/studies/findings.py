"""Findings: published claims checked at matched budgets, with seeds added until the arms separate.

For each claim (a finding file) and each budget axis it names:

1. the two arms must differ in the blanks the claim is about and in nothing else (refused
   otherwise, naming the extra differences);
2. seeds run in batches (a pilot, then ``batch`` more per arm) as an ordinary experiment in
   ``OUT/<claim>/<axis>`` (resumable: finished runs are skipped); each batch's worst case is
   reserved on the claim's ledger before launch, so the claim never spends more than cap x arms x
   the per-run budget;
3. after each batch the group-sequential test (``reports.sequential``) looks at one value per seed
   and arm; it stops when the arms separate or the seed cap is reached;
4. the verdict: ``reproduced`` (separated in the claimed direction, or for an "equal" claim an
   interval inside +-smallest_effect), ``contradicted`` (separated the other way, or an "equal"
   claim separated), ``inconclusive`` (with the smallest effect the seeds used could have seen).

Each claim writes ``OUT/<claim>/verdict.json``; ``reports.findings`` renders them all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sixblanks.budgets.ledger import Budget, Ledger
from sixblanks.reports import paired, sequential

from ..config.claims import Finding, load_finding
from ..errors import ConfigError, SixblanksError
from ..orchestration.experiment import as_config, run_experiment
from ..store.database import connect

Log = Callable[[str], None]


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


def run_axis(f: Finding, axis: str, budget: dict[str, float], out: Path, log: Log) -> dict:
    """The sequential comparison of the claim's two arms matched on ``budget``."""

    m = f.finding
    design = sequential.Design(
        alpha=m.alpha, pilot=m.seeds.pilot, batch=m.seeds.batch, cap=m.seeds.cap
    )
    test = sequential.SequentialTest([m.arm, m.than], design)
    arms = len(f.experiment["arms"])
    ledger = Ledger(Budget({k: v * arms * design.cap for k, v in budget.items()}))
    started, done, looks = time.time(), 0, []
    values: dict[str, dict[int, np.ndarray]] = {}
    while not test.finished:
        n = test.next_seeds
        res = ledger.reserve(
            {k: v * arms * (n - done) for k, v in budget.items()}, f"seeds {done}-{n}"
        )
        if res is None:
            raise SixblanksError(f"{f.name} ({axis}): the ledger refused seeds {done}..{n - 1}")
        cfg = as_config(experiment_mapping(f, axis, budget, n))
        # each look adds seeds to the same experiment: the --add notice is expected, not news
        result, _ = run_experiment(
            cfg, out, add=True, warn=lambda msg: None if msg.startswith("--add") else log(msg)
        )
        if result.get("failures"):
            raise SixblanksError(
                f"{f.name} ({axis}): {len(result['failures'])} run(s) failed; see {out}"
            )
        spent = _consumed(out, budget, range(done, n))
        ledger.commit(res, spent)
        values, label = per_seed_values(out, f)
        missing = [
            f"{a} seed {s}" for a in (m.arm, m.than) for s in range(n) if s not in values.get(a, {})
        ]
        if missing:
            raise SixblanksError(
                f"{f.name} ({axis}): no {label} recorded for {', '.join(missing)} (is the metric "
                "logged by these arms? see the results store's metrics table)"
            )
        per_seed = {a: np.array([values[a][s].mean() for s in range(n)]) for a in (m.arm, m.than)}
        bad = [
            f"{a} seed {s}" for a, v in per_seed.items() for s in range(n) if not np.isfinite(v[s])
        ]
        if bad:
            raise SixblanksError(
                f"{f.name} ({axis}): {label} is not a number for {', '.join(bad)} (a slope needs "
                "two steps or more; a metric absent from every step has no mean)"
            )
        decision = test.update(per_seed)[(m.arm, m.than)]
        looks.append({"seeds": n, "decision": decision, "spent_level": test.spent})
        log(f"{f.name} ({axis}): {n} seeds per arm, {label}: {decision}")
        done = n
    record = _verdict(f, axis, values, test, looks, ledger, budget, time.time() - started)
    record["audit"] = audit_flags(out, m.arm, m.than)
    return record


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


def _consumed(out: Path, budget: dict[str, float], seeds) -> dict[str, float]:
    con = connect(out, read_only=True)
    try:
        wanted = list(seeds)
        rows = con.execute(
            "SELECT b.counter, sum(b.consumed) FROM budgets b JOIN runs r USING (run_id) "
            f"WHERE r.seed IN ({', '.join('?' * len(wanted))}) GROUP BY b.counter",
            wanted,
        ).fetchall()
    finally:
        con.close()
    got = {k: float(v) for k, v in rows}
    # time is measured; every other counter is whole units
    return {k: (got.get(k, 0.0) if "seconds" in k else round(got.get(k, 0.0))) for k in budget}


def claim_verdict(expect: str, decision: str, low: float, high: float, delta: float) -> str:
    """The claim's verdict from the sequential test's decision and the paired interval [low, high]
    of arm minus other, with ``delta`` the smallest effect that matters.

    larger / smaller: reproduced when the test separated the arms that way, contradicted when it
    separated them the other way, else inconclusive. equal: reproduced when the interval lies
    within +-delta (a separation smaller than what matters does not contradict it), contradicted
    when it lies beyond delta on one side, else inconclusive. not_smaller ("no worse"): reproduced
    when the interval lies above -delta, contradicted when it lies below it, else inconclusive."""

    separated = decision in (sequential.LARGER, sequential.SMALLER)
    if expect == "no_difference":
        return "contradicted" if separated else "reproduced"
    if expect in (sequential.LARGER, sequential.SMALLER):
        return (
            "reproduced" if decision == expect else "contradicted" if separated else "inconclusive"
        )
    if expect == "equal":
        if low >= -delta and high <= delta:
            return "reproduced"
        return "contradicted" if low > delta or high < -delta else "inconclusive"
    if low > -delta:
        return "reproduced"
    return "contradicted" if high < -delta else "inconclusive"


def _verdict(f, axis, values, test, looks, ledger, budget, seconds) -> dict[str, Any]:
    m = f.finding
    seeds = looks[-1]["seeds"]
    ya = np.stack([values[m.arm][s] for s in range(seeds)])
    yb = np.stack([values[m.than][s] for s in range(seeds)])
    pd_ = paired.paired_difference(ya, yb, confidence=1 - m.alpha)
    decision = test.decisions[(m.arm, m.than)]
    d_mde = sequential.sequential_mde(test.design) * float(np.std(ya.mean(1) - yb.mean(1), ddof=1))
    verdict = claim_verdict(m.expect, decision, pd_.low, pd_.high, m.smallest_effect)
    return {
        "axis": axis,
        "budget": budget,
        "verdict": verdict,
        "decision": decision,
        "effect": pd_.as_dict(),
        "sequential_mde": d_mde,
        "seeds": seeds,
        "looks": looks,
        "spent": {k: ledger.counters.get(k, 0.0) for k in budget},
        "limit": dict(ledger.budget.limits),
        "per_seed": {
            a: [float(values[a][s].mean()) for s in range(seeds)] for a in (m.arm, m.than)
        },
        "seconds": seconds,
    }


def checked_finding(path: str | Path) -> tuple[Finding, Any]:
    """(the finding file at ``path``, its experiment at the pilot's seeds), refused with a
    ConfigError where it is invalid or its arms differ beyond what the claim is about."""

    f = load_finding(path)
    m = f.finding
    cfg = as_config(experiment_mapping(f, "check", f.experiment.get("budget") or {}, m.seeds.pilot))
    extra = undeclared_differences(cfg, m.arm, m.than, m.about)
    if extra:
        raise ConfigError(
            f"{path}: arms '{m.arm}' and '{m.than}' differ beyond what the claim is about "
            f"({', '.join(m.about)}): " + "; ".join(extra)
        )
    return f, cfg


def run_finding(path: Path, out: Path, log: Log) -> dict[str, Any]:
    """One claim, every budget axis; writes and returns OUT/<claim>/verdict.json's content."""

    f, _ = checked_finding(path)
    m = f.finding
    budgets = m.budgets or {"budget": dict(f.experiment.get("budget") or {})}
    axes = [run_axis(f, axis, dict(b), out / f.name / axis, log) for axis, b in budgets.items()]
    record = {
        "name": f.name,
        "path": str(path),
        "claim": m.claim,
        "source": m.source,
        "about": m.about,
        "arm": m.arm,
        "than": m.than,
        "metric": m.metric if m.metric == "final_score" else f"{m.aggregate} of {m.metric}",
        "expect": m.expect,
        "smallest_effect": m.smallest_effect,
        "alpha": m.alpha,
        "meaning": m.meaning,
        "axes": axes,
        "written_at": time.time(),
    }
    (out / f.name).mkdir(parents=True, exist_ok=True)
    (out / f.name / "verdict.json").write_text(json.dumps(record, indent=2, default=float))
    return record
