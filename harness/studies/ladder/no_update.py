"""Rung 3, no update: the initial policy evaluated repeatedly on the validation split, then again
after an engine version bump (same weights): every instance must score the same."""

from __future__ import annotations

from typing import Any

from ...training.evaluate import evaluate
from .rows import NO_UPDATE_EVAL, SPLIT, RungResult, engine_name
from .stats import judge_no_update

REPEATS = 2
"""Evaluations before the engine version bump; one more follows it."""


def no_update_rung(engine, model, tok, task, n: int, rollout) -> list[RungResult]:
    """``REPEATS`` evaluations of the unchanged policy on the validation split, then one after an
    engine version bump that reloads the same weights; every instance is compared across all."""

    runs: list[dict[str, Any]] = []
    for i in range(REPEATS + 1):
        if i == REPEATS:
            engine.load_weights({k: v.clone() for k, v in model.state_dict().items()})
        runs.append(
            evaluate(
                engine,
                tok,
                task,
                n,
                max_new_tokens=rollout.max_new_tokens,
                seed=0,
                max_context_tokens=rollout.max_prompt_tokens,
                split=SPLIT,
            )
        )
    status, ev, reason, detail = judge_no_update(
        [list(e["per_instance"]) for e in runs], REPEATS, tuple(task.reward_range)
    )
    splits = sorted({str(e.get("split")) for e in runs})  # what evaluate says it scored
    detail |= {"split": "/".join(splits), "engine": engine_name(engine)}
    label = f"{REPEATS + 1} evaluations, same policy"
    return [
        NO_UPDATE_EVAL.row(label, status, ev, detail=detail),
        NO_UPDATE_EVAL.verdict(status, reason, split=SPLIT, n=n),
    ]
