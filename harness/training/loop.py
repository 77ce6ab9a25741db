"""One run, as a thin loop under its budget ledger:

    collect -> admit -> update -> account -> evaluate -> checkpoint

- collect: the collector makes the step's trajectories and charges them (:mod:`.collectors`);
- admit: failed samples are discarded by reason, and the update is reserved at its worst case;
- update: the objective's optimizer steps (:mod:`.objectives`), then the engine takes the weights;
- account: the step's time is committed, the ledger is snapshotted into the step's metrics;
- evaluate: held-out evaluation every ``eval_every`` of the budget's counter, charged to a ledger of
  its own (counted apart from the training budget);
- checkpoint: ``on_step`` (the runner writes events and checkpoints; ``state_dict`` resumes
  exactly).

The run ends when the worst case of the next step would not fit in the budget.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import torch

from sixblanks.budgets.ledger import Budget, Ledger
from sixblanks.budgets.worst import update_worst

from ..lora import memory_metrics, param_counts, train_state_bytes
from ..rollout.engine import HFEngine, RolloutEngine
from ..stopping import RunInterrupted
from ..tasks.base import Task
from ..tasks.verify import VerifierGate
from .base import Collected, Collector, Objective, Prepared, RunResult, RunSettings, TrainingError
from .collectors import make_collector
from .context import RunContext, frozen_copy, make_optimizer
from .evaluating import HeldOutEvaluation
from .meter import UNIT_KINDS, Charge, DeviceTimer, Meter, add_costs
from .objectives import make_objective
from .parallel import setup as setup_parallel


class Trainer(HeldOutEvaluation):
    """The loop of one run. ``collector`` / ``objective``: factories of a RunContext that return a
    :class:`Collector` / an :class:`Objective` (harness/training/base.py); by default the ones the
    blanks name (``data.source``, ``objective``, ``advantage.estimator``)."""

    def __init__(
        self,
        settings: RunSettings,
        task: Task,
        model,
        tokenizer,
        *,
        ref_model=None,
        engine: RolloutEngine | None = None,
        ledger: Ledger | None = None,
        log: Callable[[str], None] | None = None,
        collector: Callable[[RunContext], Collector] | None = None,
        objective: Callable[[RunContext], Objective] | None = None,
    ):
        ref = ref_model if ref_model is not None else frozen_copy(model)
        engine = engine or HFEngine(model, tokenizer)
        ledger = ledger or Ledger(Budget(dict(settings.budget)))
        timer = DeviceTimer(next(model.parameters()).device)
        seed = settings.train_seed  # the evaluation keeps settings.seed (evaluate.py)
        rng = random.Random(seed)
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        dp, train_module = setup_parallel(settings, model, engine)  # before the optimizer
        optimizer = make_optimizer(model.parameters(), settings.optimizer)
        meter = Meter(ledger, timer, dp)
        parts = (settings, task, model, tokenizer, ref, engine, VerifierGate(task), meter)
        self.ctx = RunContext(*parts, optimizer, rng, gen, dp=dp, train_module=train_module)
        self.objective: Objective = (objective or make_objective)(self.ctx)
        self.collector: Collector = (collector or make_collector)(self.ctx)
        trainable, total = param_counts(model)  # LoRA: the adapter's weights only
        mb = train_state_bytes(model) / 2**20
        self.sizes = {"memory.trainable_params": trainable, "memory.total_params": total}
        self.sizes["memory.train_state_mb"] = mb
        self.eval_meter = Meter(Ledger(), timer, dp)
        self.log = log or (lambda _m: None)
        self.result = RunResult(ledger=ledger)
        self.next_eval = 0.0
        self.eval_counter = settings.eval_counter or next(iter(settings.budget), "launched_tokens")
        limit = settings.budget.get(self.eval_counter)
        self.eval_every = settings.eval_every or (limit / 4 if limit else None)

    # the run's state, by the names the runner, ladder and sweep use
    settings = property(lambda self: self.ctx.settings)
    model = property(lambda self: self.ctx.model)
    engine = property(lambda self: self.ctx.engine)
    ledger = property(lambda self: self.ctx.meter.ledger)
    step_idx = property(lambda self: self.ctx.step)

    # ------------------------------------------------------------------ one step

    def worst_update(self, rows: int, tokens: float, admission: bool = False) -> dict[str, float]:
        d = self.ctx.blanks.data
        out = update_worst(d.epochs, d.minibatches, rows, tokens)
        if admission:  # a second model's calls (a user PRM): the step's admission checks them,
            out.update(self.objective.worst_extra(rows))  # the objective reserves and charges
        return out

    def step(self) -> dict[str, Any] | None:
        """Collect, admit, update, account. None: the budget cannot afford another step."""

        ctx = self.ctx
        worst = self.collector.worst_case()  # it accepts at most what it launches
        bound = self.worst_update(*self.collector.update_bound(worst), admission=True)
        if not ctx.meter.fits(add_costs(worst, bound), time_of=UNIT_KINDS):
            return None
        step = ctx.meter.charge(f"step {ctx.step}")
        with step:
            collected: Collected = self.collector.collect()
            if collected.census is not None:
                self.result.census.append({"step": ctx.step, **collected.census})
            if collected.nothing_fit:
                step.cancel()
                return None
            metrics: dict[str, Any] = {"step": ctx.step, **collected.metrics}
            if collected.batch is not None:
                prepared = self.objective.prepare(collected)
                with self.admit(prepared, collected.replayed_rows) as update:
                    metrics.update(self.objective.update(prepared))
                    update.actual["optimizer_steps"] = metrics["optimizer_steps"]
            with ctx.meter.charge(f"sync step {ctx.step}"):
                ctx.sync_engine()  # a colocated HF engine shares them; vLLM reloads
        self.account(metrics)
        return metrics

    def admit(self, p: Prepared, replayed_rows: int = 0) -> Charge:
        """Discard failed samples by reason and reserve the update (before any optimizer step);
        the last ``replayed_rows`` rows were accounted for when fresh: ``replayed_tokens`` only."""

        fresh = p.batch.size - replayed_rows
        failed = p.batch.failed[:fresh]
        tokens = p.batch.row_action_tokens()[:fresh]
        self.ctx.meter.discard("failed", float(tokens[failed].sum()), int(failed.sum()))
        m = p.mask[:fresh]
        accepted, rows = float(m.sum()), int((m.sum(1) > 0).sum())
        actual = {"accepted_tokens": accepted, "rollouts_accepted": float(rows)}
        if replayed_rows:
            actual["replayed_tokens"] = float(p.mask[fresh:].sum())
        charge = self.ctx.meter.must_reserve(
            {**self.worst_update(rows, accepted), **actual}, f"update step {self.ctx.step}"
        )
        charge.actual = actual
        return charge

    def account(self, metrics: dict[str, Any]) -> None:
        meter = self.ctx.meter
        snap = meter.ledger.snapshot(self.ctx.step)
        metrics.update({f"ledger.{k}": v for k, v in snap.items() if k != "step"})
        metrics.update({**self.sizes, **memory_metrics(self.ctx.device), **self.ctx.tool_metrics()})
        if self.ctx.dp is not None:  # every rank's copy of the ledger is the same, or the run fails
            self.ctx.dp.check_ledger(meter.ledger, self.ctx.step)
        self.result.steps.append(metrics)
        self.ctx.step += 1

    # ------------------------------------------------------------------ the loop

    def train(
        self,
        max_steps: int | None = None,
        evaluate_start: bool = True,
        on_step: Callable[[Trainer, dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """Train until the budget is spent (or ``max_steps``). ``on_step(trainer, metrics)`` runs
        after each step and its evaluation (checkpoints, progress). A resumed trainer does not
        re-evaluate the start."""

        if evaluate_start and not self.result.evals:
            self.maybe_eval(force=True)
        # a time-limited run's first step reserves an estimate (meter.py), not nothing
        self.ctx.meter.first_step(self.result.evals, self.collector, self.ctx.blanks.data.epochs)
        close = self.collector.close  # a concurrent collector's worker, rounds launched ahead
        self.in_on_step = False
        try:
            self.result.ended_because = self._steps(max_steps, on_step)
        except BaseException as exc:  # stopped by the caller (a pruned trial): what it launched
            ctrl_c = isinstance(exc, (RunInterrupted, KeyboardInterrupt))  # counts; a failure or
            close(drain=self.in_on_step and not ctrl_c)  # Ctrl-C (no waiting for the collector):
            raise  # a resume recounts from the checkpoint
        drained = close(drain=True)  # rounds launched ahead: counted as launched and discarded,
        if drained:  # in a last record that trained on nothing
            self.account(m := {"step": self.ctx.step, "skipped": 1.0, **drained})
            on_step(self, m) if on_step is not None else None
        if not self.result.evals or self.result.evals[-1]["step"] != self.step_idx:
            self.maybe_eval(force=True)
        if problems := self.ledger.check_invariants():
            raise TrainingError(f"{self.settings.name}: ledger invariants broken: {problems}")
        return self.result

    def _steps(self, max_steps: int | None, on_step) -> str:
        while max_steps is None or self.step_idx < max_steps:
            m = self.step()
            if m is None:
                return "budget"
            for k in ("loss", "kl", "reward_mean"):
                if k in m and isinstance(m[k], float) and math.isnan(m[k]):
                    raise TrainingError(f"{self.settings.name}: {k} is NaN at step {m['step']}")
            self.log(
                f"{self.settings.name}: step {m['step']} reward "
                f"{m.get('reward_mean', float('nan')):.3f} "
                f"loss {m.get('loss', float('nan')):.4f} kl {m.get('kl', float('nan')):.4f} "
                f"launched {self.ledger.counters['launched_tokens']:g}"
            )
            self.maybe_eval()
            self.in_on_step = True
            on_step(self, m) if on_step is not None else None
            self.in_on_step = False
        return "max_steps"

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: weights, optimizers, RNG states, ledgers,
        results."""

        result = self.result
        return {
            **self.ctx.state_dict(),
            "meter": self.ctx.meter.state_dict(),
            "eval_meter": self.eval_meter.state_dict(),
            "collector": self.collector.state_dict(),
            "objective": self.objective.state_dict(),
            "next_eval": self.next_eval,
            "result": {k: getattr(result, k) for k in ("steps", "evals", "census", "eval_cost")},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ctx.load_state_dict(state)
        self.objective.load_state_dict(state["objective"])
        self.collector.load_state_dict(state["collector"])
        self.ctx.meter.load_state_dict(state["meter"])
        self.eval_meter.load_state_dict(state["eval_meter"])
        self.next_eval = state["next_eval"]
        result = state["result"]
        self.result = RunResult(
            list(result["steps"]), list(result["evals"]), list(result["census"]), self.ledger
        )
        self.result.eval_cost = dict(result["eval_cost"])
