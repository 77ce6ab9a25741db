"""Held-out evaluation on each task's deterministic evaluation set, what a task evaluates
apart from its score (``Task.evaluate_apart``, harness/tasks/base.py: a game's fixed external
opponents), and a DPO arm's distribution-shift evaluation (:func:`evaluate_shift`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ..rollout.agent import Episode, episodes_to_batch, run_episodes, task_params
from ..rollout.engine import RolloutEngine, SamplingParams
from ..rollout.search import search
from ..rollout.trajectory import TrajectoryBatch
from ..tasks.base import Games, Instance, Play, Task
from ..tasks.verify import VerifierGate
from .context import tool_cost


def evaluate(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    n: int,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    samples: int = 1,
    seed: int = 0,
    max_context_tokens: int = 512,
    split: str = "test",
    env_workers: int = 1,
) -> dict[str, Any]:
    """Mean outcome reward over the held-out set of ``split`` asked for ``n`` instances: distinct
    problems, at most ``n`` (``Task.eval_instances``); ``"n"`` in the record is how many it held,
    the effective number of instances (greedy when temperature is 0).

    Returns ``{"score", "n", "split", "seed_range", "success_rate", "pass_at", "failed",
    "verifier_calls", "judge_calls", "generated_tokens", "per_instance"}``, and ``tool_calls`` and
    ``tool_seconds`` where the episodes called the code tool; ``score`` is the mean reward of one
    sample (pass@1 for a 0/1 reward, averaged over ``samples``), ``pass_at`` maps k to the unbiased
    pass@k estimate (success: reward > 0) for k = 1 and k = ``samples``. Evaluation cost is reported
    here so callers can count it apart from the training budget. ``env_workers``: threads for the
    episodes' environment steps (a code tool's programs).
    """

    gate = VerifierGate(task)
    judged0 = gate.counts()[1]  # the task's judge counts across training and evaluation
    # the held-out set holds distinct problems only: fewer than ``n`` where the task's space has
    # fewer of this split, so every count below is the set's own length, never ``n``
    instances = task.eval_instances(n, split)
    seeds = [i.seed for i in instances]
    params = SamplingParams(
        temperature=temperature, max_new_tokens=max_new_tokens, env_workers=env_workers
    )
    gen = torch.Generator().manual_seed(seed)
    batch = run_episodes(
        engine,
        tokenizer,
        task,
        instances,
        samples,
        params,
        gate,
        max_context_tokens=max_context_tokens,
        generator=gen,
    )
    return _record(batch, seeds, samples, split, gate, judged0)


def _record(
    batch: TrajectoryBatch,
    seeds: list[int],
    samples: int,
    split: str,
    gate: VerifierGate,
    judged0: int,
) -> dict[str, Any]:
    """:func:`evaluate`'s record of ``batch`` (``samples`` rows of each instance, whose seeds are
    ``seeds``); ``judged0``: the judge's count before the evaluation."""

    rewards = batch.reward.view(len(seeds), samples)
    per = rewards.mean(-1)
    correct = (rewards > 0).sum(-1).tolist()
    return {
        "score": float(per.mean()),
        "n": len(seeds),
        "split": split,
        "seed_range": [min(seeds), max(seeds) + 1] if seeds else [],
        "success_rate": float((batch.reward > 0).float().mean()),
        "pass_at": {
            str(k): float(sum(pass_at_k(samples, c, k) for c in correct) / len(correct))
            for k in sorted({1, samples})
        },
        "failed": int(batch.failed.sum()),
        "verifier_calls": gate.stats.calls,
        "judge_calls": gate.counts()[1] - judged0,
        "generated_tokens": batch.launched_tokens(),
        "per_instance": per.tolist(),
        **tool_cost([batch]),
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one instance from ``n`` samples of which ``c`` succeeded (Chen et al.
    2021): 1 - C(n-c, k) / C(n, k), the chance that k samples drawn without replacement contain a
    success."""

    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate_beam(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    n: int,
    *,
    beam: int,
    expand: int,
    temperature: float,
    max_new_tokens: int,
    seed: int = 0,
    max_context_tokens: int = 512,
    split: str = "test",
) -> dict[str, Any]:
    """Inference-time beam search over turns on the same ``n`` held-out instances as
    :func:`evaluate`: ``beam`` nodes kept per turn, each expanded ``expand`` times at
    ``temperature``, ranked by the return so far plus the task's potential; an instance scores the
    best reward among its finished leaves (the verifier chooses the leaf, as best-of-k does for
    pass@k), 0 where none finished. Its inference-time compute (``generated_tokens``, each node's
    tokens once; ``env_steps``; verifier and judge calls) is returned with it, to be reported in a
    row of its own, never with the single-sample score."""

    gate = VerifierGate(task)
    judged0 = gate.counts()[1]
    instances = task.eval_instances(n, split)
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    tree = search(
        engine,
        tokenizer,
        task,
        instances,
        params,
        gate,
        mode="beam",
        beam=beam,
        expand=expand,
        max_context_tokens=max_context_tokens,
        generator=torch.Generator().manual_seed(seed),
    )
    found: list[float | None] = [None] * len(instances)
    for leaf in tree.leaves:
        if leaf.episode.failure is None:
            g, r = leaf.episode.group, float(sum(leaf.episode.turn_rewards))
            found[g] = r if found[g] is None else max(found[g], r)
    best = [r if r is not None else 0.0 for r in found]  # no finished leaf: 0, as a failure
    cost = tree.cost()
    return {
        "mode": f"beam {beam}x{expand}",
        "beam": beam,
        "expand": expand,
        "score": sum(best) / len(best) if best else 0.0,
        "n": len(instances),
        "per_instance": best,
        "generated_tokens": cost["launched_tokens"],
        "env_steps": cost["env_steps"],
        "leaves": len(tree.leaves),
        "tips": len(tree.tips),
        "verifier_calls": gate.stats.calls,
        "judge_calls": gate.counts()[1] - judged0,
    }


def evaluation_worst(ctx) -> dict[str, float]:
    """The most one evaluation of a run (``ctx``: its RunContext) can cost: its single samples and,
    with ``eval.beam``, every node of the beam search (a fork may replay its prefix)."""

    s = ctx.settings
    worst = ctx.worst_rollouts(s.eval_size * s.eval_samples)
    if s.eval_beam:
        b = s.eval_beam
        nodes = s.eval_size * b["beam"] * b["expand"]  # episodes' worth: each up to every turn
        extra = ctx.worst_rollouts(nodes)
        replays = float(nodes * ctx.turns * (ctx.turns - 1))  # a fork's prefix, replayed
        extra["verifier_calls"] += replays
        extra["judge_calls"] += replays * ctx.judge_calls_per_verify
        worst = {k: worst[k] + extra[k] for k in worst}
    return worst


OPTIONAL_COSTS = ("judge_calls", "tool_calls", "tool_seconds")
"""Costs an evaluation has only with a judge or a code tool: totals leave them out while 0."""


def charge_evaluation(total: dict[str, float], ev: dict[str, Any]) -> dict[str, float]:
    """What evaluation ``ev`` cost (generated tokens, verifier and judge calls, and the code
    tool's programs, calls and seconds, where its episodes were offered the tool), added with
    what an inference-time search at it cost (``ev["search"]``) to the running ``total`` (a cost
    of :data:`OPTIONAL_COSTS` only once nonzero). Returns the evaluation's own cost."""

    keys = ("generated_tokens", "verifier_calls", "judge_calls", "tool_calls", "tool_seconds")
    cost = {k: float(ev[k]) for k in keys if k in ev}
    for k, v in cost.items():
        v += float(ev.get("search", {}).get(k, 0.0))
        if v or k not in OPTIONAL_COSTS:
            total[k] = total.get(k, 0.0) + v
    return cost


def evaluate_run(ctx) -> tuple[dict[str, Any], dict[str, float]]:
    """One held-out evaluation of a run's current policy (``ctx``: its RunContext): single samples
    (:func:`evaluate`) and, with ``eval.beam``, an inference-time beam search (``ev["search"]``, its
    compute kept apart). Returns the result and what it cost, for the evaluation ledger."""

    s = ctx.settings
    common = {
        "max_new_tokens": s.rollout.max_new_tokens,
        "seed": s.seed,
        "max_context_tokens": s.rollout.max_prompt_tokens,
        "split": s.eval_split,
    }
    ev = evaluate(
        ctx.engine,
        ctx.tokenizer,
        ctx.task,
        s.eval_size,
        temperature=s.eval_temperature,
        samples=s.eval_samples,
        env_workers=s.rollout.env_workers,
        **common,
    )
    actual = {
        "launched_tokens": float(ev["generated_tokens"]),
        "verifier_calls": float(ev["verifier_calls"]),
        "judge_calls": float(ev["judge_calls"]),
        "rollouts_launched": float(ev["n"] * s.eval_samples),
        **{k: float(ev[k]) for k in ("tool_calls", "tool_seconds") if k in ev},
    }
    if s.eval_beam:
        b = s.eval_beam
        ev["search"] = evaluate_beam(
            ctx.engine,
            ctx.tokenizer,
            ctx.task,
            s.eval_size,
            beam=b["beam"],
            expand=b["expand"],
            temperature=b["temperature"],
            **common,
        )
        for k, v in (("launched_tokens", "generated_tokens"), ("rollouts_launched", "tips")):
            actual[k] += float(ev["search"][v])
        for k in ("verifier_calls", "judge_calls"):
            actual[k] += float(ev["search"][k])
    return ev, actual


# ----------------------------------------------------------------------------- evaluation apart


def greedy_games(engine: RolloutEngine, tokenizer, task: Task, rollout) -> Play:
    """A task's ``play`` (:class:`~sixblanks.harness.tasks.base.Play`, uncharged): greedy games of
    the policy behind ``engine``, one episode per instance, within the run's ``rollout`` limits
    (``max_new_tokens``, ``max_prompt_tokens``); ``device_seconds`` and ``wall_seconds`` are the
    caller's to add (:func:`evaluate_apart` measures them with its charge)."""

    params = SamplingParams(temperature=0.0, max_new_tokens=rollout.max_new_tokens)

    def play(label: str, instances: list[Instance]) -> Games:
        gate = VerifierGate(task)
        batch = run_episodes(
            engine,
            tokenizer,
            task,
            instances,
            1,
            params,
            gate,
            max_context_tokens=rollout.max_prompt_tokens,
        )
        return Games(
            rewards=batch.reward.tolist(),
            decided=(batch.terminated & ~batch.failed).tolist(),
            cost={
                "generated_tokens": float(batch.launched_tokens()),
                "verifier_calls": float(gate.stats.calls),
                "env_steps": float(int(batch.n_turns.sum())),
            },
        )

    return play


def evaluate_apart(ctx, meter, cost=None, run_cost=None) -> dict[str, Any]:
    """At an evaluation point of a run (``ctx``: its RunContext): what its task evaluates apart from
    the score (:meth:`Task.evaluate_apart`; ``{}`` for most tasks, a game's rows against its
    external opponents), to merge into the evaluation record. Each ``play`` is reserved at its
    worst case on ``meter`` (the run's evaluation meter: apart from the training budget), charged
    what it cost, and its device and wall seconds are added to its ``Games.cost``. A DPO arm's
    distribution-shift evaluation (:func:`evaluate_shift`) is merged in as ``shift``, and what it
    spent is added to the evaluation record's ``cost`` and to the run's ``run_cost`` (its
    generated tokens and calls)."""

    s = ctx.settings
    greedy = greedy_games(ctx.engine, ctx.tokenizer, ctx.task, s.rollout)

    def play(label: str, instances: list[Instance]) -> Games:
        worst = ctx.worst_rollouts(len(instances))
        charge = meter.must_reserve(worst, f"evaluation {label} step {ctx.step}")
        with charge:
            games = greedy(label, instances)
            charge.actual = {
                "launched_tokens": games.cost["generated_tokens"],
                "verifier_calls": games.cost["verifier_calls"],
                "env_steps": games.cost["env_steps"],
                "rollouts_launched": float(len(instances)),
            }
        games.cost.update(zip(("device_seconds", "wall_seconds"), charge.elapsed))
        return games

    out = dict(ctx.task.evaluate_apart(play, s.eval_size, s.eval_split))
    before = dict(meter.ledger.counters)
    shift = evaluate_shift(ctx, meter)
    if not shift:
        return out
    for k, name in SHIFT_COST.items():
        v = float(meter.ledger.counters[k] - before.get(k, 0.0))
        if cost is not None:
            cost[name] = cost.get(name, 0.0) + v
        if run_cost is not None and not name.endswith("seconds") and (v or name in run_cost):
            run_cost[name] = run_cost.get(name, 0.0) + v
    return {**out, "shift": shift}


SHIFT_COST = {
    "launched_tokens": "generated_tokens",
    "verifier_calls": "verifier_calls",
    "judge_calls": "judge_calls",
    "device_seconds": "device_seconds",
    "wall_seconds": "wall_seconds",
}
"""The evaluation ledger's counters a shift evaluation spends, by the names of an evaluation
record's cost (the training loop adds them to the evaluation's)."""


# ----------------------------------------------------------------------------- distribution shift


def evaluate_shift(ctx, meter) -> dict[str, float]:
    """A DPO arm's distribution-shift evaluation at an evaluation point (``ctx``: its RunContext),
    charged to ``meter`` (the run's evaluation ledger, apart from the training budget): how the
    policy scores held-out preference pairs, and how far its own samples are from them. ``{}`` for
    other objectives, or with ``data.pairs.heldout`` 0.

    The held-out pairs: a file's ``data.pairs.heldout`` pairs that are never trained on; without a
    file, the pairs (best and worst of G) of the initial policy's G rollouts of as many instances of
    the evaluation split (rolled at each evaluation, charged). Log-likelihoods are per token, of the
    distribution the trainer scores (the rollout's temperature, top-k, top-p), on the trained tokens
    (a segment pair's segments, never its prefix)::

        shift.pairs            held-out pairs scored
        shift.chosen_logp      mean log-likelihood of the chosen responses' tokens under the policy
        shift.rejected_logp    the same of the rejected responses
        shift.ref_chosen_logp  the same under the reference (the initial policy); ref_rejected_logp
        shift.margin           DPO's implicit reward margin: beta x the mean over pairs of
                               [log pi/pi_ref(chosen) - log pi/pi_ref(rejected)] (sequence sums, as
                               the loss takes them); 0 while the policy is the reference
        shift.accuracy         share of the pairs whose margin is > 0
        shift.self_logp        mean log-likelihood of the policy's own samples (one from each pair's
                               prompt and prefix, sampled as the rollouts are) under the policy
        shift.self_ref_logp    the same under the reference: against ref_chosen_logp, how typical of
                               the reference the policy's samples are next to the preferred data
        shift.self_kl          the KL estimate (k1, per token) of the policy from the reference on
                               its own samples, self_logp - self_ref_logp; 0 while they are one
        shift.self_tokens      the tokens of those samples
    """

    d = ctx.blanks.data
    if ctx.blanks.objective != "dpo" or d.pairs.heldout == 0:
        return {}
    from .collectors.pair_file import heldout_pairs

    held = (
        heldout_pairs(d.pairs, ctx.tokenizer, ctx.task)
        if d.pairs.file is not None
        else _rolled_pairs(ctx, meter)
    )
    if held is None:
        return {}
    pairs, k = held
    out: dict[str, float] = {"shift.pairs": float(k)}
    if k:
        out.update(_pair_scores(ctx, pairs, k))
    out.update(_own_samples(ctx, meter, pairs, k or pairs.size))  # no pair: every prompt held
    return out


def _rolled_pairs(ctx, meter) -> tuple[TrajectoryBatch, int]:
    """The held-out pairs of a DPO arm without a file: the initial policy's G rollouts of the first
    ``data.pairs.heldout`` instances of the evaluation split, and how many pairs they made (when
    none: one row of each instance, for the policy's own samples)."""

    from .collectors.pairs import select_pairs
    from .context import rollout_cost

    s, n = ctx.settings, ctx.blanks.data.pairs.heldout
    g = max(2, ctx.group_size)
    gate = VerifierGate(ctx.task)
    since = gate.counts()
    charge = meter.must_reserve(
        ctx.worst_rollouts(n * g), f"evaluation shift pairs step {ctx.step}"
    )
    with charge:
        batch = run_episodes(
            ctx.hf_engine(ctx.ref_model),
            ctx.tokenizer,
            ctx.task,
            ctx.task.eval_instances(n, s.eval_split),
            g,
            ctx.params,
            gate,
            max_context_tokens=s.rollout.max_prompt_tokens,
            generator=torch.Generator().manual_seed(s.seed),
        )
        charge.actual = {k: v for k, v in rollout_cost([batch], gate, since).items() if v}
    chosen, rejected, _, _ = select_pairs(batch)
    if not chosen:
        return batch.select(list(range(0, batch.size, g))), 0
    return batch.select(chosen + rejected), len(chosen)


def _token_mean(logp: torch.Tensor, mask: torch.Tensor) -> float:
    return float((logp * mask).sum() / mask.sum().clamp(min=1.0))


def _pair_scores(ctx, pairs: TrajectoryBatch, k: int) -> dict[str, float]:
    """The policy's and the reference's view of ``k`` pairs (rows ``i`` chosen, ``i + k``
    rejected)."""

    m = pairs.action_mask
    lp = ctx.batched_logprobs(ctx.model, pairs)
    ref = ctx.batched_logprobs(ctx.ref_model, pairs)
    ratio = ((lp - ref) * m).sum(1)  # log pi/pi_ref of each response: a sum over its tokens
    h = ratio[:k] - ratio[k:]
    return {
        "shift.chosen_logp": _token_mean(lp[:k], m[:k]),
        "shift.rejected_logp": _token_mean(lp[k:], m[k:]),
        "shift.ref_chosen_logp": _token_mean(ref[:k], m[:k]),
        "shift.ref_rejected_logp": _token_mean(ref[k:], m[k:]),
        "shift.margin": ctx.blanks.regularizer.dpo_beta * float(h.mean()),
        "shift.accuracy": float((h > 0).float().mean()),
    }


def _own_samples(ctx, meter, pairs: TrajectoryBatch, n: int) -> dict[str, float]:
    """The policy's own samples from the context (prompt and prefix) of the first ``n`` rows of
    ``pairs``, drawn from the distribution the log-probs score (the rollout's temperature, top-k
    and top-p, no injected mismatch: so that the mean of log pi - log pi_ref over them estimates
    KL(pi || pi_ref)), and how the policy and the reference score them."""

    s = ctx.settings
    params = task_params(dataclasses.replace(ctx.params, mismatch=None), ctx.task)
    contexts = []
    for i in range(n):
        end = int(pairs.attention_mask[i].sum())  # a sample failed before acting: all context
        start = next((a for kind, a, _ in pairs.segments[i] if kind == "action"), end)
        contexts.append(pairs.tokens[i, :start].tolist())
    worst = {"launched_tokens": float(n * params.max_new_tokens), "rollouts_launched": float(n)}
    with meter.must_reserve(worst, f"evaluation shift samples step {ctx.step}") as charge:
        gens = ctx.engine.generate(
            contexts, params, generator=torch.Generator().manual_seed(s.seed)
        )
        episodes = []
        for i, (context, (gen,)) in enumerate(zip(contexts, gens)):
            ep = Episode(Instance(int(pairs.instance_seeds[i]), pairs.observations[i][0]), i, None)
            ep.add("obs", context)
            ep.add("action", gen.token_ids, gen.logprobs, 0)
            episodes.append(ep)
        own = episodes_to_batch(episodes, ctx.tokenizer, ctx.engine.policy_version, ctx.task.name)
        charge.actual = {
            "launched_tokens": float(own.launched_tokens()),
            "rollouts_launched": float(n),
        }
    m = own.action_mask
    lp = ctx.batched_logprobs(ctx.model, own)
    ref = ctx.batched_logprobs(ctx.ref_model, own)
    return {
        "shift.self_logp": _token_mean(lp, m),
        "shift.self_ref_logp": _token_mean(ref, m),
        "shift.self_kl": _token_mean(lp - ref, m),
        "shift.self_tokens": float(m.sum()),
    }
