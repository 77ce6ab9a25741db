"""TRL's ``GRPOConfig`` as data: its defaults at huggingface/trl@f2cd577, the fields that do not
change the update (by the reason), the fields of earlier TRL still read, the values the reader
accepts, and the fields that choose the loss, read once (:class:`Loss`).

The blanks they become are in ``trl``, the settings in ``trl_settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .fields import Fields

# trl/trainer/grpo_config.py@f2cd577 (GRPOConfig) and transformers 5.24 TrainingArguments, which
# GRPOConfig subclasses through trl/trainer/base_config.py; line numbers are grpo_config.py's.
TRL_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-6,  # :418 (TrainingArguments: 5e-5)
    "num_generations": 8,  # :474
    "max_completion_length": 512,  # :488
    "generation_batch_size": None,  # :511
    "steps_per_generation": None,  # :518 (None: gradient_accumulation_steps, :1083)
    "temperature": 1.0,  # :522
    "top_p": 1.0,  # :526
    "top_k": 0,  # :533
    "min_p": None,  # :540
    "generation_kwargs": None,  # :547
    "repetition_penalty": 1.0,  # :563
    "use_vllm": False,  # :577
    "vllm_structured_outputs_regex": None,  # :609
    "beta": 0.0,  # :671
    "num_iterations": 1,  # :679
    "epsilon": 0.2,  # :683
    "delta": None,  # :687
    "epsilon_high": None,  # :695 (None: epsilon, grpo_trainer.py:921)
    "sapo_temperature_neg": 1.05,  # :704
    "sapo_temperature_pos": 1.0,  # :712
    "importance_sampling_level": "token",  # :750
    "reward_weights": None,  # :760
    "multi_objective_aggregation": "sum_then_normalize",  # :767
    "scale_rewards": "group",  # :779
    "loss_type": "dapo",  # :791
    "mask_truncated_completions": False,  # :826
    "sync_ref_model": False,  # :834
    "top_entropy_quantile": 1.0,  # :856
    "entropy_coef": 0.0,  # :866
    "use_adaptive_entropy": False,  # :876
    "vllm_importance_sampling_correction": True,  # :915
    "vllm_importance_sampling_mode": "sequence_mask",  # :924
    "vllm_importance_sampling_clip_max": 3.0,  # :937
    "vllm_importance_sampling_clip_min": None,  # :945
    "off_policy_mask_threshold": None,  # :953
    "use_bias_correction_kl": False,  # :962
    "vllm_importance_sampling_cap": None,  # :1026 (deprecated alias of clip_max)
    "cast_lm_head_to_fp32": False,  # :454
    # transformers.TrainingArguments 5.24: the run's length (max_steps > 0 overrides the epochs)
    "max_steps": -1,
    "num_train_epochs": 3.0,
    # trl/trainer/model_config.py@f2cd577 (ModelConfig), which `trl grpo --config` files mix in
    "dtype": "float32",  # :89
    "use_peft": False,  # :103
    "lora_r": 16,  # :107
    "lora_alpha": 32,  # :111
    "lora_dropout": 0.05,  # :115
    "lora_target_modules": None,  # :119 (None: peft's modules for the architecture)
    "load_in_8bit": False,  # :152
    "load_in_4bit": False,  # :156
    "neftune_noise_alpha": None,  # TrainingArguments (Trainer.train turns NEFTune on)
    # transformers.TrainingArguments 5.24 (training_args.py)
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "weight_decay": 0.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0,
    "warmup_steps": 0,
    "lr_scheduler_type": "linear",
    "optim": "adamw_torch_fused",
    "use_liger_kernel": False,  # base_config.py (the loss then runs in Liger's fused kernel)
}

_TRL_IGNORED = (
    (
        "logging and progress output",
        "logging_strategy logging_steps logging_first_step log_on_each_node "
        "logging_nan_inf_filter include_num_input_tokens_seen log_level log_level_replica "
        "disable_tqdm report_to run_name project trackio_space_id trackio_bucket_id "
        "trackio_static_space_id log_completions log_multimodal num_completions_to_print "
        "log_unique_prompts log_completions_hub_repo skip_memory_metrics debug",
    ),
    (
        "checkpoints, uploads and resuming",
        "output_dir save_only_model save_strategy save_steps save_on_each_node save_total_limit "
        "enable_jit_checkpoint push_to_hub hub_token hub_private_repo hub_model_id hub_strategy "
        "hub_always_push hub_revision load_best_model_at_end metric_for_best_model "
        "greater_is_better ignore_data_skip restore_callback_states_from_checkpoint "
        "resume_from_checkpoint",
    ),
    (
        "evaluation during training (sixblanks scores the task's held-out split, eval.*)",
        "eval_strategy eval_steps eval_delay per_device_eval_batch_size prediction_loss_only "
        "eval_on_start eval_do_concat_batches eval_use_gather_object eval_accumulation_steps "
        "include_for_metrics batch_eval_metrics num_generations_eval do_train do_eval do_predict",
    ),
    (
        "speed, memory and parallelism: the same update computed another way",
        "ds3_gather_for_generation pad_to_multiple_of cache_implementation vllm_mode "
        "vllm_model_impl vllm_enable_sleep_mode vllm_server_base_url vllm_server_host "
        "vllm_server_port vllm_server_timeout vllm_group_port vllm_gpu_memory_utilization "
        "vllm_max_model_length vllm_tensor_parallel_size use_transformers_continuous_batching "
        "transformers_continuous_batching_config use_transformers_paged "
        "average_tokens_across_devices gradient_checkpointing gradient_checkpointing_kwargs "
        "activation_checkpointing activation_checkpointing_kwargs torch_compile "
        "torch_compile_backend torch_compile_mode liger_kernel_config use_cache "
        "torch_empty_cache_steps auto_find_batch_size use_cpu accelerator_config "
        "parallelism_config dataloader_num_workers dataloader_pin_memory "
        "dataloader_persistent_workers dataloader_prefetch_factor "
        "dataloader_multiprocessing_context dataloader_in_order ddp_find_unused_parameters "
        "ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend ddp_timeout fsdp "
        "fsdp_config deepspeed local_rank attn_implementation",
    ),
    (
        "mixed precision: the same update up to rounding (sixblanks computes in model.dtype)",
        "bf16 fp16 bf16_full_eval fp16_full_eval tf32",
    ),
    (
        "the model, the data and the rewards: the experiment's model and task",
        "model_init_kwargs trust_remote_code model_name_or_path model_revision dataset_name "
        "dataset_config dataset_train_split dataset_test_split reward_funcs "
        "reward_model_name_or_path chat_template_kwargs max_tool_calling_iterations "
        "remove_unused_columns label_names lora_task_type",
    ),
    (
        "seeds and data order: each run is seeded from the experiment's seeds",
        "seed data_seed full_determinism shuffle_dataset dataloader_drop_last "
        "train_sampling_strategy length_column_name",
    ),
    (
        "read only with loss_type 'vespo' (named when set)",
        "vespo_k_pos vespo_lambda_pos vespo_k_neg vespo_lambda_neg",
    ),
    (
        "read only with use_adaptive_entropy (named when set)",
        "entropy_coef_min entropy_coef_max entropy_coef_delta entropy_target",
    ),
    (
        "read only with sync_ref_model (named when set)",
        "ref_model_mixup_alpha ref_model_sync_steps",
    ),
    (
        "options of lr_scheduler_type and optim (named when they act)",
        "lr_scheduler_kwargs optim_args optim_target_modules",
    ),
    (
        "not read by GRPOTrainer, which computes its own loss",
        "label_smoothing_factor",
    ),
    (
        "the load-balancing loss TRL adds for mixture-of-experts models (x this coefficient); "
        "sixblanks adds none: a difference on MoE models only",
        "router_aux_loss_coef",
    ),
    (
        "dropout off in the policy: no effect on models without dropout (most current LLMs)",
        "disable_dropout",
    ),
)
"""GRPOConfig fields (grpo_config.py@f2cd577, transformers 5.24 TrainingArguments, and the
ScriptArguments and ModelConfig fields `trl grpo --config` files mix in) that do not change the
update, by the reason (``ignored`` in the report). Fields that can change it are read instead
(in ``trl`` and ``trl_settings``) and named when they act."""

TRL_IGNORED_WHY = {name: why for why, names in _TRL_IGNORED for name in names.split()}
TRL_OTHER_FIELDS = frozenset(TRL_IGNORED_WHY)

TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
TRL_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

LEGACY = ("use_liger_loss", "warmup_ratio", "max_prompt_length", "torch_dtype")
"""Fields read though no longer GRPOConfig's: recipes written for earlier TRL carry them."""

