"""TRL's settings that are not blanks: the arm's rollout (sampling) and optimizer (AdamW, the
warm-up), and the experiment's (the prompt limit, the model's dtype, LoRA, the run's length as a
budget).
"""

from __future__ import annotations

import math
from typing import Any

from .builder import Builder


def rollout(b: Builder) -> None:
    """The arm's sampling settings, what sixblanks' samplers lack, then the experiment's
    settings."""

    f = b.f
    t = f.num("temperature")
    if t is not None and t > 0:
        b.rollout["temperature"] = (t, b.src("temperature"))
    else:
        b.lacks("temperature", "sixblanks samples with a temperature > 0")
    b.rollout["top_p"] = (f.num("top_p"), b.src("top_p"))
    b.rollout["top_k"] = (f.whole("top_k") or 0, b.src("top_k"))
    b.rollout["max_new_tokens"] = (f.whole("max_completion_length"), b.src("max_completion_length"))
    if b.rollout["max_new_tokens"][0] is None:
        del b.rollout["max_new_tokens"]
        b.lacks("max_completion_length", "no limit: sixblanks needs max_new_tokens")
    if f.raw("min_p") is not None:
        b.lacks("min_p", "min-p sampling: the sixblanks samplers have temperature, top_p, top_k")
    if (f.num("repetition_penalty") or 1.0) != 1.0:
        b.lacks("repetition_penalty", "no repetition penalty in sixblanks' samplers")
    if f.raw("generation_kwargs"):
        b.lacks("generation_kwargs", "extra sampling arguments are not carried over")
    if f.raw("vllm_structured_outputs_regex"):
        b.lacks("vllm_structured_outputs_regex", "constrained decoding is not carried over")
    if f.flag("use_vllm"):
        b.notes.append(
            "use_vllm: rollouts come from vLLM; set rollout.backend: vllm in the "
            "experiment to sample with another engine than the trainer's"
        )
    _experiment(b)


def _experiment(b: Builder) -> None:
    """The experiment's settings a TRL configuration holds: the prompt limit, the model's dtype,
    LoRA, a float32 LM head."""

    f = b.f
    if f.given("max_prompt_length"):  # GRPOConfig's until TRL 0.28: prompts cut to it
        n = f.whole("max_prompt_length")
        if n is None:
            b.lacks(
                "max_prompt_length",
                "no limit: TRL kept whole prompts; sixblanks bounds a prompt and its history "
                "by the experiment's rollout.max_prompt_tokens (set it above the longest prompt)",
            )
        else:
            b.experiment["rollout.max_prompt_tokens"] = (n, b.src("max_prompt_length"))
    dkey = "dtype" if f.given("dtype") or not f.given("torch_dtype") else "torch_dtype"
    dtype = f.text(dkey)
    if f.given(dkey) and dtype in ("float32", "bfloat16", "float16"):
        b.experiment["model.dtype"] = (dtype, b.src(dkey))
    elif f.given(dkey) and dtype is not None:
        b.notes.append(
            f"{dkey}={dtype!r}: the checkpoint's own dtype; sixblanks' model.dtype is the "
            "experiment's (float32 unless it says otherwise)"
        )
    if f.flag("cast_lm_head_to_fp32"):
        b.experiment["model.fp32_lm_head"] = (True, b.src("cast_lm_head_to_fp32"))
    if f.flag("use_peft"):
        _lora(b)
    if f.flag("load_in_4bit") or f.flag("load_in_8bit"):
        key = "load_in_4bit" if f.flag("load_in_4bit") else "load_in_8bit"
        b.lacks(key, "a quantized base model (QLoRA): sixblanks loads the weights in model.dtype")
    if f.raw("neftune_noise_alpha") is not None:
        b.lacks(
            "neftune_noise_alpha",
            "NEFTune's noise on the input embeddings in training forwards: sixblanks adds none",
        )


def _lora(b: Builder) -> None:
    """``use_peft``: LoRA adapters from TRL's ModelConfig fields (trl/trainer/utils.py
    get_peft_config) as the experiment's model.lora."""

    f = b.f
    keys = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
    lora: dict[str, Any] = {
        "r": f.whole("lora_r"),
        "alpha": f.num("lora_alpha"),
        "dropout": f.num("lora_dropout"),
    }
    targets = f.raw("lora_target_modules")
    if targets is None:
        b.lacks(
            "lora_target_modules",
            "unset: peft adapts its default modules for the architecture (q_proj and v_proj "
            "for Llama and Qwen); sixblanks' model.lora.target_modules names them or "
            "all-linear: the experiment's model.lora keeps all-linear",
        )
    else:
        lora["target_modules"] = targets
    b.experiment["model.lora"] = (lora, b.src(*keys))


