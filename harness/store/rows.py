"""The rows of the results store's tables, from what the runs and the orchestrator wrote: a run
directory's spec, status, result and events (``run_tables``) and the fairness audit
(``fairness_rows``). Pure conversion; ``harness/store/database.py`` writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from sixblanks.budgets.counters import COUNTERS, DISCARD_REASONS

from ..layout import RunDir

LEDGER_COLUMNS = list(COUNTERS)


def run_tables(run_dir: Path) -> dict[str, Any]:
    """Rows of one run directory for every per-run table."""

    rd = RunDir(run_dir)
    spec = rd.read_spec()
    status = rd.read_status()
    result = rd.read_result()
    events = rd.read_events()
    rid = rd.run_id
    state = status.get("state", "pending")
    db_status = {
        "finished": "finished",
        "failed": "failed",
        "running": "partial",
        "interrupted": "partial",
    }.get(state, state)
    steps = [e for e in events if e["type"] == "step"]
    evals = [e for e in events if e["type"] == "eval"]
    step_idx = [int(e["step"]) for e in steps]
    n = len(steps)
    # column-wise construction: one pass per key, not per (step, key) pair
    ledger_cols: dict[str, list] = {"run_id": [rid] * n, "step": step_idx}
    for c in LEDGER_COLUMNS:
        key = f"ledger.{c}"
        ledger_cols[c] = [float(e.get(key, 0.0)) for e in steps]
    discards = []
    for r in DISCARD_REASONS:
        tok = [float(e.get(f"ledger.discarded_tokens.{r}", 0.0)) for e in steps]
        rol = [float(e.get(f"ledger.discarded_rollouts.{r}", 0.0)) for e in steps]
        ledger_cols[f"discarded_{r}"] = tok
        pt = pr = 0.0
        for i in range(n):
            dt, dr = tok[i] - pt, rol[i] - pr
            if dt > 0 or dr > 0:
                discards.append(
                    {"run_id": rid, "step": step_idx[i], "reason": r, "rollouts": dr, "tokens": dt}
                )
            pt, pr = tok[i], rol[i]
    ledger_rows = pa.table(ledger_cols) if n else []
    # metrics: steps grouped by their key set, then one list comprehension per (group, key)
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(steps):
        groups.setdefault(tuple(e), []).append(i)
    parts = []
    for keys, idxs in groups.items():
        sub = [steps[i] for i in idxs]
        sub_steps = pa.array([step_idx[i] for i in idxs], pa.int64())
        m = len(sub)
        for k in keys:
            if (
                k in ("type", "step")
                or k.startswith("ledger.")
                or not isinstance(sub[0][k], (int, float))
            ):
                continue
            vals = pa.array([e[k] for e in sub], pa.float64())
            tbl = pa.table(
                {
                    "run_id": pa.array([rid] * m, pa.string()),
                    "step": sub_steps,
                    "name": pa.array([k] * m, pa.string()),
                    "value": vals,
                }
            )
            if vals.null_count:
                tbl = tbl.filter(vals.is_valid())
            parts.append(tbl)
    metrics = (
        pa.concat_tables(parts)
        if parts
        else pa.table(
            {
                "run_id": pa.array([], pa.string()),
                "step": pa.array([], pa.int64()),
                "name": pa.array([], pa.string()),
                "value": pa.array([], pa.float64()),
            }
        )
    )
    eval_rows = []
    for e in evals:
        pos = e.get("position", {})
        cost = e.get("cost") or {}
        eval_rows.append(
            {
                "run_id": rid,
                "step": int(e["step"]),
                "split": e.get("split", "test"),
                "score": float(e["score"]),
                "n": int(e["n"]),
                "success_rate": float(e.get("success_rate", e["score"])),
                "launched_tokens": float(pos.get("launched_tokens", 0.0)),
                "accepted_tokens": float(pos.get("accepted_tokens", 0.0)),
                "device_seconds": float(pos.get("device_seconds", 0.0)),
                "verifier_calls": float(pos.get("verifier_calls", 0.0)),
                "env_steps": float(pos.get("env_steps", 0.0)),
                "wall_seconds": float(pos.get("wall_seconds", 0.0)),
                "pass_at": json.dumps(e.get("pass_at") or {"1": float(e["score"])}),
                "position": json.dumps(pos),
                "detail": json.dumps({spec["task"]["name"]: e.get("per_instance")}),
                # what the evaluation itself cost (counted apart from the training budget)
                **{f"eval_{k}": cost.get(k) for k in EVAL_COST},
                # an inference-time search's score and its own compute (eval.beam), apart
                **search_columns(e.get("search")),
            }
        )
    last_counters = result.get("counters") or status.get("counters") or {}
    budgets = [
        {
            "run_id": rid,
            "counter": k,
            "limit_value": float(v),
            "consumed": float(last_counters.get(k, 0.0)),
        }
        for k, v in spec["budget"].items()
    ]
    final = result.get("final_score")
    if final is None and evals:
        final = float(evals[-1]["score"])
    run_row = {
        "run_id": rid,
        "experiment_id": None,
        "arm": spec["arm"],
        "preset": spec["preset"],
        "task": spec["task"]["name"],
        "seed": int(spec["seed"]),
        "status": db_status,
        "spec": json.dumps(spec),
        "blanks": json.dumps(spec["blanks"]),
        "initial_policy_hash": None,
        "steps": len(steps),
        "ended_because": result.get("ended_because"),
        "error": status.get("error"),
        "started_at": status.get("started"),
        "updated_at": status.get("updated"),
        "finished_at": status.get("finished"),
        "final_score": final,
        # node, resources, GPU share of a run placed by Ray (device-seconds "shared" on a shared GPU)
        "placement": rd.placement.read_text() if rd.placement.exists() else None,
    }
    census = [
        {
            "run_id": rid,
            **{k: c.get(k) for k in CENSUS_COLUMNS},
            **{f"dropped_{v}": int(c["groups_dropped"].get(v, 0)) for v in CENSUS_VERDICTS},
        }
        for c in (e for e in events if e["type"] == "census")
    ]
    return {
        "runs": [run_row],
        "budgets": budgets,
        "ledger": ledger_rows,
        "metrics": metrics,
        "evals": eval_rows,
        "discards": discards,
        "census": census,
        "selfplay_evals": selfplay_rows(rid, evals),
    }


def selfplay_rows(rid: str, evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per evaluation and external opponent of a two-player game task (the ``selfplay``
    games of each evaluation record, harness/training/opponents.py); none for other tasks."""

    rows = []
    for e in evals:
        for g in e.get("selfplay") or []:
            rows.append(
                {
                    "run_id": rid,
                    "step": int(e["step"]),
                    **{k: g[k] for k in ("split", "opponent", "games", "wins", "losses", "draws")},
                    "win_rate": float(g["win_rate"]),
                    "winnable": g.get("winnable"),
                    "launched_tokens": float((e.get("position") or {}).get("launched_tokens", 0.0)),
                    **{f"eval_{k}": g.get(k) for k in SELFPLAY_COST},
                }
            )
    return rows


