"""Policies out: a finished run saves its final policy as a model directory transformers loads,
with its tokenizer and a model card; `sixblanks eval` scores it (or any model directory) on any
task through the runs' own evaluation; `model.path` continues from a run."""

from __future__ import annotations

import json

import pytest

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.errors import ConfigError

EXPERIMENT = {
    "name": "policy-out",
    "task": {"name": "arithmetic", "eval_size": 8},
    "rollout": {"max_new_tokens": 4, "prompts_per_step": 2, "group_size": 2},
    "warm_start": {"steps": 20, "num_demos": 200},
    "budget": {"launched_tokens": 48},
    "arms": {"dapo": {"preset": "dapo"}},
}


def test_a_finished_runs_policy_loads_scores_as_its_run_did_and_continues(
    run_experiment, cli, tmp_path
):
    """The run's policy/ loads with AutoModelForCausalLM and AutoTokenizer; its card names the
    run, the arm's blanks and the budget; `sixblanks eval RUN` on the run's own task and split
    gives the run's own final score (the same greedy evaluation: so the saved weights are the
    final ones), its cost reported; a data file is a task too; `model.path: RUN` loads the same
    weights."""

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sixblanks.harness import checkpoint
    from sixblanks.harness.models import load_policy, state_hash

    out = run_experiment(EXPERIMENT, "--no-progress")
    (run,) = list((out / "runs").iterdir())
    result = json.loads((run / "result.json").read_text())
    policy = run / "policy"
    model = AutoModelForCausalLM.from_pretrained(policy)
    tok = AutoTokenizer.from_pretrained(policy)
    assert tok("1+2=")["input_ids"] and isinstance(model, torch.nn.Module)
    # the final weights: the run's last checkpoint holds the same tensors, and they moved from the
    # warm start the run began with
    final = checkpoint.load(run / "checkpoint")["model"]
    saved = model.state_dict()
    assert set(final) == set(saved) and all(torch.equal(saved[k], v) for k, v in final.items())
    (warm,) = list((out / "warm_start").iterdir())
    start = AutoModelForCausalLM.from_pretrained(warm).state_dict()
    assert any(not torch.equal(start[k], v) for k, v in final.items())
    card = (policy / "README.md").read_text()
    assert f"sixblanks run `{run.name}`" in card and "arm `dapo` (preset `dapo`)" in card
    assert "clip_higher" in card or "eps_high" in card  # the arm's weight blank, as YAML
    assert '"launched_tokens": 48' in card

    code, stdout, err = cli("eval", str(run), "--n", "8", "--json")
    assert code == 0, err
    ev = json.loads(stdout)
    assert ev["score"] == pytest.approx(result["final_score"])
    assert ev["n"] == 8 and ev["verifier_calls"] == 8 and ev["split"] == "test"
    code, stdout, _ = cli("eval", str(run), "--n", "8")
    assert "verifier calls" in stdout and "generated tokens" in stdout

    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(5) for b in range(5)]
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, stdout, err = cli("eval", str(policy), "--task", str(data), "--json")
    assert code == 0, err
    ev = json.loads(stdout)
    assert ev["task"] == "dataset" and ev["n"] == 5  # the test split: a fifth of 25 rows

    cfg = validate_mapping({**EXPERIMENT, "model": {"path": str(run)}})
    continued, _ = load_policy(cfg.model)
    assert state_hash(continued) == state_hash(model)


def test_a_run_without_a_policy_or_a_directory_that_is_neither_is_named(tmp_path, cli):
    unfinished = tmp_path / "run"
    unfinished.mkdir()
    (unfinished / "spec.json").write_text("{}")
    (unfinished / "status.json").write_text(json.dumps({"state": "interrupted"}))
    with pytest.raises(ConfigError, match="model.path: .* run directory without a saved policy"):
        validate_mapping({**EXPERIMENT, "model": {"path": str(unfinished)}})
    code, _, err = cli("eval", str(tmp_path), "--task", "arithmetic")
    assert code == 2 and "neither a run directory (spec.json) nor a model directory" in err
    code, _, err = cli("eval", str(unfinished))
    assert code == 2 and "(its state: interrupted;" in err
