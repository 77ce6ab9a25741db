"""The budget checks (:mod:`.checks`): what one training step reserves before it starts
(:func:`step_worst`), against a budget it must fit, and the counters a run can ever charge.

The worst case of one step mirrors the training loop's admission (``Trainer.step``): the
collector's ``worst_case()`` plus the update's bound (``Trainer.worst_update``); what depends on
the run (branch points, imagined rounds, time) is left out, so the cost is a lower bound."""

from __future__ import annotations

from sixblanks.budgets.worst import episodes_worst, update_worst

from .check_arms import CheckedArm
from .sections import TaskConfig


def step_worst(arm: CheckedArm, turns: int, judge_per_verify: int) -> dict[str, tuple[float, str]]:
    """A lower bound on what the training loop reserves to admit one step of ``arm`` (exact but for
    branch points and imagined rounds), per counter, with how it is counted."""

    b, r, g = arm.blanks, arm.rollout, arm.group_size
    d, L, P, ppp = b.data, r.max_new_tokens, r.max_prompt_tokens, r.prompts_per_step
    turns += arm.tool_turns  # the code tool's turns come on top of the task's (ToolTask)
    t = f" x {turns} turn(s)" + (f" ({arm.tool_turns} of the code tool)" if arm.tools else "")

    def rollouts(n: int, how: str) -> dict[str, tuple[float, str]]:
        # the numbers the loop reserves (RunContext.worst_rollouts), with how each is counted
        cost = episodes_worst(n, turns, L, P, judge_per_verify, arm.tool_calls)
        said = {
            "launched_tokens": f"{how} x max_new_tokens {L}{t}",
            "prompt_tokens": f"{how} x max_prompt_tokens {P}{t}",
            "rollouts_launched": how,
            "env_steps": how + t,
            "verifier_calls": how + t,
            "judge_calls": f"{how}{t} x {judge_per_verify} call(s)",
            "tool_calls": f"{how} x {arm.tool_calls} program(s)",
        }
        return {k: (v, said[k]) for k, v in cost.items() if k in said}

    if d.source == "demonstrations":  # played through the environment: no prompt is sampled
        n, how = ppp * g, f"prompts_per_step {ppp} x group size {g}"
        worst = {k: v for k, v in rollouts(n, how).items() if k != "prompt_tokens"}
    elif d.source == "preference_pairs" and d.pairs.file is not None:
        # a file's pairs: two responses each, their tokens known only once the file is read
        how = f"prompts_per_step {ppp} x 2 responses"
        worst = {
            "launched_tokens": (2 * ppp, how + " of 1+ tokens"),
            "rollouts_launched": (2 * ppp, how),
        }
    elif d.source == "preference_pairs":
        worst = rollouts(ppp * max(2, g), f"prompts_per_step {ppp} x {max(2, g)} samples")
    elif d.source == "search" and d.search.mode == "best_of_n":
        sp = d.search
        worst = _searched(rollouts(ppp * sp.n, f"prompts_per_step {ppp} x data.search.n {sp.n}"))
    elif d.source == "search":
        worst = _searched(_tree_worst(arm, turns, judge_per_verify, t))
    else:  # the on-policy rounds and their subclasses (self-play, branching, imagined, concurrent)
        greedy = b.advantage.estimator == "remax"
        n = ppp * (g + (1 if greedy else 0))
        per = f"(group size {g} + 1 greedy rollout)" if greedy else f"group size {g}"
        worst = rollouts(n, f"prompts_per_step {ppp} x {per}")
        if d.replay is not None:
            worst["replayed_tokens"] = (
                d.replay.per_step * g * turns * L,
                f"data.replay.per_step {d.replay.per_step} x group size {g} x max_new_tokens "
                f"{L}{t}",
            )
        if d.self_play is not None:
            tokens, how = worst["launched_tokens"]
            worst["opponent_tokens"] = (tokens, how + " (a reply to every move)")
    return _with_update(arm, worst)


def _with_update(
    arm: CheckedArm, worst: dict[str, tuple[float, str]]
) -> dict[str, tuple[float, str]]:
    """``worst`` (a step's episodes) with the update on them (Trainer.worst_update: it accepts at
    most what it launched) and a process reward model's scorer calls."""

    b, d = arm.blanks, arm.blanks.data
    launched, rows = worst["launched_tokens"], worst["rollouts_launched"]
    update = update_worst(d.epochs, d.minibatches, rows[0], launched[0])
    worst.update(
        optimizer_steps=(
            update["optimizer_steps"],
            f"data.epochs {d.epochs} x data.minibatches {d.minibatches}",
        ),
        accepted_tokens=(update["accepted_tokens"], launched[1]),
        rollouts_accepted=(update["rollouts_accepted"], rows[1]),
    )
    if b.advantage.estimator == "prm" and b.advantage.prm.scorer != "trained":
        calls = worst.get("judge_calls", (0.0, ""))[0] + rows[0]
        worst["judge_calls"] = (calls, f"{rows[1]}, one scorer call each, plus the verifier's")
    return worst


