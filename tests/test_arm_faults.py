"""An arm's seed offset (``arms.<arm>.seed_offset``) and a planted training fault
(``arms.<arm>.fault: {rewards: shuffle}``): keys of the experiment file, carried by the arm's run
specs, applied to training only (the held-out evaluation is the other arms'), recorded or flagged by
the audit."""

import json

import pytest
import torch

from sixblanks.algorithms.loss import compute_advantages
from sixblanks.algorithms.presets import PRESETS
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.errors import ConfigError
from sixblanks.harness.orchestration.definition import definition
from sixblanks.harness.orchestration.orchestrator import build_specs
from sixblanks.harness.orchestration.runner import execute_run, settings_from_spec
from sixblanks.harness.runspec import RunSpec
from sixblanks.harness.training.faults import planted_rewards, reward_permutation
from tests.golden.record import CONFIG, EVAL_SIZE, INITIAL_DIR

TINY = {
    "name": "faults",
    "task": {"name": "arithmetic", "eval_size": EVAL_SIZE},
    # the golden fixture's rollout: its stored initial policy is the warm start
    "rollout": CONFIG["rollout"],
    "budget": {"launched_tokens": 300},
    "eval": {"every": 10000},  # at the start and at the end
    "seeds": [0],
    "arms": {"a": {"preset": "grpo"}},
    "tracking": {"mlflow": False},
}


def _cfg(arms: dict) -> object:
    return validate_mapping({**TINY, "arms": arms})


def _specs(cfg) -> list[RunSpec]:
    """The run specs, each carrying its arm's run fields (what build_specs puts there)."""

    return build_specs(cfg, "k")


# --------------------------------------------------------------------------- the keys


def test_the_keys_default_to_nothing_and_reach_the_run_settings():
    cfg = _cfg(
        {
            "a": {"preset": "grpo"},
            "b": {"preset": "grpo", "seed_offset": 1000},
            "c": {"preset": "grpo", "fault": {"rewards": "shuffle"}},
            "d": {"preset": "grpo", "fault": {"rewards": "none"}},
        }
    )
    fields = {arm: spec.run_fields() for arm, spec in cfg.arms.items()}
    assert fields == {
        "a": {},
        "b": {"seed_offset": 1000},
        "c": {"fault": {"rewards": "shuffle"}},
        "d": {},
    }
    settings = {s.arm: settings_from_spec(s) for s in _specs(cfg)}
    assert settings["b"].seed == 0 and settings["b"].train_seed == 1000
    assert settings["a"].train_seed == 0 and settings["a"].reward_fault == "none"
    assert settings["c"].reward_fault == "shuffle" and settings["c"].train_seed == 0
    # a definition records the keys where set, and only there (an older directory's definition,
    # made before the keys existed, is the same definition)
    arms = definition(cfg)["arms"]
    assert "seed_offset" not in arms["a"] and "fault" not in arms["a"] and "fault" not in arms["d"]
    assert arms["b"]["seed_offset"] == 1000 and arms["c"]["fault"] == {"rewards": "shuffle"}


def test_an_unknown_fault_names_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        _cfg({"a": {"preset": "grpo", "fault": {"rewards": "shufle"}}})
    msg = str(err.value)
    assert "arms.a.fault.rewards" in msg and "'none'" in msg and "'shuffle'" in msg
    assert "did you mean 'shuffle'" in msg
    with pytest.raises(ConfigError, match=r"arms\.s\.fault\.rewards: 'shuffle' .* 'sft'"):
        _cfg({"s": {"preset": "sft", "fault": {"rewards": "shuffle"}}})


