"""TRL's ``GRPOConfig`` as the six blanks: one function per blank (the ratio and its trust region,
vLLM's correction, the advantage, the denominator, the regularizer, the mask, the batches), each
citing the lines of huggingface/trl@f2cd577 it follows. :func:`build` runs them in order.
"""

from __future__ import annotations

from sixblanks.algorithms.blanks import Blanks

from .builder import DATA_OFF, Builder
from .fields import Fields
from .traps import Trap
from .trl_fields import TRL_DEFAULTS, TRL_IS_MODES, Loss, read_loss
from .trl_settings import optimizer, rollout
from .trl_traps import traps

_FAMILY = {"dr_grpo": ("dr_grpo",), "dapo": ("dapo",), "cispo": ("cispo",), "sapo": ("sapo",)}
"""The preset each loss_type names (the preference on a tie); grpo for the others."""


def build(b: Builder, world_size: int | None) -> list[Trap]:
    """Every blank, rollout and optimizer setting a TRL configuration determines, into ``b``;
    returns TRL's traps with whether this configuration triggers each."""

    c = read_loss(b.f)
    b.prefer = list(_FAMILY.get(c.loss, ("grpo",)))
    _weight(b, c)
    _vllm(b)
    _advantage(b, c)
    mode = _normalization(b, c)
    _regularizer(b, mode)
    _loss_options(b)
    b.set(
        "mask.overlong_filter",
        b.f.flag("mask_truncated_completions"),
        *b.src("mask_truncated_completions"),
    )
    _data(b, c.group, world_size)
    rollout(b)
    optimizer(b)
    return traps(b, c)


def resolved_notes(resolved: Blanks) -> list[str]:
    """What a TRL translation says about the arm as resolved: its log-ratio clamp, which TRL
    does not have."""

    if resolved.weight.ratio == "none":
        return []
    return [
        "TRL does not clamp log r before exp; the arm keeps the preset's "
        f"weight.log_ratio_clamp {resolved.weight.log_ratio_clamp:g}, which binds only "
        "beyond it"
    ]


# --------------------------------------------------------------------------- w


def _weight(b: Builder, c: Loss) -> None:
    """w: the ratio and its trust region (grpo_trainer.py:3055-3110)."""

    if c.loss == "cispo":
        _cispo(b, c)
    elif c.loss == "sapo":
        b.set("weight.ratio", c.ratio, *b.src("importance_sampling_level"))
        b.set("weight.trust_region", "sapo", *b.src("loss_type"))
        b.set("weight.tau_pos", b.f.num("sapo_temperature_pos"), *b.src("sapo_temperature_pos"))
        b.set("weight.tau_neg", b.f.num("sapo_temperature_neg"), *b.src("sapo_temperature_neg"))
    else:
        _clip(b, c)
    b.set("weight.ratio_cap", None, *b.src("loss_type"))
    b.set("weight.old_policy", "recomputed", *b.src("use_vllm"))
    b.set("weight.target_kl", None, *b.src("loss_type"))


def _cispo(b: Builder, c: Loss) -> None:
    """CISPO: TRL's weight min(r, epsilon_high) as sixblanks' band [1-eps_low, 1+eps_high]."""

    f = b.f
    if c.level == "sequence":
        b.lacks(
            "importance_sampling_level",
            "sixblanks' cispo weighs each token by its own ratio; the arm uses the token ratio",
        )
    b.set("weight.ratio", c.ratio, *b.src("loss_type", "importance_sampling_level"))
    b.set("weight.trust_region", "cispo", *b.src("loss_type"))
    cap_key = "epsilon_high" if f.given("epsilon_high") else "epsilon"
    cap_src = b.src(cap_key, "loss_type")
    if c.eps_high > 1:
        b.set("weight.eps_low", 1.0, *cap_src)  # min(r, cap) has no lower bound: r > 0
        b.set("weight.eps_high", c.eps_high - 1.0, *cap_src)
        return
    b.lacks(
        cap_key,
        f"TRL's CISPO weight is min(r, {c.eps_high:g}), a cap below 1 that scales every "
        f"on-policy token's gradient by {c.eps_high:g}; sixblanks' band [1-eps_low, 1+eps_high] "
        "ends above 1: the arm uses cispo's [0, 5] (eps_low 1, eps_high 4), the recommended "
        "epsilon_high=5.0",
        c.eps_high,
    )
    b.set("weight.eps_low", 1.0, *cap_src)
    b.set("weight.eps_high", 4.0, *cap_src)