def _tree_worst(arm: CheckedArm, turns: int, judge: int, t: str) -> dict[str, tuple[float, str]]:
    """A tree search's step (beam or expansions): each call of the policy, and a replay of its
    prefix where the environment cannot restore; ``t``: how the turns are said."""

    sp, r = arm.blanks.data.search, arm.rollout
    L, P, ppp = r.max_new_tokens, r.max_prompt_tokens, r.prompts_per_step
    if sp.mode == "beam":
        calls = ppp * turns * sp.beam * sp.expand
        how = f"prompts_per_step {ppp}{t} x beam {sp.beam} x expand {sp.expand}"
    else:
        calls = ppp * sp.expansions * sp.expand
        how = f"prompts_per_step {ppp} x expansions {sp.expansions} x expand {sp.expand}"
    steps = calls * turns
    return {
        "launched_tokens": (calls * L, f"{how} x max_new_tokens {L}"),
        "prompt_tokens": (calls * P, f"{how} x max_prompt_tokens {P}"),
        "rollouts_launched": (calls, how),
        "env_steps": (steps, how + t),
        "verifier_calls": (steps, how + t),
        "judge_calls": (steps * judge, f"{how}{t} x {judge}"),
    }


def _searched(worst: dict[str, tuple[float, str]]) -> dict[str, tuple[float, str]]:
    """A training search's step: all it launches is search compute too."""

    for total, search in (
        ("launched_tokens", "search_tokens"),
        ("env_steps", "search_env_steps"),
        ("verifier_calls", "search_verifier_calls"),
    ):
        worst[search] = worst[total]
    return worst


def _charged(arm: CheckedArm, task: TaskConfig) -> set[str]:
    """The counters a run of ``arm`` on ``task`` can ever charge to its training ledger."""

    from sixblanks.budgets.counters import COUNTERS

    d = arm.blanks.data
    never = {"search_tokens", "search_env_steps", "search_verifier_calls"}
    if d.source == "search":
        never = set()
    if d.replay is None:
        never.add("replayed_tokens")
    if d.world_model is None:
        never.add("imagined_env_steps")
    if not arm.tools:
        never |= {"tool_calls", "tool_seconds"}
    if d.self_play is None:
        never.add("opponent_tokens")
    user_prm = (
        arm.blanks.advantage.estimator == "prm" and arm.blanks.advantage.prm.scorer != "trained"
    )
    if task.judge is None and not user_prm:
        never.add("judge_calls")
    if d.source == "demonstrations":  # played through the environment, nothing sampled
        never.add("prompt_tokens")
    if d.source == "preference_pairs" and d.pairs.file is not None:  # read, not played
        never |= {"prompt_tokens", "env_steps", "verifier_calls", "judge_calls"}
    return set(COUNTERS) - never


def budget_problems(
    where: str,
    budget: dict[str, float],
    arms: list[CheckedArm],
    tasks: list[tuple[TaskConfig, int | None]],
) -> list[str]:
    """``budget`` (at ``where``) below one step's worst case of a run of ``arms`` x ``tasks``, or
    limiting only counters such a run never charges."""

    from sixblanks.budgets.counters import COUNTERS

    budget = {k: v for k, v in budget.items() if k in COUNTERS}  # others: the semantic pass
    out: list[str] = []
    short: dict[str, list[tuple[float, str]]] = {}
    several = len(tasks) > 1
    if not budget:
        return out
    for arm in arms:
        for task, turns in tasks:
            run = f"arm '{arm.name}'" + (f" on task '{task.name}'" if several else "")
            if not set(budget) & _charged(arm, task):
                key = f"{where}.{next(iter(budget))}" if len(budget) == 1 else where
                out.append(
                    f"{key}: {run} never charges "
                    f"{'this counter' if len(budget) == 1 else 'any of these counters'} "
                    f"({', '.join(budget)}), so its runs would never end; add a limit it "
                    "charges (e.g. launched_tokens)"
                )
                continue
            judge = task.judge.max_calls_per_verify if task.judge is not None else 0
            worst = step_worst(arm, turns or 1, judge)
            for counter, limit in budget.items():
                cost, how = worst.get(counter, (0.0, ""))
                if cost > limit:
                    at_least = "" if turns is not None else "at least "
                    short.setdefault(counter, []).append(
                        (cost, f"{run} needs {at_least}{cost:g} ({how})")
                    )
    for counter, runs in short.items():
        need = max(c for c, _ in runs)
        out.append(
            f"{where}.{counter}: {budget[counter]:g} is below what one training step reserves "
            f"before it starts, so no step would ever run: {'; '.join(h for _, h in runs)}; raise "
            f"it to at least {need:g} or make the step smaller"
        )
    return out