VOCABULARY = (*TRL_DEFAULTS, *TRL_OTHER_FIELDS, *LEGACY)
"""Every field name the reader knows."""


@dataclass(frozen=True)
class Loss:
    """The fields that choose TRL's loss, read once at the start (so that a malformed one is
    named once, in the order TRL reads them): ``loss_type``, ``importance_sampling_level``,
    ``scale_rewards`` (True and False as 'group' and 'none'), ``num_generations`` (0 when unset),
    ``epsilon`` and ``epsilon_high`` (unset: epsilon, grpo_trainer.py:921)."""

    loss: str
    level: str
    scale: Any
    group: int
    eps: float
    eps_high: float

    @property
    def ratio(self) -> str:
        """The arm's ratio: TRL's level, but always the token ratio for CISPO, since sixblanks'
        cispo weighs each token by its own ratio."""

        return "sequence" if self.level == "sequence" and self.loss != "cispo" else "token"


def read_loss(f: Fields) -> Loss:
    """The loss fields as TRL reads them, each malformed one named once."""

    loss = f.text("loss_type", TRL_LOSS_TYPES) or "dapo"
    level = f.text("importance_sampling_level", ("token", "sequence")) or "token"
    scale = f.raw("scale_rewards")
    scale = {True: "group", False: "none"}.get(scale, scale)  # grpo_config.py:1076
    if scale not in ("group", "batch", "none"):
        f.problems.append(
            f"{f.source}: scale_rewards: unknown value {scale!r} (valid: group, batch, none)"
        )
    group = f.whole("num_generations") or 0
    if group and group < 2:
        f.problems.append(f"{f.source}: num_generations: TRL needs at least 2 (got {group})")
    if loss == "luspo" and level != "sequence":
        f.problems.append(
            f"{f.source}: loss_type: 'luspo' needs importance_sampling_level='sequence' "
            "(grpo_trainer.py:891)"
        )
    eps = f.num("epsilon") or 0.2
    eps_high = f.num("epsilon_high")
    eps_high = eps if eps_high is None else eps_high  # grpo_trainer.py:921
    return Loss(loss, level, scale, group, eps, eps_high)
