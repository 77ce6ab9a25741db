"""Warm start: SFT on task demonstrations, the initial policy every arm starts from.

Demonstrations come from each task's oracle played through its environment (the SFT collector),
so multi-turn demonstrations carry real observations. Training is the SFT objective through the
same loop as every run: the negative log-likelihood of demonstrated action tokens only (prompt and
observation tokens are masked), a token-mean over each step's batch, under a ledger whose budget is
``warm_start.steps`` optimizer steps. The result is cached by a content hash of model, tasks, SFT
config and seed.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from sixblanks.algorithms.presets import get_preset

from ..config import OptimizerConfig
from ..layout import WARM_START_JSON
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
from .warm_key import (  # noqa: F401 - re-exported: the warm start's identity, without torch
    cached_warm_start,
    chat_identity,
    machine_cache,
    tasks_inputs,
    tool_modes,
    warm_start_key,
)


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
    """``ws.steps`` SFT steps (``ws``: the WarmStartConfig) on minibatches of ``ws.batch_size``
    drawn from ``demos``: AdamW at ``ws.lr`` (no weight decay), gradient norm clipped at 1, on the
    unprocessed distribution (temperature 1; ``rollout`` gives the context and micro-batch sizes).
    ``pool_cost``: what playing the demonstrations took (environment steps, verifier calls), charged
    in the first step. Returns the trainer's result (``steps[i]["loss"]``, the ledger of
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


def demonstrated_tasks(cfg, tasks: list[Task], tokenizer) -> list[Task]:
    """The tasks the warm start demonstrates: each task as offered the code tool and as it is, as
    :func:`tool_modes` asks."""

    from ..tasks.tooled import with_tools

    modes = tool_modes(cfg)
    tooled = [with_tools(t, cfg.tools, tokenizer) for t in tasks] if True in modes else []
    return tooled + (list(tasks) if False in modes else [])


@contextmanager
def key_lock(shared: Path, key: str, log: Callable[[str], None] | None) -> Iterator[None]:
    """This process's hold on warm-start ``key`` in the machine cache (an ``flock``, released by
    the kernel if its holder dies): a second command with the same key waits for the first's
    policy instead of training it again."""

    shared.mkdir(parents=True, exist_ok=True)
    fd = os.open(shared / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log:
                log(f"warm start: waiting for another command training the same one ({key})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _copy_policy(src: Path, dst: Path) -> None:
    """``src``'s files into ``dst`` (hard links where the file system allows, else copies), written
    under a temporary name and renamed, so a reader never sees half a policy."""

    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(src, tmp, copy_function=_link_or_copy)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dst.exists():  # another writer was first: its copy is the same policy
        shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp.rename(dst)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def warm_start(
    cfg,
    tasks: list[Task],
    cache_root: str | Path,
    log: Callable[[str], None] | None = None,
    shared: Path | None | bool = True,
    key: str | None = None,
):
    """The common initial policy: (model, tokenizer, info). Cached under ``cache_root/<hash>``
    (the experiment's own copy, which its runs load) and in the machine cache (``shared``: True,
    :func:`machine_cache`; a directory; None or False: none), so another output directory with the
    same key copies it instead of training it again. ``key``: the key the caller planned its runs
    with (default: computed now), so a file edited in between cannot put the policy elsewhere."""

    key = key or warm_start_key(cfg, tasks)
    directory = Path(cache_root) / key
    info_path = directory / WARM_START_JSON
    shared_dir = machine_cache() if shared is True else (shared or None)
    if info_path.exists() or shared_dir is None:
        return _warm_start_in(cfg, tasks, key, directory, log)
    with ExitStack() as held:
        try:
            held.enter_context(key_lock(shared_dir, key, log))
        except OSError as exc:  # an unusable cache (a file in its place, read-only): not shared
            if log:
                log(f"warm start: the machine cache {shared_dir} cannot be used ({exc})")
            return _warm_start_in(cfg, tasks, key, directory, log)
        if (shared_dir / key / WARM_START_JSON).exists():
            shutil.rmtree(directory, ignore_errors=True)  # a copy or a save cut short earlier
            directory.parent.mkdir(parents=True, exist_ok=True)
            _copy_policy(shared_dir / key, directory)
            if log:
                log(f"warm start: {key} from the machine cache ({shared_dir}), not trained again")
            return _warm_start_in(cfg, tasks, key, directory, log)
        out = _warm_start_in(cfg, tasks, key, directory, log)
        try:
            _copy_policy(directory, shared_dir / key)
        except OSError as exc:  # a full or read-only cache costs the next command a warm start only
            if log:
                log(f"warm start: not kept in the machine cache {shared_dir}: {exc}")
        return out


def _warm_start_in(cfg, tasks: list[Task], key: str, directory: Path, log):
    """The warm start of ``key`` in ``directory``: loaded where it is there, else trained."""

    info_path = directory / WARM_START_JSON
    if info_path.exists():
        from ..models import load_pretrained

        model, tok = load_pretrained(directory, cfg.model.device, cfg.model.dtype)
        set_fp32_lm_head(model, cfg.model.fp32_lm_head)
        info = json.loads(info_path.read_text())
        info["cached"] = True
        return model, tok, info
    if log:
        log(f"warm start: {key} not cached: building the initial policy and its demonstrations")
    model, tok = load_policy(cfg.model, tasks)
    apply_chat_setting(tok, cfg.rollout.chat_template)
    set_gradient_checkpointing(model, cfg.model.gradient_checkpointing)
    t0 = time.time()
    losses, counters = _sft_on_demonstrations(cfg, tasks, model, tok, key, log)
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


def _sft_on_demonstrations(
    cfg, tasks: list[Task], model, tok, key: str, log
) -> tuple[list[float], dict[str, float]]:
    """The warm start's SFT of ``model`` in place on the tasks' oracle demonstrations (none where
    the warm start is off, has no steps or no task has an oracle): the loss of each step and the
    ledger's nonzero counters (the demonstrations' play charged too)."""

    losses: list[float] = []
    counters: dict[str, float] = {}
    ws = cfg.warm_start
    if ws.enabled and ws.steps > 0:
        rng = random.Random(ws.seed)
        demonstrated = demonstrated_tasks(cfg, tasks, tok)
        per_task = max(1, ws.num_demos // len(demonstrated))
        batches, cost = [], {}
        for ti, task in enumerate(demonstrated):
            if not task.has_oracle:
                continue
            seeds = demo_seeds(rng, ti, per_task, task)
            batch, played = demonstration_pool(
                task, tok, seeds, cfg.rollout.max_prompt_tokens, cfg.rollout.env_workers
            )
            batches.append(batch)
            cost = {k: cost.get(k, 0.0) + v for k, v in played.items()}
        if batches:
            demo = TrajectoryBatch.concat(batches, tok.pad_token_id or 0)
            every = max(1, cfg.warm_start.steps // 5)
            if log:
                log(
                    f"warm start: training {key}: {ws.steps} SFT steps on {demo.size} "
                    "demonstrations"
                )

            def progress(step: int, loss: float) -> None:
                if log and (step % every == 0 or step == cfg.warm_start.steps - 1):
                    log(f"warm start: SFT step {step + 1}/{cfg.warm_start.steps} loss {loss:.4f}")

            task = next(t for t in demonstrated if t.has_oracle)
            result = train_sft(model, tok, task, demo, ws, cfg.rollout, progress, cost)
            losses = [m["loss"] for m in result.steps]
            counters = {k: v for k, v in result.ledger.counters.items() if v}
    return losses, counters
