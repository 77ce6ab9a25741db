"""Start evaluations shared by runs with equal evaluation inputs
(``executor.share_start_evaluations``): the key says which runs may share, and an experiment that
shares gives every run the same evaluations, losses and scores as one that does not, while the
reused evaluations spend nothing."""

import json
import os
from pathlib import Path

from sixblanks.harness.training.start_eval import StartEvaluations, start_key

SPEC = {
    "experiment": "e",
    "arm": "a",
    "preset": "grpo",
    "seed": 0,
    "task": {"name": "arithmetic", "params": {"digits": 1}},
    "blanks": {"loss": {"agg": "token_mean"}},
    "optimizer": {"lr": 1e-3},
    "rollout": {"max_new_tokens": 4},
    "budget": {"launched_tokens": 100},
    "eval": {"size": 16, "temperature": 1.0},
    "model": {"device": "cpu"},
    "warm_start_key": "w",
    "code_version": "c",
}


def test_the_key_ignores_what_acts_only_in_training_and_counts_everything_else():
    base = start_key(SPEC, threads=1)
    training_only = {
        "experiment": "other",
        "arm": "b",
        "preset": "dr_grpo",
        "blanks": {"loss": {"agg": "seq_mean_token_sum"}},
        "optimizer": {"lr": 1e-5},
        "budget": {"launched_tokens": 999},
        "run_id": "x",
    }
    for k, v in training_only.items():
        assert start_key({**SPEC, k: v}, threads=1) == base, k
    inputs = {
        "seed": 1,
        "task": {"name": "arithmetic", "params": {"digits": 2}},
        "rollout": {"max_new_tokens": 5},
        "eval": {"size": 16, "temperature": 0.0},
        "model": {"device": "cpu", "dtype": "bfloat16"},
        "warm_start_key": "w2",
        "code_version": "c2",
        "seed_offset": 3,
        "fault": {"rewards": "shuffle"},
        "a_key_of_another_version": 1,  # unknown: counted in
    }
    for k, v in inputs.items():
        assert start_key({**SPEC, k: v}, threads=1) != base, k
    assert start_key(SPEC, threads=2) != base
    # what is never shared
    assert start_key({**SPEC, "tools": {"sandbox": "x"}}, threads=1) is None
    assert start_key({**SPEC, "task": {**SPEC["task"], "judge": {"x": 1}}}, threads=1) is None
    assert start_key({**SPEC, "eval": {"beam": {"beam": 2}}}, threads=1) is None
    parallel = {"device": "cpu", "parallel": {"world_size": 2}}
    assert start_key({**SPEC, "model": parallel}, threads=1) is None


def test_the_store_round_trips_an_evaluation_exactly(tmp_path):
    store = StartEvaluations(tmp_path / "s")
    assert store.load("k") is None
    ev = {"score": 0.1 + 0.2, "per_instance": [1 / 3, 0.0], "pass_at": {"1": 2 / 7}, "n": 2}
    store.save("k", ev, {"generated_tokens": 7.0, "wall_seconds": 0.25})
    got, cost = store.load("k")
    assert got == ev and cost == {"generated_tokens": 7.0, "wall_seconds": 0.25}
    assert [p.name for p in (tmp_path / "s").iterdir()] == ["k.json"]  # no temporary left


TINY = {
    "name": "start-eval-sharing",
    "model": {
        "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
    },
    "task": {"name": "arithmetic", "params": {"digits": 1, "operators": "+", "operands": 2}},
    "rollout": {"max_new_tokens": 3, "group_size": 4, "prompts_per_step": 4},
    "warm_start": {"steps": 150, "num_demos": 1000},
    "budget": {"launched_tokens": 240},
    # sampled at temperature 1, two samples a problem: a reused evaluation must hold the same
    # draws, and training after it the same random state
    "eval": {"size": 16, "every": 240, "temperature": 1.0, "samples": 2},
    "arms": {
        "grpo": {"preset": "grpo"},
        "dr_grpo": {"preset": "dr_grpo"},
    },
    "seeds": [0, 1],
    "tracking": {"mlflow": False},
}


def _results(out: Path) -> dict[tuple[str, int], dict]:
    res = {}
    for d in (out / "runs").iterdir():
        r = json.loads((d / "result.json").read_text())
        events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
        r["losses"] = [e["loss"] for e in events if e.get("type") == "step" and "loss" in e]
        r["eval_events"] = [e for e in events if e.get("type") == "eval"]
        for e in r["eval_events"]:  # the ledger's position at it, less the times measured
            e["counted"] = {k: v for k, v in e["position"].items() if not k.endswith("seconds")}
        res[(r["arm"], r["seed"])] = r
    return res


def test_an_experiment_sharing_start_evaluations_trains_the_same_runs(cli, write_yaml, tmp_path):
    outs = {}
    for share in (False, True):
        cfg = {**TINY, "executor": {"workers": 1, "share_start_evaluations": share}}
        outs[share] = tmp_path / f"share-{share}"
        code, _, err = cli("run", write_yaml(json.dumps(cfg)), "--out", str(outs[share]))
        assert code == 0, err
    plain, shared = _results(outs[False]), _results(outs[True])
    assert plain.keys() == shared.keys() and len(plain) == 4
    starts = [p["eval_events"][0]["per_instance"] for p in plain.values()]
    assert 0 < sum(map(sum, starts)) < sum(map(len, starts))  # draws that can differ
    same = ("score", "per_instance", "pass_at", "n", "step", "counted")
    for run, p in plain.items():
        s = shared[run]
        assert [[e[k] for k in same] for e in s["eval_events"]] == [
            [e[k] for k in same] for e in p["eval_events"]
        ]
        assert s["losses"] == p["losses"] and p["losses"]  # training saw the same random state
        assert s["counters"]["launched_tokens"] == p["counters"]["launched_tokens"]
        assert all("reused" not in e for e in p["evals"])
        assert all("reused" not in e for e in s["evals"][1:])  # only the start is shared
    # with one worker the first planned run of each seed computes it, the other reads it: that
    # one spent nothing, and its record keeps what the evaluation cost where it was computed
    for seed in (0, 1):
        first, second = shared[("grpo", seed)], shared[("dr_grpo", seed)]
        if "reused" in first["evals"][0]:  # the runs' order is the plan's
            first, second = second, first
        assert "reused" not in first["evals"][0] and "reused" in second["evals"][0]
        reused = second["eval_events"][0]
        assert "generated_tokens" not in reused["cost"]
        computed = first["eval_events"][0]["cost"]
        assert reused["reused"] == second["evals"][0]["reused"] == computed
        assert computed["generated_tokens"] > 0
        end = second["eval_events"][-1]["cost"]["generated_tokens"]
        assert second["eval_cost"]["generated_tokens"] == end  # the start's tokens not counted
        assert (
            first["eval_cost"]["generated_tokens"]
            == computed["generated_tokens"] + (first["eval_events"][-1]["cost"]["generated_tokens"])
        )
    # the store: a link into the machine's warm-start cache, one evaluation a seed
    (warm,) = [d for d in (outs[True] / "warm_start").iterdir() if d.is_dir()]
    link = warm / "start_evaluations"
    assert link.is_symlink()
    assert Path(os.environ["SIXBLANKS_CACHE"]) in link.resolve().parents
    assert len(list(link.glob("*.json"))) == 2
    # an experiment that does not share has no store in its warm-start directory
    (warm,) = [d for d in (outs[False] / "warm_start").iterdir() if d.is_dir()]
    assert not (warm / "start_evaluations").exists()