def test_build_specs_carry_the_arm_run_fields():
    """The spec holds the offset and the fault (so the run id differs from the arm's without them);
    its seed stays the experiment's, so runs of two arms pair up by seed."""

    plain = build_specs(_cfg({"a": {"preset": "grpo"}}), "k")[0]
    offset = build_specs(_cfg({"a": {"preset": "grpo", "seed_offset": 1000}}), "k")[0]
    faulted = build_specs(_cfg({"a": {"preset": "grpo", "fault": {"rewards": "shuffle"}}}), "k")[0]
    assert "seed_offset" not in plain.as_dict() and "fault" not in plain.as_dict()
    assert offset.seed_offset == 1000 and faulted.fault == {"rewards": "shuffle"}, (
        "harness/orchestration/plan.py build_specs: "
        "fields.update(cfg.arms[arm].run_fields()) before the run id is computed"
    )
    assert offset.seed == plain.seed == 0
    assert len({plain.run_id, offset.run_id, faulted.run_id}) == 3


# --------------------------------------------------------------------------- the seed offset


def _run(spec, tmp_path) -> tuple[list[dict], list[dict], dict]:
    out = execute_run(spec, tmp_path / spec.arm, INITIAL_DIR, threads=1, checkpoint_seconds=3600)
    lines = (tmp_path / spec.arm / "events.jsonl").read_text().splitlines()
    events = [json.loads(x) for x in lines if x]
    steps = [
        {k: v for k, v in e.items() if "seconds" not in k and not k.startswith(("memory.", "type"))}
        for e in events
        if e["type"] == "step"
    ]
    return steps, [e for e in events if e["type"] == "eval"], out


def test_an_offset_arm_trains_on_other_draws_and_evaluates_on_the_same_instances(tmp_path):
    torch.set_num_threads(1)
    cfg = _cfg(
        {
            "a": {"preset": "grpo"},
            "a_twin": {"preset": "grpo"},
            "b": {"preset": "grpo", "seed_offset": 1000},
        }
    )
    runs = {s.arm: _run(s, tmp_path) for s in _specs(cfg)}
    (a, a_evals, a_out), (twin, twin_evals, _), (b, b_evals, b_out) = (
        runs[k] for k in ("a", "a_twin", "b")
    )
    assert len(a) >= 3
    # offset 0: the same run, number for number (runs are deterministic given their seed)
    assert twin == a
    assert [e["per_instance"] for e in twin_evals] == [e["per_instance"] for e in a_evals]
    # offset 1000: other training draws from the first step on
    assert [s["reward_mean"] for s in b] != [s["reward_mean"] for s in a]
    assert b[0]["loss"] != a[0]["loss"]
    # ... the same held-out instances, and the same start (same policy, greedy, same instances)
    assert [e["seed_range"] for e in b_evals] == [e["seed_range"] for e in a_evals]
    assert [e["n"] for e in b_evals] == [e["n"] for e in a_evals] == [EVAL_SIZE, EVAL_SIZE]
    assert b_evals[0]["per_instance"] == a_evals[0]["per_instance"]
    # and the run's seed is the experiment's: the two arms' runs pair up by it
    assert a_out["seed"] == b_out["seed"] == 0


# --------------------------------------------------------------------------- the reward fault


def test_the_shuffle_permutes_the_rewards_by_seed_and_step():
    """Row i gets the reward of row perm[i] (a permutation drawn from the run's training seed and
    the step), on its own last turn; the rewards' multiset is unchanged."""

    reward = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0])
    turns = torch.zeros(8, 2)
    turns[:, 0] = reward
    n_turns = torch.tensor([1, 2, 1, 2, 1, 1, 2, 1])
    shuffled, shuffled_turns = planted_rewards("shuffle", reward, turns, n_turns, seed=3, step=5)
    perm = reward_permutation(8, 3, 5)
    assert sorted(perm.tolist()) == list(range(8)) and perm.tolist() != list(range(8))
    assert shuffled.tolist() == reward[perm].tolist()
    assert sorted(shuffled.tolist()) == sorted(reward.tolist())
    for i in range(8):  # on the row's last turn, 0 elsewhere: the turns sum to the reward
        last = int(n_turns[i]) - 1
        assert shuffled_turns[i, last] == shuffled[i] and shuffled_turns[i, 1 - last] == 0
    # the same seed and step, the same permutation (a resumed run); another step, another
    again, _ = planted_rewards("shuffle", reward, turns, n_turns, seed=3, step=5)
    assert again.tolist() == shuffled.tolist()
    assert reward_permutation(8, 3, 6).tolist() != perm.tolist()
    # none: the batch's own tensors
    same = planted_rewards("none", reward, turns, n_turns, seed=3, step=5)
    assert same[0] is reward and same[1] is turns