def _clip(b: Builder, c: Loss) -> None:
    """PPO's clip at [1-epsilon, 1+epsilon_high], with ``delta`` as its dual clip."""

    if c.loss == "vespo":
        b.lacks(
            "loss_type",
            "VESPO's gamma weighting of the sequence ratio has no sixblanks "
            "trust region; the arm uses PPO's clip",
            "vespo",
        )
    b.set("weight.ratio", c.ratio, *b.src("importance_sampling_level"))
    b.set("weight.trust_region", "clip", *b.src("loss_type"))
    b.set("weight.eps_low", c.eps, *b.src("epsilon"))
    b.set("weight.eps_high", c.eps_high, *b.src("epsilon_high", "epsilon"))
    delta = b.f.num("delta")
    if delta is not None and delta > 1 + c.eps_high:
        # -min(min(r, delta) A, clip(r) A) is PPO's dual clip at c = delta when delta > 1+eps
        b.set("weight.dual_clip_c", delta, *b.src("delta"))
        return
    if delta is not None:
        b.lacks(
            "delta",
            f"two-sided clipping at delta <= 1+epsilon_high "
            f"({1 + c.eps_high:g}) caps the ratio of positive advantages too; "
            "sixblanks' dual clip acts on negative advantages above 1+eps only",
        )
    b.set("weight.dual_clip_c", None, *b.src("delta"))


def _vllm(b: Builder) -> None:
    """w: TRL's correction of vLLM's sampling (grpo_trainer.py:2579-2624, applied at :3117) as
    a truncated importance weight or a gate."""

    f = b.f
    keys = ("use_vllm", "vllm_importance_sampling_correction", "vllm_importance_sampling_mode")
    if not (f.flag("use_vllm") and f.flag("vllm_importance_sampling_correction")):
        b.set("weight.tis_cap", None, *b.src(*keys[:2]))
        b.set("weight.gate", None, *b.src(*keys[:2]))
        set_is = [k for k in TRL_DEFAULTS if k.startswith("vllm_importance") and f.given(k)]
        if set_is and not f.flag("use_vllm"):
            b.notes.append(f"{', '.join(set_is)}: no effect without use_vllm")
        return
    mode = f.text("vllm_importance_sampling_mode", TRL_IS_MODES) or "sequence_mask"
    cmax_key = (
        "vllm_importance_sampling_cap"
        if f.raw("vllm_importance_sampling_cap") is not None
        else "vllm_importance_sampling_clip_max"
    )
    cmax, cmin = f.num(cmax_key), f.num("vllm_importance_sampling_clip_min")
    src = b.src(*keys, cmax_key, "vllm_importance_sampling_clip_min")
    level = "token" if mode.startswith("token") else "sequence_sum"
    if cmax is None:
        b.lacks(
            cmax_key,
            "an importance weight bounded only from below: sixblanks' "
            "corrections need an upper bound; the arm has none",
        )
        b.set("weight.tis_cap", None, *src)
        b.set("weight.gate", None, *src)
        return
    if mode.endswith("truncate"):
        if cmin is None:  # clamp(max=C): truncated IS
            b.set("weight.tis_cap", cmax, *src)
            b.set("weight.tis_form", "token" if level == "token" else "sequence", *src)
            b.set("weight.gate", None, *src)
        else:  # clamp(min, max): a clamping gate
            b.set("weight.tis_cap", None, *src)
            b.gate(src, level=level, metric="ratio", mode="clamp", low=cmin, high=cmax)
        return
    # token_mask: k kept in [low, high], 0 outside, every token in Z: IcePop's weight;
    # sequence_mask: the sequence ratio prod_t k_t where it is in [low, high], else 0, every
    # token staying in Z: a weighing gate on the product
    b.set("weight.tis_cap", None, *src)
    low = cmin if cmin is not None else 0.0
    b.gate(src, level=level, metric="ratio", mode="weight", low=low, high=cmax)


# --------------------------------------------------------------------------- A, Z, R


