"""verl's settings that are not blanks: the arm's rollout (sampling) and optimizer (AdamW, the
warm-up), and the experiment's (the prompt limit, LoRA, the rollout's end-of-sequence handling,
the run's length as a budget).
"""

from __future__ import annotations

from .builder import Builder
from .verl_fields import ACTOR, ROLLOUT


def rollout(b: Builder) -> None:
    """The arm's sampling settings, what sixblanks' samplers lack, then the experiment's
    settings."""

    f = b.f
    if not f.flag(ROLLOUT + "do_sample"):
        b.lacks(ROLLOUT + "do_sample", "greedy rollouts: sixblanks samples with a temperature > 0")
    t = f.num(ROLLOUT + "temperature")
    if t is not None and t > 0:
        b.rollout["temperature"] = (t, b.src(ROLLOUT + "temperature"))
    else:
        b.lacks(ROLLOUT + "temperature", "sixblanks samples with a temperature > 0")
    b.rollout["top_p"] = (f.num(ROLLOUT + "top_p"), b.src(ROLLOUT + "top_p"))
    k = f.whole(ROLLOUT + "top_k")
    b.rollout["top_k"] = (max(k or 0, 0), b.src(ROLLOUT + "top_k"))  # -1: off, sixblanks 0
    resp_key = (
        ROLLOUT + "response_length"
        if f.raw(ROLLOUT + "response_length") is not None
        else ("data.max_response_length")
    )
    b.rollout["max_new_tokens"] = (f.whole(resp_key), b.src(resp_key))
    if not f.flag(ROLLOUT + "calculate_log_probs"):
        b.notes.append(
            "rollout.calculate_log_probs=false: verl cannot correct for the rollout "
            "engine (no rollout log-probs); sixblanks always records them"
        )
    b.rollout = {k: v for k, v in b.rollout.items() if v[0] is not None}
    _experiment(b)


def _experiment(b: Builder) -> None:
    """The experiment's settings a verl configuration holds: the prompt limit (the dataset's
    filter and truncation length, the rollout's prompt_length by default), LoRA, ignore_eos; and
    what verl's engine or trainer does that sixblanks does not (over-sampling, routing replay, a
    critic warm-up)."""

    f = b.f
    n = f.whole("data.max_prompt_length")
    if n is not None:
        b.experiment["rollout.max_prompt_tokens"] = (n, b.src("data.max_prompt_length"))
    _lora(b)
    if f.flag(ROLLOUT + "ignore_eos"):
        b.experiment["rollout.ignore_eos"] = (True, b.src(ROLLOUT + "ignore_eos"))
    rate = f.num(ROLLOUT + "over_sample_rate") or 0.0
    if rate > 0:
        b.lacks(
            ROLLOUT + "over_sample_rate",
            f"each round's last {rate:g} of requests (the slowest, longest) aborted: "
            "sixblanks waits for every sample",
        )
    if f.flag(ROLLOUT + "enable_rollout_routing_replay"):
        b.lacks(
            ROLLOUT + "enable_rollout_routing_replay",
            "mixture-of-experts routing replayed from the rollout in the training forwards: "
            "sixblanks' forwards route for themselves",
        )
    warm = f.whole("trainer.critic_warmup") or 0
    if warm > 0:
        b.lacks(
            "trainer.critic_warmup",
            f"the first {warm} steps train the critic only (the policy waits); sixblanks "
            "updates the policy from the first step",
        )


def _lora(b: Builder) -> None:
    """``actor_rollout_ref.model.lora_rank`` > 0: LoRA adapters as the experiment's model.lora."""

    f = b.f
    m = "actor_rollout_ref.model."
    rank = f.whole(m + "lora_rank") or 0
    if rank > 0:
        lora = {"r": rank, "alpha": f.num(m + "lora_alpha")}
        if f.raw(m + "target_modules") is not None:
            lora["target_modules"] = f.raw(m + "target_modules")
        else:
            b.lacks(
                m + "target_modules",
                "null: peft adapts its default modules for the architecture; the experiment's "
                "model.lora keeps sixblanks' all-linear",
            )
        b.experiment["model.lora"] = (
            lora,
            b.src(m + "lora_rank", m + "lora_alpha", m + "target_modules"),
        )


