"""The claim forms beyond two arms: a claim over three arms and an interaction between two budgets
run end to end in one findings command (the shipped examples, at the tiny budgets of
test_findings), their runs shared where they are the same, and validate's refusals of malformed
forms; a per-axis expectation; two-arm criteria hashed as before."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from .conftest import ROOT
from .test_findings import TINY

EXAMPLES = ROOT / "examples" / "findings"


def test_validate_accepts_the_examples_and_names_what_is_wrong(cli, write_yaml):
    for p in sorted(EXAMPLES.glob("*.yaml")):
        code, out, err = cli("validate", str(p))
        assert code == 0, err
    best = (EXAMPLES / "three_arm_best.yaml").read_text()
    assert (
        "plain best of plain, shuffled, frozen"
        in cli("validate", str(EXAMPLES / "three_arm_best.yaml"))[1]
    )
    bad = best.replace("expect: best", "expect: ordering").replace("  arm: plain\n", "")
    bad = bad.replace("arms: [plain, shuffled, frozen]", "arms: [plain, shufled, frozen]")
    code, _, err = cli("validate", write_yaml(bad, "ordering.yaml"))
    assert code == 2 and "finding.arms: unknown arm 'shufled'" in err
    code, _, err = cli("validate", write_yaml(best.replace("arm: plain", "arm: other"), "b.yaml"))
    assert code == 2 and "'other' is not one of finding.arms" in err
    grows = (EXAMPLES / "interaction_grows.yaml").read_text()
    code, _, err = cli(
        "validate", write_yaml(grows.replace("[small, large]", "[small, huge]"), "i.yaml")
    )
    assert code == 2 and "finding.between: 'huge' is not a budget axis" in err
    code, _, err = cli(
        "validate", write_yaml(grows.replace("  between: [small, large]\n", ""), "i.yaml")
    )
    assert code == 2 and "finding.between: an interaction claim (expect: grows) needs it" in err


def test_an_expectation_per_budget_axis(cli, write_yaml):
    from sixblanks.harness.config.finding_file import load_finding

    axes = TINY.replace("expect: smaller", "expect: {small: smaller, large: equal}").replace(
        "  seeds: {pilot: 5, batch: 1, cap: 6}",
        "  seeds: {pilot: 5, batch: 1, cap: 6}\n"
        "  budgets: {small: {launched_tokens: 240}, large: {launched_tokens: 480}}",
    )
    m = load_finding(write_yaml(axes, "axes.yaml")).finding
    assert (m.expect_at("small"), m.expect_at("large")) == ("smaller", "equal")
    assert m.effect_at("large") == 0.05
    code, out, err = cli("validate", write_yaml(axes, "axes.yaml"))
    assert code == 0, err
    missing = axes.replace("{small: smaller, large: equal}", "{small: smaller}")
    code, _, err = cli("validate", write_yaml(missing, "m.yaml"))
    assert (
        code == 2 and "finding.expect: one per budget axis (small, large); given for small" in err
    )


def test_a_two_arm_criterion_has_no_new_fields(write_yaml):
    """The forms' fields enter the criterion (and its hash) only where given: a two-arm claim's
    criterion holds exactly the fields it always had."""

    from sixblanks.harness.config.finding_file import CRITERION_FIELDS, load_finding

    f = load_finding(write_yaml(TINY, "c.yaml"))
    assert list(f.finding.criterion()) == list(CRITERION_FIELDS)
    g = load_finding(str(EXAMPLES / "interaction_grows.yaml"))
    assert g.finding.criterion()["between"] == ["small", "large"]


def _holm_levels(p, alpha):
    """Holm at alpha for two p-values, by hand: the smaller tested at alpha / 2, the larger at
    alpha once the smaller is rejected; a comparison's level is alpha x p / adjusted p."""

    small, large = min(p), max(p)
    adj = {small: min(1, 2 * small), large: min(1, max(2 * small, large))}
    return [min(alpha, alpha * x / adj[x]) if adj[x] > 0 else alpha for x in p]


