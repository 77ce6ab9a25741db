"""Rung 2, the frozen batch: the arm's own update (policy gradient, actor-critic, DPO or SFT) on a
frozen batch stored to disk, computed twice and across a micro-batch split: the same losses and
the same gradients, or the update depends on something it should not (its micro-batches, state
left from a previous call)."""

from __future__ import annotations

import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import torch

from ...layout import LADDER_FROZEN_BATCH
from ...rollout.agent import run_episodes
from ...rollout.engine import SamplingParams
from ...rollout.trajectory import TrajectoryBatch
from ...training.base import Collected, Prepared
from ...training.objectives.policy_gradient import PolicyGradient
from .rows import FROZEN_BATCH, RungResult, engine_name

FROZEN_TRIES = 8
"""Rung 2 draws at most this many batches of a group-relative arm looking for a reward spread."""


KINDS = {
    "pg": "policy-gradient update (the arm's A, w, Z and R)",
    "critic": "actor-critic update (policy loss with the critic's GAE advantages, and value loss)",
    "dpo": "DPO update (its loss on preference pairs against the reference)",
    "sft": "SFT update (the NLL of demonstrated action tokens)",
}
"""The kinds of update rung 2 reproduces, by :func:`arm_kind`."""


def arm_kind(blanks) -> str:
    """The objective an arm's update runs: sft, dpo, critic (``advantage.estimator: gae``) or pg."""

    if blanks.objective in ("sft", "dpo"):
        return blanks.objective
    return "critic" if blanks.advantage.estimator == "gae" else "pg"


class ProcessInputsStoodIn(PolicyGradient):
    """A process-credit arm's update
    (:class:`~sixblanks.harness.training.objectives.process.ProcessCredit` inherits the policy
    gradient's) with its second model's inputs stood in: step scores 0.5 where the environment
    gives no label, token rewards 0. Rung 2 checks the policy's loss and gradient on a frozen
    batch, not the process reward model."""

    SKIPS_UNUSED = False  # as ProcessCredit: pi_old and pi_ref always computed

    def process_inputs(self, collected: Collected, old_logp, ref_logp) -> dict[str, Any]:
        b = collected.batch
        return {
            "step_scores": torch.where(b.step_labels.isnan(), 0.5, b.step_labels),
            "process_rewards": torch.zeros(b.action_mask.shape),
        }


def rung_objective(ctx):
    """The objective rung 2 runs for the arm of ``ctx``: the arm's own, a process-credit arm's with
    its second model's inputs stood in (:class:`ProcessInputsStoodIn`)."""

    from ...training.objectives import make_objective

    if arm_kind(ctx.blanks) == "pg" and ctx.blanks.advantage.estimator in ("prm", "prime"):
        return ProcessInputsStoodIn(ctx)
    return make_objective(ctx)


DPO_ROUNDS = 4
"""Steps of a DPO arm's collector rung 2 draws at most, until two pairs (a split) are found."""


def _collected_pairs(ctx, collector) -> tuple[Collected | None, str]:
    """A DPO arm's pairs as its own collector makes them (scored rollouts of the reference policy,
    or a file's pairs), over up to :data:`DPO_ROUNDS` of its steps until two pairs are found:
    chosen rows first, then the rejected ones."""

    parts = []
    for _ in range(DPO_ROUNDS):
        c = collector.collect()
        if c.batch is not None and c.pairs:
            parts.append(c)
        if sum(c.pairs for c in parts) >= 2:
            break
    n = sum(c.pairs for c in parts)
    steps = f"{DPO_ROUNDS} steps of its collector" if n < 2 else "its collector"
    if not n:
        return None, f"no preference pair in {steps} (no group's rewards differ)"
    halves = [
        c.batch.select(list(range(k * c.pairs, (k + 1) * c.pairs))) for k in (0, 1) for c in parts
    ]
    batch = TrajectoryBatch.concat(halves, ctx.pad_id)
    return Collected(batch, pairs=n), f"{n} preference pairs from {steps}"