SELFPLAY_COST = (
    "generated_tokens",
    "verifier_calls",
    "env_steps",
    "device_seconds",
    "wall_seconds",
)
"""What one external opponent's games cost (counted apart from the training budget)."""


EVAL_COST = ("generated_tokens", "verifier_calls", "device_seconds", "wall_seconds", "judge_calls")
"""The cost of one evaluation, as the loop records it (``cost`` of each eval record)."""

CENSUS_COLUMNS = (
    "step",
    "rounds",
    "prompts_sampled",
    "groups_launched",
    "groups_varied",
    "groups_kept",
    "responses_launched",
    "responses_accepted",
    "tokens_launched",
    "tokens_accepted",
    "cap_hit",
)
CENSUS_VERDICTS = ("all_correct", "all_wrong", "zero_variance", "accuracy", "surplus")
"""Why a launched group was dropped (``SamplingCensus.groups_dropped``)."""


def fairness_rows(exp_id: str, fairness: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm x held-constant item (its value; flagged with the reason and the experiment's
    value where it differs), then one per per-run flag (consumption, code)."""

    flags = {(f["arm"], f["item"]): f for f in fairness["flags"]}
    rows = []
    for arm, rec in fairness["arms"].items():
        for item in fairness["held_constant"]:
            f = flags.get((arm, item))
            ref = f.get("reference") if f else None
            rows.append(
                {
                    "experiment_id": exp_id,
                    "arm": arm,
                    "item": item,
                    "flagged": f is not None,
                    "reason": f["reason"] if f else None,
                    "value": json.dumps(rec["items"][item], default=str),
                    "reference": json.dumps(ref, default=str) if ref is not None else None,
                    "run_id": None,
                }
            )
    for f in fairness["flags"]:
        if f["item"] not in fairness["held_constant"]:  # per-run flags: consumption, code
            rows.append(
                {
                    "experiment_id": exp_id,
                    "arm": f["arm"],
                    "item": f["item"],
                    "flagged": True,
                    "reason": f["reason"],
                    "value": None,
                    "reference": None,
                    "run_id": f.get("run_id"),
                }
            )
    return rows


def search_columns(search: dict[str, Any] | None) -> dict[str, Any]:
    """The evals row's columns of an inference-time search (``eval.beam``; all None without one)."""

    s = search or {}
    return {
        "search_mode": s.get("mode"),
        "search_score": s.get("score"),
        **{f"search_{k}": s.get(k) for k in ("generated_tokens", "env_steps", "verifier_calls")},
    }


def trial_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The store's rows (table ``trials``) of a sweep summary (sweep.json)."""

    rows = []
    for arm, rec in summary["arms"].items():
        for t in rec["trials_detail"]:
            c = t["counters"] or {}
            rows.append(
                {
                    "arm": arm,
                    "trial": t["number"],
                    "state": t["state"],
                    "params": t["params"],
                    "value": t["value"],
                    "launched_tokens": c.get("launched_tokens"),
                    "device_seconds": c.get("device_seconds"),
                    "pruned_at": t["pruned_at"],
                    "split": t.get("split"),
                }
            )
    return rows
