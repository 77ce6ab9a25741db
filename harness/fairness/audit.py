"""The fairness audit: each item a fair comparison must hold constant or account for, measured per
arm as a value or a content hash (never a proxy), differences flagged; with the inert differences
(blanks in which arms differ but that never acted during their runs, harness/fairness/inert.py).
    initial_policy   content hash of the initial weights
    tokenizer        hashes of the vocabulary+merges and of the whole tokenizer, special tokens, the
                     chat template's hash and whether the rollouts apply one
    task             name, resolved parameters, hash of the task class source and of the modules
                     it comes from (its environment, the helpers it imports; user tasks included),
                     the reasoning-gym version and dataset source for its tasks, the gymnasium
                     version for a gymnasium environment (its class's source: the reward's)
    reward           hash of the verifier's source, and every shaping term of the arm (overlong
                     shaping, potential shaping, KL in the reward); the experiment's reward has none
    sampling         backend, temperature, top-p, top-k (samples per prompt: global_batch), and
                     the sampler-trainer mismatch the arm injects (``rollout.mismatch``: in the item
                     only where set, so that an arm without one reads as before)
    limits           tokens per turn, context tokens, turns per episode
    global_batch     prompts per step, samples per prompt, updates per batch (epochs x minibatches),
                     and, measured over the arm's finished runs, the prompts whose group reached an
                     update and optimizer steps per 1000 accepted tokens (flagged past 10% relative
                     difference)
    optimizer        the arm's resolved optimizer settings (``ExperimentConfig.optimizer_for``: the
                     experiment's section with the arm's overrides, as its runs ran with them):
                     AdamW, learning rate, betas, weight decay, gradient clip and the warm-up steps
                     of its schedule (linear warm-up, then constant: the trainer's only one)
    training_search  the search the arm trains on (data.source 'search': mode, width, selection,
                     search policy; None: single samples): its search compute is inside its matched
                     budget, and search-time scores are never put in the same row as single-sample
                     ones
    evaluation       the evaluation scaffold: split, size, samples, beam, temperature, schedule,
                     seeds (its token limit is the arm's max_new_tokens, audited under limits)
    budget           the limits
    search_budget    what tuning the arm cost (``arms.<arm>.search_budget``; None: not tuned)
    fault            a fault planted in the arm's training (``arms.<arm>.fault``; the experiment's
                     value: none): a negative control, flagged as not a fair arm
    seed_offset      what the arm adds to the seed of its training randomness
                     (``arms.<arm>.seed_offset``): recorded, never flagged (:data:`RECORDED`)
    tools            the code tool its episodes are offered (the ``tools:`` section: call format,
                     turns, sandbox limits; None: none, or ``arms.<arm>.tools: false``)
Beyond the items, an arm that samples under an injected mismatch (``rollout.mismatch``) or a lagged
behaviour policy (``data.lag``, ``broadcast_every``, a concurrent collector) with no blank reading
the rollout's log-probs (truncated IS, a gate, a ratio to the rollout, the bypass form) is flagged
``correction``: its gradient carries the difference's bias uncorrected. An arm whose code tool runs
the policy's programs without isolation (``sandbox.isolation: none``) is flagged ``sandbox``.
With several tasks, task-dependent items hold one value per task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sixblanks.algorithms.blanks import Blanks

from ..config import ExperimentConfig
from ..layout import RunDir
from ..runspec import RunSpec
from ..version import code_fingerprint
from .consumption import run_flags, step_slack
from .flag import Flag
from .identity import (
    judge_identity,
    task_and_reward,
)
from .inert import inert_differences
from .tools import sandbox_flags, tools_reason

HELD_CONSTANT = (
    "initial_policy",
    "tokenizer",
    "task",
    "reward",
    "sampling",
    "limits",
    "global_batch",
    "optimizer",
    "training_search",
    "evaluation",
    "budget",
    "search_budget",
    "fault",
    "seed_offset",
    "tools",
)
RECORDED = ("seed_offset",)
"""Items of :data:`HELD_CONSTANT` recorded for every arm and never flagged: differences an
experiment makes on purpose that leave a comparison fair (an arm's training randomness drawn apart,
its evaluation instances and its runs' seeds those of the other arms)."""
NO_FAULT = {"rewards": "none"}
MEASURED_TOLERANCE = 0.10
"""Measured batch figures (prompts trained, optimizer steps per accepted token) differ when they are
more than this far apart, relative to the experiment's value."""


def shaping_terms(blanks: Blanks) -> dict[str, Any]:
    """Every term the arm adds to the task's reward (empty: the task's reward as it is)."""

    out: dict[str, Any] = {}
    if blanks.data.overlong_shaping.enabled:
        out["overlong"] = blanks.data.overlong_shaping.model_dump(exclude={"enabled"})
    if (ps := blanks.data.potential_shaping).enabled:  # the learner's gamma unless set
        out["potential"] = {"gamma": blanks.advantage.gamma if ps.gamma is None else ps.gamma}
    reg = blanks.regularizer
    if reg.reward_kl_coef > 0:
        out["kl_in_reward"] = {"coef": reg.reward_kl_coef, "estimator": reg.reward_kl_estimator}
    return out


def optimizer_settings(optimizer: dict[str, Any]) -> dict[str, Any]:
    """What an optimizer section (a spec's ``optimizer``, resolved) trains with: every run's
    optimizer is torch's AdamW, its learning rate warmed up linearly over ``warmup_steps`` and then
    constant, so these keys are all that can differ."""

    betas = optimizer.get("betas")
    return {
        "name": "AdamW",
        "lr": optimizer.get("lr"),
        "betas": list(betas) if betas is not None else None,
        "weight_decay": optimizer.get("weight_decay"),
        "grad_clip": optimizer.get("grad_clip"),
        "warmup_steps": optimizer.get("warmup_steps"),
    }


def training_search(blanks: Blanks) -> dict[str, Any] | None:
    """The search an arm's training data comes from (None: single samples, no search)."""

    if blanks.data.source != "search":
        return None
    sp = blanks.data.search
    width = {"best_of_n": {"n": sp.n}, "beam": {"beam": sp.beam, "expand": sp.expand}}.get(
        sp.mode, {"expand": sp.expand, "expansions": sp.expansions}
    )
    return {"mode": sp.mode, **width, "select": sp.select, "policy": sp.policy}


def spec_items(
    spec: RunSpec, cfg: ExperimentConfig, warm_info: dict[str, Any], shaped: bool = True
) -> dict[str, Any]:
    """The configured value of every held-constant item for one run spec (``shaped=False``: the
    experiment's reference: the reward without the arm's shaping, no fault, no seed offset). An
    arm's fault and seed offset are read from the spec (``ArmConfig.run_fields``: there when set),
    what its runs ran with."""

    blanks = Blanks.model_validate(spec.blanks)
    r, d = spec.rollout, blanks.data
    ident, verifier, max_turns = _task_items(spec)
    return {
        "initial_policy": warm_info.get("policy_hash"),
        "tokenizer": _tokenizer_item(r, warm_info),
        "task": ident,
        "reward": {"verifier": verifier, "shaping": shaping_terms(blanks) if shaped else {}},
        "sampling": {
            "backend": r["backend"],
            "temperature": r["temperature"],
            "top_p": r["top_p"],
            "top_k": r["top_k"],
            **({"mismatch": r["mismatch"]} if r.get("mismatch") else {}),
        },
        "limits": {
            "max_new_tokens": r["max_new_tokens"],
            "max_prompt_tokens": r["max_prompt_tokens"],
            "max_turns": max_turns,
        },
        "global_batch": {
            "prompts_per_step": r["prompts_per_step"],
            "samples_per_prompt": spec.group_size,
            "updates_per_batch": d.epochs * d.minibatches,
            "epochs": d.epochs,
            "minibatches": d.minibatches,
        },
        "optimizer": optimizer_settings(spec.optimizer or {}),
        "training_search": training_search(blanks),
        "evaluation": {
            **{
                k: spec.eval.get(k)
                for k in ("split", "every", "counter", "temperature", "samples", "beam")
            },
            "size": spec.eval.get("size") or spec.task.get("eval_size"),
            "seeds": list(cfg.seeds),
        },
        "budget": spec.budget,
        "search_budget": cfg.arms[spec.arm].search_budget if spec.arm in cfg.arms else None,
        "fault": (spec.fault or NO_FAULT) if shaped else NO_FAULT,
        "seed_offset": int(spec.seed_offset or 0) if shaped else 0,
        "tools": spec.tools,
    }


def _task_items(spec: RunSpec) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A run's task identity (with its inputs), its verifier's (with its judge's, where it has one)
    and the task's turn limit."""

    from ..tasks import make_task

    ident, verifier = task_and_reward(spec.task_name, json.dumps(spec.task_params, sort_keys=True))
    # its data files and user modules (a verifier and its helpers, at any depth) as the run
    # recorded them: an arm whose runs read another version of either is flagged
    ident = {**ident, "inputs": spec.task_inputs or {}}
    max_turns = make_task(spec.task_name, spec.task.get("params")).max_turns
    judge = spec.task.get("judge")
    if judge:
        verifier = {**verifier, "judge": judge_identity(judge)}
    return ident, verifier, max_turns


def _tokenizer_item(rollout: dict[str, Any], warm_info: dict[str, Any]) -> dict[str, Any]:
    """The warm start's tokenizer identity (its key where unknown) and the chat template the runs
    applied (``auto`` without a template of the tokenizer's own: none)."""

    tok = warm_info.get("tokenizer") or {"unknown": warm_info.get("key")}
    applied = rollout.get("chat_template", "none")  # auto: the tokenizer's own (in its identity)
    if applied == "auto" and not tok.get("chat_template"):
        applied = "none"
    return {**tok, "chat_template_applied": applied}


def measured_batch(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean over finished runs: the prompts whose group reached an update (groups kept by every
    filter; a launched group that dynamic sampling or the zero-variance filter dropped consumed
    budget but trained nothing; a prompt pool's repeats count each time), and optimizer steps per
    1000 accepted tokens."""

    done = [r for r in runs if r["state"] == "finished"]
    if not done:
        return {"prompts_trained": None, "optimizer_steps_per_1k_accepted_tokens": None}
    prompts = [r["prompts_trained"] for r in done]
    per_k = [
        1000.0 * r["counters"].get("optimizer_steps", 0.0) / r["counters"]["accepted_tokens"]
        for r in done
        if (r["counters"] or {}).get("accepted_tokens")
    ]
    return {
        "prompts_trained": sum(prompts) / len(prompts),
        "optimizer_steps_per_1k_accepted_tokens": sum(per_k) / len(per_k) if per_k else None,
    }


def _differs(item: str, value: Any, ref: Any) -> bool:
    if item == "global_batch" and isinstance(value, dict) and "measured" in value:
        if {k: v for k, v in value.items() if k != "measured"} != {
            k: v for k, v in ref.items() if k != "measured"
        }:
            return True
        for k, v in value["measured"].items():
            r = ref["measured"].get(k)
            if (
                v is not None
                and r is not None
                and abs(v - r) > MEASURED_TOLERANCE * max(abs(r), 1e-12)
            ):
                return True
        return False
    canon = lambda x: json.dumps(x, sort_keys=True, default=str)  # noqa: E731
    return canon(value) != canon(ref)


PER_TASK = ("task", "reward", "limits", "evaluation")
"""Items whose value depends on the task (the others are the arm's, whatever the task)."""


def _per_task(item: str, values: dict[str, Any]) -> Any:
    """One task, or an item that does not depend on it: the value; else {task: value}."""

    return values if len(values) > 1 and item in PER_TASK else next(iter(values.values()))


def _run_record(s: RunSpec, runs_dir: Path) -> dict[str, Any]:
    """One run as the audit lists it: its identity, state, counters and the prompts it trained."""
    rd = RunDir(runs_dir / s.run_id)
    st = rd.read_status()
    events = rd.read_events() if rd.events.exists() else []
    census = [e for e in events if e.get("type") == "census"]
    return {
        "run_id": s.run_id,
        "seed": s.seed,
        "task": s.task_name,
        "state": st.get("state"),
        "counters": st.get("counters"),
        "code_version": s.code_version,
        "prompts_trained": sum(int(c.get("groups_kept", 0)) for c in census),
    }


def _item_flags(arm: str, items: dict[str, Any], reference: dict[str, Any]) -> list[Flag]:
    """A flag for each held-constant item (not only recorded) where ``arm`` differs from it."""

    flags = []
    for item in HELD_CONSTANT:
        value, ref = items[item], reference[item]
        if item not in RECORDED and _differs(item, value, ref):
            flags.append(Flag(arm, item, _reason(item, value, ref), value=value, reference=ref))
    return flags


def fairness_audit(
    cfg: ExperimentConfig, specs: list[RunSpec], runs_dir: Path, warm_info: dict[str, Any]
) -> dict[str, Any]:
    """What a fair comparison holds constant (the items of :data:`HELD_CONSTANT`), per arm, and
    each arm's consumption; flags differences.

    An arm is flagged on an item where it differs from the experiment's value (the first arm's; for
    the reward, the task's reward without shaping), when a run consumed less than 90% of the
    matched budget on a budgeted counter, or when a run was made by other code than the code running
    now (reused with ``--reuse-finished``). ``inert`` lists the blanks that differ between arms but
    never acted in an arm's runs (:func:`inert_differences`).
    """

    per_arm: dict[str, dict[str, Any]] = {}
    task_values: dict[str, dict[str, dict[str, Any]]] = {}
    reference_tasks: dict[str, dict[str, Any]] = {}
    for s in specs:
        arm, task = s.arm, s.task_name
        task_values.setdefault(arm, {}).setdefault(task, spec_items(s, cfg, warm_info))
        if not reference_tasks or next(iter(reference_tasks.values()))["_arm"] == arm:
            reference_tasks.setdefault(task, {"_arm": arm, **spec_items(s, cfg, warm_info, False)})
        per_arm.setdefault(arm, {"runs": []})["runs"].append(_run_record(s, runs_dir))
    reference: dict[str, Any] = {}
    for item in HELD_CONSTANT:
        reference[item] = _per_task(item, {t: v[item] for t, v in reference_tasks.items()})
    first_arm = next(iter(per_arm), None)
    for arm, rec in per_arm.items():
        rec["items"] = {
            item: _per_task(item, {t: v[item] for t, v in task_values[arm].items()})
            for item in HELD_CONSTANT
        }
        # the measured batch figures: over every run of the arm, all tasks together
        measured = measured_batch(rec["runs"])
        rec["items"]["global_batch"] = {**rec["items"]["global_batch"], "measured": measured}
        if arm == first_arm:
            reference["global_batch"] = {**reference["global_batch"], "measured": measured}
    code, slack = code_fingerprint(), step_slack(cfg)
    flags = []
    for arm, rec in per_arm.items():
        flags += _item_flags(arm, rec["items"], reference)
        flags += run_flags(cfg, arm, rec["runs"], code, slack.get(arm, {}))
    flags += uncorrected_flags(specs) + sandbox_flags(specs)
    return {
        "held_constant": HELD_CONSTANT,
        "reference": reference,
        "arms": per_arm,
        "flags": [f.as_dict() for f in flags],
        "flagged_arms": sorted({f.arm for f in flags}),
        "inert": inert_differences(specs, runs_dir),
    }


def corrects_the_sampler(blanks: Blanks) -> bool:
    """Whether any blank weighs or masks by the rollout's own log-probs: truncated IS, a gate,
    a ratio to the rollout (SAO's DIS, DPPO's anchor), or pi_old taken from the rollout."""

    w = blanks.weight
    return (
        w.tis_cap is not None
        or w.gate is not None
        or w.ratio == "behavior"
        or w.old_policy == "rollout"
    )


def uncorrected_flags(specs: list[RunSpec]) -> list[Flag]:
    """An arm whose behaviour policy differs from pi_old on purpose, by an injected mismatch
    (``rollout.mismatch``) or by lag (``data.lag``, ``broadcast_every``, a concurrent collector),
    with no correction: its ratio is pi/pi_old with pi_old the trainer's recomputation, so nothing
    weighs pi_old/pi_rollout and its gradient is biased by the difference (flag ``correction``,
    one per arm)."""

    flags, seen = [], set()
    for s in specs:
        arm = s.arm
        if arm in seen:
            continue
        seen.add(arm)
        blanks = Blanks.model_validate(s.blanks)
        d, why = blanks.data, []
        if s.rollout.get("mismatch"):
            why.append(f"an injected mismatch ({compact_mismatch(s.rollout)})")
        if d.lag or d.broadcast_every > 1 or d.concurrent is not None:
            lag = (
                "a concurrent collector"
                if d.concurrent is not None
                else f"data.lag {d.lag}, broadcast_every {d.broadcast_every}"
            )
            why.append(f"a lagged behaviour policy ({lag})")
        if why and not corrects_the_sampler(blanks):
            reason = (
                f"samples with {' and '.join(why)} and corrects for none of it: the ratio is "
                "pi/pi_old(recomputed), nothing weighs pi_old/pi_rollout (set weight.tis_cap, a "
                "weight.gate, or weight.old_policy: rollout); deliberate only in a no-correction "
                "control arm"
            )
            flags.append(Flag(arm, "correction", reason))
    return flags


def _reason(item: str, value: Any, ref: Any) -> str:
    """Which keys differ, in words."""

    if item == "tools":
        return tools_reason(value, ref)
    if item == "training_search":
        searched = value or ref
        who = "this arm" if value else "the experiment's reference arm"
        return (
            f"{who} trains on what a {searched['mode']} search selected: the search compute is "
            "inside the matched budget (the search counters say how much); search-time scores "
            "are reported apart from single-sample ones"
        )
    if isinstance(value, dict) and isinstance(ref, dict):
        keys = sorted(
            k
            for k in set(value) | set(ref)
            if json.dumps(value.get(k), sort_keys=True, default=str)
            != json.dumps(ref.get(k), sort_keys=True, default=str)
        )
        if item == "global_batch" and keys == ["measured"]:
            m, r = value["measured"], ref.get("measured") or {}
            return "measured: " + ", ".join(
                f"{k} {m[k]:.4g} vs {r[k]:.4g}"
                for k in m
                if m[k] is not None and r.get(k) is not None and m[k] != r[k]
            )
        if item == "fault":
            return (
                f"a fault is planted in this arm's training ({compact_fault(value)}): a negative "
                "control that must lose, not an arm to compare on equal terms"
            )
        if item == "optimizer" and keys:
            return (
                "the optimizer differs: "
                + ", ".join(f"{k} {_short(value.get(k))} vs {_short(ref.get(k))}" for k in keys)
                + " (the experiment's value second): the arms train with other steps, so a "
                "difference in score may be the optimizer's, not the blanks'"
            )
        if item == "reward" and value.get("shaping"):
            return (
                f"the reward is shaped ({', '.join(sorted(value['shaping']))}): not the task's "
                "reward"
            )
        if item == "sampling" and "mismatch" in keys:
            others = [k for k in keys if k != "mismatch"]
            return (
                f"rollout.mismatch differs: this arm's is {compact_mismatch(value)}, the "
                f"experiment's value {compact_mismatch(ref)} (a sampler-trainer mismatch injected "
                "on purpose: the arms' rollouts come from differently corrupted samplers)"
                + (f"; also differs in {', '.join(others)}" if others else "")
            )
        if keys:
            return f"differs from the experiment's value in {', '.join(keys)}"
    return "differs from the experiment's held-constant value"


def _short(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else json.dumps(v, default=str)


def compact_mismatch(sampling: dict[str, Any]) -> str:
    """``sampler_dtype bfloat16, logit_noise 0.5``: a sampling item's mismatch settings away from
    their defaults, or ``none``."""

    m = sampling.get("mismatch") or {}
    defaults = {"sampler_dtype": None, "logit_noise": 0.0, "top_p": 1.0}
    shown = [f"{k} {m[k]}" for k in sorted(m) if m[k] != defaults.get(k)]
    return ", ".join(shown) or "none"


def compact_fault(fault: dict[str, Any]) -> str:
    """``rewards: shuffle``: the fault's settings away from none."""

    return ", ".join(f"{k}: {v}" for k, v in sorted(fault.items()) if v != "none") or "none"
