"""verl's actor, rollout and algorithm configuration as the six blanks: one function per blank
(the ratio and its trust region, one per policy loss; the advantage, one per estimator; the
denominator; the KL and entropy terms; the batches, dynamic sampling and overlong shaping), each
citing the lines of verl-project/verl@1dda039 it follows. :func:`build` runs them in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .builder import DATA_OFF, Builder
from .traps import Trap
from .verl_correction import correction
from .verl_fields import ACTOR, ALGORITHM, CORRECTION, FAMILY, KL, ROLLOUT, Choice, read_choice
from .verl_settings import optimizer, rollout
from .verl_traps import traps

_UNSUPPORTED = (
    (ALGORITHM + "use_pf_ppo", "PF-PPO's reweighted resampling of the batch"),
    ("distillation.enabled", "on-policy distillation from a teacher"),
)
"""Training schemes verl has and sixblanks does not, named when turned on."""


def build(b: Builder, world_size: int | None) -> list[Trap]:
    """Every blank, rollout and optimizer setting a verl configuration determines, into ``b``;
    returns verl's traps with whether this configuration triggers each. ``world_size`` is not
    read: verl's batch sizes count the whole run's prompts, not one process's."""

    c = read_choice(b.f)
    loss, lm = _weight(b, c)
    norm = _advantage(b, c.est)
    _normalization(b, c.agg, loss, lm)
    _regularizer(b)
    b.set("mask.overlong_filter", False, *lm)
    _data(b, c.group)
    rollout(b)
    optimizer(b)
    for key, reason in _UNSUPPORTED:
        if b.f.flag(key):
            b.lacks(key, f"{reason} has no sixblanks equivalent")
    return traps(b, c, loss, norm)


# --------------------------------------------------------------------------- w


@dataclass(frozen=True)
class _Weight:
    """The loss verl computes and the fields each weight setting comes from: those that name the
    loss, and each clip bound's (clip_ratio where the bound is null)."""

    loss: str
    named: tuple[str, ...]
    low: tuple[str, ...]
    high: tuple[str, ...]


def _weight(b: Builder, c: Choice) -> tuple[str, tuple[str, ...]]:
    """w: the ratio, its trust region and the rollout correction (core_algos.py: vanilla
    1285-1376, dppo 1379-1542, gspo 1545-1618, sapo 1621-1703, gpg 1706-1739, cispo 2046-2104,
    bypass 2412-2548). Returns the loss verl computes (bypass_* when bypass_mode replaces
    loss_mode) and the fields that name it."""

    f = b.f
    loss = "bypass_" + c.bypass_loss if c.bypass else c.mode
    if loss in ("clip_cov", "kl_cov", "geo_mean", "dro"):
        b.lacks(
            ACTOR + "policy_loss.loss_mode",
            f"'{c.mode}' has no sixblanks trust region; the arm uses PPO's clip (vanilla)",
        )
        loss = "vanilla"
    b.prefer = list(FAMILY.get(loss, ()))
    if c.bypass:
        named = b.src(CORRECTION + "bypass_mode", CORRECTION + "loss_type")
    else:
        named = b.src(ACTOR + "policy_loss.loss_mode")
    bound = [
        b.src(key) if f.raw(key) is not None else b.src(ACTOR + "clip_ratio")
        for key in (ACTOR + "clip_ratio_low", ACTOR + "clip_ratio_high")
    ]
    w = _Weight(loss, named, *bound)
    if loss in _LOSSES:
        _LOSSES[loss](b, c, w)
    if loss not in ("dppo_tv", "dppo_kl"):
        b.set("weight.ratio_cap", None, *named)
    if loss not in ("vanilla", "bypass_ppo_clip", "gpg", "bypass_reinforce"):
        b.set("weight.dual_clip_c", None, *named)
    if loss not in ("gpg", "bypass_reinforce"):
        # gspo clamps the log-ratio's upper side at 10 (core_algos.py:1590), the others at 20
        b.set("weight.log_ratio_clamp", 10.0 if loss == "gspo" else 20.0, *named)
    b.set(
        "weight.old_policy",
        "rollout" if c.bypass else "recomputed",
        *b.src(CORRECTION + "bypass_mode"),
    )
    b.set("weight.target_kl", None, *named)
    correction(b, c.bypass, c.bypass_loss)
    return loss, named


