"""Warm start: SFT on task demonstrations, the initial policy every arm starts from.

Demonstrations come from each task's oracle played through its environment (the SFT collector),
so multi-turn demonstrations carry real observations. Training is the SFT objective through the
same loop as every run: the negative log-likelihood of demonstrated action tokens only (prompt and
observation tokens are masked), a token-mean over each step's batch, under a ledger whose budget is
``warm_start.steps`` optimizer steps. The result is cached by a content hash of model, tasks, SFT
config and seed.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sixblanks.algorithms.presets import get_preset

from ..config import OptimizerConfig
from ..layout import TOKENIZER_IDENTITY_JSON, WARM_START_JSON
from ..models import (
    apply_chat_setting,
    load_policy,
    save_policy,
    set_fp32_lm_head,
    set_gradient_checkpointing,
    state_hash,
)
from ..rollout.trajectory import TrajectoryBatch
from ..seeds import demo_seeds
from ..tasks.base import Task
from ..training import RunSettings, Trainer
from ..training.collectors import Demonstrations
from ..training.collectors.demonstrations import demonstration_pool
from ..training.objectives import SFT
from ..version import code_fingerprint


def train_sft(
    model,
    tokenizer,
    task: Task,
    demos: TrajectoryBatch,
    ws,
    rollout,
    progress: Callable[[int, float], None] | None = None,
    pool_cost: dict[str, float] | None = None,
):
    """``ws.steps`` SFT steps (``ws``: the WarmStartConfig) on minibatches of ``ws.batch_size`` drawn
    from ``demos``: AdamW at ``ws.lr`` (no weight decay), gradient norm clipped at 1, on the
    unprocessed distribution (temperature 1; ``rollout`` gives the context and micro-batch sizes).
    ``pool_cost``: what playing the demonstrations took (environment steps, verifier calls),
    charged in the first step. Returns the trainer's result (``steps[i]["loss"]``, the ledger of
    demonstration tokens, environment steps and verifier calls)."""

    settings = RunSettings(
        blanks=get_preset("sft").blanks,
        rollout=rollout.model_copy(update={"temperature": 1.0, "top_p": 1.0, "top_k": 0}),
        optimizer=OptimizerConfig(lr=ws.lr, weight_decay=0.0, grad_clip=1.0, warmup_steps=0),
        budget={"optimizer_steps": float(ws.steps)},
        seed=ws.seed,
        evaluate=False,
        name="warm start",
    )
    trainer = Trainer(
        settings,
        task,
        model,
        tokenizer,
        ref_model=model,  # unused: the warm start measures no KL to a reference
        collector=lambda ctx: Demonstrations(
            ctx, demos, ws.batch_size, ws.seed, pool_cost=pool_cost
        ),
        objective=lambda ctx: SFT(ctx, kl_to_reference=False),
    )

    def on_step(tr: Trainer, metrics: dict[str, Any]) -> None:
        if progress is not None:
            progress(int(metrics["step"]), float(metrics["loss"]))

    return trainer.train(evaluate_start=False, on_step=on_step)


def chat_identity(mode: str) -> str:
    """``rollout.chat_template`` as it enters the warm-start key: the mode, or a file's content hash."""

    if mode in ("auto", "none"):
        return mode
    return "file:" + hashlib.sha256(Path(mode).read_bytes()).hexdigest()[:16]


def tasks_inputs(cfg) -> list[dict]:
    """Each task's data files and user modules (:func:`task_inputs`); [] where no task has any."""

    from .data_files import task_inputs

    found = [task_inputs(t) for t in cfg.tasks or []]
    return found if any(found) else []


