"""The fairness audit: each item of the chapter's "hold constant or account for" list, measured per
arm as a value or a content hash (never a proxy), differences flagged; and the inert differences:
blanks in which arms differ but that never acted during their runs.

    initial_policy   content hash of the initial weights
    tokenizer        hashes of the vocabulary+merges and of the whole tokenizer, special tokens, the
                     chat template's hash and whether the rollouts apply one
    task             name, resolved parameters, hash of the task class source (user tasks included),
                     the reasoning-gym version and dataset source for its tasks
    reward           hash of the verifier's source, and every shaping term of the arm (overlong
                     shaping, KL in the reward); the experiment's reward has none
    sampling         backend, temperature, top-p, top-k (samples per prompt: global_batch)
    limits           tokens per turn, context tokens, turns per episode
    global_batch     prompts per step, samples per prompt, updates per batch (epochs x minibatches),
                     and, measured over the arm's finished runs, unique prompts consumed and optimizer
                     steps per 1000 accepted tokens (flagged past 10% relative difference)
    evaluation       the evaluation scaffold: split, size, samples, temperature, schedule, seeds (its
                     token limit is the arm's max_new_tokens, audited under limits)
    budget           the limits
    search_budget    what tuning the arm cost (``arms.<arm>.search_budget``; None: not tuned)

With several tasks, task-dependent items hold one value per task.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from sixblanks.algorithms.blanks import Blanks, flatten

from .config import ExperimentConfig
from .layout import RunDir
from .version import code_fingerprint

HELD_CONSTANT = (
    "initial_policy",
    "tokenizer",
    "task",
    "reward",
    "sampling",
    "limits",
    "global_batch",
    "evaluation",
    "budget",
    "search_budget",
)
MEASURED_TOLERANCE = 0.10
"""Measured batch figures (unique prompts, optimizer steps per accepted token) differ when they are
more than this far apart, relative to the experiment's value."""
RATIO_ONE = 1e-6
"""An importance ratio within this of 1 counts as 1 (on-policy recomputation is exact up to this)."""


def content_hash(obj: Any) -> str:
    """A short sha256 of ``obj`` (strings as they are, other objects as canonical JSON)."""

    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_identity(tok) -> dict[str, Any]:
    """What a tokenizer is, by content: vocabulary and merges, the whole serialized tokenizer
    (normalizer, pre-tokenizer, added tokens), special tokens and the chat template."""

    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        full = json.loads(backend.to_str())
        vocab = content_hash(full.get("model"))  # the vocabulary and the merges
        whole = content_hash(full)
    else:  # a slow tokenizer: its vocabulary is what can be read
        vocab = whole = content_hash(sorted(tok.get_vocab().items()))
    template = getattr(tok, "chat_template", None)
    return {
        "vocab_merges": vocab,
        "tokenizer": whole,
        "vocab_size": len(tok),
        "special_tokens": {k: str(v) for k, v in sorted(tok.special_tokens_map.items())},
        "chat_template": content_hash(template) if template else None,
    }


