"""verl's configuration as data: its defaults at verl-project/verl@1dda039, the fields it has that
do not change the update (with why), the sections and values the reader knows, and the fields that
choose the loss, read once (:class:`Choice`).

The blanks they become are in ``verl`` and ``verl_correction``, the settings in ``verl_settings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .fields import Fields

ACTOR = "actor_rollout_ref.actor."
ROLLOUT = "actor_rollout_ref.rollout."
ALGORITHM = "algorithm."
CORRECTION = ALGORITHM + "rollout_correction."

# verl/trainer/config/_generated_ppo_trainer.yaml@1dda039 (the hydra defaults; the dataclasses in
# verl/workers/config/actor.py:152-180 and verl/trainer/config/algorithm.py:36-59, 178-184, 654-666
# agree except rollout_correction.rollout_is: null in YAML, "sequence" in the dataclass)
VERL_DEFAULTS: dict[str, Any] = {
    ACTOR + "ppo_mini_batch_size": 256,  # actor.py:152
    ACTOR + "clip_ratio": 0.2,  # actor.py:159
    ACTOR + "clip_ratio_low": 0.2,  # actor.py:160 (not null: clip_ratio alone changes nothing)
    ACTOR + "clip_ratio_high": 0.2,  # actor.py:161
    ACTOR + "policy_loss.loss_mode": "vanilla",  # actor.py:94
    ACTOR + "clip_ratio_c": 3.0,  # actor.py:164
    ACTOR + "loss_agg_mode": "token-mean",  # actor.py:165
    ACTOR + "loss_scale_factor": None,  # actor.py:166
    ACTOR + "entropy_coeff": 0.0,  # actor.py:167
    ACTOR + "tau_pos": 1.0,  # actor.py:168
    ACTOR + "tau_neg": 1.05,  # actor.py:169
    ACTOR + "use_kl_loss": False,  # actor.py:172
    ACTOR + "kl_loss_coef": 0.001,  # actor.py:176
    ACTOR + "kl_loss_type": "low_var_kl",  # actor.py:177
    ACTOR + "ppo_epochs": 1,  # actor.py:178
    ACTOR + "grad_clip": 1.0,  # actor.py:310
    ACTOR + "optim.lr": 1e-6,  # _generated_ppo_trainer.yaml:12
    ACTOR + "optim.weight_decay": 0.01,  # :15
    ACTOR + "optim.lr_warmup_steps": -1,  # :16 (-1: lr_warmup_steps_ratio decides)
    ACTOR + "optim.lr_warmup_steps_ratio": 0.0,  # :13
    ACTOR + "optim.betas": [0.9, 0.999],  # :17
    ACTOR + "optim.clip_grad": 1.0,  # :20
    ACTOR + "optim.lr_scheduler_type": "constant",  # :23
    ACTOR + "optim.optimizer": "AdamW",  # :10
    ROLLOUT + "n": 1,  # :335
    ROLLOUT + "temperature": 1.0,  # :303
    ROLLOUT + "top_k": -1,  # :304
    ROLLOUT + "top_p": 1.0,  # :305
    ROLLOUT + "do_sample": True,  # :334
    ROLLOUT + "response_length": None,  # :309 (${data.max_response_length})
    ROLLOUT + "calculate_log_probs": True,  # :363
    ROLLOUT + "name": "vllm",  # :299 (??? in YAML: vllm, sglang or trtllm, all separate engines)
    "data.train_batch_size": 1024,  # :511
    "data.gen_batch_size": None,  # :512
    "data.max_response_length": 512,  # :510
    ALGORITHM + "gamma": 1.0,  # :862
    ALGORITHM + "lam": 1.0,  # :863
    ALGORITHM + "adv_estimator": "gae",  # :864
    ALGORITHM + "norm_adv_by_std_in_grpo": True,  # :865
    ALGORITHM + "filter_groups.enable": False,  # :868
    ALGORITHM + "filter_groups.metric": None,  # :869
    ALGORITHM + "filter_groups.max_num_gen_batches": 0,  # :870 (non-positive: no limit)
    ALGORITHM + "use_kl_in_reward": False,  # :872
    ALGORITHM + "kl_penalty": "kl",  # :873
    ALGORITHM + "kl_ctrl.type": "fixed",  # :876
    ALGORITHM + "kl_ctrl.kl_coef": 0.001,  # :877
    ALGORITHM + "use_pf_ppo": False,  # :880
    CORRECTION + "rollout_is": None,  # algorithm/rollout_correction.yaml
    CORRECTION + "rollout_is_threshold": 2.0,
    CORRECTION + "rollout_rs": None,
    CORRECTION + "rollout_rs_threshold": None,
    CORRECTION + "bypass_mode": False,
    CORRECTION + "loss_type": "ppo_clip",
    CORRECTION + "rollout_is_batch_normalize": False,
    "critic.optim.lr": 1e-5,  # :544
    "critic.cliprange_value": 0.5,  # :621
    "trainer.v1.trainer_mode": "sync",  # :983
    "trainer.v1.separate_async.parameter_sync_step": 4,  # :989
    "reward.reward_kwargs.overlong_buffer_cfg.enable": False,  # DAPO reward manager
    "reward.reward_kwargs.overlong_buffer_cfg.len": 4096,  # (experimental/reward_loop/...
    "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,  # ...reward_manager/dapo.py)
    "distillation.enabled": False,  # :886
    "actor_rollout_ref.model.lora_rank": 0,  # :452
    "actor_rollout_ref.model.lora_alpha": 16,  # :453
    "actor_rollout_ref.model.target_modules": "all-linear",  # :454
    "data.max_prompt_length": 512,  # :509
    "trainer.total_epochs": 30,  # :954
    "trainer.total_training_steps": None,  # :955 (null: total_epochs x the dataset's batches)
    "trainer.critic_warmup": 0,  # :973
    ROLLOUT + "ignore_eos": False,  # :312
    ROLLOUT + "over_sample_rate": 0.0,  # :336
    ROLLOUT + "enable_rollout_routing_replay": False,  # :387
}

# The other leaf fields of the sections the reader checks (from _generated_ppo_trainer.yaml):
# known, with no effect on the update.
_VERL_OTHER = {
    ACTOR: (
        "optim.optimizer_impl optim.total_training_steps optim.min_lr_ratio optim.num_cycles "
        "optim.zero_indexed_step optim.warmup_style optim.override_optimizer_config rollout_n "
        "strategy ppo_micro_batch_size ppo_micro_batch_size_per_gpu use_dynamic_bsz "
        "ppo_max_token_len_per_gpu freeze_vision_tower policy_loss.clip_cov_ratio "
        "policy_loss.clip_cov_lb policy_loss.clip_cov_ub policy_loss.kl_cov_ratio "
        "policy_loss.ppo_kl_coef policy_loss.dro_beta calculate_entropy calculate_sum_pi_squared "
        "use_prefix_grouper use_torch_compile shuffle data_loader_seed use_fused_kernels "
        "ulysses_sequence_parallel_size entropy_from_logits_with_chunking "
        "entropy_from_logits_chunk_size entropy_checkpointing pad_to_length use_remove_padding "
        "use_rollout_log_probs ppo_infer_micro_batch_size_per_gpu ppo_infer_max_token_len_per_gpu"
    ),
    ROLLOUT: (
        "mode nnodes n_gpus_per_node full_determinism seed prompt_length dtype "
        "gpu_memory_utilization enforce_eager cudagraph_capture_sizes free_cache_engine "
        "tensor_model_parallel_size data_parallel_size expert_parallel_size "
        "pipeline_model_parallel_size max_num_batched_tokens max_model_len max_num_seqs "
        "enable_chunked_prefill enable_prefix_caching logprobs_mode scheduling_policy load_format "
        "layered_summon log_prob_micro_batch_size log_prob_micro_batch_size_per_gpu "
        "log_prob_use_dynamic_bsz log_prob_max_token_len_per_gpu disable_log_stats "
        "multi_stage_wake_up skip_tokenizer_init moe_load_balance_metrics_interval quantization "
        "quantization_config_file"
    ),
    ALGORITHM: (
        "filter_groups.max_inflight_gen_batches kl_ctrl.horizon kl_ctrl.target_kl "
        "pf_ppo.reweight_method pf_ppo.weight_pow"
    ),
    "data.": (
        "tokenizer use_shm train_files val_files train_max_samples val_max_samples prompt_key "
        "reward_fn_key val_batch_size tool_config_path function_tool_path return_raw_input_ids "
        "return_raw_chat return_full_prompt shuffle seed dataloader_num_workers image_patch_size "
        "validation_shuffle filter_overlong_prompts filter_overlong_prompts_workers truncation "
        "image_key video_key audio_key trust_remote_code return_multi_modal_inputs "
        "apply_chat_template_kwargs mm_processor_kwargs custom_cls"
    ),
    "critic.": (
        "optim rollout_n strategy enable ppo_mini_batch_size ppo_micro_batch_size "
        "ppo_micro_batch_size_per_gpu use_dynamic_bsz ppo_max_token_len_per_gpu "
        "forward_max_token_len_per_gpu ppo_epochs shuffle data_loader_seed loss_agg_mode "
        "loss_scale_factor forward_micro_batch_size forward_micro_batch_size_per_gpu "
        "ulysses_sequence_parallel_size grad_clip model fsdp profiler checkpoint"
    ),
}
VERL_OTHER = frozenset(
    f"{sec}{leaf}" for sec, leaves in _VERL_OTHER.items() for leaf in leaves.split()
)

_SPEED = "speed, memory and parallelism: the same update computed another way"
_SEEDS = "seeds and data order: each run is seeded from the experiment's seeds"


def _keys(prefix: str, names: str = "") -> tuple[str, ...]:
    """The dotted keys of ``names`` (space-separated) under ``prefix``; the prefix itself, a
    section, when there are none."""

    return tuple(prefix + n for n in names.split()) if names else (prefix,)


_VERL_WHY: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        _keys(ACTOR, "optim.total_training_steps"),
        "set by verl at run time from trainer.total_training_steps",
    ),
    (
        _keys(
            ACTOR, "optim.min_lr_ratio optim.num_cycles optim.zero_indexed_step optim.warmup_style"
        ),
        "the cosine schedule's options (lr_scheduler_type is named when not constant)",
    ),
    (
        _keys(ACTOR, "optim.optimizer_impl optim.override_optimizer_config"),
        "the optimizer's implementation and extra arguments (optim.optimizer is read)",
    ),
    (_keys(ACTOR, "rollout_n"), "set from rollout.n, read there"),
    (
        _keys(ACTOR + "policy_loss."),
        "read only by the clip_cov, kl_cov and dro losses, named when chosen",
    ),
    (_keys(ACTOR, "calculate_entropy calculate_sum_pi_squared"), "metrics only"),
    (_keys(ACTOR, "shuffle data_loader_seed"), _SEEDS),
    (
        _keys(ACTOR, "freeze_vision_tower"),
        "vision-language models only: sixblanks' policies read text",
    ),
    (
        _keys(ACTOR, "use_rollout_log_probs"),
        "defined, and read by no code at verl@1dda039 (bypass_mode is how verl trains against "
        "the rollout's log-probs)",
    ),
    (_keys(ACTOR), _SPEED),
    (_keys(ROLLOUT, "seed full_determinism"), _SEEDS),
    (
        _keys(ROLLOUT, "prompt_length"),
        "the engine's prompt length, data.max_prompt_length by default (read)",
    ),
    (
        _keys(ROLLOUT),
        "the rollout engine's machines, memory, scheduling and numerics: how the samples are "
        "made (its mismatch with the trainer is what rollout_correction weighs)",
    ),
    (_keys(ALGORITHM + "pf_ppo."), "read only with use_pf_ppo, named when set"),
    (
        _keys(ALGORITHM + "kl_ctrl."),
        "the adaptive KL controller's (kl_ctrl.type adaptive is named)",
    ),
    (
        _keys(ALGORITHM + "filter_groups."),
        "how many generation batches run at once: the same samples",
    ),
    (_keys("data.", "shuffle seed validation_shuffle"), _SEEDS),
    (_keys("data."), "the dataset, its files and how they are loaded: the experiment's task"),
    (
        _keys("critic."),
        "the critic's own batching, epochs and implementation, not carried over (sixblanks' "
        "critic: advantage.critic; critic.optim.lr and cliprange_value are read)",
    ),
    (
        _keys("actor_rollout_ref.model."),
        "the model and how it is loaded: the experiment's model (LoRA is read)",
    ),
    (
        _keys("actor_rollout_ref.ref."),
        "the reference model's engine: its weights are the initial policy's",
    ),
    (
        ("reward.", "reward_model.", "custom_reward_function.", "sandbox_fusion."),
        "the reward: the experiment's task and its verifier",
    ),
    (
        _keys("trainer."),
        "the trainer's bookkeeping: logging, checkpoints, evaluation schedule, machines",
    ),
)
"""Why a field verl knows has no effect on the update: the first rule with the field, a dict
field's section, or a section (ending in '.') holding it."""


