"""`sixblanks findings` end to end on one tiny claim (a planted reward fault), its refusals, and its
report in a real browser."""

from __future__ import annotations

import json
from dataclasses import replace

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
  alpha: 0.2
  symmetric: true
  seeds: {pilot: 5, batch: 1, cap: 6}
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


def test_the_five_verdicts_of_a_directional_claim():
    """Each case of a directional claim with smallest effect 0.05, built from an interval, and
    mirrored for a claim of 'smaller'; each verdict comes with its rule in words."""

    cases = {
        (0.06, 0.2): "reproduced",  # excludes 0 on the claimed side, delta inside
        (0.01, 0.3): "reproduced",
        (0.01, 0.04): "present but smaller than claimed",  # between 0 and delta
        (-0.02, 0.03): "not reproduced at delta",  # excludes delta, not 0
        (-0.3, -0.01): "contradicted",  # wholly below 0
        (-0.02, 0.08): "inconclusive",  # contains 0 and delta
    }
    for (low, high), want in cases.items():
        verdict, rule = claim_verdict("larger", low, high, 0.05)
        assert verdict == want, (low, high)
        assert rule and "interval" in rule
        assert claim_verdict("smaller", -high, -low, 0.05)[0] == want
    # an interval touching 0 does not exclude it
    assert claim_verdict("larger", 0.0, 0.2, 0.05)[0] == "inconclusive"
    # equivalence and no-worse claims keep their interval-against-margin rules
    assert claim_verdict("equal", 0.01, 0.04, 0.05)[0] == "reproduced"
    assert claim_verdict("equal", 0.06, 0.2, 0.05)[0] == "contradicted"
    assert claim_verdict("equal", -0.1, 0.1, 0.05)[0] == "inconclusive"
    assert claim_verdict("not_smaller", -0.04, 0.2, 0.05)[0] == "reproduced"
    assert claim_verdict("not_smaller", -0.3, -0.06, 0.05)[0] == "contradicted"
    assert claim_verdict("not_smaller", -0.2, 0.1, 0.05)[0] == "inconclusive"
    # calibration: no winner declared between identical arms
    assert claim_verdict("no_difference", -0.1, 0.1, 0.05)[0] == "reproduced"
    assert claim_verdict("no_difference", -0.1, -0.02, 0.05)[0] == "contradicted"


