"""A run's held-out evaluations: when (:meth:`HeldOutEvaluation.maybe_eval`, every ``eval_every``
of the budget's counter) and how (:meth:`HeldOutEvaluation.evaluate`), charged to an evaluation
ledger of their own, counted apart from the training budget. The training loop
(:class:`~.loop.Trainer`) is the one class that has them: it holds what they read (``ctx``,
``eval_meter``, ``result``, ``next_eval``, ``eval_counter``, ``eval_every``, ``log``).
"""

from __future__ import annotations

from typing import Any

from .evaluate import charge_evaluation, evaluate_apart, evaluate_run, evaluation_worst
from .start_eval import keep_start, start_store

EVAL_RECORD = ("score", "n", "split", "seed_range", "success_rate", "pass_at", "per_instance")
EVAL_RECORD += ("search",)  # an inference-time beam search's score and compute (eval.beam)
"""What an evaluation record keeps of :func:`evaluate`'s result (besides its position and cost)."""


class HeldOutEvaluation:
    """The evaluation half of the training loop (mixed into :class:`~.loop.Trainer`)."""

    def evaluate(self) -> dict[str, Any]:
        """Held-out evaluation of the current policy, charged to the evaluation ledger (before the
        first step, one stored by a run of equal inputs where shared: :mod:`.start_eval`)."""

        ctx = self.ctx
        store, key, found = start_store(ctx, self.result.steps)
        charge = self.eval_meter.must_reserve(
            evaluation_worst(ctx), f"evaluation at step {ctx.step}"
        )
        with charge:  # data-parallel: rank 0 evaluates (no collective in it), the others take it
            dp = ctx.dp
            if found is not None:
                ev, charge.actual = found[0], {}
            else:
                ev, charge.actual = evaluate_run(ctx) if dp is None or dp.writer else (None, {})
            if dp is not None:
                ev, charge.actual = dp.from_rank0((ev, charge.actual))
        cost = charge_evaluation(self.result.eval_cost, ev) if found is None else {}
        record = {
            "step": ctx.step,
            "position": dict(self.ledger.counters),
            **{k: ev[k] for k in EVAL_RECORD if k in ev},
            "cost": {
                **cost,
                "device_seconds": charge.elapsed[0],
                "wall_seconds": charge.elapsed[1],
            },
        }
        keep_start(record, ev, found, store, key)
        # and what the task evaluates apart from the score (a game's external opponents)
        apart = evaluate_apart(ctx, self.eval_meter, record["cost"], self.result.eval_cost)
        self.result.evals.append(record | apart)
        return self.result.evals[-1]

    def maybe_eval(self, force: bool = False) -> None:
        """Evaluate when the budget's counter passed the next evaluation point (or ``force``)."""

        if not self.ctx.settings.evaluate or (self.eval_every is None and not force):
            return
        value = self.ledger.counters[self.eval_counter]
        if force or value >= self.next_eval:
            rec = self.evaluate()
            self.log(
                f"{self.settings.name}: eval at {self.eval_counter}={value:g}: score "
                f"{rec['score']:.3f}"
            )
            if self.eval_every:
                while self.next_eval <= value:
                    self.next_eval += self.eval_every
