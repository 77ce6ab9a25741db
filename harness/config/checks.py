"""Cross-field checks of a parsed experiment: settings each valid alone whose runs cannot work,
would never end, or would train on nothing. Called by :func:`~.loading.validate_mapping` on a
configuration that parsed, before any model is loaded; each problem is one ``key.path: message``
line.

- clip bounds outside their meaningful range (``weight.eps_low`` >= 1: a lower bound
  1 - eps_low <= 0 clips nothing; a gate band that excludes ratio 1; a truncated-IS cap below 1);
- a group size of 1 with a group-relative advantage (every advantage exactly 0) or with dynamic
  sampling (every group dropped);
- more minibatches than a step's batch has rows (``algorithms.data.minibatches`` would run fewer
  optimizer steps than the step reserves);
- a branching turn the task never reaches (the run would fail at its start);
- a reward fault (``fault.rewards``) on an arm whose objective reads no reward (SFT, DPO), and the
  gradient-noise probe (``rollout.grad_noise_probe``) on arms whose objective has none;
- a sampler mismatch the rollout backend cannot inject (``rollout.mismatch.logit_noise`` on vLLM);
- a budget (``budget``, and an explicit ``sweep.trial_budget`` or ``ladder.budget``) below the worst
  case one training step reserves, so no step is ever admitted; or one whose counters an arm never
  charges, so its runs would never end.

:func:`cautions` lists what is valid but works against the arm (printed, never refused): among them
absolute clip bounds on a sequence ratio far from the spread of its log measured on the built-in
tiny policy, the one policy whose spread is known before a run.

The worst case of one step mirrors the training loop's admission (``Trainer.step``): the collector's
``worst_case()`` (``RunContext.worst_rollouts`` and the collectors' additions) plus the update's
bound (``Trainer.worst_update``). Only what is certain is checked: additions that depend on the run
(branch points, imagined rounds, time) are left out, so the computed cost is a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sixblanks.algorithms.blanks import Blanks
from sixblanks.budgets.worst import episodes_worst, update_worst

from .experiment import ExperimentConfig
from .parallel_checks import parallel_notes, parallel_problems
from .sections import RolloutConfig, TaskConfig
from .tool_checks import tool_problems


@dataclass
class _Arm:
    name: str
    preset: str
    override: dict[str, Any]
    blanks: Blanks
    rollout: RolloutConfig
    group_size: int
    tool_turns: int = 0
    """Tool turns an episode may take where the arm is offered the code tool (``tools:``)."""
    tool_calls: int = 0
    """Programs an episode may run (tool turns x calls per turn)."""

    @property
    def tools(self) -> bool:
        return self.tool_turns > 0

    def path(self, dotted: str) -> str:
        """``arms.<arm>.blanks.<dotted>``, with where the value comes from when the arm does not
        set it (the preset or the default)."""

        node: Any = self.override
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        where = f"arms.{self.name}.blanks.{dotted}"
        return where if node is not None else f"{where} (from preset '{self.preset}')"

    @property
    def group_path(self) -> str:
        """Where the arm's group size is set: its data blank (or preset), else
        rollout.group_size."""

        if self.blanks.data.group_size is None:
            return "rollout.group_size"
        return self.path("data.group_size")


def resolved_arms(cfg: ExperimentConfig) -> list[_Arm]:
    """The arms whose blanks resolve (the others are reported by the semantic pass)."""

    from pydantic import ValidationError

    out = []
    for name, spec in cfg.arms.items():
        try:
            blanks = cfg.resolved_blanks(name)
        except (ValidationError, KeyError, ValueError):
            continue
        rollout = cfg.rollout_for(name)
        g = blanks.data.group_size or rollout.group_size
        tools = cfg.tools_for(name)
        turns, calls = (
            (tools.max_calls, tools.max_calls * tools.calls_per_turn) if tools else (0, 0)
        )
        out.append(_Arm(name, spec.preset, spec.blanks, blanks, rollout, g, turns, calls))
    return out


def _turns(task: TaskConfig) -> int | None:
    """The task's turn limit as a run sees it (``RunContext.turns``); None when the task cannot be
    built here (then 1 turn is the lower bound used)."""

    from ..tasks.registry import make_task

    try:
        return max(1, int(make_task(task.name, task.params).max_turns))
    except Exception:  # noqa: BLE001 - reported by the semantic pass
        return None


# --------------------------------------------------------------------------- weight


def _weight_problems(arm: _Arm) -> list[str]:
    w, out = arm.blanks.weight, []
    if w.trust_region in ("clip", "dis") and w.eps_low >= 1:
        level = "sequence-level" if w.ratio in ("sequence", "gspo_token") else "token-level"
        out.append(
            f"{arm.path('weight.eps_low')}: {w.eps_low:g} puts the lower clip bound at "
            f"1 - {w.eps_low:g} = {1 - w.eps_low:g}, where no ratio is (ratios are > 0): it clips "
            f"nothing; a {level} ratio needs 0 < eps_low < 1 (e.g. 0.2"
            + (", or GSPO's 3e-4)" if level == "sequence-level" else ")")
        )
    g = w.gate
    if g is not None and g.metric == "ratio" and not g.low <= 1.0 <= g.high:
        verb = "masks" if g.mode == "mask" else "reweights"
        out.append(
            f"{arm.path('weight.gate')}: the ratio band [{g.low:g}, {g.high:g}] excludes 1, so it "
            f"{verb} every token whose trainer and behaviour policies agree; use low <= 1 <= high "
            "(e.g. 0.5 and 2)"
        )
    if w.tis_cap is not None and w.tis_cap < 1:
        verb = "drops" if w.tis_form.endswith("_mask") else "scales down"
        out.append(
            f"{arm.path('weight.tis_cap')}: {w.tis_cap:g} < 1 {verb} even the tokens whose "
            "trainer and behaviour policies agree (ratio 1); use a cap >= 1 (e.g. 2)"
        )
    return out


def _fault_problems(cfg: ExperimentConfig, arm: _Arm) -> list[str]:
    """A reward fault on an arm whose update reads no reward (SFT, DPO: nothing to shuffle)."""

    fault = cfg.arms[arm.name].fault.rewards
    if fault == "none" or arm.blanks.objective == "pg":
        return []
    return [
        f"arms.{arm.name}.fault.rewards: '{fault}' acts on the rewards the advantages are "
        f"computed from, and the arm's objective '{arm.blanks.objective}' "
        f"({arm.path('objective')}) computes none; plant it on a policy-gradient arm, or set "
        "rewards: none"
    ]


def _mismatch_problems(cfg: ExperimentConfig, arm: _Arm) -> list[str]:
    """``rollout.mismatch`` (the mismatch lab) where the backend cannot inject it: vLLM takes a
    sampler dtype (its engine's dtype) and a nucleus (its top_p), not per-step logit noise."""

    m = arm.rollout.mismatch
    if arm.rollout.backend != "vllm" or m.logit_noise <= 0:
        return []
    own = cfg.arms[arm.name].rollout.mismatch
    where = (
        f"arms.{arm.name}.rollout.mismatch.logit_noise"
        if own is not None and "logit_noise" in own.model_fields_set
        else "rollout.mismatch.logit_noise"
    )
    return [
        f"{where}: {m.logit_noise:g} needs rollout.backend hf: the vLLM engine's sampler adds no "
        "noise to its logits (it does inject mismatch.sampler_dtype, as its dtype, and "
        "mismatch.top_p); set logit_noise: 0 or use the hf backend"
    ]


def _env_worker_problems(arm: _Arm) -> list[str]:
    """Environment steps on threads where the environments share state: a self-play game's
    opponent pool plays its members in one shared model."""

    if arm.rollout.env_workers <= 1 or arm.blanks.data.self_play is None:
        return []
    return [
        f"arms.{arm.name}: rollout.env_workers {arm.rollout.env_workers} with data.self_play: "
        "the opponents' pool loads each member into one shared model, so its games cannot step "
        "at once; set rollout.env_workers: 1"
    ]


def _probe_problems(cfg: ExperimentConfig, arms: list[_Arm]) -> list[str]:
    """The gradient-noise probe on arms whose objective has none (actor-critic, SFT, DPO)."""

    if not cfg.rollout.grad_noise_probe:
        return []
    loose = []
    for arm in arms:
        objective, estimator = arm.blanks.objective, arm.blanks.advantage.estimator
        if objective != "pg" or estimator == "gae":
            loose.append(f"{arm.name} (objective '{objective}', advantage.estimator '{estimator}')")
    if not loose:
        return []
    return [
        f"rollout.grad_noise_probe: only the critic-free policy-gradient objective measures the "
        f"gradient's noise, and arm(s) {', '.join(loose)} would log nothing; leave them out of the "
        "probe's experiment or set grad_noise_probe: false"
    ]


# --------------------------------------------------------------------------- groups and batches


def _zero_advantage(b: Blanks) -> tuple[str, str] | None:
    """Why a group of one sample gets an advantage of exactly 0 on every token, and the blank
    value that would give it one; None when it does not."""

    a = b.advantage
    if a.estimator in ("group_norm", "group_mean", "loo", "reinforce_pp_baseline", "prime"):
        if a.singleton == "zero":
            why = f"advantage.estimator '{a.estimator}' with advantage.singleton 'zero'"
            return why, "advantage.singleton: raw (A = R)"
    if a.estimator == "turn_return" and a.turn_baseline == "group":
        why = "advantage.estimator 'turn_return' with advantage.turn_baseline 'group'"
        return why, "advantage.turn_baseline: none"
    if a.estimator == "prm" and a.prm.mode in ("sum", "min"):
        return f"advantage.estimator 'prm' with advantage.prm.mode '{a.prm.mode}'", ""
    return None


_NO_GROUP = "an estimator without a group baseline (batch_mean, reinforce_pp, remax, gae)"


def _group_problems(arms: list[_Arm]) -> list[str]:
    """A group size of 1 with a group baseline (every A = 0) or with dynamic sampling (every group
    dropped). Branching makes groups of its own at its branch points: left alone."""

    out: list[str] = []
    shared: list[str] = []
    fixes: list[str] = []
    for arm in arms:
        b = arm.blanks
        if arm.group_size != 1 or b.data.source != "rollouts" or b.data.branching is not None:
            continue
        zero = _zero_advantage(b) if b.objective == "pg" else None
        if zero is not None:
            why, fix = zero
            if arm.group_path == "rollout.group_size":
                shared.append(f"{arm.name} ({why})")
                fixes += [fix] if fix and fix not in fixes else []
            else:
                out.append(
                    f"{arm.group_path}: 1 sample per prompt with {why} gives every sample an "
                    "advantage of exactly 0 (a group of one has no baseline): the arm would learn "
                    f"nothing; use a group size >= 2, or {fix + ', or ' if fix else ''}{_NO_GROUP}"
                )
        if b.data.dynamic_sampling:
            out.append(
                f"{arm.path('data.dynamic_sampling')}: with a group size of 1 ({arm.group_path}) "
                "every group's rewards are all equal, so dynamic sampling drops every group and no "
                "step trains on anything; use a group size >= 2 or dynamic_sampling: false"
            )
    if shared:
        out.insert(
            0,
            f"rollout.group_size: 1 sample per prompt gives arm(s) {', '.join(shared)} an "
            "advantage of exactly 0 on every sample (a group of one has no baseline): they would "
            "learn nothing; use a group size >= 2, or on those arms "
            f"{', '.join(fixes) + ' or ' if fixes else ''}{_NO_GROUP}",
        )
    return out


def _max_rows(arm: _Arm) -> tuple[int, str] | None:
    """The most units (rows; pairs for DPO) one step's update can split into minibatches, and how
    they are counted; None where it depends on the run (branching, imagined rounds, tree search)."""

    d, r, g = arm.blanks.data, arm.rollout, arm.group_size
    ppp = f"prompts_per_step {r.prompts_per_step}"
    if d.source == "preference_pairs":
        return r.prompts_per_step, f"at most one pair per prompt ({ppp})"
    if d.source == "search":
        if d.search.select == "best":
            return r.prompts_per_step, f"the best sample of each prompt ({ppp})"
        if d.search.mode == "best_of_n":
            n = r.prompts_per_step * d.search.n
            return n, f"{ppp} x data.search.n {d.search.n}"
        return None
    if d.branching is not None or d.world_model is not None:
        return None
    rows, how = r.prompts_per_step * g, f"{ppp} x group size {g}"
    if d.source == "rollouts" and d.replay is not None:
        rows += d.replay.per_step * g
        how += f", plus data.replay.per_step {d.replay.per_step} replayed groups"
    return rows, how


def _minibatch_problems(arm: _Arm) -> list[str]:
    d, bound = arm.blanks.data, _max_rows(arm)
    if bound is None or d.minibatches <= bound[0]:
        return []
    rows, how = bound
    return [
        f"{arm.path('data.minibatches')}: {d.minibatches} minibatches of a step's batch of at most "
        f"{rows} rows ({how}): a minibatch needs a row, so at most {rows} optimizer steps would "
        f"run per epoch while {d.minibatches} are reserved; use at most {rows}"
    ]


def _branching_problems(arm: _Arm, tasks: list[tuple[str, int | None]]) -> list[str]:
    br = arm.blanks.data.branching
    if br is None:
        return []
    out = []
    for name, turns in tasks:
        if turns is not None and max(br.turns) >= turns:
            out.append(
                f"{arm.path('data.branching.turns')}: turn {max(br.turns)} never happens in task "
                f"'{name}' (at most {turns} turn(s), numbered from 0)"
            )
    return out


# --------------------------------------------------------------------------- budgets


def step_worst(arm: _Arm, turns: int, judge_per_verify: int) -> dict[str, tuple[float, str]]:
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


def _with_update(arm: _Arm, worst: dict[str, tuple[float, str]]) -> dict[str, tuple[float, str]]:
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


def _tree_worst(arm: _Arm, turns: int, judge: int, t: str) -> dict[str, tuple[float, str]]:
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


def _charged(arm: _Arm, task: TaskConfig) -> set[str]:
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


def _budget_problems(
    where: str,
    budget: dict[str, float],
    arms: list[_Arm],
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


_STEP_KEYS = ("rollout.", "blanks.data.", "blanks.objective", "blanks.advantage.")
"""Sweep-space paths that change what one step costs: an arm tuned on them is not checked."""


def _prm_label_problems(arms: list[_Arm], tasks: list[TaskConfig]) -> list[str]:
    """A trained process reward model learns from step labels: refused on a task that gives none
    (unless a search tree labels the steps), as the run itself would refuse it at its start."""

    from ..tasks.registry import make_task

    out = []
    for arm in arms:
        a, d = arm.blanks.advantage, arm.blanks.data
        tree = d.source == "search" and d.search.tree_labels and d.search.mode != "best_of_n"
        if a.estimator != "prm" or a.prm.scorer != "trained" or tree:
            continue
        for task in tasks:
            try:
                labelled = make_task(task.name, task.params).has_step_labels
            except Exception:  # noqa: BLE001 - reported by the semantic pass
                continue
            if not labelled:
                out.append(
                    f"arms.{arm.name}.blanks.advantage.prm.scorer: 'trained' learns from step "
                    f"labels, and task '{task.name}' gives none; use a task with step labels "
                    "(chain_arithmetic, plan_execute), a search tree's labels (data.source search, "
                    "search.tree_labels) or a scorer 'module:function'"
                )
    return out


def run_problems(cfg: ExperimentConfig) -> list[str]:
    """Every problem of ``cfg``'s runs that shows before any of them starts."""

    arms = resolved_arms(cfg)
    tasks = [(t, _turns(t)) for t in cfg.tasks or []]
    out: list[str] = []
    for arm in arms:
        out += _weight_problems(arm)
        out += _minibatch_problems(arm)
        out += _branching_problems(arm, [(t.name, n) for t, n in tasks])
        out += _fault_problems(cfg, arm)
        out += _env_worker_problems(arm)
        out += [p for p in _mismatch_problems(cfg, arm) if p not in out]  # one line a key
    out += _group_problems(arms)
    out += _prm_label_problems(arms, [t for t, _ in tasks])
    out += _probe_problems(cfg, arms)
    out += _budget_problems("budget", cfg.budget, arms, tasks)
    out += parallel_problems(cfg) + tool_problems(cfg)
    first = tasks[:1]  # the ladder and the sweep run the first task
    sw = cfg.sweep
    if "trial_budget" in sw.model_fields_set and sw.trial_budget:
        tuned = [
            a
            for a in arms
            if a.name in sw.space and not any(p.startswith(_STEP_KEYS) for p in sw.space[a.name])
        ]
        out += _budget_problems("sweep.trial_budget", sw.trial_budget, tuned, first)
    lad = cfg.ladder
    if "budget" in lad.model_fields_set and lad.budget and arms:
        arm = [a for a in arms if a.name == (lad.arm or next(iter(cfg.arms)))]
        out += _budget_problems("ladder.budget", lad.budget, arm, first)
    return out


# --------------------------------------------------------------------------- cautions

TINY_SEQ_SPREAD = (0.0034, 0.138)
"""The smallest and the largest spread of a sequence's log-ratio (per step, the std over sequences
of mean_t log pi/pi_old) that the golden fixture's ``gspo`` and ``gspo_paper`` runs measured on the
built-in tiny policy (arithmetic, answers of at most 6 tokens, 4 minibatches a batch, learning
rate :data:`TINY_SEQ_SPREAD_LR`); ``tests/test_ratio_scale.py`` keeps them equal to the fixture. A
sequence ratio's spread depends on the policy, the lengths and the learning rate, and a run
measures it only once it updates (``ratio.seq_logratio_spread``): this is the one policy whose
spread is known before anything runs."""
TINY_SEQ_SPREAD_LR = 3e-4
SPREAD_FAR = 10.0
"""A bound below 1/10 of the smallest spread is crossed by almost every sequence that moved that
way (a normal spread leaves 92% of its mass beyond 0.1 sigma); one above 10 times the largest is
crossed by none."""


def _sequence_bound_caution(cfg: ExperimentConfig, arm: _Arm) -> str | None:
    """Absolute clip bounds on a sequence ratio far from the spread measured on the built-in tiny
    policy, for an arm that trains that policy at about the learning rate it was measured at and
    updates more than once per batch (with one update every sequence ratio is exactly 1 and no
    bound acts). Another policy's spread is unknown before its run: nothing is said."""

    b, w = arm.blanks, arm.blanks.weight
    if (
        w.ratio not in ("sequence", "gspo_token")
        or w.trust_region != "clip"
        or w.clip_scale is not None
        or b.objective != "pg"
        or b.data.epochs * b.data.minibatches < 2
        or cfg.model.path is not None
        or cfg.model.gguf is not None
        or not 1 / 3 <= cfg.optimizer_for(arm.name).lr / TINY_SEQ_SPREAD_LR <= 3
    ):
        return None
    lo, hi = TINY_SEQ_SPREAD
    far: list[str] = []
    # each bound as the distance of log s_i from 0 at which it clips
    for key, dist, sign, way in (
        ("eps_low", -math.log1p(-w.eps_low) if w.eps_low < 1 else math.inf, "negative", "fell"),
        ("eps_high", math.log1p(w.eps_high), "positive", "rose"),
    ):
        eps = getattr(w, key)
        if dist < lo / SPREAD_FAR:
            far.append(
                f"weight.{key} {eps:g}{_from_preset(arm, key)} is {lo / dist:.0f}x below the "
                f"smallest, so nearly every sequence with a {sign} advantage whose ratio {way} "
                "gets no gradient"
            )
        elif math.isfinite(dist) and dist > hi * SPREAD_FAR:
            far.append(
                f"weight.{key} {eps:g}{_from_preset(arm, key)} is {dist / hi:.0f}x above the "
                f"largest, so it clips no sequence: no trust region for a {sign} advantage"
            )
    if not far:
        return None
    return (
        f"arms.{arm.name}: absolute clip bounds on a sequence ratio far from the spread of its "
        f"log measured on the built-in tiny policy ({lo:g} to {hi:g} a step, on arithmetic at "
        f"learning rate {TINY_SEQ_SPREAD_LR:g}): " + "; ".join(far) + ". Set weight.clip_scale "
        "(preset gspo's {low: 2, high: 2.667}) for bounds at multiples of the spread the run "
        "measures, or compare clip_frac with ratio.seq_logratio_spread after a run"
    )


def _from_preset(arm: _Arm, key: str) -> str:
    weight = arm.override.get("weight") or {}
    return "" if key in weight else f" (from preset '{arm.preset}')"


def _heldout_cautions(cfg: ExperimentConfig) -> list[str]:
    """A task whose space holds fewer distinct held-out problems than the evaluation asks for: its
    scores are over that many instances (each problem once), not the requested size; and what a
    task's partition had to give up (a dataset's rows that repeat a held-out prompt)."""

    from ..tasks.registry import make_task

    out: list[str] = []
    for t in cfg.tasks or []:
        try:
            task = make_task(t.name, t.params)
        except Exception:  # noqa: BLE001 - a task that does not build is reported as a problem
            continue
        n = cfg.eval.size or t.eval_size
        split = cfg.eval.split
        try:
            have = {s: task.distinct_available(s, n) for s in ("test", "validation")}
            notes = task.heldout_notes()
        except Exception:  # noqa: BLE001 - a user task's partition that raises: nothing to say
            continue
        if have[split] < n:
            other = "validation" if split == "test" else "test"
            out.append(
                f"task '{t.name}': the evaluation asks for {n} held-out instances (eval.size or "
                f"eval_size) but its space holds {have[split]} distinct {split} problem(s) "
                f"({have[other]} {other}): each evaluation scores those {have[split]}, each once, "
                "so its interval is that wide; a larger space (task.params) holds more"
            )
        out.extend(f"task '{t.name}': {note}" for note in notes)
    return out


def cautions(cfg: ExperimentConfig) -> list[str]:
    """What is valid but works against the arm (the chapter's warnings): printed by ``validate``
    and logged when a run starts, never refused."""

    out: list[str] = []
    for arm in resolved_arms(cfg):
        b, G = arm.blanks, arm.group_size
        weight = arm.override.get("weight") or {}
        if b.weight.clip_scale is not None and {"eps_low", "eps_high"} & set(weight):
            out.append(
                f"arms.{arm.name}: weight.eps_low/eps_high with weight.clip_scale: the bounds are "
                "set from the measured spread after the first update, so these act only before "
                "it (where nothing is clipped); set weight.clip_scale.low/high, or clip_scale: "
                "null for absolute bounds"
            )
        seq = _sequence_bound_caution(cfg, arm)
        if seq is not None:
            out.append(seq)
        if b.objective != "pg" or b.data.source != "rollouts" or b.data.branching is not None:
            continue
        est = b.advantage.estimator
        if est == "batch_mean" and G == 1:
            out.append(
                f"arms.{arm.name}: advantage.estimator 'batch_mean' with one sample per prompt "
                f"({arm.group_path} 1): the baseline is the mean over the whole batch, across "
                "different prompts, so an easy prompt's reward counts as credit; a group of "
                "samples per prompt gives a baseline per prompt"
            )
        if est == "gigpo" and G == 1:
            out.append(
                f"arms.{arm.name}: GiGPO with one sample per prompt ({arm.group_path} 1): its "
                "episode term is 0 (a group of one) and its step term is 0 unless one episode "
                "revisits a state (an anchor group needs two visits): almost every advantage is "
                "0; GiGPO needs a group of episodes per prompt"
            )
        if est == "loo" and G == 2:
            out.append(
                f"arms.{arm.name}: RLOO with 2 samples per prompt ({arm.group_path} 2): each "
                "sample's baseline is the other sample alone, so A = +-(R1 - R2) and the estimate "
                "is as noisy as one reward; use 4 or more samples per prompt"
            )
    return out + _heldout_cautions(cfg) + parallel_notes(cfg)
