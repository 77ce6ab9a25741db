"""The warm start's identity, without training or loading it (no torch): its key, a content hash
of everything the warm-start policy depends on, where this machine caches it, and a cached one's
info read from its files. The command that runs an experiment drafts its run ids and finds a cached
warm start with this alone, so that its own process need not import torch while its workers do."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..layout import TOKENIZER_IDENTITY_JSON, WARM_START_JSON
from ..version import code_fingerprint
from .data_files import task_inputs, without_locations

if TYPE_CHECKING:
    from ..tasks.base import Task


def chat_identity(mode: str) -> str:
    """``rollout.chat_template`` as it enters the warm-start key: the mode, or a file's content
    hash."""

    if mode in ("auto", "none"):
        return mode
    return "file:" + hashlib.sha256(Path(mode).read_bytes()).hexdigest()[:16]


def tasks_inputs(cfg) -> list[dict]:
    """Each task's data files and user modules (:func:`task_inputs`); [] where no task has any."""

    found = [task_inputs(t) for t in cfg.tasks or []]
    return found if any(found) else []


def tool_modes(cfg) -> list[bool]:
    """Whether the warm start demonstrates with the code tool (True), without it (False), or both:
    one per kind of arm, so that arms with and without the tool start from the same policy (the
    tool's announcement before the prompt tells the two apart)."""

    return sorted({cfg.tools_for(arm) is not None for arm in cfg.arms})


def warm_start_key(cfg, tasks: list[Task]) -> str:
    """Content hash of everything the warm-start policy depends on."""

    payload = {
        "code": code_fingerprint(),  # any change to the source or the libraries rebuilds it
        "model": cfg.model.model_dump(mode="json", exclude={"lora", "parallel"}),  # RL only
        "tasks": [{"name": t.name, "params": t.params.model_dump(mode="json")} for t in tasks],
        "warm_start": cfg.warm_start.model_dump(mode="json"),
        "max_context": cfg.rollout.max_prompt_tokens,
        "chat_template": chat_identity(cfg.rollout.chat_template),
        # micro-batches below warm_start.batch_size change the float summation order
        "micro_batch": min(cfg.rollout.micro_batch_size, cfg.warm_start.batch_size),
    }
    # the demonstrations come from the tasks' data and code: their files (by content, not by
    # where they lie) and user modules
    modes = tool_modes(cfg)
    if modes != [False]:  # demonstrations with the code tool (only then: other keys as they were)
        payload["tools"] = {"config": cfg.tools.model_dump(mode="json"), "modes": modes}
    inputs = tasks_inputs(cfg)
    if inputs:
        placed = [without_locations(t["params"], i) for t, i in zip(payload["tasks"], inputs)]
        payload["tasks"] = [{**t, "params": p} for t, (p, _) in zip(payload["tasks"], placed)]
        payload["inputs"] = [i for _, i in placed]
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


def machine_cache() -> Path | None:
    """The warm-start cache this machine's commands share: ``$SIXBLANKS_CACHE/warm_start``
    (default ``~/.cache/sixblanks/warm_start``, beside the GGUF conversions); None where
    ``SIXBLANKS_NO_CACHE`` is set (``sixblanks run --no-cache``)."""

    if os.environ.get("SIXBLANKS_NO_CACHE"):
        return None
    root = Path(os.environ.get("SIXBLANKS_CACHE") or Path.home() / ".cache" / "sixblanks")
    return root / "warm_start"