@pytest.mark.slow
def test_a_three_arm_claim_and_an_interaction_end_to_end(cli, tmp_path):
    files = tmp_path / "claims"
    shutil.copytree(EXAMPLES, files)
    out = tmp_path / "findings"
    code, stdout, err = cli("findings", str(files), "--out", str(out))
    assert code == 0, err
    best = json.loads((out / "three_arm_best" / "verdict.json").read_text())
    inter = json.loads((out / "interaction_grows" / "verdict.json").read_text())
    # the family: two pairs of the three-arm claim and the interaction
    (ax,) = best["axes"]
    assert [c["label"] for c in ax["comparisons"]] == ["plain − shuffled", "plain − frozen"]
    assert {c["family"]["size"] for c in ax["comparisons"]} == {3}
    for c in ax["comparisons"]:
        want = np.subtract(ax["per_seed"]["plain"], ax["per_seed"][c["than"]])
        assert c["d"] == pytest.approx(want)
    levels = _holm_levels([c["p"] for c in ax["comparisons"]], best["alpha"])
    assert [c["level"] for c in ax["comparisons"]] == pytest.approx(levels)
    order = [
        "reproduced",
        "present but smaller than claimed",
        "inconclusive",
        "not reproduced at delta",
        "contradicted",
    ]
    assert ax["verdict"] == max((c["verdict"] for c in ax["comparisons"]), key=order.index)
    (ix,) = inter["axes"]
    (c,) = ix["comparisons"]
    s = ix["per_seed"]
    want = np.subtract(s["plain (large)"], s["shuffled (large)"]) - np.subtract(
        s["plain (small)"], s["shuffled (small)"]
    )
    assert c["d"] == pytest.approx(want) and c["family"]["size"] == 3
    # shared runs: the interaction's 480-token runs are the three-arm claim's plain and shuffled
    # runs; whichever ran first trained them, the other copied them (byte-identical events, which
    # two trainings would not give: their timings differ)
    runs = sorted(out.glob("*/*/runs/*/spec.json"))
    copied = [p.parent for p in runs if (p.parent / "shared.json").exists()]
    assert len(runs) == 9 + 12 and len(copied) == 6
    events = {}
    for p in runs:
        events.setdefault((p.parent / "events.jsonl").read_bytes(), []).append(p.parent)
    assert len(events) == 15  # runs trained
    assert all(len(v) == 2 for v in events.values() if any(d in copied for d in v))
    # no double counting: a copied run is in the ledger of the claim that trained it only
    taker = (
        best if (out / "three_arm_best" / "budget" / "runs" / copied[0].name).exists() else inter
    )
    assert sum(x["shared"]["runs"] for x in taker["axes"]) == 6
    from sixblanks.reports.data import connect

    con = connect(out / "three_arm_best" / "budget")
    trained = con.execute(
        "SELECT sum(b.consumed) FROM runs r JOIN budgets b USING (run_id) WHERE "
        "b.counter = 'launched_tokens' AND r.run_id NOT IN (SELECT unnest(?))",
        [[d.name for d in copied]],
    ).fetchone()[0]
    con.close()
    assert ax["spent"]["launched_tokens"] == pytest.approx(trained)
    # each claim's store marks its copies with their source, and no run trained there
    for exp in {p.parents[2] for p in runs}:
        con = connect(exp)
        marked = dict(con.execute("SELECT run_id, shared_from FROM runs").fetchall())
        con.close()
        here = [p.parent for p in runs if p.parents[2] == exp]
        assert marked == {
            d.name: json.loads((d / "shared.json").read_text())["from"] if d in copied else None
            for d in here
        }
    assert "run(s) shared" in stdout
    md = (out / "findings.md").read_text()
    assert "taken over, not trained again" in md and "Holm holds it to inside the claim" in md
    _a_sign_change_from_the_same_runs(cli, files, out, inter)


AMENDED = """  amendments:
    - was: {expect: grows}
      reason: the difference may change its side, not only grow
"""


def _a_sign_change_from_the_same_runs(cli, files, out, grows):
    """A sign-change claim on the interaction's arms and budgets, run as a second command into the
    same output directory: all of its runs are the interaction's, copied (none trained, nothing
    in its ledger), its two sides are the family, and its amendment from `grows` replays the
    interaction claim's verdict from the same seeds."""

    grown = (files / "interaction_grows.yaml").read_text()
    text = grown.replace("  expect: grows\n", "  expect: changes_sign\n" + AMENDED)
    path = files.parent / "sign" / "interaction_changes_sign.yaml"
    path.parent.mkdir()
    path.write_text(text)
    code, stdout, err = cli("findings", str(path), "--out", str(out))
    assert code == 0, err
    sign = json.loads((out / "interaction_changes_sign" / "verdict.json").read_text())
    (ax,) = sign["axes"]
    s = ax["per_seed"]
    assert s == grows["axes"][0]["per_seed"]  # the same runs
    sides = ax["comparisons"]
    for c, b in zip(sides, ("small", "large")):
        assert c["d"] == pytest.approx(np.subtract(s[f"plain ({b})"], s[f"shuffled ({b})"]))
    fam = [c["family"] for c in sides]
    assert [f["size"] for f in fam] == [2, 2]
    small, large = sorted(c["p"] for c in sides)
    holm = {small: min(1, 2 * small), large: min(1, max(2 * small, large))}
    assert [f["adjusted_p"] for f in fam] == pytest.approx([holm[c["p"]] for c in sides])
    for f in fam:  # a side is separated exactly where its adjusted p is at most alpha
        side = "above 0" if f["low"] > 0 else "below 0" if f["high"] < 0 else None
        assert (side is not None) == (f["adjusted_p"] <= sign["alpha"])
        assert f["verdict"] == (f"separated {side}" if side else "not separated")
    first, second = (f["verdict"] for f in fam)
    want = (
        "inconclusive"
        if "not separated" in (first, second)
        else "contradicted"
        if first == second
        else "reproduced"
    )
    assert ax["family"]["verdict"] == want
    # copied, not trained: the interaction's 12 runs, none in this claim's ledger
    assert ax["shared"]["runs"] == 12
    assert ax["shared"]["from"] == {"interaction_grows/small": 6, "interaction_grows/large": 6}
    assert set(ax["spent"].values()) == {0}
    # what they consumed is what the interaction spent training them, counter by counter
    assert ax["shared"]["consumed"] == pytest.approx(grows["axes"][0]["spent"])
    (was,) = ax["under_amendments"]
    assert was["expect"] == "grows" and was["verdict"] == grows["axes"][0]["verdict"]
    (replayed,) = was["comparisons"]
    assert (replayed["low"], replayed["high"]) == pytest.approx(
        (
            grows["axes"][0]["comparisons"][0]["interval"]["low"],
            grows["axes"][0]["comparisons"][0]["interval"]["high"],
        )
    )
    md = (out / "findings.md").read_text()
    assert f"amendment (grows, hash {was['hash']}): {was['verdict']}" in md
    # the command resumed: every run is finished here, nothing is copied again
    code, _, err = cli("findings", str(path), "--out", str(out))
    assert code == 0 and "copied" not in err
    assert len(list(out.glob("interaction_changes_sign/*/runs/*/shared.json"))) == 12