def _length(b: Builder) -> int | None:
    """verl's run length as the experiment's budget: trainer.total_training_steps (it overrides
    total_epochs x the dataset's batches) trainer steps, each ppo_epochs x mini-batches optimizer
    updates: the ledger's optimizer_steps. Without it, total_epochs passes over a dataset the
    configuration does not size: no budget. Returns the run's trainer steps, or None."""

    f = b.f
    per = b.updates_per_step()
    steps = f.whole("trainer.total_training_steps")
    epochs = f.show("trainer.total_epochs")
    if steps is not None and steps > 0:
        b.experiment["budget.optimizer_steps"] = (
            steps * per,
            b.src(
                "trainer.total_training_steps",
                ACTOR + "ppo_epochs",
                "data.train_batch_size",
                ACTOR + "ppo_mini_batch_size",
            ),
        )
        b.budget_note = (
            f"trainer.total_training_steps={steps}: verl's run is {steps} steps of {per} "
            f"optimizer updates (ppo_epochs x mini-batches), optimizer_steps {steps * per}; "
            f"verl also stops after {epochs} passes over the dataset, if they come first "
            "(the dataset's size is not in the configuration)"
        )
        return steps
    tbs = f.whole("data.train_batch_size") or "P"
    b.budget_note = (
        f"{epochs} passes over the training dataset set verl's run length "
        "(trainer.total_training_steps is null), and the dataset's size is not in the "
        "configuration: no budget is derived from it, the experiment's applies; for a dataset "
        f"of D prompts verl's run is optimizer_steps = {f.raw('trainer.total_epochs')} x "
        f"(D // {tbs}) x {per}"
    )
    return None


def optimizer(b: Builder) -> None:
    """The arm's AdamW settings and warm-up; the run's length as the experiment's budget."""

    f = b.f
    o = ACTOR + "optim."
    b.optimizer["lr"] = (f.num(o + "lr"), b.src(o + "lr"))
    b.optimizer["weight_decay"] = (f.num(o + "weight_decay"), b.src(o + "weight_decay"))
    betas = f.raw(o + "betas")
    if isinstance(betas, list | tuple) and len(betas) == 2:
        b.optimizer["betas"] = ([float(x) for x in betas], b.src(o + "betas"))
    else:
        f.problems.append(f"{f.source}: {o}betas: {betas!r} is not a pair of numbers")
    clip_key = (
        ACTOR + "grad_clip"
        if f.given(ACTOR + "grad_clip") or not f.given(o + "clip_grad")
        else (o + "clip_grad")
    )
    clip = f.num(clip_key)
    if clip:
        b.optimizer["grad_clip"] = (clip, b.src(clip_key))
    _warmup(b, _length(b))
    sched = f.text(o + "lr_scheduler_type")
    if sched not in (None, "constant"):
        b.lacks(
            o + "lr_scheduler_type",
            f"'{sched}' decays the learning rate; sixblanks keeps it constant after the warm-up",
        )
    if (f.text(o + "optimizer") or "AdamW") != "AdamW":
        b.lacks(o + "optimizer", "sixblanks trains with torch's AdamW")


def _warmup(b: Builder, total: int | None) -> None:
    """verl's scheduler steps once per trainer step, as sixblanks' warm-up does: lr_warmup_steps
    > 0 is the warm-up in steps; otherwise int(lr_warmup_steps_ratio x the run's steps), known
    where trainer.total_training_steps gives them (in the synchronous trainer, whose scheduler
    steps once per step; the asynchronous modes are not represented)."""

    f = b.f
    o = ACTOR + "optim."
    warm, ratio = f.whole(o + "lr_warmup_steps"), f.num(o + "lr_warmup_steps_ratio") or 0.0
    if warm is not None and warm > 0:
        b.optimizer["warmup_steps"] = (warm, b.src(o + "lr_warmup_steps"))
    elif ratio <= 0:
        b.optimizer["warmup_steps"] = (0, b.src(o + "lr_warmup_steps", o + "lr_warmup_steps_ratio"))
    elif total is None or f.text("trainer.v1.trainer_mode") not in (None, "sync"):
        b.lacks(
            o + "lr_warmup_steps_ratio",
            "a warm-up as a fraction of verl's run, whose length (total_epochs passes over the "
            "dataset) the configuration does not give: set trainer.total_training_steps, or "
            "the arm's optimizer.warmup_steps by hand",
        )
    else:  # workers/engine/fsdp/transformer_impl.py:495-497
        keys = (o + "lr_warmup_steps_ratio", "trainer.total_training_steps")
        b.optimizer["warmup_steps"] = (int(ratio * total), b.src(*keys))