def _source_hash(obj: Any) -> str:
    try:
        return content_hash(inspect.getsource(obj))
    except (OSError, TypeError):  # defined interactively: the qualified name is what is known
        return content_hash(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', obj)}")


@lru_cache(maxsize=64)
def _task_and_reward(name: str, params_json: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from .tasks import make_task
    from .tasks.rgym import ReasoningGymTask

    task = make_task(name, json.loads(params_json))
    cls = type(task)
    ident: dict[str, Any] = {
        "name": name,
        "params": task.params.model_dump(mode="json"),  # defaults resolved
        "source": _source_hash(cls),
    }
    verifier = {"source": _source_hash(cls.verify)}
    if isinstance(task, ReasoningGymTask):
        from importlib.metadata import version

        ds, _ = task._entry(0)  # noqa: SLF001 - the dataset object the task scores with
        ident["reasoning_gym"] = version("reasoning-gym")
        ident["dataset_source"] = _source_hash(type(ds))
        verifier["score_answer"] = _source_hash(type(ds).score_answer)
    return ident, verifier


def judge_identity(judge: dict[str, Any]) -> dict[str, Any]:
    """A judge in the reward: how it is used, and its callable's source or its model's files."""

    out = {k: judge.get(k) for k in ("kind", "use", "max_calls_per_verify")}
    if judge["kind"] == "callable":
        from .tasks.judge import JudgeError, import_callable

        out["callable"] = judge["callable"]
        try:
            out["source"] = _source_hash(import_callable(judge["callable"]))
        except JudgeError as exc:
            out["source"] = f"unavailable: {exc}"
    else:
        root = Path(judge["path"])
        files = sorted(p for p in root.glob("*") if p.is_file()) if root.is_dir() else []
        out["model"] = content_hash(
            {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
        )
        out["prompt"] = content_hash(judge["prompt"])
    return out


def task_identity(task: dict[str, Any]) -> dict[str, Any]:
    """Name, resolved parameters and source hash of a task spec ``{"name", "params"}``."""

    return _task_and_reward(task["name"], json.dumps(task.get("params") or {}, sort_keys=True))[0]


def shaping_terms(blanks: Blanks) -> dict[str, Any]:
    """Every term the arm adds to the task's reward (empty: the task's reward as it is)."""

    out: dict[str, Any] = {}
    if blanks.data.overlong_shaping.enabled:
        out["overlong"] = blanks.data.overlong_shaping.model_dump(exclude={"enabled"})
    reg = blanks.regularizer
    if reg.reward_kl_coef > 0:
        out["kl_in_reward"] = {"coef": reg.reward_kl_coef, "estimator": reg.reward_kl_estimator}
    return out


def _group_size(spec: dict[str, Any]) -> int:
    return int(spec["blanks"]["data"].get("group_size") or spec["rollout"]["group_size"])


def spec_items(
    spec: dict[str, Any], cfg: ExperimentConfig, warm_info: dict[str, Any], shaped: bool = True
) -> dict[str, Any]:
    """The configured value of every held-constant item for one run spec (``shaped=False``: the
    reward without the arm's shaping, the experiment's reference)."""

    blanks = Blanks.model_validate(spec["blanks"])
    r, d = spec["rollout"], blanks.data
    ident, verifier = _task_and_reward(
        spec["task"]["name"], json.dumps(spec["task"].get("params") or {}, sort_keys=True)
    )
    from .tasks import make_task

    max_turns = make_task(spec["task"]["name"], spec["task"].get("params")).max_turns
    judge = spec["task"].get("judge")
    if judge:
        verifier = {**verifier, "judge": judge_identity(judge)}
    return {
        "initial_policy": warm_info.get("policy_hash"),
        "tokenizer": {
            **(warm_info.get("tokenizer") or {"unknown": warm_info.get("key")}),
            # rollouts apply no chat template yet; a run spec that names one is audited by it
            "chat_template_applied": r.get("chat_template", "none"),
        },
        "task": ident,
        "reward": {"verifier": verifier, "shaping": shaping_terms(blanks) if shaped else {}},
        "sampling": {
            "backend": r["backend"],
            "temperature": r["temperature"],
            "top_p": r["top_p"],
            "top_k": r["top_k"],
        },
        "limits": {
            "max_new_tokens": r["max_new_tokens"],
            "max_prompt_tokens": r["max_prompt_tokens"],
            "max_turns": max_turns,
        },
        "global_batch": {
            "prompts_per_step": r["prompts_per_step"],
            "samples_per_prompt": _group_size(spec),
            "updates_per_batch": d.epochs * d.minibatches,
            "epochs": d.epochs,
            "minibatches": d.minibatches,
        },
        "evaluation": {
            **{
                k: spec["eval"].get(k)
                for k in ("split", "every", "counter", "temperature", "samples")
            },
            "size": spec["eval"].get("size") or spec["task"].get("eval_size"),
            "seeds": list(cfg.seeds),
        },
        "budget": spec["budget"],
        "search_budget": cfg.arms[spec["arm"]].search_budget if spec["arm"] in cfg.arms else None,
    }


def measured_batch(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean over finished runs: unique prompts consumed, optimizer steps per 1000 accepted tokens."""

    done = [r for r in runs if r["state"] == "finished"]
    if not done:
        return {"unique_prompts": None, "optimizer_steps_per_1k_accepted_tokens": None}
    prompts = [r["prompts_sampled"] for r in done]
    per_k = [
        1000.0 * r["counters"].get("optimizer_steps", 0.0) / r["counters"]["accepted_tokens"]
        for r in done
        if (r["counters"] or {}).get("accepted_tokens")
    ]
    return {
        "unique_prompts": sum(prompts) / len(prompts),
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


def fairness_audit(
    cfg: ExperimentConfig, specs: list[dict[str, Any]], runs_dir: Path, warm_info: dict[str, Any]
) -> dict[str, Any]:
    """What the chapter says to hold constant, per arm, and each arm's consumption; flags differences.

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
        arm, task = s["arm"], s["task"]["name"]
        task_values.setdefault(arm, {}).setdefault(task, spec_items(s, cfg, warm_info))
        if not reference_tasks or next(iter(reference_tasks.values()))["_arm"] == arm:
            reference_tasks.setdefault(task, {"_arm": arm, **spec_items(s, cfg, warm_info, False)})
        rd = RunDir(runs_dir / s["run_id"])
        st = rd.read_status()
        census = (
            [e for e in rd.read_events() if e.get("type") == "census"] if rd.events.exists() else []
        )
        per_arm.setdefault(arm, {"runs": []})["runs"].append(
            {
                "run_id": s["run_id"],
                "seed": s["seed"],
                "task": task,
                "state": st.get("state"),
                "counters": st.get("counters"),
                "code_version": s.get("code_version"),
                "prompts_sampled": sum(int(c.get("prompts_sampled", 0)) for c in census),
            }
        )
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
    code = code_fingerprint()
    flags = []
    for arm, rec in per_arm.items():
        for item in HELD_CONSTANT:
            if _differs(item, rec["items"][item], reference[item]):
                flags.append(
                    {
                        "arm": arm,
                        "item": item,
                        "reason": _reason(item, rec["items"][item], reference[item]),
                        "value": rec["items"][item],
                        "reference": reference[item],
                    }
                )
        flags += _run_flags(cfg, arm, rec["runs"], code)
    return {
        "held_constant": HELD_CONSTANT,
        "reference": reference,
        "arms": per_arm,
        "flags": flags,
        "flagged_arms": sorted({f["arm"] for f in flags}),
        "inert": inert_differences(cfg, specs, runs_dir),
    }


def _reason(item: str, value: Any, ref: Any) -> str:
    """Which keys differ, in words."""

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
        if item == "reward" and value.get("shaping"):
            return f"the reward is shaped ({', '.join(sorted(value['shaping']))}): not the task's reward"
        if keys:
            return f"differs from the experiment's value in {', '.join(keys)}"
    return "differs from the experiment's held-constant value"


def _run_flags(
    cfg: ExperimentConfig, arm: str, runs: list[dict[str, Any]], code: str
) -> list[dict]:
    flags = []
    for run in runs:
        if run["code_version"] != code:
            flags.append(
                {
                    "arm": arm,
                    "item": "code",
                    "run_id": run["run_id"],
                    "reason": f"run by other code ({run['code_version']}; now {code}), "
                    "reused on request (--reuse-finished)",
                }
            )
        counters = run["counters"] or {}
        for counter, limit in cfg.budget.items():
            used = counters.get(counter, 0.0)
            if run["state"] == "finished" and used < 0.9 * limit:
                flags.append(
                    {
                        "arm": arm,
                        "item": "consumption",
                        "run_id": run["run_id"],
                        "reason": f"consumed {used:g} of {limit:g} {counter} (< 90% of the matched budget)",
                    }
                )
            if run["state"] != "finished":
                flags.append(
                    {
                        "arm": arm,
                        "item": "consumption",
                        "run_id": run["run_id"],
                        "reason": f"run is {run['state']}: consumption not final",
                    }
                )
    return flags


# ----------------------------------------------------------------------------- inert differences

CLIP_FIELDS = ("weight.eps_low", "weight.eps_high", "weight.dual_clip_c")
TRUST_REGION_FIELDS = (
    "weight.trust_region",
    *CLIP_FIELDS,
    "weight.tau_pos",
    "weight.tau_neg",
    "weight.log_ratio_clamp",
)
"""Fields that act only through a ratio away from 1 (at r = 1 every trust region's gradient weight is
1). The ratio's kind (token or sequence) changes the gradient even at r = 1, so it is not here."""


def _activity(runs_dir: Path, run_ids: list[str]) -> dict[str, float]:
    """What acted in an arm's runs, from their step metrics, census and discards."""

    act = {
        "steps": 0.0,
        "updates": 0.0,
        "ratio_max": 1.0,
        "ratio_min": 1.0,
        "clip_frac": 0.0,
        "early_stops": 0.0,
        "groups_dropped": 0.0,
        "overlong_penalized": 0.0,
        "overlong_filtered": 0.0,
    }
    for rid in run_ids:
        rd = RunDir(runs_dir / rid)
        if not rd.events.exists():
            continue
        for e in rd.read_events():
            if e.get("type") == "census":
                act["groups_dropped"] += sum(
                    v for k, v in (e.get("groups_dropped") or {}).items() if k != "surplus"
                )
            if e.get("type") != "step":
                continue
            act["steps"] += 1
            if "ratio_max" in e:
                act["updates"] += 1
                act["ratio_max"] = max(act["ratio_max"], e["ratio_max"])
                act["ratio_min"] = min(act["ratio_min"], e.get("ratio_min", 1.0))
                act["clip_frac"] = max(act["clip_frac"], e.get("clip_frac", 0.0))
            act["early_stops"] += float(e.get("early_stop_epoch", -1.0) >= 0)
            act["overlong_penalized"] += e.get("overlong_penalty_frac", 0.0)
        res = rd.read_result()
        act["overlong_filtered"] += (res.get("discarded_by_reason") or {}).get(
            "overlong_filter", 0.0
        )
    return act


def inert_note(field: str, blanks: dict[str, Any], act: dict[str, float]) -> str | None:
    """Why ``field`` never acted in runs with ``act`` (None: it did, or it cannot be told)."""

    if not act.get("steps"):
        return None  # no step recorded: nothing can be told
    every_ratio_one = act["updates"] > 0 and (
        act["ratio_max"] <= 1 + RATIO_ONE and act["ratio_min"] >= 1 - RATIO_ONE
    )
    if field.startswith("weight.") and blanks["weight.ratio"] != "none":
        if field == "weight.target_kl":
            if blanks[field] is not None and act["updates"] and not act["early_stops"]:
                return "never acted: the target-KL stop never fired"
            return None
        if every_ratio_one and field in TRUST_REGION_FIELDS:
            return (
                "never acted: every importance ratio was 1 and the clip fraction 0 "
                "(one on-policy update per batch)"
            )
        uses_eps = ("clip", "dis") if field != "weight.dual_clip_c" else ("clip",)
        if field in CLIP_FIELDS and blanks["weight.trust_region"] not in uses_eps:
            return f"not used: trust region '{blanks['weight.trust_region']}' has no clip"
        if (
            field in ("weight.tau_pos", "weight.tau_neg")
            and blanks["weight.trust_region"] != "sapo"
        ):
            return f"not used: trust region '{blanks['weight.trust_region']}' has no soft gate"
        if field in CLIP_FIELDS and act["updates"] and act["clip_frac"] == 0:
            return "never acted: clip fraction 0 in every update"
    for kind in ("loss_kl", "reward_kl"):
        if field.startswith(f"regularizer.{kind}_") and field != f"regularizer.{kind}_coef":
            if not blanks[f"regularizer.{kind}_coef"]:
                return f"never acted: the KL term ({kind.replace('_', ' ')}) has coefficient 0"
    if field.startswith("data.") and field.split(".")[1] in (
        "dynamic_sampling",
        "max_sampling_rounds",
        "on_round_cap",
    ):
        if blanks["data.dynamic_sampling"] and not act["groups_dropped"]:
            return "never acted: dynamic sampling dropped no group"
    if field.startswith("data.overlong_shaping.") and blanks["data.overlong_shaping.enabled"]:
        if not act["overlong_penalized"]:
            return "never acted: no response reached the overlong zone (penalty 0 throughout)"
    if field == "mask.overlong_filter" and blanks[field] and not act["overlong_filtered"]:
        return "never acted: no response was truncated"
    return None


def inert_differences(
    cfg: ExperimentConfig, specs: list[dict[str, Any]], runs_dir: Path
) -> list[dict[str, str]]:
    """For each blank field in which the arms differ, the arms in whose runs it never acted:
    ``[{"arm", "blank", "note"}]``."""

    flat: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[str]] = {}
    for s in specs:
        flat.setdefault(s["arm"], flatten(Blanks.model_validate(s["blanks"])))
        runs.setdefault(s["arm"], []).append(s["run_id"])
    if len(flat) < 2:
        return []
    fields = sorted(
        k
        for k in next(iter(flat.values()))
        if len({json.dumps(f.get(k), default=str) for f in flat.values()}) > 1
    )
    out = []
    for arm, blanks in flat.items():
        act = _activity(runs_dir, runs[arm])
        for field in fields:
            note = inert_note(field, blanks, act)
            if note:
                out.append({"arm": arm, "blank": field, "note": note})
    return out