def optimizer(b: Builder) -> None:
    """The arm's AdamW settings and warm-up; the run's length as the experiment's budget."""

    f = b.f
    b.optimizer["lr"] = (f.num("learning_rate"), b.src("learning_rate"))
    b.optimizer["weight_decay"] = (f.num("weight_decay"), b.src("weight_decay"))
    b.optimizer["betas"] = (
        [f.num("adam_beta1"), f.num("adam_beta2")],
        b.src("adam_beta1", "adam_beta2"),
    )
    clip = f.num("max_grad_norm")
    b.optimizer["grad_clip"] = (clip if clip else None, b.src("max_grad_norm"))
    if b.optimizer["grad_clip"][0] is None:
        b.notes.append(
            "max_grad_norm 0 or unset turns clipping off; an arm's grad_clip: null "
            "keeps the experiment's, so set optimizer.grad_clip: null there"
        )
        del b.optimizer["grad_clip"]
    _warmup(b, _length(b))
    sched = f.text("lr_scheduler_type")
    if sched not in ("constant", "constant_with_warmup"):
        b.lacks(
            "lr_scheduler_type",
            f"'{sched}' decays the learning rate over max_steps; "
            "sixblanks keeps it constant after the warm-up (its runs end on a budget)",
        )
    if f.text("optim") not in ("adamw_torch", "adamw_torch_fused", "adamw_hf"):
        b.lacks("optim", "sixblanks trains with torch's AdamW")
    if f.num("adam_epsilon") != 1e-8:
        b.lacks("adam_epsilon", "sixblanks' AdamW keeps torch's eps 1e-8")


def _length(b: Builder) -> int | None:
    """TRL's run length as the experiment's budget: max_steps > 0 optimizer updates (it overrides
    num_train_epochs), the ledger's optimizer_steps. Without it the run is num_train_epochs passes
    over a dataset the configuration does not size: no budget, and the note says how to make one.
    Returns the run's optimizer updates, or None."""

    f = b.f
    per = b.updates_per_step()
    total = f.whole("max_steps")
    if total is not None and total > 0:
        b.experiment["budget.optimizer_steps"] = (total, b.src("max_steps"))
        b.budget_note = (
            f"max_steps={total}: TRL's run is {total} optimizer updates, the ledger's "
            f"optimizer_steps (a step here makes {per}: data.epochs x data.minibatches)"
        )
        if total % per:
            b.budget_note += (
                f"; the run ends after {total // per} steps, {total % per} updates short, as the "
                "next step would not fit"
            )
        return total
    prompts = b.rollout.get("prompts_per_step", (None,))[0] or "P"
    epochs = f.num("num_train_epochs")
    b.budget_note = (
        f"{f.show('num_train_epochs')} passes over the training dataset set TRL's run length "
        f"(max_steps={f.raw('max_steps')!r} does not), and the dataset's size is not in the "
        "configuration: no budget is derived from it, the experiment's applies; for a dataset "
        f"of D prompts TRL's run is optimizer_steps = {epochs:g} x (D // {prompts}) x {per}"
    )
    return None


def _warmup(b: Builder, total: int | None) -> None:
    """TRL's warm-up counts optimizer updates; sixblanks raises the learning rate once per step
    (all of its updates alike): the warm-up in steps is the updates over updates per step, rounded
    up. A fraction (warmup_steps < 1, or the older warmup_ratio, which a warmup_steps >= 1
    overrides) is of the run's updates, ceil(fraction x max_steps), known only with max_steps."""

    f = b.f
    warm = f.num("warmup_steps") or 0.0
    ratio = f.num("warmup_ratio") or 0.0
    updates, src = int(warm), b.src("warmup_steps")
    if warm >= 1 and ratio > 0:
        b.notes.append("warmup_ratio: no effect, warmup_steps >= 1 overrides it")
    elif 0 < warm < 1 or (warm == 0 and ratio > 0):
        key = "warmup_steps" if warm else "warmup_ratio"
        if total is None:
            b.lacks(
                key,
                "a warm-up as a fraction of TRL's run, whose length (num_train_epochs passes "
                "over the dataset) the configuration does not give: set max_steps, or the "
                "arm's optimizer.warmup_steps by hand",
            )
            return
        updates, src = math.ceil(total * (warm or ratio)), b.src(key, "max_steps")
    per = b.updates_per_step()
    steps = math.ceil(updates / per)
    b.optimizer["warmup_steps"] = (steps, src)
    if per > 1 and updates:
        b.notes.append(
            f"warm-up: TRL warms up over {updates} optimizer updates; sixblanks raises the "
            f"learning rate once per step of {per} updates: {steps} steps"
        )
