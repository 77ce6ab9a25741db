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
from ..runspec import RunSpec

LEDGER_COLUMNS = list(COUNTERS)


def run_tables(run_dir: Path) -> dict[str, Any]:
    """Rows of one run directory for every per-run table."""

    rd = RunDir(run_dir)
    spec = rd.read_spec()
    status = rd.read_status()
    result = rd.read_result()
    events = rd.read_events()
    rid = rd.run_id
    steps = [e for e in events if e["type"] == "step"]
    evals = [e for e in events if e["type"] == "eval"]
    ledger = ledger_table(rid, steps)
    discards = discard_rows(rid, steps)
    # a DPO arm's distribution-shift evaluation (shift.*) is measured at evaluation points
    shift = [{"step": e["step"], **e["shift"]} for e in evals if e.get("shift")]
    metrics = metrics_table(rid, steps + shift)
    evals_rows = eval_rows(rid, spec, evals)
    budgets = budget_rows(rid, spec, status, result)
    run = run_row(rd, spec, status, result, steps, evals)
    return {
        "runs": [run],
        "budgets": budgets,
        "ledger": ledger,
        "metrics": metrics,
        "evals": evals_rows,
        "discards": discards,
        "census": census_rows(rid, events),
        "selfplay_evals": selfplay_rows(rid, evals),
    }


DB_STATUS = {
    "finished": "finished",
    "failed": "failed",
    "running": "partial",
    "interrupted": "partial",
}
"""The store's run status of a run's state (any other state as it is)."""


def run_row(
    rd: RunDir,
    spec: RunSpec,
    status: dict[str, Any],
    result: dict[str, Any],
    steps: list[dict[str, Any]],
    evals: list[dict[str, Any]],
) -> dict[str, Any]:
    """The run's ``runs`` row (final score: the result's, else the last evaluation's)."""

    state = status.get("state", "pending")
    final = result.get("final_score")
    if final is None and evals:
        final = float(evals[-1]["score"])
    return {
        "run_id": rd.run_id,
        "experiment_id": None,
        "arm": spec.arm,
        "preset": spec.preset,
        "task": spec.task_name,
        "seed": int(spec.seed),
        "status": DB_STATUS.get(state, state),
        "spec": json.dumps(spec.as_dict()),
        "blanks": json.dumps(spec.blanks),
        "initial_policy_hash": None,
        "steps": len(steps),
        "ended_because": result.get("ended_because"),
        "error": status.get("error"),
        "started_at": status.get("started"),
        "updated_at": status.get("updated"),
        "finished_at": status.get("finished"),
        "final_score": final,
        # node, resources, GPU share of a run placed by Ray (device-seconds "shared" on a shared
        # GPU)
        "placement": rd.placement.read_text() if rd.placement.exists() else None,
        # a run copied from another claim's (trained there, counted in that claim's ledger)
        "shared_from": json.loads(rd.shared.read_text())["from"] if rd.shared.exists() else None,
    }


def budget_rows(
    rid: str, spec: RunSpec, status: dict[str, Any], result: dict[str, Any]
) -> list[dict[str, Any]]:
    """One ``budgets`` row per budget counter: its limit and what the run consumed of it."""

    last_counters = result.get("counters") or status.get("counters") or {}
    return [
        {
            "run_id": rid,
            "counter": k,
            "limit_value": float(v),
            "consumed": float(last_counters.get(k, 0.0)),
        }
        for k, v in spec.budget.items()
    ]


def ledger_table(rid: str, steps: list[dict[str, Any]]) -> pa.Table | list:
    """The ledger after each step, discards by reason included ([] for a run without steps)."""

    n_steps = len(steps)
    # column-wise construction: one pass per key, not per (step, key) pair
    ledger_cols: dict[str, list] = {
        "run_id": [rid] * n_steps,
        "step": [int(e["step"]) for e in steps],
    }
    for counter in LEDGER_COLUMNS:
        key = f"ledger.{counter}"
        ledger_cols[counter] = [float(e.get(key, 0.0)) for e in steps]
    for reason in DISCARD_REASONS:
        key = f"ledger.discarded_tokens.{reason}"
        ledger_cols[f"discarded_{reason}"] = [float(e.get(key, 0.0)) for e in steps]
    return pa.table(ledger_cols) if n_steps else []