def warm_start_key(cfg, tasks: list[Task]) -> str:
    """Content hash of everything the warm-start policy depends on."""

    payload = {
        "code": code_fingerprint(),  # any change to the source or the libraries rebuilds it
        "model": cfg.model.model_dump(mode="json", exclude={"lora", "parallel"}),  # RL only
        "tasks": [{"name": t.name, "params": t.params.model_dump(mode="json")} for t in tasks],
        # the demonstrations come from the tasks' data and code: their files and user modules
        **({"inputs": inputs} if (inputs := tasks_inputs(cfg)) else {}),
        "warm_start": cfg.warm_start.model_dump(mode="json"),
        "max_context": cfg.rollout.max_prompt_tokens,
        "chat_template": chat_identity(cfg.rollout.chat_template),
        # micro-batches below warm_start.batch_size change the float summation order
        "micro_batch": min(cfg.rollout.micro_batch_size, cfg.warm_start.batch_size),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def cached_warm_start(directory: str | Path):
    """(info, the tokenizer's identity) of the warm start cached in ``directory`` (its cache root
    and :func:`warm_start_key`) whose identity was recorded beside it (by the orchestrator), read
    from its files; None otherwise (:func:`warm_start` builds or loads it)."""

    directory = Path(directory)
    try:
        info = json.loads((directory / WARM_START_JSON).read_text())
        identity = json.loads((directory / TOKENIZER_IDENTITY_JSON).read_text())
    except (OSError, ValueError):  # not cached, or cached before identities were recorded
        return None
    return {**info, "cached": True}, identity


def warm_start(
    cfg, tasks: list[Task], cache_root: str | Path, log: Callable[[str], None] | None = None
):
    """The common initial policy: (model, tokenizer, info). Cached under ``cache_root/<hash>``."""

    key = warm_start_key(cfg, tasks)
    directory = Path(cache_root) / key
    info_path = directory / WARM_START_JSON
    if info_path.exists():
        from ..models import load_pretrained

        model, tok = load_pretrained(directory, cfg.model.device, cfg.model.dtype)
        set_fp32_lm_head(model, cfg.model.fp32_lm_head)
        info = json.loads(info_path.read_text())
        info["cached"] = True
        return model, tok, info
    model, tok = load_policy(cfg.model, tasks)
    apply_chat_setting(tok, cfg.rollout.chat_template)
    set_gradient_checkpointing(model, cfg.model.gradient_checkpointing)
    t0 = time.time()
    losses: list[float] = []
    counters: dict[str, float] = {}
    ws = cfg.warm_start
    if ws.enabled and ws.steps > 0:
        rng = random.Random(ws.seed)
        per_task = max(1, ws.num_demos // len(tasks))
        batches, cost = [], {}
        for ti, task in enumerate(tasks):
            if not task.has_oracle:
                continue
            seeds = demo_seeds(rng, ti, per_task)
            batch, played = demonstration_pool(task, tok, seeds, cfg.rollout.max_prompt_tokens)
            batches.append(batch)
            cost = {k: cost.get(k, 0.0) + v for k, v in played.items()}
        if batches:
            demo = TrajectoryBatch.concat(batches, tok.pad_token_id or 0)
            every = max(1, cfg.warm_start.steps // 5)

            def progress(step: int, loss: float) -> None:
                if log and (step % every == 0 or step == cfg.warm_start.steps - 1):
                    log(f"warm start: SFT step {step + 1}/{cfg.warm_start.steps} loss {loss:.4f}")

            task = next(t for t in tasks if t.has_oracle)
            result = train_sft(model, tok, task, demo, ws, cfg.rollout, progress, cost)
            losses = [m["loss"] for m in result.steps]
            counters = {k: v for k, v in result.ledger.counters.items() if v}
    info: dict[str, Any] = {
        "key": key,
        "policy_hash": state_hash(model),
        "steps": len(losses),
        "final_loss": losses[-1] if losses else None,
        "losses": losses,
        "counters": counters,
        "seconds": time.time() - t0,
        "cached": False,
    }
    save_policy(model, tok, directory)
    info_path.write_text(json.dumps(info, indent=2))
    return model, tok, info