def _clip(b: Builder, c: Choice, w: _Weight) -> None:
    """vanilla PPO and bypass ppo_clip: the clip, and the dual clip at clip_ratio_c, always on
    (core_algos.py:1344-1349)."""

    b.set("weight.ratio", "token", *w.named)
    b.set("weight.trust_region", "clip", *w.named)
    b.set("weight.eps_low", c.low, *w.low)
    b.set("weight.eps_high", c.high, *w.high)
    b.set("weight.dual_clip_c", c.c, *b.src(ACTOR + "clip_ratio_c"))


def _gspo(b: Builder, c: Choice, w: _Weight) -> None:
    """GSPO: the clip on the sequence ratio, carried per token."""

    b.set("weight.ratio", "gspo_token", *w.named)
    b.set("weight.trust_region", "clip", *w.named)
    b.set("weight.eps_low", c.low, *w.low)
    b.set("weight.eps_high", c.high, *w.high)
    b.set("weight.dual_clip_c", None, *w.named)


def _sapo(b: Builder, c: Choice, w: _Weight) -> None:
    """SAPO: the soft gate with its two temperatures."""

    b.set("weight.ratio", "token", *w.named)
    b.set("weight.trust_region", "sapo", *w.named)
    b.set("weight.tau_pos", b.f.num(ACTOR + "tau_pos"), *b.src(ACTOR + "tau_pos"))
    b.set("weight.tau_neg", b.f.num(ACTOR + "tau_neg"), *b.src(ACTOR + "tau_neg"))


def _cispo(b: Builder, c: Choice, w: _Weight) -> None:
    """CISPO: the band [1-clip_ratio_low, 1+clip_ratio_high], its lower end at 0 at most."""

    b.set("weight.ratio", "token", *w.named)
    b.set("weight.trust_region", "cispo", *w.named)
    if c.low is not None and c.low > 1:
        b.notes.append(
            f"{ACTOR}clip_ratio_low={c.low:g}: a lower bound below 0 clips nothing (ratios are "
            "> 0), as eps_low 1"
        )
    b.set("weight.eps_low", min(c.low if c.low is not None else 0.2, 1.0), *w.low)
    b.set("weight.eps_high", c.high, *w.high)


def _dppo(b: Builder, c: Choice, w: _Weight) -> None:
    """DPPO: the ratio anchored on pi_old (core_algos.py:1431-1436), its divergence bound, and
    the detached ratio truncated at clip_ratio_c (config.get(.., 20.0) never falls back)."""

    b.set("weight.ratio", "token", *w.named)
    b.set("weight.trust_region", w.loss, *w.named)
    b.set("weight.eps_low", c.low, *w.low)
    b.set("weight.eps_high", c.high, *w.high)
    b.set("weight.ratio_cap", c.c, *b.src(ACTOR + "clip_ratio_c"))


def _no_ratio(b: Builder, c: Choice, w: _Weight) -> None:
    """gpg and bypass reinforce: REINFORCE, no ratio."""

    b.set("weight.ratio", "none", *w.named)
    b.set("weight.trust_region", "none", *w.named)


_LOSSES: dict[str, Callable[[Builder, Choice, _Weight], None]] = {
    "vanilla": _clip,
    "bypass_ppo_clip": _clip,
    "gspo": _gspo,
    "sapo": _sapo,
    "cispo": _cispo,
    "dppo_tv": _dppo,
    "dppo_kl": _dppo,
    "gpg": _no_ratio,
    "bypass_reinforce": _no_ratio,
}
"""The ratio and trust region of each loss verl computes."""


# --------------------------------------------------------------------------- A


def _advantage(b: Builder, est: str) -> bool:
    """A: the estimator (core_algos.py: grpo 267-331, rloo 587-636, rpp 693-731, rpp baseline
    533-584, remax 734). Returns norm_adv_by_std_in_grpo as read."""

    norm = b.f.flag(ALGORITHM + "norm_adv_by_std_in_grpo")
    _ESTIMATORS.get(est, _other)(b, est, b.src(ALGORITHM + "adv_estimator"), norm)
    return norm