def discard_rows(rid: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``discards`` row per reason and step that discarded something (that step's share)."""

    # a step's share: the increase of the ledger's cumulative counts over the step before
    discards = []
    for reason in DISCARD_REASONS:
        tokens = [float(e.get(f"ledger.discarded_tokens.{reason}", 0.0)) for e in steps]
        rollouts = [float(e.get(f"ledger.discarded_rollouts.{reason}", 0.0)) for e in steps]
        prev_tokens = prev_rollouts = 0.0
        for step, step_tokens, step_rollouts in zip(steps, tokens, rollouts):
            new_tokens, new_rollouts = step_tokens - prev_tokens, step_rollouts - prev_rollouts
            if new_tokens > 0 or new_rollouts > 0:
                discards.append(
                    {
                        "run_id": rid,
                        "step": int(step["step"]),
                        "reason": reason,
                        "rollouts": new_rollouts,
                        "tokens": new_tokens,
                    }
                )
            prev_tokens, prev_rollouts = step_tokens, step_rollouts
    return discards


METRICS_SCHEMA = {
    "run_id": pa.string(),
    "step": pa.int64(),
    "name": pa.string(),
    "value": pa.float64(),
}


def metrics_table(rid: str, steps: list[dict[str, Any]]) -> pa.Table:
    """The steps' numeric non-ledger metrics, a (run, step, name, value) row each, no nulls."""

    # steps grouped by their key set, then one list comprehension per (group, key)
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(steps):
        groups.setdefault(tuple(e), []).append(i)
    parts = []
    for keys, idxs in groups.items():
        group = [steps[i] for i in idxs]
        group_steps = pa.array([int(e["step"]) for e in group], pa.int64())
        size = len(group)
        for key in keys:
            if (
                key in ("type", "step")
                or key.startswith("ledger.")
                or not isinstance(group[0][key], (int, float))
            ):
                continue
            values = pa.array([e[key] for e in group], pa.float64())
            table = pa.table(
                {
                    "run_id": pa.array([rid] * size, pa.string()),
                    "step": group_steps,
                    "name": pa.array([key] * size, pa.string()),
                    "value": values,
                }
            )
            if values.null_count:
                table = table.filter(values.is_valid())
            parts.append(table)
    if parts:
        return pa.concat_tables(parts)
    return pa.table({name: pa.array([], kind) for name, kind in METRICS_SCHEMA.items()})


def eval_rows(rid: str, spec: RunSpec, evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``evals`` row per evaluation: score, positions, pass@k, detail, own and search cost."""

    rows = []
    for record in evals:
        pos = record.get("position", {})
        cost = record.get("cost") or {}
        rows.append(
            {
                "run_id": rid,
                "step": int(record["step"]),
                "split": record.get("split", "test"),
                "score": float(record["score"]),
                "n": int(record["n"]),
                "success_rate": float(record.get("success_rate", record["score"])),
                "launched_tokens": float(pos.get("launched_tokens", 0.0)),
                "accepted_tokens": float(pos.get("accepted_tokens", 0.0)),
                "device_seconds": float(pos.get("device_seconds", 0.0)),
                "verifier_calls": float(pos.get("verifier_calls", 0.0)),
                "env_steps": float(pos.get("env_steps", 0.0)),
                "wall_seconds": float(pos.get("wall_seconds", 0.0)),
                "pass_at": json.dumps(record.get("pass_at") or {"1": float(record["score"])}),
                "position": json.dumps(pos),
                "detail": json.dumps({spec.task_name: record.get("per_instance")}),
                # what the evaluation itself cost (counted apart from the training budget)
                **{f"eval_{k}": cost.get(k) for k in EVAL_COST},
                # an inference-time search's score and its own compute (eval.beam), apart
                **search_columns(record.get("search")),
            }
        )
    return rows


def census_rows(rid: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``census`` row per dynamic-sampling census record, the dropped groups by verdict."""

    return [
        {
            "run_id": rid,
            **{k: c.get(k) for k in CENSUS_COLUMNS},
            **{f"dropped_{v}": int(c["groups_dropped"].get(v, 0)) for v in CENSUS_VERDICTS},
            # prompts a curriculum skipped before launching them (0 without one)
            **{
                f"skipped_{v}": int((c.get("prompts_skipped") or {}).get(v, 0))
                for v in ("all_correct", "all_wrong")
            },
        }
        for c in (e for e in events if e["type"] == "census")
    ]


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
