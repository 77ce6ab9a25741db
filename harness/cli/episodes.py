"""The work of ``rollouts``: the instances and the policy episodes are sampled with, and the
episodes shown (on a terminal, or as JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..layout import ExperimentDir
from .app import err, out


def training_seeds(task, n: int, seed: int) -> list[int]:
    """``n`` instance seeds drawn as a run's training batches draw them (``--seed`` seeds the
    draw): episodes shown are of training problems, never of a held-out one."""
    import random

    from ..seeds import train_seeds

    return train_seeds(random.Random(seed), n, task)


def add_task(cfg, task: str | None) -> str:
    """The task to sample (``--task``, default the first); a registered task the file does not
    list is added to ``cfg`` with its defaults. An unknown one is a ConfigError."""

    from ..config import TaskConfig
    from ..tasks import make_task
    from ..tasks.registry import TaskLoadError

    names = [t.name for t in cfg.tasks or []]
    chosen = task or names[0]
    if chosen not in names:
        try:
            make_task(chosen)
        except (TaskLoadError, ValueError) as exc:
            from ..errors import ConfigError

            raise ConfigError(f"--task: {exc}") from None
        cfg.tasks = [*(cfg.tasks or []), TaskConfig(name=chosen)]
    return chosen


def episode_policy(cfg, tasks, warm: bool, out_dir: Path | None, quiet: bool):
    """The policy and tokenizer episodes are sampled with: the warm-start policy (built and cached
    if missing) or the configured model as it loads."""

    from ..models import apply_chat_setting, load_policy
    from ..orchestration.command import out_dir_of
    from ..orchestration.warmstart import warm_start

    if warm:
        log = (lambda m: err.print(f"[dim]{m}[/dim]")) if not quiet else None
        model, tok, _info = warm_start(
            cfg, tasks, ExperimentDir(out_dir_of(cfg, out_dir)).warm_start, log=log
        )
        return model, tok
    model, tok = load_policy(cfg.model, tasks)
    apply_chat_setting(tok, cfg.rollout.chat_template)
    return model, tok


def episode_record(batch, b: int, tok) -> dict[str, Any]:
    """Episode ``b`` of ``batch`` as JSON: its tokens (and each decoded), masks, log-probs, turns,
    rewards and failure."""

    length = int(batch.attention_mask[b].sum())
    tokens = batch.tokens[b, :length].tolist()
    return {
        "group": int(batch.group_ids[b]),
        "instance_seed": int(batch.instance_seeds[b]),
        "tokens": tokens,
        "text": [tok.decode([t]) for t in tokens],
        "action_mask": batch.action_mask[b, :length].tolist(),
        "logprobs": batch.behavior_logprobs[b, :length].tolist(),
        "turn_ids": batch.turn_ids[b, :length].tolist(),
        "turn_rewards": batch.turn_rewards[b].tolist(),
        "reward": float(batch.reward[b]),
        "truncated": bool(batch.truncated[b]),
        "failed": batch.failure_reasons[b],
    }


ACTION_MARKS = ("⟦", "⟧")


def print_episodes(batch, tok, contract) -> None:
    """Each episode on a line (actions between ⟦ ⟧, which stay in a pipe or a log where colour
    does not, and green on a terminal; prompts and observations dim), then the contract checks."""

    from rich.text import Text

    opening, closing = ACTION_MARKS
    for b in range(batch.size):
        text = Text(f"[{b}] group {int(batch.group_ids[b])} ")
        for kind, start, end in batch.segments[b]:
            piece = tok.decode(batch.tokens[b, start:end].tolist(), skip_special_tokens=True)
            piece = piece.replace("\n", "\\n")
            if kind == "action":
                text.append(f"{opening}{piece}{closing}", style="bold green")
            else:
                text.append(piece, style="dim")
        text.append(
            f"  reward {float(batch.reward[b]):g}" + ("  (truncated)" if batch.truncated[b] else "")
        )
        if batch.failure_reasons[b]:
            text.append(f"  FAILED: {batch.failure_reasons[b]}", style="red")
        out.print(text)
    out.print(
        f"[dim]{opening}action tokens{closing} (mask 1, green on a terminal); the rest: "
        "prompt and observation tokens (mask 0, dim)[/dim]"
    )
    for res in contract.results:
        mark = "[green]ok[/green]" if res.passed else "[red]FAIL[/red]"
        out.print(f"contract {res.name}: {mark} {res.detail}")
