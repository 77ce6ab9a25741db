"""What a run's inputs are, by content: a tokenizer (vocabulary, merges, special tokens, chat
template), a task (its resolved parameters and the source of its class and verifier), a judge (its
callable's source or its model's files). The fairness audit compares arms by these, and a cached
warm start is checked against its tokenizer's."""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import Any


def content_hash(obj: Any) -> str:
    """A short sha256 of ``obj`` (strings as they are, other objects as canonical JSON)."""

    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_identity(tok) -> dict[str, Any]:
    """What a tokenizer is, by content: vocabulary and merges, the whole serialized tokenizer
    (normalizer, pre-tokenizer, added tokens), special tokens and the chat template."""

    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        full = json.loads(backend.to_str())
        vocab = content_hash(full.get("model"))  # the vocabulary and the merges
        whole = content_hash(full)
    else:  # a slow tokenizer: its vocabulary is what can be read
        vocab = whole = content_hash(sorted(tok.get_vocab().items()))
    template = getattr(tok, "chat_template", None)
    return {
        "vocab_merges": vocab,
        "tokenizer": whole,
        "vocab_size": len(tok),
        "special_tokens": {k: str(v) for k, v in sorted(tok.special_tokens_map.items())},
        "chat_template": content_hash(template) if template else None,
    }


def _source_hash(obj: Any) -> str:
    try:
        return content_hash(inspect.getsource(obj))
    except (OSError, TypeError):  # defined interactively: the qualified name is what is known
        return content_hash(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', obj)}")


@lru_cache(maxsize=64)
def task_and_reward(name: str, params_json: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from ..tasks import make_task
    from ..tasks.rgym import ReasoningGymTask

    task = make_task(name, json.loads(params_json))
    cls = type(task)
    ident: dict[str, Any] = {
        "name": name,
        "params": task.params.model_dump(mode="json"),  # defaults resolved
        "source": _source_hash(cls),
    }
    verifier = {"source": _source_hash(cls.verify)}
    if isinstance(task, ReasoningGymTask):
        from importlib.metadata import version

        ds, _ = task._entry(0)  # noqa: SLF001 - the dataset object the task scores with
        ident["reasoning_gym"] = version("reasoning-gym")
        ident["dataset_source"] = _source_hash(type(ds))
        verifier["score_answer"] = _source_hash(type(ds).score_answer)
    if getattr(task, "env_id", None) and name.startswith("gymnasium:"):  # the reward is the env's
        from importlib.metadata import version

        ident["gymnasium"] = version("gymnasium")
        verifier["environment"] = _source_hash(type(task.make_gym().unwrapped))
    return ident, verifier


def judge_identity(judge: dict[str, Any]) -> dict[str, Any]:
    """A judge in the reward: how it is used, and its callable's source or its model's files."""

    out = {k: judge.get(k) for k in ("kind", "use", "max_calls_per_verify")}
    if judge["kind"] == "callable":
        from ..tasks.judge import JudgeError, import_callable

        out["callable"] = judge["callable"]
        try:
            out["source"] = _source_hash(import_callable(judge["callable"]))
        except JudgeError as exc:
            out["source"] = f"unavailable: {exc}"
    else:
        root = Path(judge["path"])
        files = sorted(p for p in root.glob("*") if p.is_file()) if root.is_dir() else []
        out["model"] = content_hash(
            {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
        )
        out["prompt"] = content_hash(judge["prompt"])
    return out


def task_identity(task: dict[str, Any]) -> dict[str, Any]:
    """Name, resolved parameters and source hash of a task spec ``{"name", "params"}``."""

    return task_and_reward(task["name"], json.dumps(task.get("params") or {}, sort_keys=True))[0]
