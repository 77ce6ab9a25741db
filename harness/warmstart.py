"""Warm start: SFT on task demonstrations, the initial policy every arm starts from.

Demonstrations come from each task's oracle played through its environment, so
multi-turn demonstrations carry real observations. The loss is the negative
log-likelihood of demonstrated action tokens only (prompt and observation
tokens are masked), a global token-mean over the step's batch. The result is
cached by a content hash of model, tasks, SFT config and seed.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from sixblanks.algorithms.logprobs import token_logprobs

from .models import load_policy, save_policy, state_hash
from .rollout.agent import _Episode, _to_batch, encode_observation, state_key
from .rollout.trajectory import TrajectoryBatch
from .tasks.base import Task
from .tasks.verify import VerifierGate

SFT_CODE_VERSION = "sft-v1"
DEMO_SEED_BASE = 500_000_000
"""Demonstration instances use seeds from here: disjoint from RL training seeds and held-out seeds."""


def demonstration_batch(
    task: Task, tokenizer, seeds: list[int], max_context_tokens: int = 512
) -> TrajectoryBatch:
    """Oracle episodes of ``task`` on instances ``seeds``, with mask 1 on the oracle's action tokens."""

    if not task.has_oracle:
        raise ValueError(
            f"task '{task.name}' has no demonstration oracle; disable warm_start or add one"
        )
    gate = VerifierGate(task, timeout_s=None)
    episodes = []
    for seed in seeds:
        inst = task.make_instance(seed)
        env = task.make_env(inst, gate)
        obs, _ = env.reset(seed=inst.seed)
        ep = _Episode(inst, len(episodes), env)
        ep.observations.append(obs)
        ep.add("obs", encode_observation(tokenizer, obs, first=True))
        ep.state_keys.append(state_key(ep.observations))
        for turn in range(max(1, task.max_turns)):
            action = task.oracle(inst, ep.observations)
            ids = tokenizer(action, add_special_tokens=False)["input_ids"]
            ep.add("action", ids, None, turn)
            ep.actions.append(action)
            res = env.step(action)
            ep.turn_rewards.append(res.reward)
            ep.terminated = bool(res.terminated)
            if res.terminated or res.truncated:
                ep.truncated = bool(res.truncated) and not res.terminated
                break
            obs_ids = encode_observation(tokenizer, res.observation, first=False)
            if len(ep.tokens) + len(obs_ids) > max_context_tokens:
                break
            ep.observations.append(res.observation)
            ep.add("obs", obs_ids)
            ep.state_keys.append(state_key(ep.observations))
        episodes.append(ep)
    return _to_batch(episodes, tokenizer, 0, task.name)


def sft_loss(model, batch: TrajectoryBatch) -> torch.Tensor:
    """NLL of action tokens, token-mean over the batch. Labels are shifted by one inside token_logprobs."""

    dev = next(model.parameters()).device
    tokens, attn = batch.tokens.to(dev), batch.attention_mask.to(dev)
    logits = model(input_ids=tokens, attention_mask=attn, use_cache=False).logits
    lp, _ = token_logprobs(logits[:, :-1], tokens[:, 1:])
    mask = batch.action_mask[:, 1:].to(dev)
    return -(lp * mask).sum() / mask.sum().clamp(min=1.0)


def train_sft(
    model,
    batch: TrajectoryBatch,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW on the demonstration batch; returns the loss per step."""

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        idx = torch.randint(0, batch.size, (min(batch_size, batch.size),), generator=gen)
        loss = sft_loss(model, batch.select(idx))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"SFT loss is {loss.item()} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step, losses[-1])
    model.eval()
    return losses


def warm_start_key(cfg, tasks: list[Task]) -> str:
    """Content hash of everything the warm-start policy depends on."""

    payload = {
        "code": SFT_CODE_VERSION,
        "model": cfg.model.model_dump(mode="json"),
        "tasks": [{"name": t.name, "params": t.params.model_dump(mode="json")} for t in tasks],
        "warm_start": cfg.warm_start.model_dump(mode="json"),
        "max_context": cfg.rollout.max_prompt_tokens,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def warm_start(
    cfg, tasks: list[Task], cache_root: str | Path, log: Callable[[str], None] | None = None
):
    """The common initial policy: (model, tokenizer, info). Cached under ``cache_root/<hash>``."""

    key = warm_start_key(cfg, tasks)
    directory = Path(cache_root) / key
    info_path = directory / "warm_start.json"
    if info_path.exists():
        from .models import load_pretrained

        model, tok = load_pretrained(directory, cfg.model.device, cfg.model.dtype)
        info = json.loads(info_path.read_text())
        info["cached"] = True
        return model, tok, info
    model, tok = load_policy(cfg.model, tasks)
    t0 = time.time()
    losses: list[float] = []
    if cfg.warm_start.enabled and cfg.warm_start.steps > 0:
        rng = random.Random(cfg.warm_start.seed)
        per_task = max(1, cfg.warm_start.num_demos // len(tasks))
        batches = []
        for ti, task in enumerate(tasks):
            if not task.has_oracle:
                continue
            seeds = [
                DEMO_SEED_BASE + ti * 10_000_000 + rng.randrange(10_000_000)
                for _ in range(per_task)
            ]
            batches.append(demonstration_batch(task, tok, seeds, cfg.rollout.max_prompt_tokens))
        if batches:
            demo = TrajectoryBatch.concat(batches, tok.pad_token_id or 0)
            every = max(1, cfg.warm_start.steps // 5)

            def progress(step: int, loss: float) -> None:
                if log and (step % every == 0 or step == cfg.warm_start.steps - 1):
                    log(f"warm start: SFT step {step + 1}/{cfg.warm_start.steps} loss {loss:.4f}")

            losses = train_sft(
                model,
                demo,
                cfg.warm_start.steps,
                cfg.warm_start.batch_size,
                cfg.warm_start.lr,
                cfg.warm_start.seed,
                progress,
            )
    info: dict[str, Any] = {
        "key": key,
        "policy_hash": state_hash(model),
        "steps": len(losses),
        "final_loss": losses[-1] if losses else None,
        "seconds": time.time() - t0,
        "cached": False,
    }
    save_policy(model, tok, directory)
    info_path.write_text(json.dumps(info, indent=2))
    return model, tok, info
