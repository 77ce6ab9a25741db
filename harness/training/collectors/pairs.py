"""DPO preference pairs (``data.source: preference_pairs``), from one of two places
(``data.pairs``):

- scored rollouts (no ``data.pairs.file``): G >= 2 rollouts of each instance from the initial
  (reference) policy; the best and the worst response of a group whose rewards differ make a pair.
  Every response is launched and charged as a rollout; the others of such a group are discarded as
  ``pair_selection`` (the cost of making one pair out of G samples), and every response of a group
  whose rewards are all equal as ``no_preference`` (no pair can be made of it);
- a file (``data.pairs.file``, :mod:`.pair_file`): prompts_per_step of its training pairs a step, in
  a shuffled order drawn from the run's seed, a new order each pass over the file. Nothing is
  sampled, so nothing else is charged: no prompt tokens, environment steps or verifier calls. Each
  response counts as one rollout launched and its trained tokens (the response, or the segment
  after the prefix) as launched tokens, as a demonstration's do, so that once trained they are the
  accepted tokens and launched = accepted + discarded stays whole. A step's cost is known before
  it runs: its worst case is exact, and the run ends at the first step that would not fit.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from ...rollout.trajectory import TrajectoryBatch
from ..base import Collected, Collector
from ..context import RunContext
from .pair_file import PairFile


def select_pairs(batch: TrajectoryBatch) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(chosen, rejected, unselected, no_preference)`` rows of scored groups: of each group whose
    rewards differ, the first row of highest reward and the first of lowest make a pair and its
    other rows are unselected; every row of a group whose rewards are all equal has no
    preference."""

    chosen, rejected, unselected, flat = [], [], [], []
    for g in torch.unique(batch.group_ids).tolist():
        rows = (batch.group_ids == g).nonzero().flatten()
        r = batch.reward[rows]
        if float(r.max()) > float(r.min()):
            best, worst = int(rows[r.argmax()]), int(rows[r.argmin()])
            chosen.append(best)
            rejected.append(worst)
            unselected += [int(i) for i in rows if int(i) not in (best, worst)]
        else:
            flat += rows.tolist()
    return chosen, rejected, unselected, flat


class PairOrder:
    """The order a file's ``n`` training pairs are served in: pass ``p`` over them is a permutation
    drawn from ``(seed, p)``; :meth:`take` continues where the last call stopped, into the next
    pass at the end of one."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.position = n, seed, 0

    def permutation(self, p: int) -> list[int]:
        return random.Random(self.seed * 1_000_003 + p).sample(range(self.n), self.n)

    def peek(self, k: int) -> list[int]:
        """The next ``k`` indices, without moving on."""

        out, pos = [], self.position
        while len(out) < k:
            p, i = divmod(pos, self.n)
            chunk = self.permutation(p)[i : i + k - len(out)]
            out += chunk
            pos += len(chunk)
        return out

    def take(self, k: int) -> list[int]:
        out = self.peek(k)
        self.position += k
        return out


class PreferencePairs(Collector):
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.n_prompts = ctx.settings.rollout.prompts_per_step
        self.group_size = max(2, ctx.group_size)
        spec = ctx.blanks.data.pairs
        self.file = PairFile(spec, ctx.tokenizer, ctx.task) if spec.file is not None else None
        if self.file is not None:
            self.order = PairOrder(len(self.file.train), ctx.settings.train_seed)

    def next_pairs(self) -> list[int]:
        """A file's pairs the next step trains on (indices into its pairs)."""

        return [self.file.train[i] for i in self.order.peek(self.n_prompts)]

    def worst_case(self) -> dict[str, float]:
        if self.file is not None:  # exact: the next step's pairs are known
            tokens = sum(self.file.toks[i].tokens for i in self.next_pairs())
            return {"launched_tokens": float(tokens), "rollouts_launched": 2.0 * self.n_prompts}
        return self.ctx.worst_rollouts(self.n_prompts * self.group_size)

    def collect(self) -> Collected:
        if self.file is not None:
            return self.collect_file()
        ctx = self.ctx  # one reservation: the loop checked that the step's worst case fits
        with ctx.meter.must_reserve(self.worst_case(), f"pairs step {ctx.step}") as charge:
            calls0 = ctx.gate.counts()
            engine = ctx.hf_engine(ctx.ref_model)
            batch = ctx.episodes(engine, ctx.train_instances(self.n_prompts), self.group_size)
            charge.actual = ctx.rollout_cost([batch], calls0)
        chosen, rejected, unselected, flat = select_pairs(batch)
        tokens = batch.row_action_tokens()
        ctx.meter.discard("pair_selection", float(tokens[unselected].sum()), len(unselected))
        ctx.meter.discard("no_preference", float(tokens[flat].sum()), len(flat))
        if not chosen:
            return Collected(None, {"skipped": 1.0, "pairs": 0.0})
        pair_batch = batch.select(chosen + rejected)
        return Collected(pair_batch, {"reward_mean": float(batch.reward.mean())}, pairs=len(chosen))

    def collect_file(self) -> Collected:
        ctx = self.ctx
        with ctx.meter.must_reserve(self.worst_case(), f"pairs step {ctx.step}") as charge:
            idx = self.next_pairs()
            self.order.take(len(idx))
            batch = self.file.batch(idx)
            charge.actual = {
                "launched_tokens": float(batch.launched_tokens()),
                "rollouts_launched": float(batch.size),
            }
        passes = self.order.position / self.order.n  # passes over the training pairs so far
        return Collected(batch, {"pairs_passes": passes}, pairs=len(idx))

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.order.position} if self.file is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.file is not None:
            self.order.position = int(state["position"])