def _frozen_collected(ctx, collector, kind: str) -> tuple[Collected | None, str]:
    """The frozen batch and a phrase saying what it holds (None and why, where there is nothing to
    update on). A DPO arm's pairs and an SFT arm's demonstrations come from the arm's own collector
    (``collector``); every other arm's batch is ``prompts_per_step`` instances of seeds 0, 1, ...
    sampled G times each from a fixed generator (ReMax: with its greedy baseline)."""

    from ...training.collectors import GreedyBaseline

    r, task = ctx.settings.rollout, ctx.task
    if kind == "dpo":
        return _collected_pairs(ctx, collector)
    if kind == "sft" and ctx.blanks.data.source == "demonstrations":
        try:
            collected = collector.collect()
        except ValueError as exc:  # no oracle, or a demonstration that failed
            return None, f"no demonstrations: {exc}"
        return collected, f"{collected.batch.size} oracle demonstrations"
    G, P = ctx.group_size, r.prompts_per_step
    train = [s for s in range(FROZEN_TRIES * P * 8) if task.trains_on(s)]
    generator = torch.Generator().manual_seed(0)
    for tried in range(1, FROZEN_TRIES + 1):
        # training problems only, like the arm's own batches; a batch whose every group agrees on
        # its reward gives a group-relative arm a zero gradient, which reproduces trivially and
        # shows nothing: the next prompts are drawn until one group disagrees
        instances = task.instances(train[(tried - 1) * P : tried * P])
        batch = run_episodes(
            ctx.engine,
            ctx.tokenizer,
            task,
            instances,
            G,
            SamplingParams(r.temperature, r.top_p, r.top_k, r.max_new_tokens),
            generator=generator,
        )
        if kind != "pg" or bool((batch.reward.view(-1, G).std(1) > 0).any()):
            break
    what = f"{batch.size} rollouts ({len(instances)} prompts x {G})"
    if tried > 1:
        what += f", draw {tried} (the {tried - 1} before had no reward spread in any group)"
    baseline = None
    if ctx.blanks.advantage.estimator == "remax":  # its greedy rollout of each instance
        greedy = GreedyBaseline(ctx).run(instances, ctx.engine)
        baseline = greedy.reward[torch.arange(batch.size) // G]
        what += " and their greedy baseline"
    return Collected(batch, baseline_rewards=baseline, groups_launched=len(instances)), what


def save_frozen_batch(path: Path, kind: str, prepared: Prepared, blanks, **about: Any) -> None:
    """``prepared`` (the batch and the tensors the objective prepared from it) to ``path``, in
    plain tensors, lists and numbers (``torch.load(path, weights_only=True)`` reads it back)."""

    batch = {f.name: getattr(prepared.batch, f.name) for f in fields(prepared.batch)}
    batch["snapshots"] = [[] for _ in batch["snapshots"]]  # environment states: in no loss
    metrics = {k: float(v) for k, v in prepared.metrics.items() if isinstance(v, (int, float))}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "kind": kind,
            "blanks": blanks.model_dump(mode="json"),
            "batch": batch,
            "mask": prepared.mask,
            "units": prepared.units,
            "tensors": prepared.tensors,
            "metrics": metrics,
            **about,
        },
        path,
    )


def load_frozen_batch(path: Path) -> tuple[str, Prepared, dict[str, Any]]:
    """(kind, the prepared update, the whole record) of a frozen batch :func:`save_frozen_batch`
    stored. Replay: an objective of the same blanks on the same policy, ``objective.update``."""

    d = torch.load(path, weights_only=True)
    batch = TrajectoryBatch(**d["batch"])
    return d["kind"], Prepared(batch, d["mask"], d["units"], d["tensors"], d["metrics"]), d


def _flat(params) -> torch.Tensor:
    grads = [p.grad.detach().flatten() for p in params if p.grad is not None]
    return torch.cat(grads).clone() if grads else torch.zeros(0)


