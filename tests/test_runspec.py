"""RunSpec: its JSON form is the dict the orchestrator planned before specs were typed, key for key
and in order, so run ids (content hashes) and the spec.json files already written do not change;
it round-trips through its JSON text (how it crosses to a worker process) and through spec.json."""

import dataclasses
import json

import pytest

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.layout import RunDir, write_json
from sixblanks.harness.orchestration.data_files import arm_inputs, task_inputs
from sixblanks.harness.orchestration.orchestrator import build_specs
from sixblanks.harness.orchestration.runner import spec_id
from sixblanks.harness.runspec import RunSpec

SMALL = {
    "name": "small",
    "task": {"name": "arithmetic", "eval_size": 16},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "budget": {"launched_tokens": 1200},
    "seeds": [0, 1],
    "arms": {
        "grpo": {"preset": "grpo"},
        "offset": {"preset": "rloo", "seed_offset": 1000},
        "faulted": {"preset": "grpo", "fault": {"rewards": "shuffle"}},
    },
    "tracking": {"mlflow": False},
}


def _old_specs(cfg, warm_key: str, code: str) -> list[dict]:
    """The plain dicts build_specs made before RunSpec, built the way it built them."""

    task_ins = [task_inputs(t) for t in cfg.tasks or []]
    out = []
    for arm in cfg.arms:
        blanks = cfg.resolved_blanks(arm).model_dump(mode="json")
        arm_ins = arm_inputs(cfg, arm)
        for task, task_in in zip(cfg.tasks or [], task_ins):
            for seed in cfg.seeds:
                d = {
                    "experiment": cfg.name,
                    "arm": arm,
                    "preset": cfg.arms[arm].preset,
                    "seed": seed,
                    "task": task.model_dump(mode="json"),
                    "blanks": blanks,
                    "optimizer": cfg.optimizer_for(arm).model_dump(mode="json"),
                    "rollout": cfg.rollout_for(arm).model_dump(mode="json"),
                    "budget": dict(cfg.budget),
                    "eval": cfg.eval.model_dump(mode="json"),
                    "model": cfg.model.model_dump(mode="json"),
                    "warm_start_key": warm_key,
                    "code_version": code,
                }
                d.update(cfg.arms[arm].run_fields())
                if (tools := cfg.tools_for(arm)) is not None:
                    d["tools"] = tools.model_dump(mode="json")
                d.update({"task_inputs": task_in} if task_in else {})
                d.update({"arm_inputs": arm_ins} if arm_ins else {})
                d["run_id"] = spec_id(d)
                out.append(d)
    return out


def test_the_json_form_is_the_old_dict_and_the_run_ids_are_its_hashes():
    cfg = validate_mapping(SMALL)
    specs, old = build_specs(cfg, "warm", code="c"), _old_specs(cfg, "warm", code="c")
    assert len(specs) == len(old) == 6
    for spec, d in zip(specs, old):
        assert isinstance(spec, RunSpec)
        assert spec.run_id == d["run_id"] == spec_id({k: v for k, v in d.items() if k != "run_id"})
        # the same file, byte for byte, as runner.execute_run writes it
        assert json.dumps(spec.as_dict(), indent=2) == json.dumps(d, indent=2)
        assert spec_id(spec.as_dict(run_id=False)) == spec.run_id
    by_arm = {s.arm: s for s in specs}
    assert by_arm["offset"].seed_offset == 1000 and "seed_offset" not in by_arm["grpo"].as_dict()
    assert by_arm["faulted"].fault == {"rewards": "shuffle"} and by_arm["grpo"].fault is None


def test_round_trips_through_its_json_text_and_spec_json(tmp_path):
    for spec in build_specs(validate_mapping(SMALL), "warm", code="c"):
        assert RunSpec.from_json(spec.to_json()) == spec
        assert RunSpec.from_dict(spec.as_dict()) == spec
        rd = RunDir(tmp_path / spec.run_id)
        rd.path.mkdir()
        write_json(rd.spec, spec.as_dict())
        assert rd.read_spec() == spec


def test_a_spec_of_an_older_version_keeps_its_keys_and_its_id():
    """A key this version no longer plans stays in ``extra``: the spec hashes and writes as
    before."""

    (spec,) = build_specs(
        validate_mapping({**SMALL, "seeds": [0], "arms": {"a": {"preset": "grpo"}}}), "k", "c"
    )
    d = spec.as_dict(run_id=False)
    d["task_source"] = "builtin"
    d["run_id"] = spec_id(d)
    old = RunSpec.from_dict(d)
    assert old.extra == {"task_source": "builtin"} and old.as_dict() == d
    assert list(old.as_dict()) == list(d) and spec_id(old.as_dict(run_id=False)) == old.run_id


def test_it_is_frozen_and_replace_makes_a_variant():
    (spec,) = build_specs(
        validate_mapping({**SMALL, "seeds": [0], "arms": {"a": {"preset": "grpo"}}}), "k", "c"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 3  # type: ignore[misc]
    other = spec.replace(seed=3, eval={**spec.eval, "split": "validation"})
    assert (other.seed, other.eval["split"], spec.seed) == (3, "validation", 0)
    assert spec.eval["split"] != "validation" and other.run_id == spec.run_id
    assert spec.as_dict() is not spec.as_dict()  # a copy: editing it leaves the spec as it is
    assert spec.label == "a/arithmetic/seed0" and spec.task_name == "arithmetic"
    assert spec.world_size == 1 and spec.group_size == 4 and not spec.has_inputs