def why(key: str) -> str:
    """Why a field verl knows has no effect on the update."""

    for keys, reason in _VERL_WHY:
        for k in keys:
            if key == k or key.startswith(k if k.endswith(".") else k + "."):
                return reason
    return "infrastructure: machines, profiling, storage"


VERL_SUBTREES = tuple(
    f"{sec}{sub}."
    for sec, subs in (
        (ACTOR, "fsdp_config megatron profiler checkpoint qat router_replay optim policy_loss"),
        (
            ROLLOUT,
            "engine_kwargs val_kwargs multi_turn agent trace prometheus disaggregation "
            "checkpoint_engine profiler mtp qat",
        ),
        ("critic.", "optim model fsdp profiler checkpoint megatron"),
    )
    for sub in subs.split()
)
"""Sub-sections of the checked sections whose fields are known and have no effect on the update
(the optimizer's and the policy loss's own fields are checked by name above)."""

VERL_SECTIONS = (
    "actor_rollout_ref.actor",
    "actor_rollout_ref.rollout",
    "algorithm",
    "data",
    "critic",
)
"""Sections whose every field the reader knows: another field there is reported as unknown."""

VERL_OTHER_SECTIONS = (
    "actor_rollout_ref.model",
    "actor_rollout_ref.ref",
    "actor_rollout_ref.hybrid_engine",
    "actor_rollout_ref.nccl_timeout",
    "trainer",
    "reward",
    "reward_model",
    "custom_reward_function",
    "sandbox_fusion",
    "distillation",
    "transfer_queue",
    "global_profiler",
    "ray_kwargs",
    "hydra",
)
"""Top-level sections with no effect on the update (their fields are not checked one by one)."""