def _trainer(fault: str):
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer

    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    settings = RunSettings(
        blanks=PRESETS["grpo"].blanks,
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget={"launched_tokens": 800.0},
        seed=0,
        eval_size=EVAL_SIZE,
        name=f"grpo {fault}",
        reward_fault=fault,
    )
    return Trainer(settings, make_task("arithmetic"), model, tok)


def test_a_shuffled_arm_learns_from_permuted_rewards_and_evaluates_as_any_other():
    torch.set_num_threads(1)
    clean, faulted = _trainer("none"), _trainer("shuffle")
    # evaluation reads no fault: the same record from the same policy
    ev_clean, ev_faulted = clean.evaluate(), faulted.evaluate()
    for k in ("score", "per_instance", "seed_range", "n"):
        assert ev_faulted[k] == ev_clean[k], k
    # the same first batch (the fault draws from a generator of its own)
    got = {}
    for name, tr in (("clean", clean), ("faulted", faulted)):
        collected = tr.collector.collect()
        got[name] = (collected.batch, tr.objective.prepare(collected))
    batch, p_clean = got["clean"]
    fbatch, p_faulted = got["faulted"]
    assert torch.equal(batch.reward, fbatch.reward) and torch.equal(batch.tokens, fbatch.tokens)
    assert len(set(batch.reward.tolist())) > 1  # something to permute
    # the advantages come from the permuted rewards ...
    perm = reward_permutation(batch.size, 0, 0)
    mask0 = fbatch.action_mask.clone()
    want, _, _ = compute_advantages(
        PRESETS["grpo"].blanks,
        fbatch.reward[perm],
        mask0,
        fbatch.group_ids,
        old_logp=p_faulted.tensors["old_logp"],
        ref_logp=p_faulted.tensors["ref_logp"],
        l_max=faulted.ctx.l_max,
        **{**fbatch.advantage_inputs(), "turn_rewards": fbatch.reward[perm][:, None]},
    )
    assert torch.allclose(p_faulted.tensors["adv"], want)
    assert not torch.allclose(p_faulted.tensors["adv"], p_clean.tensors["adv"])
    # ... and the logged rewards are the true ones
    for k in ("reward_mean", "response_length_correct", "trainable_group_frac_kept"):
        assert p_faulted.metrics[k] == p_clean.metrics[k], k


# --------------------------------------------------------------------------- the audit


def test_the_audit_flags_a_fault_and_records_an_offset(tmp_path):
    from sixblanks.harness.fairness.audit import HELD_CONSTANT, fairness_audit
    from sixblanks.harness.fairness.identity import tokenizer_identity
    from sixblanks.harness.models import build_tokenizer

    cfg = _cfg(
        {
            "a": {"preset": "grpo"},
            "b": {"preset": "grpo", "seed_offset": 1000},
            "c": {"preset": "grpo", "fault": {"rewards": "shuffle"}},
        }
    )
    warm = {"policy_hash": "p0", "key": "k", "tokenizer": tokenizer_identity(build_tokenizer("01"))}
    audit = fairness_audit(cfg, _specs(cfg), tmp_path, warm)
    flagged = {(f["arm"], f["item"]) for f in audit["flags"] if f["item"] in HELD_CONSTANT}
    assert flagged == {("c", "fault")}
    flag = next(f for f in audit["flags"] if f["item"] == "fault")
    assert flag["value"] == {"rewards": "shuffle"} and flag["reference"] == {"rewards": "none"}
    assert "rewards: shuffle" in flag["reason"] and "negative control" in flag["reason"]
    items = {arm: rec["items"] for arm, rec in audit["arms"].items()}
    assert [items[a]["seed_offset"] for a in "abc"] == [0, 1000, 0]  # recorded, not flagged
    assert items["a"]["fault"] == items["b"]["fault"] == {"rewards": "none"}
