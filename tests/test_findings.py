"""`sixblanks findings` end to end on one tiny claim (a planted reward fault), its refusals, and its
report in a real browser."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sixblanks.harness.studies.findings import aggregate, claim_verdict

from .conftest import screenshot

TINY = """
finding:
  claim: A planted fault (rewards shuffled within each training batch) loses to true rewards.
  source: calibration (tiny)
  about: [fault]
  arm: shuffled
  than: plain
  metric: final_score
  expect: smaller
  smallest_effect: 0.05
  seeds: {pilot: 2, batch: 1, cap: 3}
model: {tiny: {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64}}
task: {name: arithmetic, params: {digits: 1, operators: "+", operands: 2}}
rollout: {max_new_tokens: 3, group_size: 4, prompts_per_step: 4}
warm_start: {steps: 20, num_demos: 200}
budget: {launched_tokens: 480}
eval: {size: 16, every: 240}
tracking: {mlflow: false}
arms:
  plain: {preset: grpo}
  shuffled: {preset: grpo, fault: {rewards: shuffle}}
"""


def test_aggregate_by_hand():
    assert aggregate([1.0, 2.0, 6.0], [0, 0, 0], "mean") == 3.0
    assert aggregate([1.0, 2.0, 6.0], [0, 0, 0], "last") == 6.0
    # value = 1 + 0.5 * (tokens / 1000): slope 0.5 per 1000 launched tokens
    assert aggregate([1.0, 1.5, 2.0], [0, 1000, 2000], "slope") == pytest.approx(0.5)
    assert np.isnan(aggregate([1.0], [0], "slope"))


def test_verdicts_by_hand():
    # directional claims follow the sequential test's decision
    assert claim_verdict("larger", "larger", 0.1, 0.3, 0.05) == "reproduced"
    assert claim_verdict("larger", "smaller", -0.3, -0.1, 0.05) == "contradicted"
    assert claim_verdict("larger", "no difference", -0.1, 0.3, 0.05) == "inconclusive"
    # equivalence: the interval against +-delta, separated or not
    assert claim_verdict("equal", "larger", 0.01, 0.04, 0.05) == "reproduced"
    assert claim_verdict("equal", "no difference", -0.02, 0.03, 0.05) == "reproduced"
    assert claim_verdict("equal", "larger", 0.06, 0.2, 0.05) == "contradicted"
    assert claim_verdict("equal", "no difference", -0.1, 0.1, 0.05) == "inconclusive"
    # calibration: no winner declared between identical arms, however wide the interval
    assert claim_verdict("no_difference", "no difference", -0.1, 0.1, 0.05) == "reproduced"
    assert claim_verdict("no_difference", "smaller", -0.1, -0.02, 0.05) == "contradicted"
    # no worse: above -delta
    assert claim_verdict("not_smaller", "larger", 0.1, 0.3, 0.05) == "reproduced"
    assert claim_verdict("not_smaller", "no difference", -0.04, 0.2, 0.05) == "reproduced"
    assert claim_verdict("not_smaller", "smaller", -0.3, -0.06, 0.05) == "contradicted"
    assert claim_verdict("not_smaller", "no difference", -0.2, 0.1, 0.05) == "inconclusive"


@pytest.mark.slow
def test_a_tiny_claim_end_to_end(cli, write_yaml, tmp_path):
    path = write_yaml(TINY, "tiny_fault.yaml")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- findings:start -->\nold\n<!-- findings:end -->\nafter\n")
    out = tmp_path / "findings"
    code, stdout, err = cli("findings", path, "--out", str(out), "--readme", str(readme))
    assert code == 0, err
    record = json.loads((out / "tiny_fault" / "verdict.json").read_text())
    (axis,) = record["axes"]
    assert axis["verdict"] in ("reproduced", "contradicted", "inconclusive")
    # every look ran the seeds it reserved, and the claim's ledger holds what the runs consumed
    assert [look["seeds"] for look in axis["looks"]] == [2, 3][: len(axis["looks"])]
    n = axis["seeds"]
    assert all(len(v) == n for v in axis["per_seed"].values())
    assert axis["limit"] == {"launched_tokens": 480 * 2 * 3}
    assert 0 < axis["spent"]["launched_tokens"] <= 480 * 2 * n
    from sixblanks.reports.data import connect

    con = connect(out / "tiny_fault" / "budget")
    runs = con.execute(
        "SELECT count(*), sum(b.consumed) FROM runs r JOIN budgets b USING (run_id) "
        "WHERE b.counter = 'launched_tokens'"
    ).fetchone()
    con.close()
    assert runs == (2 * n, axis["spent"]["launched_tokens"])
    # the per-seed values are the runs' mean final outcomes; the effect is their paired difference
    diff = np.mean(axis["per_seed"]["shuffled"]) - np.mean(axis["per_seed"]["plain"])
    assert axis["effect"]["diff"] == pytest.approx(diff)
    assert axis["effect"]["low"] <= axis["effect"]["diff"] <= axis["effect"]["high"]
    # the smallest detectable effect: 0 only where every paired difference is 0
    assert axis["effect"]["mde"] >= 0
    assert (axis["effect"]["mde"] == 0) == (axis["effect"]["se"] == 0)
    # the audit's flags ride along: the planted fault is the difference the claim is about
    assert any(a.startswith("shuffled: fault:") for a in axis["audit"])
    assert "tiny_fault" in stdout and "report:" in stdout
    text = readme.read_text()
    assert "old" not in text and f"**{axis['verdict']}**" in text and text.endswith("after\n")
    md = (out / "findings.md").read_text()
    assert "tiny_fault" in md and axis["verdict"] in md
    # again: everything finished, nothing runs twice, the same verdict
    before = sorted(p.name for p in (out / "tiny_fault" / "budget" / "runs").iterdir())
    code, _, err = cli("findings", path, "--out", str(out))
    assert code == 0, err
    assert sorted(p.name for p in (out / "tiny_fault" / "budget" / "runs").iterdir()) == before
    again = json.loads((out / "tiny_fault" / "verdict.json").read_text())
    assert again["axes"][0]["effect"] == axis["effect"]
    _renders(out / "index.html", tmp_path)


def _renders(index, tmp_path):
    img = screenshot(index, tmp_path, "1200,1200")
    # text, the verdict table and the embedded figure: many colours, not a blank page
    assert len({tuple(p) for p in img[::5, ::5].reshape(-1, 3)}) > 50


def test_a_claim_whose_arms_differ_beyond_it_is_refused(cli, write_yaml, tmp_path):
    bad = TINY.replace(
        "shuffled: {preset: grpo, fault: {rewards: shuffle}}",
        "shuffled: {preset: grpo, fault: {rewards: shuffle}, optimizer: {lr: 0.001}}",
    )
    code, _, err = cli("findings", write_yaml(bad, "bad.yaml"), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "differ beyond what the claim is about (fault)" in err and "optimizer.lr" in err
    assert not (tmp_path / "o" / "bad").exists()


def test_finding_file_errors_are_named(cli, write_yaml, tmp_path):
    bad = TINY.replace("than: plain", "than: plian").replace("expect: smaller", "expect: lower")
    code, _, err = cli("findings", write_yaml(bad, "bad.yaml"), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "finding.than: unknown arm 'plian'" in err
    assert "finding.expect" in err
    code, _, err = cli("findings", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "o"))
    assert code == 2 and "no such finding file" in err


def test_validate_checks_a_finding_file_before_anything_runs(cli, write_yaml):
    """validate takes a finding file (its claim printed), and refuses, naming each: a misspelt
    counter in a later budget axis, a seed offset between the arms below the seed cap (the arms
    would share runs), arms that differ beyond the claim. An arm restating the experiment's value
    does not differ from one that inherits it."""

    code, out, err = cli("validate", write_yaml(TINY, "tiny.yaml"))
    assert code == 0, err
    assert "claim: shuffled smaller than plain on final_score (smallest effect 0.05" in out
    axes = TINY.replace(
        "  seeds: {pilot: 2, batch: 1, cap: 3}",
        "  seeds: {pilot: 2, batch: 1, cap: 3}\n"
        "  budgets: {a: {launched_tokens: 480}, b: {launched_tokns: 960}}",
    )
    code, _, err = cli("validate", write_yaml(axes, "axes.yaml"))
    assert code == 2 and "finding.budgets.b.launched_tokns: unknown counter" in err
    offset = TINY.replace("about: [fault]", "about: [fault, seed_offset]").replace(
        "fault: {rewards: shuffle}}", "fault: {rewards: shuffle}, seed_offset: 2}"
    )
    code, _, err = cli("validate", write_yaml(offset, "offset.yaml"))
    assert code == 2 and "seed_offset differs by 2 between 'shuffled' and 'plain'" in err
    restated = TINY.replace(
        "plain: {preset: grpo}", "plain: {preset: grpo, optimizer: {lr: 0.0003}}"
    ).replace(
        "budget: {launched_tokens: 480}", "budget: {launched_tokens: 480}\noptimizer: {lr: 0.0003}"
    )
    code, _, err = cli("validate", write_yaml(restated, "restated.yaml"))
    assert code == 0, err
    wider = TINY.replace("plain: {preset: grpo}", "plain: {preset: grpo, optimizer: {lr: 0.001}}")
    code, _, err = cli("validate", write_yaml(wider, "wider.yaml"))
    assert code == 2 and "optimizer.lr: 0.0003 vs 0.001" in err


def test_every_shipped_claim_is_valid_and_fair():
    from sixblanks.harness.config.claims import load_finding
    from sixblanks.harness.orchestration.experiment import as_config
    from sixblanks.harness.studies.findings import experiment_mapping, undeclared_differences

    from .conftest import ROOT

    files = sorted((ROOT / "experiments" / "findings").glob("*.yaml"))
    assert len(files) >= 8
    for p in files:
        f = load_finding(p)
        m = f.finding
        cfg = as_config(experiment_mapping(f, "check", f.experiment["budget"], m.seeds.pilot))
        assert undeclared_differences(cfg, m.arm, m.than, m.about) == [], p.name