def _update_gradients(
    ctx, objective, path: Path, micro: int
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The objective's own update of the frozen batch reloaded from ``path``, as one optimizer step
    on the whole batch (one epoch of one minibatch) in micro-batches of at most ``micro`` units,
    its optimizer steps replaced by a read of the gradients. Returns (the update's metrics,
    {"policy": the policy's gradient, "critic": the critic's own, where it has one}). The weights
    never change."""

    _, prepared, _ = load_frozen_batch(path)
    critic = getattr(objective, "critic", None)
    grads: dict[str, torch.Tensor] = {}

    def read_gradients() -> float:  # in place of the policy's optimizer step
        grads["policy"] = _flat(ctx.model.parameters())
        if critic is not None:
            grads["critic"] = _flat(p for p in critic.parameters() if p.requires_grad)
        return 0.0

    settings, blanks, gen = ctx.settings, ctx.blanks, ctx.gen.get_state()
    one_step = blanks.data.model_copy(update={"epochs": 1, "minibatches": 1})
    ctx.settings = replace(
        settings, rollout=settings.rollout.model_copy(update={"micro_batch_size": micro})
    )
    ctx.blanks = blanks.model_copy(update={"data": one_step})
    ctx.clip_and_step = read_gradients
    if critic is not None:
        objective.step_critic = lambda: None  # a separate critic's optimizer step
    try:
        metrics = objective.update(prepared)
    finally:
        ctx.settings, ctx.blanks = settings, blanks
        ctx.gen.set_state(gen)
        del ctx.clip_and_step
        objective.__dict__.pop("step_critic", None)
        ctx.model.zero_grad(set_to_none=True)
        if critic is not None:
            critic.zero_grad(set_to_none=True)
    return metrics, grads


def frozen_batch_check(trainer, path: Path, **about: Any) -> list[RungResult]:
    """Rung 2 on ``trainer``'s arm: its objective's update of a frozen batch (stored to ``path``
    and reloaded for every computation) reproduces on a repeat and across a micro-batch split:
    the same losses (a critic's value loss too) and the same gradients (on the policy, and on a
    critic's own parameters). ``about``: recorded with the batch (the policy it was drawn from)."""

    ctx, objective, kind = trainer.ctx, trainer.objective, arm_kind(trainer.ctx.blanks)
    if kind == "pg" and ctx.blanks.advantage.estimator in ("prm", "prime"):
        if not isinstance(objective, ProcessInputsStoodIn):  # the trainer built the real one
            objective = ProcessInputsStoodIn(ctx)
    collected, data = _frozen_collected(ctx, trainer.collector, kind)
    if isinstance(objective, ProcessInputsStoodIn):
        data += " (the process reward model's inputs stood in)"
    detail: dict[str, Any] = {"kind": kind, "data": data, "engine": engine_name(ctx.engine)}
    label = "repeat + micro-batch split"
    if collected is None:
        reason = f"nothing to update on: {data}"
        return [
            FROZEN_BATCH.row(label, "inconclusive", reason, detail=detail),
            FROZEN_BATCH.verdict("inconclusive", reason),
        ]
    prepared = objective.prepare(collected)
    save_frozen_batch(path, kind, prepared, ctx.blanks, arm=ctx.settings.name, **about)
    units = prepared.units
    m0 = min(ctx.settings.rollout.micro_batch_size, units)  # the arm's own micro-batches
    m1 = (m0 + 1) // 2 if m0 > 1 else min(2, units)
    runs = [_update_gradients(ctx, objective, path, m) for m in (m0, m0, m1)]
    unit = "pairs" if kind == "dpo" else "rows"
    detail |= {"file": str(path), "units": units, "unit": unit, "micro_batch_sizes": [m0, m0, m1]}
    if any("policy" not in g for _, g in runs):
        reason = (
            f"the {KINDS[kind]} took no optimizer step on {data} (no trained token, or target KL "
            "stopped it): nothing to reproduce"
        )
        return [
            FROZEN_BATCH.row(label, "inconclusive", reason, detail=detail),
            FROZEN_BATCH.verdict("inconclusive", reason),
        ]
    ok, compared, zero = _compare_runs(runs, kind, (m0, m1), unit, detail)
    ev = f"{KINDS[kind]} on {data}, stored in {path.name}: {compared}"
    if not ok:
        status, ev = "fail", "update not reproducible on a frozen batch: " + ev
        reason = f"the {KINDS[kind]} differs on a repeat or a micro-batch split ({path} replays it)"
    else:
        status, reason = _judge_reproduced(kind, data, zero, units, unit)
        ev = ev if status == "pass" else reason + "; " + ev
    return [
        FROZEN_BATCH.row(label, status, ev, detail=detail),
        FROZEN_BATCH.verdict(status, reason),
    ]


def _judge_reproduced(
    kind: str, data: str, zero: list[str], units: int, unit: str
) -> tuple[str, str]:
    """(status, reason) of an update that reproduced: a pass only where it could have failed,
    with a gradient to compare (``zero``: the parts whose gradient is zero) and a batch of
    ``units`` that micro-batches split."""

    if zero:
        # a zero gradient reproduces trivially: no signal in the batch, nothing shown
        return "inconclusive", (
            f"the frozen batch's {' and '.join(zero)} gradient is zero ({data} without a learning "
            "signal): nothing to reproduce"
        )
    if units < 2:
        return "inconclusive", f"one {unit[:-1]} in the frozen batch: no micro-batch split to check"
    return "pass", f"the {KINDS[kind]} reproduces on a repeat and across a micro-batch split"


def _compare_runs(
    runs: list[tuple[dict[str, Any], dict[str, torch.Tensor]]],
    kind: str,
    micro: tuple[int, int],
    unit: str,
    detail: dict[str, Any],
) -> tuple[bool, str, list[str]]:
    """The update's three computations (micro-batches of ``micro[0]`` units, the arm's own, twice,
    then of ``micro[1]``) compared: whether losses and gradients agree, the evidence, and the
    parts whose gradient is zero. Each part's gradient differences and the losses go into
    ``detail``."""

    m0, m1 = micro

    loss_keys = ["loss", "value_loss"] if kind == "critic" else ["loss"]
    losses = {k: [float(m[k]) for m, _ in runs] for k in loss_keys}
    ok, loss_text = True, []
    for k, (l1, l2, l3) in losses.items():
        ok &= abs(l1 - l2) <= 1e-6 * max(1, abs(l1)) and abs(l1 - l3) <= 1e-5 * max(1, abs(l1))
        loss_text.append(
            f"{k.replace('_', ' ')} {l1:.6g} / repeat {l2:.6g} / micro-batches of {m1} {l3:.6g}"
        )
    grad_text, zero = [], []
    for part in runs[0][1]:
        g1, g2, g3 = (g[part] for _, g in runs)
        g_max = float(g1.abs().max()) if g1.numel() else 0.0
        scale = max(g_max, 1e-12)
        rep = float((g1 - g2).abs().max()) / scale if g1.numel() else 0.0
        split = float((g1 - g3).abs().max()) / scale if g1.numel() else 0.0
        detail[f"grad.{part}"] = {"abs_max": g_max, "rel_diff_repeat": rep, "rel_diff_split": split}
        ok &= rep <= 1e-4 and split <= 1e-3
        grad_text.append(f"{part} repeat {rep:.2g}, split {split:.2g}")
        if g_max == 0.0:
            zero.append(part)
    detail["loss"] = losses
    text = (
        "; ".join(loss_text)
        + f" (micro-batches of {m0} {unit}); max relative grad difference: "
        + "; ".join(grad_text)
    )
    return ok, text, zero


def frozen_batch_rung(
    engine, model, tok, task, rollout, blanks, out_dir: str | Path | None = None
) -> list[RungResult]:
    """Rung 2 for an arm of ``blanks`` on ``model`` (its reference a frozen copy), sampling with
    ``engine``: :func:`frozen_batch_check`, the frozen batch stored in ``out_dir`` (None: a
    temporary folder)."""

    from ...config import OptimizerConfig
    from ...training import RunSettings, Trainer

    settings = RunSettings(
        blanks=blanks,
        rollout=rollout,
        optimizer=OptimizerConfig(),
        budget={},
        seed=0,
        reward_range=tuple(task.reward_range),
        name="ladder rung 2",
        evaluate=False,
    )
    trainer = Trainer(settings, task, model, tok, engine=engine, objective=rung_objective)
    if out_dir is not None:
        return frozen_batch_check(trainer, Path(out_dir) / LADDER_FROZEN_BATCH)
    with tempfile.TemporaryDirectory() as tmp:
        return frozen_batch_check(trainer, Path(tmp) / LADDER_FROZEN_BATCH)