VERL_LOSS_MODES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
)  # workers/config/actor.py:83-84
VERL_ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "gdpo",
)  # core_algos.py:97-110
VERL_AGG = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)  # actor.py:214-220

FAMILY = {
    "gspo": ("gspo_token_paper",),
    "sapo": ("sapo",),
    "cispo": ("cispo",),
    "dppo_tv": ("dppo",),
    "dppo_kl": ("dppo",),
    "gpg": ("reinforce",),
}
"""The preset family each verl loss names (the preference on a tie); the estimator's otherwise."""

KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
"""verl's kl_penalty names (core_algos.py:2215-2244) as sixblanks estimators."""


def known(key: str) -> bool:
    """Whether ``key`` is a field verl has (not reported as unknown)."""

    if key in VERL_DEFAULTS or key in VERL_OTHER:
        return True
    if any(key.startswith(s) for s in VERL_SUBTREES):
        return True
    if any(key.startswith(k + ".") for k in (*VERL_DEFAULTS, *VERL_OTHER)):  # inside a dict field
        return True
    if any(key == s or key.startswith(s + ".") for s in VERL_OTHER_SECTIONS):
        return True
    return False


VOCABULARY = (*VERL_DEFAULTS, *VERL_OTHER)
"""The field names an unknown field's closest match is looked for among."""