def test_family_adjustments_by_hand():
    from sixblanks.harness.studies.findings import adjusted_p

    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005 x4, 0.01 x3, 0.03 x2, 0.04 x1, each at least the one before
    assert adjusted_p(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Benjamini-Hochberg: m p / rank, each at most the one after
    assert adjusted_p(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjusted_p([0.6, 0.9], "holm") == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="valid: holm, bh"):
        adjusted_p(p, "bonferoni")


def test_a_changed_criterion_is_refused_unless_amended(write_yaml):
    """The criterion recorded at the first launch fixes it: a later change of expect is refused,
    naming the change; with an amendment (the field as it was, a reason) it runs, and the versions
    go from the original to the current."""

    from sixblanks.harness.config.finding_file import criterion_hash, load_finding
    from sixblanks.harness.errors import ConfigError
    from sixblanks.harness.studies.findings import check_criterion

    f = load_finding(write_yaml(TINY, "c.yaml"))
    first = {"hash": criterion_hash(f.finding.criterion()), "criterion": f.finding.criterion()}
    check_criterion(f, first, "first launch")
    changed = load_finding(
        write_yaml(TINY.replace("expect: smaller", "expect: not_smaller"), "c.yaml")
    )
    with pytest.raises(ConfigError, match="expect: 'smaller' -> 'not_smaller'.*amendments"):
        check_criterion(changed, first, "first launch")
    amended = TINY.replace(
        "expect: smaller",
        "expect: not_smaller\n  amendments:\n    - was: {expect: smaller, seeds: {cap: 6}}\n"
        "      reason: the fault may only cost a little at this budget",
    )
    f2 = load_finding(write_yaml(amended, "c.yaml"))
    check_criterion(f2, first, "first launch")
    original, now = f2.finding.criterion_versions()
    assert original == f.finding.criterion() and now["expect"] == "not_smaller"
    bad = amended.replace("was: {expect: smaller", "was: {expected: smaller")
    with pytest.raises(ConfigError, match="not criterion fields: expected"):
        load_finding(write_yaml(bad, "c.yaml"))


@pytest.mark.slow
def test_a_tiny_claim_end_to_end(cli, write_yaml, tmp_path, monkeypatch):
    from sixblanks.harness.orchestration import command

    built = []
    build = command.build_report_checked
    monkeypatch.setattr(
        command, "build_report_checked", lambda d, *a, **k: built.append(d) or build(d, *a, **k)
    )
    path = write_yaml(TINY, "tiny_fault.yaml")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- findings:start -->\nold\n<!-- findings:end -->\nafter\n")
    out, kept = tmp_path / "findings", tmp_path / "results"
    code, stdout, err = cli(
        "findings", path, "--out", str(out), "--summaries", str(kept), "--readme", str(readme)
    )
    assert code == 0, err
    record = json.loads((out / "tiny_fault" / "verdict.json").read_text())
    (axis,) = record["axes"]
    # every look ran the seeds it reserved, and the claim's ledger holds what the runs consumed
    assert [look["seeds"] for look in axis["looks"]] == [5, 6][: len(axis["looks"])]
    n = axis["seeds"]
    assert all(len(v) == n for v in axis["per_seed"].values())
    assert axis["limit"] == {"launched_tokens": 480 * 2 * 6}
    assert 0 < axis["spent"]["launched_tokens"] <= 480 * 2 * n
    from sixblanks.reports.data import connect

    con = connect(out / "tiny_fault" / "budget")
    runs = con.execute(
        "SELECT count(*), sum(b.consumed) FROM runs r JOIN budgets b USING (run_id) "
        "WHERE b.counter = 'launched_tokens'"
    ).fetchone()
    con.close()
    assert runs == (2 * n, axis["spent"]["launched_tokens"])
    # the experiment's report is built once, after the last look, and holds every look's runs
    experiment = out / "tiny_fault" / "budget"
    assert built == [experiment]
    with open(experiment / "report" / "scores.csv") as fh:
        assert sorted(fh.readline().split(",")[:5]) == ["arm", "preset", "run_id", "seed", "task"]
        assert sorted(int(line.split(",")[4]) for line in fh) == sorted(2 * list(range(n)))
    # the decision's interval is the exact sign-flip test's, recomputed here by brute force over
    # every sign pattern of the per-seed differences: a shift is inside the interval where the
    # look's p-value of the shifted differences exceeds the look's level
    d = np.subtract(axis["per_seed"]["shuffled"], axis["per_seed"]["plain"])
    e = axis["interval"]
    assert e["mean"] == pytest.approx(d.mean())
    # the estimate is the median-unbiased one at the stopping look, from the same differences
    from sixblanks.reports import sequential

    design = sequential.Design(**{k: v for k, v in axis["design"].items() if k != "looks"})
    design = replace(design, spend=tuple(design.spend))
    k = len(axis["looks"]) - 1
    assert e["estimate"] == pytest.approx(sequential.median_unbiased(design, k, d, record["alpha"]))
    look_level = axis["design"]["spend"][len(axis["looks"]) - 1] * record["alpha"] / 0.2
    for shift, inside in ((e["low"] - 1e-6, False), (e["high"] + 1e-6, False), (d.mean(), True)):
        assert (_brute_p(d - shift) > look_level) == inside, shift
    assert axis["verdict"] == claim_verdict("smaller", e["low"], e["high"], 0.05)[0]
    # a family of one: the adjusted verdict is the verdict alone
    assert axis["family"]["size"] == 1 and axis["family"]["verdict"] == axis["verdict"]
    # the warm start's score and each arm's end, from the store's step-0 and last evaluations
    start = axis["start"]["arms"]
    assert set(start) == {"shuffled", "plain"}
    assert all(0 <= v["start"] <= 1 and 0 <= v["end"] <= 1 for v in start.values())
    assert start["shuffled"]["start"] == start["plain"]["start"]  # one warm start
    # the audit's flags ride along: the planted fault is the difference the claim is about
    assert any(a.startswith("shuffled: fault:") for a in axis["audit"])
    assert "tiny_fault" in stdout and "report:" in stdout
    # the committed summary, and README's table made from it
    kept_record = json.loads((kept / "tiny_fault.json").read_text())
    assert kept_record["criterion_hash"] == record["criterion_hash"] and kept_record["commit"]
    text = readme.read_text()
    from sixblanks.reports.findings import load_summaries, table_markdown

    assert "old" not in text and text.endswith("after\n")
    assert table_markdown(load_summaries(kept)) in text
    md = (out / "findings.md").read_text()
    assert "tiny_fault" in md and axis["verdict"] in md
    # again: everything finished, nothing runs twice, the same verdict
    before = sorted(p.name for p in (out / "tiny_fault" / "budget" / "runs").iterdir())
    code, _, err = cli("findings", path, "--out", str(out), "--summaries", str(kept))
    assert code == 0, err
    assert sorted(p.name for p in (out / "tiny_fault" / "budget" / "runs").iterdir()) == before
    again = json.loads((out / "tiny_fault" / "verdict.json").read_text())
    assert again["axes"][0]["interval"] == axis["interval"]
    # the criterion changed after the data: refused, naming the change; amended: it runs, and the
    # report shows the verdict under the original criterion too
    changed = TINY.replace("expect: smaller", "expect: not_smaller")
    code, _, err = cli("findings", write_yaml(changed, "tiny_fault.yaml"), "--out", str(out))
    assert code == 2 and "expect: 'smaller' -> 'not_smaller'" in err
    amended = changed.replace(
        "  alpha: 0.2",
        "  alpha: 0.2\n  amendments:\n    - was: {expect: smaller}\n"
        "      reason: a test of the amendment record",
    )
    code, _, err = cli("findings", write_yaml(amended, "tiny_fault.yaml"), "--out", str(out))
    assert code == 0, err
    third = json.loads((out / "tiny_fault" / "verdict.json").read_text())
    (under,) = third["axes"][0]["under_amendments"]
    assert under["expect"] == "smaller" and under["verdict"] == axis["verdict"]
    assert "a test of the amendment record" in (out / "findings.md").read_text()
    _renders(out / "index.html", tmp_path)


def _brute_p(d: np.ndarray) -> float:
    """The two-sided sign-flip p-value of the mean of ``d`` by enumeration (itertools)."""

    import itertools

    stat = abs(d.mean())
    flips = [abs(np.mean(d * np.array(s))) for s in itertools.product((1, -1), repeat=len(d))]
    return float(np.mean([f >= stat - 1e-12 for f in flips]))


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
        "  seeds: {pilot: 5, batch: 1, cap: 6}",
        "  seeds: {pilot: 5, batch: 1, cap: 6}\n"
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
    from sixblanks.harness.config.finding_file import load_finding
    from sixblanks.harness.orchestration.command import as_config
    from sixblanks.harness.studies.findings import (
        checked_finding,
        experiment_mapping,
        undeclared_differences,
    )

    from .conftest import ROOT

    files = sorted((ROOT / "experiments" / "findings").glob("*.yaml"))
    assert len(files) >= 8
    for p in files:
        checked_finding(p)  # what validate checks: the seed plan, the criterion, the arms
        f = load_finding(p)
        m = f.finding
        cfg = as_config(experiment_mapping(f, "check", f.experiment["budget"], 2))
        assert undeclared_differences(cfg, m.arm, m.than, m.about) == [], p.name
