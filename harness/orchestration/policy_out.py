"""A finished run's policy, taken out: a model directory (``RUN/policy``) that transformers loads
(``AutoModelForCausalLM.from_pretrained``), and vLLM for the architectures it supports, with the
tokenizer and a model card naming the run, the arm's blanks and its budget.

The checkpoint is the run's own resumable state (weights, optimizer moments, RNG states, the
ledger) in a layout only the trainer reads; this is the policy a user evaluates, serves or
continues from (``model.path: RUN``).
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import yaml

from .. import layout
from ..layout import POLICY, RunDir
from ..runspec import RunSpec

CARD = "README.md"


def export_policy(trainer, rd: RunDir, spec: RunSpec, summary: dict[str, Any]) -> None:
    """``trainer``'s final policy into ``rd.policy``: the weights as plain tensors in the model's
    Hugging Face layout (LoRA adapters merged into their base, an FSDP2 model gathered from its
    shards: every rank takes part, rank 0 writes), the tokenizer, and the model card. Written under
    a temporary name and renamed, so a directory named ``policy`` is always whole."""

    from ..rollout.vllm_engine import export_weights
    from ..training.parallel import full_tensors

    model, dp = trainer.ctx.model, trainer.ctx.dp
    if dp is not None and dp.backend == "fsdp2":
        writer = layout.writes(rd.policy)
        state = {}
        for k, v in full_tensors(model):  # a collective: every rank gathers, rank 0 keeps
            if writer:
                state[k] = v.detach().cpu()
        if not writer:
            return
        from transformers import AutoModelForCausalLM

        plain = AutoModelForCausalLM.from_config(model.config, torch_dtype=model.dtype)
        plain.load_state_dict(state)
        model = plain
    elif not layout.writes(rd.policy):
        return
    tmp = rd.path / f".{POLICY}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    export_weights(model, trainer.ctx.tokenizer, tmp)
    (tmp / CARD).write_text(model_card(spec, summary), encoding="utf-8")
    shutil.rmtree(rd.policy, ignore_errors=True)
    tmp.rename(rd.policy)


def model_card(spec: RunSpec, summary: dict[str, Any]) -> str:
    """The model card of a run's policy: Hugging Face's YAML header, then what made it (run,
    experiment, arm and preset, task, seed, the arm's six blanks, the budget and what it spent,
    the final held-out score, the code) and how to load it."""

    header = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["sixblanks", "reinforcement-learning", spec.preset],
    }
    counters = summary.get("counters") or {}
    spent = {k: counters.get(k) for k in sorted(spec.budget)}
    final = (summary.get("evals") or [{}])[-1]
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False).strip(),
        "---",
        "",
        f"# {spec.experiment} / {spec.arm} / seed {spec.seed}",
        "",
        f"The final policy of sixblanks run `{spec.run_id}`: arm `{spec.arm}` (preset "
        f"`{spec.preset}`) of experiment `{spec.experiment}`, seed {spec.seed}, on task "
        f"`{spec.task_name}`, trained from the warm start `{spec.warm_start_key}` by "
        f"{spec.code_version}.",
        "",
        f"- budget: {json.dumps(spec.budget)}; spent: {json.dumps(spent)}",
        f"- optimizer steps: {summary.get('steps')}; ended because: {summary.get('ended_because')}",
        f"- final held-out score: {final.get('score')} on {final.get('n')} instances of the "
        f"{final.get('split')} split",
        "",
        "## The arm's six blanks",
        "",
        "```yaml",
        yaml.safe_dump(spec.blanks, sort_keys=False).strip(),
        "```",
        "",
        "## Loading it",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'model = AutoModelForCausalLM.from_pretrained("<this directory>")',
        'tokenizer = AutoTokenizer.from_pretrained("<this directory>")',
        "```",
        "",
        "`sixblanks eval <this directory or its run directory> --task NAME` scores it on any task; "
        "`model.path: <its run directory>` continues training from it.",
        "",
    ]
    return "\n".join(lines)
