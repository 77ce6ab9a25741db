"""What every collector and objective of one run shares: the models, the engine, the RNGs, the
meter, and the few operations they all need (log-probs of the sampling distribution, an optimizer
step, the cost of rollouts)."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

import torch

from sixblanks.budgets.worst import episodes_worst

from ..rollout.agent import run_episodes
from ..rollout.engine import HFEngine, RolloutEngine, SamplerMismatch, SamplingParams
from ..rollout.trajectory import TrajectoryBatch
from ..seeds import train_seeds
from ..stopping import stop_point
from ..tasks.base import Task
from ..tasks.verify import VerifierGate
from ..tools.toolbox import OUTCOMES, tally
from .base import RunSettings, TrainingError
from .meter import Meter
from .parallel import full_tensors, load_full_state, load_optimizer_state, optimizer_state
from .policy import policy_logprobs
from .shared_prefix import split_point


def frozen_copy(model):
    """A frozen copy of ``model`` (the reference policy where none is given)."""

    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def make_optimizer(params, o, lr: float | None = None) -> torch.optim.AdamW:
    """An AdamW over ``params`` with the optimizer settings ``o`` (``lr``: another learning rate,
    a critic's). Fused (one kernel for the whole update of every parameter) where every parameter
    is a plain tensor on the CPU or CUDA: a tiny policy's step took 17-22 ms with ``foreach`` here
    and 4-5 ms fused, the same AdamW to float32 rounding. Elsewhere (a sharded parameter of
    FSDP2, another device) ``foreach``: one kernel per operation over all parameters."""

    params = list(params)
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    fused = all(type(p) is torch.nn.Parameter and p.device.type in ("cpu", "cuda") for p in tensors)
    return torch.optim.AdamW(
        params,
        lr=lr or o.lr,
        betas=tuple(o.betas),
        weight_decay=o.weight_decay,
        **({"fused": True} if fused else {"foreach": True}),
    )


def training_params(rollout) -> SamplingParams:
    """The sampling parameters of a run's training rollouts (``rollout``: its RolloutConfig),
    with the sampler-trainer mismatch ``rollout.mismatch`` injects (the mismatch lab; None where it
    sets nothing)."""

    return SamplingParams(
        rollout.temperature,
        rollout.top_p,
        rollout.top_k,
        rollout.max_new_tokens,
        ignore_eos=rollout.ignore_eos,
        env_workers=getattr(rollout, "env_workers", 1),
        mismatch=SamplerMismatch.of(getattr(rollout, "mismatch", None)),
    )


def rollout_cost(
    batches: list[TrajectoryBatch], gate: VerifierGate, since: tuple[int, int]
) -> dict[str, float]:
    """What episodes actually cost; ``since``: the gate's (verifier, judge) calls before they
    ran."""

    verifier, judge = gate.counts()
    return {
        "launched_tokens": float(sum(b.launched_tokens() for b in batches)),
        "prompt_tokens": float(sum(b.prompt_tokens() for b in batches)),
        "rollouts_launched": float(sum(b.size for b in batches)),
        "env_steps": float(sum(int(b.n_turns.sum()) for b in batches)),
        "verifier_calls": float(verifier - since[0]),
        "judge_calls": float(judge - since[1]),
        **tool_cost(batches),
    }


def tool_cost(batches: list[TrajectoryBatch]) -> dict[str, float]:
    """The ledger's ``tool_calls`` and ``tool_seconds`` of episodes' programs (none where no episode
    made a call: a run without the tool charges neither)."""

    counts = tally(log for b in batches for log in b.tool_log)
    if not any(counts[k] for k in OUTCOMES):
        return {}
    return {"tool_calls": counts["calls"], "tool_seconds": counts["seconds"]}


@dataclass
class RunContext:
    settings: RunSettings
    task: Task
    model: Any
    tokenizer: Any
    ref_model: Any
    engine: RolloutEngine
    gate: VerifierGate
    meter: Meter
    optimizer: torch.optim.Optimizer
    rng: random.Random
    gen: torch.Generator
    step: int = 0
    dp: Any = None
    """The data-parallel group of a run over several ranks (:mod:`.parallel`); None: one process."""
    train_module: Any = None
    """The module the training forward goes through (DDP's wrapper; else the model itself)."""

    def __post_init__(self) -> None:
        if self.train_module is None:
            self.train_module = self.model
        rollout = self.settings.rollout
        self.blanks = self.settings.blanks
        self.device = next(self.model.parameters()).device
        self.group_size = self.blanks.data.group_size or rollout.group_size
        self.params = training_params(rollout)
        self.score_params = self.params.scoring()  # the trainer's (never the mismatch's)
        self.turns = max(1, self.task.max_turns)
        self.l_max = self.blanks.normalization.l_max or rollout.max_new_tokens * self.turns
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.step_tool_logs: list[list[tuple[str, float]]] = []

    # ------------------------------------------------------------------ data and its cost

    def train_instances(self, n: int):
        return self.task.instances(train_seeds(self.rng, n, self.task))

    def worst_rollouts(self, n: int) -> dict[str, float]:
        """The most ``n`` episodes can cost: every turn at the generation and context limits."""

        rollout, box = self.settings.rollout, self.toolbox
        return episodes_worst(
            n,
            self.turns,
            rollout.max_new_tokens,
            rollout.max_prompt_tokens,
            self.judge_calls_per_verify,
            # every program an episode may run, each to its timeout and set-up allowance: an
            # exact bound, so a limit on either tool counter holds
            self.tool_calls_per_episode if box else 0,
            box.worst_seconds if box else 0.0,
        )

    @property
    def toolbox(self):
        """The run's code tool (harness/tools/toolbox.py); None where its task offers none."""

        return getattr(self.task, "toolbox", None)

    @property
    def tool_calls_per_episode(self) -> int:
        cfg = self.toolbox.config
        return cfg.max_calls * cfg.calls_per_turn

    def tool_metrics(self) -> dict[str, float]:
        """The step's tool calls by outcome (``tools.calls``, ``tools.seconds``, ``tools.ok``,
        ``tools.timeout``, ``tools.parse_unclosed``, ...), counted by :meth:`rollout_cost` over
        every episode the step launched, and reset; {} where the task offers no tool."""

        if not self.toolbox:
            return {}
        out = {f"tools.{k}": v for k, v in tally(self.step_tool_logs).items()}
        self.step_tool_logs = []
        return out

    @property
    def judge_calls_per_verify(self) -> int:
        judge = self.gate.judge
        return judge.max_calls_per_verify if judge is not None else 0

    def hf_engine(self, model) -> HFEngine:
        """A transformers engine of its own for ``model`` (a frozen copy, the reference), decoding
        as ``rollout`` says the policy's engine does."""

        r = self.settings.rollout
        return HFEngine(model, self.tokenizer, decode=r.decode, skip_padding=r.skip_padding)

    def episodes(self, engine, instances, group_size: int, **kw) -> TrajectoryBatch:
        """``group_size`` episodes of each of ``instances`` with ``engine``, under the run's task,
        sampling parameters, verifier gate, context limit and generator (``kw``: group_offset,
        snapshots).

        With ``rollout.group_seeds`` (always under data parallelism) each group is sampled with a
        generator of its own, seeded from the run's stream, and a data-parallel rank samples only
        its share of the groups (:meth:`sharded_episodes`)."""

        if self.settings.rollout.group_seeds or self.dp is not None:
            return self.sharded_episodes(engine, instances, group_size, **kw)
        return self._episodes(engine, instances, group_size, self.gen, **kw)

    def sharded_episodes(self, engine, instances, group_size: int, **kw) -> TrajectoryBatch:
        """Every group sampled with its own generator (one seed per group, drawn from the run's
        stream on every rank alike). Under data parallelism a rank samples its contiguous share
        of the groups and the shares are gathered in rank order: the same batch on every rank,
        the one a single process with ``rollout.group_seeds`` samples. Returns the whole batch."""

        seeds = torch.randint(0, 2**62, (len(instances),), generator=self.gen).tolist()
        offset = kw.pop("group_offset", 0)
        mine = self.dp.share(len(instances)) if self.dp is not None else range(len(instances))
        parts = [
            self._episodes(
                engine,
                [instances[i]],
                group_size,
                torch.Generator().manual_seed(int(seeds[i])),
                group_offset=offset + i,
                **kw,
            )
            for i in mine
        ]
        local = TrajectoryBatch.concat(parts, self.pad_id) if parts else None
        shares = self.dp.gather(local) if self.dp is not None else [local]
        return TrajectoryBatch.concat([b for b in shares if b is not None], self.pad_id)

    def _episodes(self, engine, instances, group_size: int, generator, **kw) -> TrajectoryBatch:
        return run_episodes(
            engine,
            self.tokenizer,
            self.task,
            instances,
            group_size,
            self.params,
            self.gate,
            max_context_tokens=self.settings.rollout.max_prompt_tokens,
            generator=generator,
            **kw,
        )

    def rollout_cost(
        self, batches: list[TrajectoryBatch], since: tuple[int, int]
    ) -> dict[str, float]:
        """What episodes actually cost; ``since``: the gate's (verifier, judge) calls before they
        ran (:meth:`VerifierGate.counts`)."""

        cost = rollout_cost(batches, self.gate, since)
        self.step_tool_logs += [log for b in batches for log in b.tool_log]
        if self.dp is not None:  # the batches are the gathered ones; each rank's gate its own
            cost.update(self.dp.sum_costs({k: cost[k] for k in ("verifier_calls", "judge_calls")}))
        return cost

    # ------------------------------------------------------------------ model passes

    def logprobs(self, model, batch: TrajectoryBatch, entropy: bool = False, grad: bool = False):
        """Log-probs ``[B, T]`` (and entropy) of the sampling distribution, i.e. after temperature,
        top-k and top-p, as the engine sampled from (the trainer's side of it: a
        ``rollout.mismatch`` corrupts the sampler only, and this is what it is measured against).
        The prompts the rows share are computed once each where ``rollout.shared_prefix`` allows
        (:mod:`..shared_prefix`)."""

        stop_point("a forward pass")  # Ctrl-C: between micro-batches (harness/stopping.py)
        temp, top_k, top_p = self.score_params
        split = 0
        action_mask = getattr(batch, "action_mask", None)  # a probe of bare tokens has none
        # off under data parallelism: it calls submodules past DDP's and FSDP2's hooks
        if self.settings.rollout.shared_prefix and action_mask is not None and self.dp is None:
            split = split_point(action_mask, batch.attention_mask)
        with torch.enable_grad() if grad else torch.no_grad():
            return policy_logprobs(
                model,
                batch.tokens,
                batch.attention_mask,
                temp,
                top_k=top_k,
                top_p=top_p,
                entropy=entropy,
                split=split,
                skip_padding=self.settings.rollout.skip_padding,
            )

    def batched_logprobs(self, model, batch: TrajectoryBatch) -> torch.Tensor:
        """No-grad log-probs ``[B, T]`` on the CPU, in micro-batches."""

        mb = self.settings.rollout.micro_batch_size
        if self.dp is not None:
            return self._ranks_logprobs(model, batch, mb)
        parts = [
            self.logprobs(model, batch.select(list(range(s, min(batch.size, s + mb)))))[0]
            for s in range(0, batch.size, mb)
        ]
        return torch.cat(parts, 0).cpu()

    def _ranks_logprobs(self, model, batch: TrajectoryBatch, mb: int) -> torch.Tensor:
        """:meth:`batched_logprobs` under data parallelism: each rank forwards its share of the
        rows, in as many micro-batches as every other rank (FSDP2's forwards are collectives; a
        rank out of rows forwards one and drops it), and the shares are gathered."""

        mine = []
        for pos in self.dp.micro_parts(batch.size, mb):
            lp = self.logprobs(model, batch.select(pos or [0]))[0].cpu()
            if pos:
                mine.append((pos, lp))
        out = torch.zeros(batch.action_mask.shape, dtype=torch.float32)  # the log-softmax dtype
        for share in self.dp.gather(mine):
            for pos, lp in share:
                out[pos] = lp.to(out.dtype)
        return out

    def clip_and_step(self) -> float:
        """Clip the policy's gradient norm, apply the warm-up learning rate, step. Returns the
        norm."""

        params = [p for p in self.model.parameters() if p.grad is not None]
        opt = self.settings.optimizer
        gn = torch.nn.utils.clip_grad_norm_(params, opt.grad_clip or float("inf"))
        if not torch.isfinite(gn):
            raise TrainingError(
                f"{self.settings.name}: gradient norm is {float(gn)} at step {self.step}"
            )
        warm = opt.warmup_steps
        for group in self.optimizer.param_groups:
            group["lr"] = opt.lr * (min(1.0, (self.step + 1) / warm) if warm else 1.0)
        self.optimizer.step()
        return float(gn)

    def sync_engine(self) -> None:
        """The rollout engine takes the policy's new weights (a colocated HF engine shares them;
        vLLM reloads them; under FSDP2 the engine holds a full copy of its own, loaded from the
        shards gathered one tensor at a time)."""

        if self.dp is not None and self.dp.backend == "fsdp2":
            self.engine.load_weights(self.dp.full_state(self.model))
        else:
            self.engine.load_weights(None)

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().cpu().clone() for k, v in full_tensors(self.model)},
            "optimizer": optimizer_state(self.model, self.optimizer, self.dp),
            "rng_py": self.rng.getstate(),
            "gen": self.gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "step_idx": self.step,
            "engine_version": self.engine.policy_version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_full_state(self.model, state["model"])
        self.sync_engine()  # a vLLM engine still holds the initial weights
        self.engine.policy_version = state["engine_version"]
        load_optimizer_state(self.model, self.optimizer, state["optimizer"], self.dp)
        self.rng.setstate(state["rng_py"])
        self.gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        self.step = state["step_idx"]
