"""TRL's side of ``benchmarks/vs_trl.py``: its GRPOConfig with the settings of the sixblanks side,
its timed runs, and the share of its step spent in generation."""

from __future__ import annotations

import copy
import tempfile
import time

from vs_trl_setup import SETUP, Parts, Setup, synchronize


def trl_config(out: str, steps: int, setup: Setup = SETUP):
    """TRL's GRPOConfig of the comparison: the settings of the sixblanks side, one by one."""

    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out,
        per_device_train_batch_size=setup.prompts * setup.group,
        gradient_accumulation_steps=1,
        num_generations=setup.group,
        max_completion_length=setup.new_tokens,
        # EOS ignored: every sample is new_tokens long
        generation_kwargs={"min_new_tokens": setup.new_tokens},
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=setup.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        max_steps=steps + 1,
        logging_steps=10**6,
        save_strategy="no",
        report_to="none",
        # sixblanks keeps every activation; TRL's GRPOConfig would recompute them
        gradient_checkpointing=False,
        use_cpu=setup.device == "cpu",
        bf16=setup.bf16,
        fp16=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )


def trl_run(
    task, model0, tok, steps: int, parts: Parts | None = None, setup: Setup = SETUP
) -> list[float]:
    """Seconds of each TRL step after the first, on the batch and device of ``setup``."""

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    seeds = list(range(setup.prompts * (steps + 1) * 4))
    prompts = [task.make_instance(s).prompt for s in seeds]
    data = Dataset.from_dict({"prompt": prompts, "seed": seeds})

    def reward(prompts, completions, seed, **_):
        return [float(task.verify(task.make_instance(s), c)) for s, c in zip(seed, completions)]

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if parts is not None:
                parts.on = state.global_step > 0  # the warm-up step is not counted
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            synchronize(setup)
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as out:
        args = trl_config(out, steps, setup)
        trainer = GRPOTrainer(
            model=copy.deepcopy(model0),
            reward_funcs=reward,
            args=args,
            train_dataset=data,
            processing_class=tok,
            callbacks=[Clock()],
        )
        trainer.train()
    if parts is not None:
        parts.on = False
    return times[1:]


def trl_generation(task, model0, tok, steps: int) -> tuple[float, float]:
    """(seconds per step in ``model.generate``, seconds per step in all) of one TRL run."""

    from transformers.generation.utils import GenerationMixin

    parts = Parts()
    real = parts.wrap(GenerationMixin, "generate", "generation")
    try:
        times = trl_run(task, model0, tok, steps, parts)
    finally:
        GenerationMixin.generate = real
    return parts.seconds["generation"] / steps, sum(times) / steps