def _advantage(b: Builder, c: Loss) -> None:
    """A (grpo_trainer.py:2687-2707): the group's mean, its std with Bessel's correction
    (trainer/utils.py:857), or the batch's std."""

    f = b.f
    if f.raw("multi_objective_aggregation") != "sum_then_normalize":
        b.lacks(
            "multi_objective_aggregation",
            "several reward functions normalized one by one "
            "before their weighted sum: a sixblanks task has one reward",
        )
    if f.raw("reward_weights") is not None:
        b.lacks(
            "reward_weights",
            "weights of several reward functions: a sixblanks task has one "
            "reward (a task combining rewards computes it)",
        )
    src = b.src("scale_rewards")
    if c.scale == "batch":
        b.set("advantage.estimator", "group_mean_batch_std", *src)
        b.set("advantage.batch_std", "rewards", *src)
    else:
        b.set("advantage.estimator", "group_mean" if c.scale == "none" else "group_norm", *src)
    if c.scale != "none":
        b.set("advantage.std_ddof", 1, *src)
        b.set("advantage.std_eps", 1e-4, *src)


_MODES = {
    "grpo": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
    "dr_grpo": "constant",
    "luspo": "seq-mean-token-sum",
}
"""Each loss_type's denominator (grpo_trainer.py:3124-3148); token-mean for the others."""


def _normalization(b: Builder, c: Loss) -> str:
    """Z (grpo_trainer.py:3124-3148). Returns the normalization mode."""

    ls = b.src("loss_type")
    mode = _MODES.get(c.loss, "token-mean")
    b.set("normalization.mode", mode, *ls)
    if mode != "token-mean":
        b.set("normalization.count_empty_rows", True, *ls)  # mask.sum(-1).clamp(min=1)
    if mode == "constant":
        b.set("normalization.l_max", None, *b.src("max_completion_length"))
        b.notes.append(
            "loss_type 'dr_grpo' divides by B x max_completion_length: normalization.l_max "
            "unset is the rollout's max_new_tokens, set from max_completion_length"
        )
    if c.loss == "bnpo":
        b.lacks(
            "loss_type",
            "'bnpo' takes a token-mean per local micro-batch, then averages "
            "them over gradient_accumulation_steps; sixblanks' token-mean is over the "
            "optimizer step's batch (equal with one micro-batch per step)",
            "bnpo",
        )
    if c.loss == "luspo":
        b.notes.append(
            "loss_type 'luspo' scales each sequence's loss by its length: GSPO's "
            "sequence ratio with seq-mean-token-sum"
        )
    return mode


_FIXED_IN_SIXBLANKS = (
    (
        "use_adaptive_entropy",
        "an entropy coefficient adapted to a target entropy: sixblanks' coefficient is fixed",
    ),
    (
        "use_bias_correction_kl",
        "the KL term weighted by the importance ratio: sixblanks' KL term is not",
    ),
    (
        "sync_ref_model",
        "a reference policy mixed with the current one every few steps: "
        "sixblanks' reference is the initial policy, fixed",
    ),
)
"""Flags of TRL's regularizer with no sixblanks equivalent, and why."""


def _regularizer(b: Builder, mode: str) -> None:
    """R (grpo_trainer.py:3069-3076: k3 in the loss), and the entropy bonus."""

    f = b.f
    beta = f.num("beta") or 0.0
    b.set("regularizer.loss_kl_coef", beta, *b.src("beta"))
    if beta > 0:
        b.set("regularizer.loss_kl_estimator", "k3", *b.src("beta"))
    b.set("regularizer.reward_kl_coef", 0.0, *b.src("beta"))
    b.set("regularizer.entropy_coef", f.num("entropy_coef") or 0.0, *b.src("entropy_coef"))
    for key, reason in _FIXED_IN_SIXBLANKS:
        if f.flag(key):
            b.lacks(key, reason)
    if (f.num("entropy_coef") or 0.0) > 0 and mode != "token-mean":
        b.lacks(
            "entropy_coef",
            "TRL's entropy bonus is a token-mean whatever the loss_type "
            f"(grpo_config.py:866); sixblanks aggregates it as the loss ({mode})",
        )