def _grpo(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    b.set(
        "advantage.estimator",
        "group_norm" if norm else "group_mean",
        *a,
        *b.src(ALGORITHM + "norm_adv_by_std_in_grpo"),
    )
    if norm:
        b.set("advantage.std_ddof", 1, *a)  # torch.std (:321)
        b.set("advantage.std_eps", 1e-6, *a)  # epsilon=1e-6 (:272)
    b.set("advantage.singleton", "raw", *a)  # a group of one: mean 0, std 1 (:315-317)
    b.prefer = b.prefer or (["grpo"] if norm else ["dr_grpo", "grpo"])


def _rloo(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    b.set("advantage.estimator", "loo", *a)
    b.set("advantage.singleton", "raw" if est == "rloo" else "zero", *a)
    b.prefer = b.prefer or ["rloo"]


def _reinforce_pp(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    b.set("advantage.estimator", "reinforce_pp", *a)
    b.set("advantage.gamma", b.f.num(ALGORITHM + "gamma"), *b.src(ALGORITHM + "gamma"))
    b.notes.append(
        "reinforce_plus_plus whitens with verl's masked_whiten (unbiased "
        "variance); sixblanks' reinforce_pp uses ddof 0 (OpenRLHF)"
    )
    b.prefer = b.prefer or ["reinforce_pp"]


def _reinforce_pp_baseline(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    b.set("advantage.estimator", "reinforce_pp_baseline", *a)
    b.set("advantage.singleton", "raw", *a)
    b.prefer = b.prefer or ["reinforce_pp_baseline"]


def _remax(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    b.set("advantage.estimator", "remax", *a)
    b.prefer = b.prefer or ["remax"]


def _gae(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    f = b.f
    b.set("advantage.estimator", "gae", *a)
    b.set("advantage.gamma", f.num(ALGORITHM + "gamma"), *b.src(ALGORITHM + "gamma"))
    b.set("advantage.lam", f.num(ALGORITHM + "lam"), *b.src(ALGORITHM + "lam"))
    b.set(
        "advantage.critic.value_clip",
        f.num("critic.cliprange_value"),
        *b.src("critic.cliprange_value"),
    )
    b.set("advantage.critic.lr", f.num("critic.optim.lr"), *b.src("critic.optim.lr"))
    b.set("advantage.critic.bootstrap_truncated", False, *a)  # next value 0 at the end
    b.set("advantage.critic.whiten", "batch", *a)  # masked_whiten over the batch
    b.prefer = b.prefer or ["ppo"]


def _other(b: Builder, est: str, a: tuple[str, ...], norm: bool) -> None:
    b.lacks(
        ALGORITHM + "adv_estimator",
        f"'{est}' has no sixblanks estimator; the arm uses GRPO's group mean/std",
    )
    b.set("advantage.estimator", "group_norm", *a)
    b.set("advantage.std_ddof", 1, *a)
    b.set("advantage.std_eps", 1e-6, *a)


_ESTIMATORS: dict[str, Callable[[Builder, str, tuple[str, ...], bool], None]] = {
    "grpo": _grpo,
    "grpo_vectorized": _grpo,
    "rloo": _rloo,
    "rloo_vectorized": _rloo,
    "reinforce_plus_plus": _reinforce_pp,
    "reinforce_plus_plus_baseline": _reinforce_pp_baseline,
    "remax": _remax,
    "gae": _gae,
}
"""Each estimator verl has a sixblanks equivalent for (the others: GRPO's, named as lacking)."""


# --------------------------------------------------------------------------- Z, R


def _normalization(b: Builder, agg: str, loss: str, lm: tuple[str, ...]) -> None:
    """Z: loss_agg_mode (and loss_scale_factor) as the normalization blank (core_algos.py:
    1140-1207; gspo and sapo aggregate seq-mean-token-mean whatever the mode)."""

    f = b.f
    z = b.src(ACTOR + "loss_agg_mode", ACTOR + "loss_scale_factor")
    zmode = {"seq-mean-token-sum-norm": "constant"}.get(agg, agg)
    if loss in ("gspo", "sapo"):
        zmode = "seq-mean-token-mean"
        z = (*z, *lm)
    b.set("normalization.mode", zmode, *z)
    if zmode not in ("token-mean", "token-sum"):
        # the global batch size is ppo_mini_batch_size x n sequences, empty ones included
        # (trainer/ppo/v1/trainer_base.py:1704)
        b.set("normalization.count_empty_rows", True, *z)
    if zmode != "constant":
        return
    factor = f.whole(ACTOR + "loss_scale_factor")
    resp = f.whole(ROLLOUT + "response_length") or f.whole("data.max_response_length")
    b.set("normalization.l_max", None if factor in (None, resp) else factor, *z)
    if factor is None:
        b.lacks(
            ACTOR + "loss_scale_factor",
            "null: verl divides by the padded length of each "
            "micro-batch (core_algos.py:1188-1193), which changes with the batch; the arm "
            "divides by the generation budget max_new_tokens",
            None,
        )


def _regularizer(b: Builder) -> None:
    """R: the KL in the loss (core_algos.py:2187-2212) or in the reward, the entropy bonus."""

    f = b.f
    if f.flag(ACTOR + "use_kl_loss"):
        coef = f.num(ACTOR + "kl_loss_coef") or 0.0
        b.set(
            "regularizer.loss_kl_coef",
            coef,
            *b.src(ACTOR + "use_kl_loss", ACTOR + "kl_loss_coef"),
        )
        if coef > 0:
            b.set(
                "regularizer.loss_kl_estimator",
                _kl(b, ACTOR + "kl_loss_type", loss=True),
                *b.src(ACTOR + "kl_loss_type"),
            )
    else:
        b.set("regularizer.loss_kl_coef", 0.0, *b.src(ACTOR + "use_kl_loss"))
        if f.given(ACTOR + "kl_loss_type") or f.given(ACTOR + "kl_loss_coef"):
            b.notes.append("kl_loss_type / kl_loss_coef: no effect while use_kl_loss is false")
    if f.flag(ALGORITHM + "use_kl_in_reward"):
        _reward_kl(b)
    else:
        b.set("regularizer.reward_kl_coef", 0.0, *b.src(ALGORITHM + "use_kl_in_reward"))
    b.set(
        "regularizer.entropy_coef",
        f.num(ACTOR + "entropy_coeff") or 0.0,
        *b.src(ACTOR + "entropy_coeff"),
    )


def _reward_kl(b: Builder) -> None:
    """The KL in the reward (use_kl_in_reward), its coefficient fixed."""

    f = b.f
    coef = f.num(ALGORITHM + "kl_ctrl.kl_coef") or 0.0
    b.set(
        "regularizer.reward_kl_coef",
        coef,
        *b.src(ALGORITHM + "use_kl_in_reward", ALGORITHM + "kl_ctrl.kl_coef"),
    )
    if coef > 0:
        b.set(
            "regularizer.reward_kl_estimator",
            _kl(b, ALGORITHM + "kl_penalty", loss=False),
            *b.src(ALGORITHM + "kl_penalty"),
        )
    if f.text(ALGORITHM + "kl_ctrl.type") == "adaptive":
        b.lacks(ALGORITHM + "kl_ctrl.type", "an adaptive KL coefficient: sixblanks' is fixed")


def _kl(b: Builder, key: str, loss: bool) -> str:
    """verl's KL name as a sixblanks estimator: 'k3+'/'low_var_kl+' straight-through k3."""

    name = b.f.text(key) or "kl"
    base, plus = (name[:-1], True) if name.endswith("+") else (name, False)
    if base not in KL:
        b.lacks(key, f"'{name}' has no sixblanks KL estimator; the arm uses k3")
        return "k3"
    est = KL[base]
    if plus and loss and est == "k3":
        return "k3+"
    if plus and loss and est == "k1":
        b.notes.append(
            f"{key}={name!r}: k1's value with k2's gradient; the arm uses k2 (the same "
            "gradient, a different logged value)"
        )
        return "k2"
    if plus and not loss:
        b.notes.append(
            f"{key}={name!r}: the '+' (straight-through gradient) has no effect on a "
            "KL placed in the reward"
        )
    return est


# --------------------------------------------------------------------------- (i)


def _data(b: Builder, group: int) -> None:
    """(i): the group, epochs and mini-batches, dynamic sampling, overlong shaping; verl has no
    data filter; an asynchronous trainer mode is named."""

    f = b.f
    tbs = _batches(b, group)
    _dynamic_sampling(b, tbs)
    _overlong(b)
    for path, off in DATA_OFF:
        b.set(path, off, *b.src(ALGORITHM + "filter_groups.enable"))
    mode = f.text("trainer.v1.trainer_mode")
    if mode not in (None, "sync"):
        b.lacks(
            "trainer.v1.trainer_mode",
            f"'{mode}' trains while rollouts run ahead on older "
            "weights; sixblanks' asynchronous collection is data.concurrent with "
            "data.broadcast_every / data.staleness, not set here",
        )


def _batches(b: Builder, group: int) -> int | None:
    """The group size (rollout.n), ppo_epochs, and a step's prompts as mini-batches. Returns
    data.train_batch_size as read."""

    f = b.f
    b.set("data.group_size", group, *b.src(ROLLOUT + "n"))
    b.set("data.epochs", f.whole(ACTOR + "ppo_epochs") or 1, *b.src(ACTOR + "ppo_epochs"))
    tbs, mbs = f.whole("data.train_batch_size"), f.whole(ACTOR + "ppo_mini_batch_size")
    if not (tbs and mbs):
        return tbs
    k, r = divmod(tbs, mbs)
    if r or not k:
        b.lacks(
            ACTOR + "ppo_mini_batch_size",
            f"{tbs} prompts per step are not a whole number "
            f"of mini-batches of {mbs}: the arm uses {max(1, k)}",
        )
    bsrc = b.src("data.train_batch_size", ACTOR + "ppo_mini_batch_size")
    b.set("data.minibatches", max(1, k), *bsrc)
    b.rollout["prompts_per_step"] = (tbs, b.src("data.train_batch_size"))
    return tbs


def _dynamic_sampling(b: Builder, tbs: int | None) -> None:
    """algorithm.filter_groups: DAPO's dynamic sampling, raising at verl's cap of rounds; a
    generation batch of another size than the step's ``tbs`` prompts is named."""

    f = b.f
    fg = ALGORITHM + "filter_groups."
    ds = f.flag(fg + "enable")
    b.set("data.dynamic_sampling", ds, *b.src(fg + "enable"))
    if not ds:
        return
    rounds = f.whole(fg + "max_num_gen_batches") or 0
    rsrc = b.src(fg + "max_num_gen_batches")
    if rounds > 0:
        b.set("data.max_sampling_rounds", rounds, *rsrc)
    else:
        b.lacks(
            fg + "max_num_gen_batches",
            "no limit on generation rounds: "
            "sixblanks caps them (data.max_sampling_rounds, the preset's)",
        )
    b.set("data.on_round_cap", "error", *rsrc)  # verl raises at the cap
    metric = f.text(fg + "metric")
    if metric not in (None, "seq_reward", "seq_final_reward", "score"):
        b.notes.append(
            f"filter_groups.metric={metric!r}: verl keeps groups whose {metric} "
            "varies; sixblanks' dynamic sampling looks at the reward"
        )
    gen = f.whole("data.gen_batch_size")
    if gen is not None and gen != tbs:
        b.lacks(
            "data.gen_batch_size",
            "rounds of another size than the step's prompts: "
            "sixblanks samples prompts_per_step prompts per round",
        )


def _overlong(b: Builder) -> None:
    """DAPO's overlong reward shaping, from the DAPO reward manager's overlong_buffer_cfg."""

    f = b.f
    ol = "reward.reward_kwargs.overlong_buffer_cfg."
    on = f.flag(ol + "enable")
    b.set("data.overlong_shaping.enabled", on, *b.src(ol + "enable"))
    if on:
        b.set("data.overlong_shaping.cache", f.whole(ol + "len"), *b.src(ol + "len"))
        b.set(
            "data.overlong_shaping.factor",
            f.num(ol + "penalty_factor"),
            *b.src(ol + "penalty_factor"),
        )