@dataclass(frozen=True)
class Choice:
    """The fields that choose verl's loss, read once at the start (so that a malformed one is
    named once, in the order verl reads them): the estimator, the policy loss, its aggregation,
    bypass mode and its loss, the clip bounds (clip_ratio_low/high, clip_ratio where one is null;
    clip_ratio_c) and the group size (rollout.n)."""

    est: str
    mode: str
    agg: str
    bypass: bool
    bypass_loss: str
    low: float | None
    high: float | None
    c: float | None
    group: int


def read_choice(f: Fields) -> Choice:
    """The loss fields as verl reads them, each malformed one named once."""

    est = f.text(ALGORITHM + "adv_estimator", VERL_ESTIMATORS) or "gae"
    mode = f.text(ACTOR + "policy_loss.loss_mode", VERL_LOSS_MODES) or "vanilla"
    agg = f.text(ACTOR + "loss_agg_mode", VERL_AGG) or "token-mean"
    bypass = f.flag(CORRECTION + "bypass_mode") or mode == "bypass_mode"
    bypass_loss = f.text(CORRECTION + "loss_type", ("ppo_clip", "reinforce")) or "ppo_clip"
    c_key = ACTOR + "clip_ratio_c"
    low, high, c = f.num(ACTOR + "clip_ratio_low"), f.num(ACTOR + "clip_ratio_high"), f.num(c_key)
    low = f.num(ACTOR + "clip_ratio") if low is None else low  # core_algos.py:1314-1315
    high = f.num(ACTOR + "clip_ratio") if high is None else high
    group = f.whole(ROLLOUT + "n") or 1
    if c is not None and c <= 1:
        f.problems.append(f"{f.source}: {c_key}: verl asserts clip_ratio_c > 1 (got {c:g})")
    return Choice(est, mode, agg, bypass, bypass_loss, low, high, c, group)