def _loss_options(b: Builder) -> None:
    """Options of TRL's loss that sixblanks has no equivalent for, named when they act: a mask
    by entropy, DeepSeek-V3.2's off-policy mask, Liger's fused kernel."""

    f = b.f
    if (f.num("top_entropy_quantile") or 1.0) < 1.0:
        b.lacks(
            "top_entropy_quantile",
            "training only the highest-entropy tokens: no sixblanks mask selects tokens by entropy",
        )
    if f.raw("off_policy_mask_threshold") is not None:
        b.lacks(
            "off_policy_mask_threshold",
            "DeepSeek-V3.2's off-policy sequence mask (A < 0 "
            "and KL > delta): sixblanks' gates do not look at the advantage's sign",
        )
    if f.flag("use_liger_kernel"):
        b.lacks(
            "use_liger_kernel",
            "the loss runs in Liger's fused kernel, not TRL's reference "
            "loss: the same formula, not checked here (and it refuses "
            "top_entropy_quantile and off-policy masking)",
        )
    if f.given("use_liger_loss"):
        b.lacks(
            "use_liger_loss", "removed from GRPOConfig (trl#4364) in favour of use_liger_kernel"
        )


# --------------------------------------------------------------------------- (i)


def _data(b: Builder, group: int, world_size: int | None) -> None:
    """(i): the batches (grpo_config.py:1080-1115, grpo_trainer.py:1208-1275); TRL has no
    dynamic sampling, overlong shaping or data filter."""

    _batches(b, group, world_size)
    b.set("data.dynamic_sampling", False, *b.src("loss_type"))
    b.set("data.overlong_shaping.enabled", False, *b.src("loss_type"))
    for path, off in DATA_OFF:
        b.set(path, off, *b.src("loss_type"))


def _sizes(f: Fields, group: int, world: int) -> tuple[int, int, int] | None:
    """(sequences per generation batch, sequences per optimizer step, num_iterations), or None
    where TRL would refuse the sizes (a problem is recorded) or no batch is set."""

    pdbs = f.whole("per_device_train_batch_size") or 0
    ga = f.whole("gradient_accumulation_steps") or 1
    gbs, spg = f.whole("generation_batch_size"), f.whole("steps_per_generation")
    mu = f.whole("num_iterations") or 1
    if not (pdbs and group):
        return None
    if gbs is not None and spg is not None:
        f.problems.append(
            f"{f.source}: generation_batch_size and steps_per_generation: TRL takes one of the "
            "two (grpo_config.py:1104)"
        )
        return None
    if gbs is None:
        spg = spg or ga
        gbs = pdbs * world * spg
    elif gbs % (pdbs * world):
        f.problems.append(
            f"{f.source}: generation_batch_size: {gbs} is not a multiple of "
            f"per_device_train_batch_size x processes ({pdbs * world})"
        )
        return None
    if gbs % group:
        f.problems.append(
            f"{f.source}: generation_batch_size: {gbs} sequences are not whole groups of "
            f"num_generations {group} (grpo_config.py:1128)"
        )
        return None
    return gbs, pdbs * world * ga, mu


def _batches(b: Builder, group: int, world_size: int | None) -> None:
    """The group size, the epochs, and a generation batch as mini-batches of optimizer steps."""

    if world_size is None:
        b.notes.append(
            "the number of processes is not a GRPOConfig field: assumed 1 (--world-size N "
            "multiplies the batch sizes)"
        )
    sizes = _sizes(b.f, group, world_size or 1)
    if sizes is None:
        return
    gbs, step, mu = sizes
    keys = (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "generation_batch_size",
        "num_generations",
    )
    src = b.src(*keys)
    b.set("data.group_size", group, *b.src("num_generations"))
    b.set("data.epochs", mu, *b.src("num_iterations"))
    if gbs < step:
        b.set("data.minibatches", 1, *src)
        b.rollout["prompts_per_step"] = (step // group, src)
        b.lacks(
            "steps_per_generation",
            f"one optimizer step accumulates {step // gbs} generation batches of {gbs} "
            "sequences (their advantages normalized apart); sixblanks samples the step's "
            f"{step} sequences in one round",
        )
        return
    k, r = divmod(gbs, step)
    if r:
        b.lacks(
            "steps_per_generation",
            f"a generation batch of {gbs} sequences is not a "
            f"whole number of optimizer batches of {step}: the arm splits it into {k}",
        )
    b.set("data.minibatches", max(1, k), *src)
    b.rollout["prompts_per_step"] = (gbs // group, src)
