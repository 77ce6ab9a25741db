"""The checks of each arm's blanks and of the settings they meet (:mod:`.checks`): clip bounds,
a planted fault, a sampler mismatch, threaded environments, the gradient-noise probe, groups of
one, minibatches, branching turns and a trained process reward model's step labels."""

from __future__ import annotations

from sixblanks.algorithms.blanks import Blanks

from .check_arms import CheckedArm
from .experiment_config import ExperimentConfig
from .sections import TaskConfig

# --------------------------------------------------------------------------- weight


def weight_problems(arm: CheckedArm) -> list[str]:
    w, out = arm.blanks.weight, []
    if w.trust_region in ("clip", "dis") and w.eps_low >= 1:
        level = "sequence-level" if w.ratio in ("sequence", "gspo_token") else "token-level"
        out.append(
            f"{arm.path('weight.eps_low')}: {w.eps_low:g} puts the lower clip bound at "
            f"1 - {w.eps_low:g} = {1 - w.eps_low:g}, where no ratio is (ratios are > 0): it clips "
            f"nothing; a {level} ratio needs 0 < eps_low < 1 (e.g. 0.2"
            + (", or GSPO's 3e-4)" if level == "sequence-level" else ")")
        )
    g = w.gate
    if g is not None and g.metric == "ratio" and not g.low <= 1.0 <= g.high:
        verb = "masks" if g.mode == "mask" else "reweights"
        out.append(
            f"{arm.path('weight.gate')}: the ratio band [{g.low:g}, {g.high:g}] excludes 1, so it "
            f"{verb} every token whose trainer and behaviour policies agree; use low <= 1 <= high "
            "(e.g. 0.5 and 2)"
        )
    if w.tis_cap is not None and w.tis_cap < 1:
        verb = "drops" if w.tis_form.endswith("_mask") else "scales down"
        out.append(
            f"{arm.path('weight.tis_cap')}: {w.tis_cap:g} < 1 {verb} even the tokens whose "
            "trainer and behaviour policies agree (ratio 1); use a cap >= 1 (e.g. 2)"
        )
    return out


def fault_problems(cfg: ExperimentConfig, arm: CheckedArm) -> list[str]:
    """A reward fault on an arm whose update reads no reward (SFT, DPO: nothing to shuffle)."""

    fault = cfg.arms[arm.name].fault.rewards
    if fault == "none" or arm.blanks.objective == "pg":
        return []
    return [
        f"arms.{arm.name}.fault.rewards: '{fault}' acts on the rewards the advantages are "
        f"computed from, and the arm's objective '{arm.blanks.objective}' "
        f"({arm.path('objective')}) computes none; plant it on a policy-gradient arm, or set "
        "rewards: none"
    ]


def mismatch_problems(cfg: ExperimentConfig, arm: CheckedArm) -> list[str]:
    """``rollout.mismatch`` (the mismatch lab) where the backend cannot inject it: vLLM takes a
    sampler dtype (its engine's dtype) and a nucleus (its top_p), not per-step logit noise."""

    m = arm.rollout.mismatch
    if arm.rollout.backend != "vllm" or m.logit_noise <= 0:
        return []
    own = cfg.arms[arm.name].rollout.mismatch
    where = (
        f"arms.{arm.name}.rollout.mismatch.logit_noise"
        if own is not None and "logit_noise" in own.model_fields_set
        else "rollout.mismatch.logit_noise"
    )
    return [
        f"{where}: {m.logit_noise:g} needs rollout.backend hf: the vLLM engine's sampler adds no "
        "noise to its logits (it does inject mismatch.sampler_dtype, as its dtype, and "
        "mismatch.top_p); set logit_noise: 0 or use the hf backend"
    ]


def env_worker_problems(arm: CheckedArm) -> list[str]:
    """Environment steps on threads where the environments share state: a self-play game's
    opponent pool plays its members in one shared model."""

    if arm.rollout.env_workers <= 1 or arm.blanks.data.self_play is None:
        return []
    return [
        f"arms.{arm.name}: rollout.env_workers {arm.rollout.env_workers} with data.self_play: "
        "the opponents' pool loads each member into one shared model, so its games cannot step "
        "at once; set rollout.env_workers: 1"
    ]


def probe_problems(cfg: ExperimentConfig, arms: list[CheckedArm]) -> list[str]:
    """The gradient-noise probe on arms whose objective has none (actor-critic, SFT, DPO)."""

    if not cfg.rollout.grad_noise_probe:
        return []
    loose = []
    for arm in arms:
        objective, estimator = arm.blanks.objective, arm.blanks.advantage.estimator
        if objective != "pg" or estimator == "gae":
            loose.append(f"{arm.name} (objective '{objective}', advantage.estimator '{estimator}')")
    if not loose:
        return []
    return [
        f"rollout.grad_noise_probe: only the critic-free policy-gradient objective measures the "
        f"gradient's noise, and arm(s) {', '.join(loose)} would log nothing; leave them out of the "
        "probe's experiment or set grad_noise_probe: false"
    ]


# --------------------------------------------------------------------------- groups and batches


def _zero_advantage(b: Blanks) -> tuple[str, str] | None:
    """Why a group of one sample gets an advantage of exactly 0 on every token, and the blank
    value that would give it one; None when it does not."""

    a = b.advantage
    if a.estimator in ("group_norm", "group_mean", "loo", "reinforce_pp_baseline", "prime"):
        if a.singleton == "zero":
            why = f"advantage.estimator '{a.estimator}' with advantage.singleton 'zero'"
            return why, "advantage.singleton: raw (A = R)"
    if a.estimator == "turn_return" and a.turn_baseline == "group":
        why = "advantage.estimator 'turn_return' with advantage.turn_baseline 'group'"
        return why, "advantage.turn_baseline: none"
    if a.estimator == "prm" and a.prm.mode in ("sum", "min"):
        return f"advantage.estimator 'prm' with advantage.prm.mode '{a.prm.mode}'", ""
    return None


