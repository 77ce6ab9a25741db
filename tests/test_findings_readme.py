"""README's findings table is the one made from the committed summaries
(experiments/findings/results), and no committed verdict contradicts its own interval and smallest
effect under the rule it states."""

import json

import pytest

from sixblanks.harness.studies.findings.verdicts import claim_verdict
from sixblanks.reports.findings import (
    README_END,
    README_START,
    audit_cell,
    load_summaries,
    table_markdown,
)

from .conftest import ROOT

RESULTS = ROOT / "experiments" / "findings" / "results"
SUMMARIES = load_summaries(RESULTS)


def test_every_claim_file_has_its_committed_summary():
    claims = {p.stem for p in (ROOT / "experiments" / "findings").glob("*.yaml")}
    assert {s["name"] for s in SUMMARIES} == claims


def test_readme_table_is_the_one_made_from_the_committed_summaries():
    text = (ROOT / "README.md").read_text()
    block = text.split(README_START, 1)[1].split(README_END, 1)[0]
    assert block.strip() == table_markdown(SUMMARIES).strip()


@pytest.mark.parametrize("summary", SUMMARIES, ids=[s["name"] for s in SUMMARIES])
def test_no_label_contradicts_its_interval_and_smallest_effect(summary):
    for ax in summary["axes"]:
        fam = ax["family"]
        expect, delta = summary["expect"], summary["smallest_effect"]
        expect = expect[ax["axis"]] if isinstance(expect, dict) else expect
        delta = delta[ax["axis"]] if isinstance(delta, dict) else delta
        verdict, rule = claim_verdict(expect, fam["low"], fam["high"], float(delta))
        assert (verdict, rule) == (fam["verdict"], fam["rule"]), (ax["axis"], fam)
        assert fam["low"] <= fam["estimate"] <= fam["high"]
        if verdict == "reproduced" and expect in ("larger", "smaller"):
            assert not fam["low"] <= 0 <= fam["high"]  # a directional "reproduced" excludes 0


def test_a_summary_edited_by_hand_no_longer_matches_the_readme(tmp_path):
    edited = json.loads(json.dumps(SUMMARIES))
    edited[0]["axes"][0]["family"]["verdict"] = "reproduced (edited)"
    assert table_markdown(edited).strip() != table_markdown(SUMMARIES).strip()


def test_consumption_flags_are_counted_per_arm_and_the_others_kept():
    flags = [
        "grpo: consumption: consumed 17812 of 20000 launched_tokens (< 90% of the matched budget)",
        "shuffled: fault: a fault is planted",
        "grpo: consumption: consumed 17961 of 20000 launched_tokens (< 90% of the matched budget)",
    ]
    assert audit_cell(flags) == (
        "grpo: consumption: 2 run(s) consumed under 90% of the matched budget (17812 to 17961 of "
        "20000 launched_tokens); shuffled: fault: a fault is planted"
    )
    assert audit_cell([]) == "none"
