"""An experiment's preparation (harness/orchestration/plan.py): the plan names the runs the
experiment then runs, its warm-start directory holds the policy it describes, and a second
preparation finds the warm start cached and plans the same."""

import dataclasses

from sixblanks.harness.layout import TOKENIZER_IDENTITY_JSON, read_json, read_status
from sixblanks.harness.orchestration.orchestrator import Orchestrator, build_specs
from sixblanks.harness.orchestration.plan import Plan, prepare_experiment

from .test_orchestrator import _cfg


def _tiny():
    # TINY's warm start (shared with test_orchestrator through the machine cache), two short runs
    return _cfg(seeds=[0, 1], arms={"grpo": {"preset": "grpo"}}, budget={"launched_tokens": 300})


def test_the_plan_names_the_runs_the_experiment_runs_and_its_warm_dir_holds_the_policy(tmp_path):
    from sixblanks.harness.fairness.identity import tokenizer_identity
    from sixblanks.harness.models import load_pretrained, state_hash
    from sixblanks.harness.orchestration.warmstart import warm_start_key
    from sixblanks.harness.tasks import make_task

    cfg, out = _tiny(), tmp_path / "exp"
    plan = prepare_experiment(cfg, out)
    assert isinstance(plan, Plan) and isinstance(plan.specs, tuple)
    key = warm_start_key(cfg, [make_task(t.name, t.params) for t in cfg.tasks])
    assert plan.warm_key == key and plan.warm_dir == out / "warm_start" / key
    assert [s.run_id for s in plan.specs] == [s.run_id for s in build_specs(cfg, key)]
    assert [(s.arm, s.seed) for s in plan.specs] == [("grpo", 0), ("grpo", 1)]
    # the directory holds the policy the info describes, and its tokenizer's identity
    model, tok = load_pretrained(plan.warm_dir, cfg.model.device, cfg.model.dtype)
    assert state_hash(model) == plan.warm_info["policy_hash"]
    identity = tokenizer_identity(tok)
    assert plan.warm_info["tokenizer"] == identity
    assert read_json(plan.warm_dir / TOKENIZER_IDENTITY_JSON) == identity

    result = Orchestrator(cfg, out, progress=False).run(track=False)
    ids = [s.run_id for s in plan.specs]
    assert read_json(out / "experiment.json")["runs"] == ids
    assert [r["run_id"] for r in result["summary"]] == ids and not result["failures"]
    assert all(read_status(out / "runs" / i)["state"] == "finished" for i in ids)


def test_a_second_preparation_finds_the_warm_start_cached_and_plans_the_same(tmp_path):
    cfg, out = _tiny(), tmp_path / "exp"
    heard: list[str] = []
    first = prepare_experiment(cfg, out, log=heard.append)
    # trained here, or copied from the machine cache where another test trained it
    assert heard and all(line.startswith("warm start: ") for line in heard)
    heard.clear()
    second = prepare_experiment(cfg, out, log=heard.append)
    assert heard == []  # found in the output directory: neither trained nor copied again
    assert second.warm_info["cached"] is True
    assert second == dataclasses.replace(first, warm_info={**first.warm_info, "cached": True})
    assert prepare_experiment(cfg, out) == second
    # an orchestrator given the plan runs it as it is
    assert Orchestrator(cfg, out, progress=False, plan=second).prepare() is second
