"""The ablation ladder stops at the rung that explains a planted fault, with evidence naming it."""

import json

import pytest
import torch

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.ladder import Ladder, first_failure, paired_diff_ci

BASE = {
    "name": "ladder",
    "task": {"name": "arithmetic", "eval_size": 64},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
    "warm_start": {"steps": 150, "num_demos": 1000},
    "budget": {"launched_tokens": 20000},
    "seeds": [0],
    "arms": {"grpo": {"preset": "grpo"}},
    "ladder": {
        "budget": {"launched_tokens": 2500},
        "advantage_variants": ["group_norm", "loo"],
        "normalization_variants": ["seq-mean-token-mean", "token-mean"],
        "lr_factors": [1.0],
        "clip_variants": [],
        "kl_variants": [],
    },
    "tracking": {"mlflow": False},
}


def _cfg(**over):
    data = json.loads(json.dumps(BASE))
    for k, v in over.items():
        data[k] = v if not isinstance(v, dict) or k not in data else {**data[k], **v}
    return validate_mapping(data)


def test_paired_difference_interval_by_hand():
    d, lo, hi = paired_diff_ci([1, 1, 1, 1], [0, 0, 0, 0])
    assert (d, lo, hi) == (1.0, 1.0, 1.0)
    d, lo, hi = paired_diff_ci([1, 0, 1, 0], [0, 1, 0, 1])
    assert d == 0.0 and lo < 0 < hi


def test_shifted_mask_stops_at_the_contract_rung(tmp_path, monkeypatch):
    import sixblanks.harness.contract as contract

    real = contract.run_episodes

    def shifted(*args, **kwargs):
        batch = real(*args, **kwargs)
        batch.action_mask = torch.cat([batch.action_mask[:, 1:], torch.zeros(batch.size, 1)], 1)
        return batch

    monkeypatch.setattr(contract, "run_episodes", shifted)
    results = Ladder(_cfg(), tmp_path).run()
    fail = first_failure(results)
    assert fail.rung == 1 and [r.rung for r in results] == [1]
    assert "masks: sample 0, token" in fail.evidence and "action_mask is 1" in fail.evidence


def test_drifting_environment_stops_at_the_no_update_rung(tmp_path):
    cfg = _cfg(task={"name": "tests.drift_task:DriftingArithmetic", "eval_size": 64})
    results = Ladder(cfg, tmp_path).run()
    fail = first_failure(results)
    assert fail.rung == 3 and [r.status for r in results] == ["pass", "pass", "fail"]
    assert "environment drift" in fail.evidence
    assert [r.detail["engine"] for r in results] == ["HFEngine"] * 3  # rollout.backend: hf


@pytest.mark.slow
def test_learning_rate_far_too_high_stops_at_rung_7_and_default_arm_passes(
    tmp_path, cli, write_yaml
):
    import yaml

    bad = _cfg(
        arms={"grpo": {"preset": "grpo", "optimizer": {"lr": 3.0}}},
        ladder={"lr_factors": [1e-4, 1.0]},
    )
    results = Ladder(bad, tmp_path / "bad").run()
    fail = first_failure(results)
    assert fail is not None and fail.rung == 7, [
        (r.rung, r.variant, r.status, r.evidence) for r in results
    ]
    assert "lr=3 (nominal)" in fail.variant and (
        "lr=0.0003" in fail.evidence or "diverged" in fail.evidence
    )
    assert all(r.status != "fail" for r in results if r.rung < 7)

    # the default arm passes every rung it can run (asynchrony is not built: inconclusive)
    path = write_yaml(yaml.safe_dump(json.loads(json.dumps(BASE))))
    code, out, err = cli("ladder", path, "--out", str(tmp_path / "good"), "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [
        r["rung"]
        for r in rows
        if r["variant"].endswith("(nominal)") or r["rung"] in (1, 2, 3, 4, 9)
    ]
    assert not [r for r in rows if r["status"] == "fail"]
    assert {r["rung"] for r in rows} == set(range(1, 10))
    assert next(r for r in rows if r["rung"] == 9)["status"] == "inconclusive"
    assert {r["detail"]["engine"] for r in rows if r["rung"] <= 8} == {"HFEngine"}
    import duckdb

    con = duckdb.connect(str(tmp_path / "good" / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(DISTINCT rung) FROM ladder").fetchone()[0] == 9
    con.close()
    # the report renders the ladder table
    from sixblanks.harness.orchestrator import Orchestrator
    from sixblanks.reports.build import build_report

    Orchestrator(
        validate_mapping(json.loads(json.dumps(BASE)) | {"budget": {"launched_tokens": 600}}),
        tmp_path / "good",
        progress=False,
    ).ingest()
    html = build_report(tmp_path / "good", resamples=200).read_text()
    assert "Ablation ladder" in html and "asynchrony" in html


@pytest.mark.vllm
@pytest.mark.slow
def test_ladder_of_a_vllm_arm_samples_with_vllm(tmp_path):
    """The ladder builds its engines as runs do: rollout.backend vllm means vLLM in every rung
    (contract, frozen batch, repeated evaluation, and the short training run of rung 4)."""

    from sixblanks.harness.store import connect

    cfg = _cfg(
        task={"name": "arithmetic", "eval_size": 8},
        rollout={"backend": "vllm"},
        warm_start={"steps": 40, "num_demos": 300},
        ladder={"budget": {"launched_tokens": 150}},
    )
    results = Ladder(cfg, tmp_path).run(until=4)
    assert [r.rung for r in results] == [1, 2, 3, 4], [(r.rung, r.evidence) for r in results]
    assert [r.status for r in results][:3] == ["pass"] * 3, [r.evidence for r in results]
    assert [r.detail["engine"] for r in results] == ["VLLMEngine"] * 4
    con = connect(tmp_path, read_only=True)
    stored = [json.loads(d)["engine"] for (d,) in con.sql("SELECT detail FROM ladder").fetchall()]
    con.close()
    assert stored == ["VLLMEngine"] * 4
