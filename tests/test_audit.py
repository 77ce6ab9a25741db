"""The fairness audit measures each held-constant item and flags exactly the planted difference;
inert differences are found from what the runs did."""

import copy
import json
from types import SimpleNamespace

import pytest

from sixblanks.algorithms.blanks import flatten
from sixblanks.algorithms.presets import resolve
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.fairness.audit import HELD_CONSTANT, fairness_audit
from sixblanks.harness.fairness.identity import tokenizer_identity
from sixblanks.harness.fairness.inert import inert_differences, inert_note
from sixblanks.harness.models import build_tokenizer
from sixblanks.harness.orchestration.orchestrator import build_specs

BASE = {
    "name": "audit",
    "task": {"name": "arithmetic", "params": {"digits": 1}, "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "budget": {"launched_tokens": 1000},
    "seeds": [0],
    "arms": {"a": {"preset": "grpo"}, "b": {"preset": "grpo"}},
}


@pytest.fixture(scope="module")
def warm_info():
    return {
        "policy_hash": "p0",
        "key": "k",
        "tokenizer": tokenizer_identity(build_tokenizer("0123")),
    }


def _audit(tmp_path, warm_info, arm_b=None, plant=None):
    data = copy.deepcopy(BASE)
    if arm_b:
        data["arms"]["b"] = {"preset": "grpo", **arm_b}
    cfg = validate_mapping(data)
    specs = [plant(s) if plant and s.arm == "b" else s for s in build_specs(cfg, "k")]
    return fairness_audit(cfg, specs, tmp_path, warm_info)


def _flagged(audit):
    return {(f["arm"], f["item"]) for f in audit["flags"] if f["item"] in HELD_CONSTANT}


def test_identical_arms_are_not_flagged_and_items_are_measured(tmp_path, warm_info):
    audit = _audit(tmp_path, warm_info)
    assert _flagged(audit) == set()
    items = audit["arms"]["a"]["items"]
    tok = items["tokenizer"]
    assert (
        len(tok["vocab_merges"]) == 16
        and tok["vocab_size"] > 4
        and "eos_token" in tok["special_tokens"]
    )
    assert tok["chat_template"] is None and tok["chat_template_applied"] == "none"
    assert (
        items["task"]["params"]["digits"] == 1 and items["task"]["params"]["operands"] == 2
    )  # defaults
    assert len(items["task"]["source"]) == 16 and items["reward"]["shaping"] == {}
    assert items["global_batch"] | {} == {
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "updates_per_batch": 1,
        "epochs": 1,
        "minibatches": 1,
        "measured": {"prompts_trained": None, "optimizer_steps_per_1k_accepted_tokens": None},
    }
    assert items["evaluation"]["split"] == "test" and items["search_budget"] is None
    # the resolved optimizer settings (the experiment's defaults here)
    assert items["optimizer"] == {
        "name": "AdamW",
        "lr": 3e-4,
        "betas": [0.9, 0.999],
        "weight_decay": 0.0,
        "grad_clip": 1.0,
        "warmup_steps": 0,
    }


def test_tokenizer_identity_is_by_content():
    a, b = build_tokenizer("0123"), build_tokenizer("0123")
    assert tokenizer_identity(a) == tokenizer_identity(b)
    assert (
        tokenizer_identity(build_tokenizer("0123é"))["vocab_merges"]
        != tokenizer_identity(a)["vocab_merges"]
    )
    b.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert tokenizer_identity(b)["chat_template"] != tokenizer_identity(a)["chat_template"] is None


@pytest.mark.parametrize(
    ("arm_b", "plant", "item"),
    [
        # a different chat template applied by one arm's rollouts
        (
            None,
            lambda s: s.replace(rollout={**s.rollout, "chat_template": "other.jinja"}),
            "tokenizer",
        ),
        # a task parameter
        (
            None,
            lambda s: s.replace(task={**s.task, "params": {**s.task_params, "operands": 3}}),
            "task",
        ),
        # KL-in-reward shaping (rloo, reinforce_pp, ppo put their KL there)
        ({"blanks": {"regularizer": {"reward_kl_coef": 0.05}}}, None, "reward"),
        # DAPO's overlong shaping
        ({"blanks": {"data": {"overlong_shaping": {"enabled": True}}}}, None, "reward"),
        # a different group size (the data blank's)
        ({"blanks": {"data": {"group_size": 8}}}, None, "global_batch"),
        # several updates per batch
        ({"blanks": {"data": {"minibatches": 2}}}, None, "global_batch"),
        # an arm-level rollout override
        ({"rollout": {"temperature": 0.7}}, None, "sampling"),
        ({"rollout": {"max_new_tokens": 8}}, None, "limits"),
        # a tuned arm against an untuned one
        ({"search_budget": {"launched_tokens": 5000.0}}, None, "search_budget"),
        # an arm trained on a search's selection (expert iteration) against single samples
        ({"preset": "rft"}, None, "training_search"),
        # an arm-level optimizer override: three times the learning rate, another warm-up
        ({"optimizer": {"lr": 9e-4}}, None, "optimizer"),
        ({"optimizer": {"warmup_steps": 10}}, None, "optimizer"),
    ],
)
def test_each_planted_difference_flags_exactly_its_item(tmp_path, warm_info, arm_b, plant, item):
    audit = _audit(tmp_path, warm_info, arm_b, plant)
    flagged = _flagged(audit)
    assert flagged == {("b", item)}
    flag = next(f for f in audit["flags"] if f["item"] == item)
    assert flag["value"] != flag["reference"] and flag["reason"]
    if item == "reward":
        assert "shaped" in flag["reason"] and flag["reference"]["shaping"] == {}
    if item == "optimizer":
        assert flag["reference"]["lr"] == 3e-4
        changed = {k for k in flag["value"] if flag["value"][k] != flag["reference"][k]}
        assert len(changed) == 1 and f"{changed.pop()} " in flag["reason"]
    if item == "training_search":
        assert flag["value"] == {"mode": "best_of_n", "n": 8, "select": "best", "policy": "current"}
        assert (
            flag["reference"] is None and "search-time scores are reported apart" in flag["reason"]
        )


def test_measured_batch_figures_are_compared(tmp_path, warm_info):
    """Unique prompts consumed and optimizer steps per accepted token come from the runs."""

    cfg = validate_mapping(BASE)
    specs = build_specs(cfg, "k")
    for s in specs:
        d = tmp_path / s.run_id
        d.mkdir()
        accepted, prompts = (1000.0, [4, 4]) if s.arm == "a" else (1000.0, [4, 4, 4, 4])
        (d / "status.json").write_text(
            json.dumps(
                {
                    "state": "finished",
                    "counters": {
                        "launched_tokens": 1000,
                        "accepted_tokens": accepted,
                        "optimizer_steps": 2,
                    },
                }
            )
        )
        (d / "events.jsonl").write_text(
            "".join(
                json.dumps({"type": "census", "groups_kept": p, "prompts_sampled": p + 1}) + "\n"
                for p in prompts
            )
        )
    audit = fairness_audit(cfg, specs, tmp_path, warm_info)
    measured = audit["arms"]["b"]["items"]["global_batch"]["measured"]
    assert measured == {"prompts_trained": 16, "optimizer_steps_per_1k_accepted_tokens": 2.0}
    assert _flagged(audit) == {("b", "global_batch")}  # 16 vs 8 prompts: beyond 10%


def _blanks(preset, over=None):
    return flatten(resolve(preset, over or {}))


ACTIVE = {
    "steps": 4.0,
    "updates": 4.0,
    "ratio_max": 1.3,
    "ratio_min": 0.8,
    "clip_frac": 0.05,
    "early_stops": 0.0,
    "groups_dropped": 3.0,
    "overlong_penalized": 0.2,
    "overlong_filtered": 0.0,
    "shaping_logged": 4.0,
    "shaping_moved": 0.3,
}


def test_inert_rules_by_hand():
    on_policy = {**ACTIVE, "ratio_max": 1.0, "ratio_min": 1.0, "clip_frac": 0.0}
    dapo = _blanks("dapo")
    assert "every importance ratio was 1" in inert_note("weight.eps_high", dapo, on_policy)
    assert inert_note("weight.eps_high", dapo, ACTIVE) is None
    assert "clip fraction 0" in inert_note("weight.eps_high", dapo, {**ACTIVE, "clip_frac": 0.0})
    assert inert_note("weight.ratio", _blanks("gspo"), on_policy) is None  # acts even at r = 1
    sapo = _blanks("sapo")
    assert "every importance ratio was 1" in inert_note("weight.tau_pos", sapo, on_policy)
    # a clip bound under a soft gate, a gate temperature under a clip: not used at all
    assert (
        inert_note("weight.eps_high", sapo, ACTIVE) == "not used: trust region 'sapo' has no clip"
    )
    assert "no soft gate" in inert_note("weight.tau_pos", dapo, ACTIVE)
    # a KL estimator that differs, under a zero coefficient
    assert "coefficient 0" in inert_note("regularizer.loss_kl_estimator", dapo, ACTIVE)
    assert inert_note("regularizer.loss_kl_estimator", _blanks("grpo"), ACTIVE) is None
    # dynamic sampling that never dropped a group; overlong shaping that never penalized
    assert "dropped no group" in inert_note(
        "data.dynamic_sampling", dapo, {**ACTIVE, "groups_dropped": 0.0}
    )
    assert (
        inert_note("data.dynamic_sampling", _blanks("grpo"), {**ACTIVE, "groups_dropped": 0.0})
        is None
    )
    assert "overlong zone" in inert_note(
        "data.overlong_shaping.enabled", dapo, {**ACTIVE, "overlong_penalized": 0.0}
    )
    # potential shaping whose terms summed to 0 for every sample (outcome credit: it telescopes)
    shaped = _blanks("grpo", {"data": {"potential_shaping": {"enabled": True}}})
    still = {**ACTIVE, "shaping_moved": 0.0}
    assert "summed to 0" in inert_note("data.potential_shaping.enabled", shaped, still)
    assert inert_note("data.potential_shaping.enabled", shaped, ACTIVE) is None
    unlogged = {**still, "shaping_logged": 0.0}  # an older run without the metric: cannot tell
    assert inert_note("data.potential_shaping.enabled", shaped, unlogged) is None
    # per-turn credit: terms that sum to 0 over an episode still move each turn's return
    turns = _blanks("turn_grpo", {"data": {"potential_shaping": {"enabled": True}}})
    assert inert_note("data.potential_shaping.enabled", turns, still) is None
    assert inert_note("data.potential_shaping.enabled", shaped, unlogged) is None
    assert "target-KL stop never fired" in inert_note(
        "weight.target_kl", _blanks("grpo", {"weight": {"target_kl": 0.02}}), ACTIVE
    )


def test_inert_differences_only_for_fields_that_differ(tmp_path):
    cfg = validate_mapping(BASE | {"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}})
    specs = build_specs(cfg, "k")
    for s in specs:  # one on-policy update per batch: every ratio 1
        d = tmp_path / s.run_id
        d.mkdir()
        step = {"type": "step", "step": 0, "ratio_max": 1.0, "ratio_min": 1.0, "clip_frac": 0.0}
        census = {"type": "census", "groups_dropped": {"all_correct": 1, "surplus": 2}}
        (d / "events.jsonl").write_text(json.dumps(step) + "\n" + json.dumps(census) + "\n")
    notes = {(n["arm"], n["blank"]) for n in inert_differences(specs, tmp_path)}
    assert ("a", "weight.eps_high") in notes and ("b", "weight.eps_high") in notes
    assert ("b", "data.dynamic_sampling") not in notes  # it dropped a group
    assert not {b for _, b in notes} & {"weight.eps_low", "data.epochs"}  # equal in both arms


def test_a_multi_task_experiment_is_audited_per_task_where_the_item_depends_on_it(
    tmp_path, warm_info
):
    data = copy.deepcopy(BASE)
    del data["task"]
    data["tasks"] = [
        {"name": "arithmetic", "eval_size": 16},
        {"name": "guess_number", "eval_size": 8},
    ]
    cfg = validate_mapping(data)
    specs = build_specs(cfg, "k")
    audit = fairness_audit(cfg, specs, tmp_path, warm_info)
    assert _flagged(audit) == set()  # identical arms over two tasks: nothing to flag
    items = audit["arms"]["b"]["items"]
    assert set(items["task"]) == {"arithmetic", "guess_number"}  # task-dependent: one per task
    assert items["limits"]["guess_number"]["max_turns"] > items["limits"]["arithmetic"]["max_turns"]
    assert items["global_batch"]["prompts_per_step"] == 4  # the arm's, whatever the task
    assert "measured" in items["global_batch"]
    data["arms"]["b"] = {"preset": "grpo", "blanks": {"data": {"group_size": 8}}}
    audit = fairness_audit(
        validate_mapping(data), build_specs(validate_mapping(data), "k"), tmp_path, warm_info
    )
    assert _flagged(audit) == {("b", "global_batch")}


def test_an_optimizer_that_differs_is_flagged_and_shown_in_the_report(tmp_path, warm_info):
    """Arm b at three times a's learning rate: flagged on ``optimizer`` with both values in the
    reason, and the report's audit table shows the row with b's cell flagged; an arm that sets
    the experiment's own learning rate is not flagged."""

    import polars as pl

    from sixblanks.harness.store.rows import fairness_rows
    from sixblanks.reports.audit_tables import fairness_blocks
    from sixblanks.reports.render import to_markdown

    same = _audit(tmp_path, warm_info, {"optimizer": {"lr": 3e-4}})
    assert _flagged(same) == set()
    audit = _audit(tmp_path, warm_info, {"optimizer": {"lr": 9e-4}})
    assert _flagged(audit) == {("b", "optimizer")}
    flag = next(f for f in audit["flags"] if f["item"] == "optimizer")
    assert flag["value"]["lr"] == pytest.approx(3 * flag["reference"]["lr"])
    assert "lr 0.0009 vs 0.0003" in flag["reason"]
    # what the audit stores, as the report reads it
    rows = pl.DataFrame(fairness_rows("e", audit)).drop("experiment_id")
    md = to_markdown("t", fairness_blocks(SimpleNamespace(fairness=rows, arms=["a", "b"])))
    line = next(ln for ln in md.splitlines() if ln.startswith("| optimizer |"))
    a = "name=AdamW, lr=0.0003, betas=[0.9, 0.999], weight_decay=0, grad_clip=1, warmup_steps=0"
    assert line.startswith(f"| optimizer | {a} | ⚠ {a.replace('0.0003', '0.0009')} — the optimizer")
    assert line.endswith(f"| {a} |")  # the experiment's value