_NO_GROUP = "an estimator without a group baseline (batch_mean, reinforce_pp, remax, gae)"


def group_problems(arms: list[CheckedArm]) -> list[str]:
    """A group size of 1 with a group baseline (every A = 0) or with dynamic sampling (every group
    dropped). Branching makes groups of its own at its branch points: left alone."""

    out: list[str] = []
    shared: list[str] = []
    fixes: list[str] = []
    for arm in arms:
        b = arm.blanks
        if arm.group_size != 1 or b.data.source != "rollouts" or b.data.branching is not None:
            continue
        zero = _zero_advantage(b) if b.objective == "pg" else None
        if zero is not None:
            why, fix = zero
            if arm.group_path == "rollout.group_size":
                shared.append(f"{arm.name} ({why})")
                fixes += [fix] if fix and fix not in fixes else []
            else:
                out.append(
                    f"{arm.group_path}: 1 sample per prompt with {why} gives every sample an "
                    "advantage of exactly 0 (a group of one has no baseline): the arm would learn "
                    f"nothing; use a group size >= 2, or {fix + ', or ' if fix else ''}{_NO_GROUP}"
                )
        if b.data.dynamic_sampling:
            out.append(
                f"{arm.path('data.dynamic_sampling')}: with a group size of 1 ({arm.group_path}) "
                "every group's rewards are all equal, so dynamic sampling drops every group and no "
                "step trains on anything; use a group size >= 2 or dynamic_sampling: false"
            )
    if shared:
        out.insert(
            0,
            f"rollout.group_size: 1 sample per prompt gives arm(s) {', '.join(shared)} an "
            "advantage of exactly 0 on every sample (a group of one has no baseline): they would "
            "learn nothing; use a group size >= 2, or on those arms "
            f"{', '.join(fixes) + ' or ' if fixes else ''}{_NO_GROUP}",
        )
    return out


def _max_rows(arm: CheckedArm) -> tuple[int, str] | None:
    """The most units (rows; pairs for DPO) one step's update can split into minibatches, and how
    they are counted; None where it depends on the run (branching, imagined rounds, tree search)."""

    d, r, g = arm.blanks.data, arm.rollout, arm.group_size
    ppp = f"prompts_per_step {r.prompts_per_step}"
    if d.source == "preference_pairs":
        return r.prompts_per_step, f"at most one pair per prompt ({ppp})"
    if d.source == "search":
        if d.search.select == "best":
            return r.prompts_per_step, f"the best sample of each prompt ({ppp})"
        if d.search.mode == "best_of_n":
            n = r.prompts_per_step * d.search.n
            return n, f"{ppp} x data.search.n {d.search.n}"
        return None
    if d.branching is not None or d.world_model is not None:
        return None
    rows, how = r.prompts_per_step * g, f"{ppp} x group size {g}"
    if d.source == "rollouts" and d.replay is not None:
        rows += d.replay.per_step * g
        how += f", plus data.replay.per_step {d.replay.per_step} replayed groups"
    return rows, how


def minibatch_problems(arm: CheckedArm) -> list[str]:
    d, bound = arm.blanks.data, _max_rows(arm)
    if bound is None or d.minibatches <= bound[0]:
        return []
    rows, how = bound
    return [
        f"{arm.path('data.minibatches')}: {d.minibatches} minibatches of a step's batch of at most "
        f"{rows} rows ({how}): a minibatch needs a row, so at most {rows} optimizer steps would "
        f"run per epoch while {d.minibatches} are reserved; use at most {rows}"
    ]


def branching_problems(arm: CheckedArm, tasks: list[tuple[str, int | None]]) -> list[str]:
    br = arm.blanks.data.branching
    if br is None:
        return []
    out = []
    for name, turns in tasks:
        if turns is not None and max(br.turns) >= turns:
            out.append(
                f"{arm.path('data.branching.turns')}: turn {max(br.turns)} never happens in task "
                f"'{name}' (at most {turns} turn(s), numbered from 0)"
            )
    return out


def prm_label_problems(arms: list[CheckedArm], tasks: list[TaskConfig]) -> list[str]:
    """A trained process reward model learns from step labels: refused on a task that gives none
    (unless a search tree labels the steps), as the run itself would refuse it at its start."""

    from ..tasks.registry import make_task

    out = []
    for arm in arms:
        a, d = arm.blanks.advantage, arm.blanks.data
        tree = d.source == "search" and d.search.tree_labels and d.search.mode != "best_of_n"
        if a.estimator != "prm" or a.prm.scorer != "trained" or tree:
            continue
        for task in tasks:
            try:
                labelled = make_task(task.name, task.params).has_step_labels
            except Exception:  # noqa: BLE001 - reported by the semantic pass
                continue
            if not labelled:
                out.append(
                    f"arms.{arm.name}.blanks.advantage.prm.scorer: 'trained' learns from step "
                    f"labels, and task '{task.name}' gives none; use a task with step labels "
                    "(chain_arithmetic, plan_execute), a search tree's labels (data.source search, "
                    "search.tree_labels) or a scorer 'module:function'"
                )
    return out
