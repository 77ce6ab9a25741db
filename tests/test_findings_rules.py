"""The rules of the claim forms beyond two arms, each case built by hand: a sign-change claim's
verdict from its two sides (alone, inside the claim, and in a family), the verdict under an earlier
criterion for claims over k arms and interactions, `better: lower` turning the pairs a claim over k
arms implies, and the copy of a run shared between claims (never a partial source, never a copy
as a source, never twice, never half-made after a kill)."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest

from sixblanks.harness.studies import findings as fs
from sixblanks.reports import sequential

from .test_findings_forms import EXAMPLES

N = 6  # seeds: every sign pattern of six seeds is 64, so a p-value is a count over 64
UP = np.array([0.3, 0.5, 0.2, 0.4, 0.6, 0.35])  # all above 0: p = 2 / 64
DOWN_BUT_ONE = np.array([-3.0, -2.5, -2.0, -1.5, -1.0, 0.2])  # p = 4 / 64 (by hand below)
MIXED = np.array([1.0, -1.2, 0.5, -0.4, 0.3, -0.1])


def _p(d) -> float:
    """The two-sided sign-flip p-value of the mean, every pattern enumerated."""

    stat = abs(sum(d))
    hits = sum(
        abs(sum(s * x for s, x in zip(signs, d))) >= stat - 1e-12
        for signs in itertools.product((1, -1), repeat=len(d))
    )
    return hits / 2 ** len(d)


def _holm(p: list[float]) -> list[float]:
    """Holm-adjusted p-values, by the textbook step-down on the sorted list."""

    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, (len(p) - rank) * p[i])
        out[i] = min(1.0, running)
    return out


def _side(d, adjusted: float, alpha: float) -> str:
    if adjusted > alpha:
        return "not separated"
    return "separated above 0" if np.mean(d) > 0 else "separated below 0"


def _sign_verdict(first: str, second: str) -> str:
    if "not separated" in (first, second):
        return "inconclusive"
    return "contradicted" if first == second else "reproduced"


def _design(alpha: float) -> sequential.Design:
    # one look at six seeds, differences symmetric: the sequential p-value is the look's own
    return sequential.Design(alpha=alpha, pilot=N, batch=1, cap=N, skew=1.0)


def _sides(b1, b2) -> list[dict]:
    return [
        {
            "label": f"a − b at {k}",
            "arm": "a",
            "than": "b",
            "expect": "separated",
            "smallest_effect": 0.05,
            "d": np.asarray(d),
        }
        for k, d in (("small", b1), ("large", b2))
    ]


def test_the_p_values_the_cases_are_built_from():
    assert _p(UP) == 2 / 64 and _p(-UP) == 2 / 64
    # |sum| 9.8; only flipping the 0.2 (to 10.2) or nothing reaches it, each with its mirror
    assert _p(DOWN_BUT_ONE) == 4 / 64
    assert _p(MIXED) > 0.5
    for d in (UP, DOWN_BUT_ONE, MIXED):
        assert sequential.p_value(d, _design(0.1)) == pytest.approx(_p(d))


@pytest.mark.parametrize(
    "b1, b2, alpha",
    [
        (UP, DOWN_BUT_ONE, 0.1),  # opposite sides; the second only at Holm's step-down level
        (UP, -DOWN_BUT_ONE, 0.1),  # both above 0
        (-UP, DOWN_BUT_ONE, 0.1),  # both below 0
        (UP, MIXED, 0.1),  # the second not separated
        (-DOWN_BUT_ONE, DOWN_BUT_ONE, 0.1),  # opposite, but Holm's 2 x 4/64 is above 0.1
        (-DOWN_BUT_ONE, DOWN_BUT_ONE, 0.2),  # ... and at 0.2 it is not
    ],
)
def test_a_sign_change_inside_the_claim(b1, b2, alpha):
    """Each side judged at the level Holm's step-down over the two holds it to; the claim's
    verdict from the two sides; the case's answer computed here from the enumerated p-values."""

    comps = fs.judge_inside(_sides(b1, b2), {"expect": "changes_sign"}, _design(alpha), alpha)
    p = [_p(b1), _p(b2)]
    adjusted = _holm(p)
    want = [_side(d, a, alpha) for d, a in zip((b1, b2), adjusted)]
    assert [c["verdict"] for c in comps] == want
    assert [c["level"] for c in comps] == pytest.approx(
        [alpha * pi / ai for pi, ai in zip(p, adjusted)]
    )
    for c, side in zip(comps, want):
        low, high = c["interval"]["low"], c["interval"]["high"]
        assert (low > 0, high < 0) == (side.endswith("above 0"), side.endswith("below 0"))
        assert c["rule"] == fs.MARGIN_RULES["separated"][side]
    verdict, rule = fs.combine("changes_sign", [c["verdict"] for c in comps])
    assert verdict == _sign_verdict(*want) == fs.sign_change_verdict(*want)
    assert rule == fs.SIGN_CHANGE_RULE


def test_the_cases_cover_every_sign_change_verdict():
    seen = set()
    for b1, b2 in ((UP, DOWN_BUT_ONE), (UP, -DOWN_BUT_ONE), (UP, MIXED)):
        adjusted = _holm([_p(b1), _p(b2)])
        seen.add(_sign_verdict(*(_side(d, a, 0.1) for d, a in zip((b1, b2), adjusted))))
    assert seen == {"reproduced", "contradicted", "inconclusive"}
    # and the rule says so in words
    rule = fs.SIGN_CHANGE_RULE
    assert "on one side at the first budget and on the other side at the second" in rule
    assert "each at its adjusted level" in rule
    assert "contradicted where both are separated on the same side" in rule
    assert rule.endswith("otherwise inconclusive")


def _criterion(**kw) -> dict:
    base = {
        "claim": "c",
        "arm": "a",
        "than": "b",
        "metric": "final_score",
        "aggregate": "mean",
        "expect": "larger",
        "smallest_effect": 0.05,
        "alpha": 0.1,
        "seeds": {"pilot": None, "batch": None, "cap": None},
        "symmetric": True,
    }
    return {**base, **kw}


def _interaction_record(b1, b2, alpha: float) -> dict:
    zeros = np.zeros(N)
    return {
        "axis": "small → large",
        "between": ["small", "large"],
        "kind": "interaction",
        "design": fs.design_record(_design(alpha)),
        "per_seed": {
            "a (small)": list(b1),
            "b (small)": list(zeros),
            "a (large)": list(b2),
            "b (large)": list(zeros),
        },
    }


def test_a_sign_change_in_the_family():
    """The two sides and a two-arm claim's comparison, Holm-adjusted over the three: the side
    that separated alone at Holm's level inside the claim does not in the family."""

    alpha = 0.1
    sign = {
        "alpha": alpha,
        "expect": "changes_sign",
        "arm": "a",
        "than": "b",
        "criterion": _criterion(expect="changes_sign", between=["small", "large"]),
        "axes": [
            {
                **_interaction_record(UP, DOWN_BUT_ONE, alpha),
                "comparisons": fs.judge_inside(
                    _sides(UP, DOWN_BUT_ONE), {"expect": "changes_sign"}, _design(alpha), alpha
                ),
            }
        ],
    }
    two = {
        "alpha": alpha,
        "expect": "larger",
        "arm": "a",
        "than": "b",
        "criterion": _criterion(),
        "axes": [
            {
                "axis": "budget",
                "design": fs.design_record(_design(alpha)),
                "per_seed": {"a": list(MIXED), "b": [0.0] * N},
            }
        ],
    }
    assert sign["axes"][0]["comparisons"][1]["verdict"] == "separated below 0"  # alone
    fs.adjust([sign, two])
    p = [_p(UP), _p(DOWN_BUT_ONE), _p(MIXED)]
    adjusted = _holm(p)  # 3 x 2/64 = 0.094, then 2 x 4/64 = 0.125, then the mixed one
    sides = [c["family"] for c in sign["axes"][0]["comparisons"]]
    assert [s["adjusted_p"] for s in sides] == pytest.approx(adjusted[:2])
    assert [s["verdict"] for s in sides] == [
        _side(d, a, alpha) for d, a in zip((UP, DOWN_BUT_ONE), adjusted)
    ]
    assert [s["verdict"] for s in sides] == ["separated above 0", "not separated"]
    assert sign["axes"][0]["family"]["verdict"] == "inconclusive"
    assert two["axes"][0]["family"]["adjusted_p"] == pytest.approx(adjusted[2])


def test_better_lower_turns_the_pairs_a_claim_over_k_arms_implies():
    values = {"a": 1.0 + UP, "b": 3.0 + UP * 0, "c": 5.0 + MIXED * 0.1}

    def diff(axis, x, y):
        return np.asarray(values[x]) - np.asarray(values[y])

    best = {"expect": "best", "arm": "a", "arms": ["a", "b", "c"], "smallest_effect": 0.05}
    order = {"expect": "ordering", "arms": ["a", "b", "c"], "smallest_effect": 0.05}
    for crit, pairs in ((best, [("a", "b"), ("a", "c")]), (order, [("a", "b"), ("b", "c")])):
        higher = fs.implied_by(crit, ["budget"], diff)
        lower = fs.implied_by({**crit, "better": "lower"}, ["budget"], diff)
        assert [(c["arm"], c["than"], c["expect"]) for c in higher] == [
            (x, y, "larger") for x, y in pairs
        ]
        assert [(c["arm"], c["than"], c["expect"]) for c in lower] == [
            (x, y, "smaller") for x, y in pairs
        ]
        for c, (x, y) in zip(lower, pairs):
            assert c["d"] == pytest.approx(values[x] - values[y])
        # a < b < c on every seed: lower is better reproduces the claim, higher contradicts it
        for comps, want in ((lower, "reproduced"), (higher, "contradicted")):
            judged = fs.judge_inside(comps, crit, _design(0.2), 0.2)
            assert fs.combine(crit["expect"], [j["verdict"] for j in judged])[0] == want


def test_better_is_validated_and_hashed_only_where_given(cli, write_yaml):
    from sixblanks.harness.config.finding_file import criterion_hash, load_finding

    best = (EXAMPLES / "three_arm_best.yaml").read_text()
    # the examples' criteria as hashed before the field existed (commit 620d95e)
    f = load_finding(str(EXAMPLES / "three_arm_best.yaml"))
    assert "better" not in f.finding.criterion()
    assert criterion_hash(f.finding.criterion()) == "a394ef2b854b8588"
    g = load_finding(str(EXAMPLES / "interaction_grows.yaml"))
    assert criterion_hash(g.finding.criterion()) == "d827011d3fa66441"
    lower = best.replace("  expect: best\n", "  expect: best\n  better: lower\n")
    m = load_finding(write_yaml(lower, "low.yaml")).finding
    assert m.criterion()["better"] == "lower"
    assert {k: v for k, v in m.criterion().items() if k != "better"} == f.finding.criterion()
    code, out, err = cli("validate", write_yaml(lower, "low.yaml"))
    assert code == 0, err
    assert "plain best of plain, shuffled, frozen (lower is better)" in out
    code, _, err = cli("validate", write_yaml(lower.replace("lower", "smaller"), "x.yaml"))
    assert code == 2 and "finding.better" in err
    grows = (EXAMPLES / "interaction_grows.yaml").read_text()
    bad = grows.replace("  expect: grows\n", "  expect: grows\n  better: lower\n")
    code, _, err = cli("validate", write_yaml(bad, "g.yaml"))
    assert code == 2 and "finding.better: not used by an interaction claim" in err
    # an amendment from "not given": null, so that the original version hashes as it was
    amended = lower.replace(
        "  better: lower\n",
        "  better: lower\n  amendments:\n    - was: {better: null}\n"
        "      reason: the metric is a length; shorter is the claim\n",
    )
    original, now = load_finding(write_yaml(amended, "a.yaml")).finding.criterion_versions()
    assert criterion_hash(original) == "a394ef2b854b8588" and now["better"] == "lower"


def _many_record(alpha: float) -> dict:
    # a above b on every seed, c below b on every seed
    b = np.linspace(0.2, 0.7, N)
    return {
        "axis": "budget",
        "design": fs.design_record(_design(alpha)),
        "per_seed": {"a": list(b + 1 + UP), "b": list(b), "c": list(b - 1 - UP)},
    }


@pytest.mark.parametrize(
    "was, want",
    [
        # a − b and a − c above 0 on every seed, p 2/64 each, Holm 4/64 <= 0.2: both separated
        ({"expect": "best", "arm": "a", "arms": ["a", "b", "c"]}, "reproduced"),
        (
            {"expect": "best", "arm": "a", "arms": ["a", "b", "c"], "better": "lower"},
            "contradicted",
        ),
        # a − c reproduced, c − b contradicted: any pair contradicted
        ({"expect": "ordering", "arm": None, "arms": ["a", "c", "b"]}, "contradicted"),
        ({"expect": "larger", "arm": "b", "than": "c"}, "reproduced"),  # two arms, computable
    ],
)
def test_the_verdict_under_an_earlier_criterion_of_a_claim_over_k_arms(was, want):
    now = _criterion(expect="ordering", arm=None, than=None, arms=["a", "b", "c"], alpha=0.2)
    got = fs.under(_criterion(**{"than": None, "alpha": 0.2, **was}), now, _many_record(0.2), 1)
    assert got["verdict"] == want
    if "than" in was:  # two arms: the one interval, a − b's mean inside it
        assert got["low"] < 1.0 + UP.mean() < got["high"] and got["low"] > 0
    else:
        assert len(got["comparisons"]) == 2 and got["rule"] == fs.COMBINED_RULE
        p = [2 / 64, 2 / 64]
        assert [c["level"] for c in got["comparisons"]] == pytest.approx(
            [0.2 * x / a for x, a in zip(p, _holm(p))]
        )


def test_the_verdict_under_an_earlier_criterion_of_an_interaction():
    # a − b: 0.3 .. 0.6 at the small budget, -3 .. 0.2 at the large one
    ax = _interaction_record(UP, DOWN_BUT_ONE, 0.1)
    now = _criterion(expect="changes_sign", between=["small", "large"])
    grows = fs.under(_criterion(expect="grows", between=["small", "large"]), now, ax, 1)
    # (a − b at large) − (at small), per seed: p by enumeration, one comparison at alpha
    d = DOWN_BUT_ONE - UP
    assert _p(d) <= 0.1 and d.mean() < 0
    assert grows["verdict"] == "contradicted" and grows["expect"] == "grows"
    (c,) = grows["comparisons"]
    assert c["low"] < d.mean() < c["high"] < 0
    turned = fs.under(_criterion(expect="grows", between=["large", "small"]), now, ax, 1)
    assert turned["verdict"] == "reproduced"
    sign = fs.under(_criterion(expect="changes_sign", between=["small", "large"]), now, ax, 1)
    assert sign["verdict"] == "reproduced" and sign["rule"] == fs.SIGN_CHANGE_RULE
    # where the runs cannot give the earlier version's values: why, in words
    two = fs.under(_criterion(), now, ax, 1)
    assert two["verdict"] == "not computable"
    assert "judges each budget axis on its own" in two["why"] and "small → large" in two["why"]
    other = fs.under(_criterion(expect="grows", arm="c", between=["small", "large"]), now, ax, 1)
    assert other["verdict"] == "not computable"
    assert "compares c, which the runs did not measure (they measured a, b)" in other["why"]
    flat = fs.under(
        _criterion(expect="grows", between=["small", "large"]),
        now,
        {**_many_record(0.1), "axis": "small"},
        1,
    )
    assert "compares at budget axis 'large'; these runs are of small" in flat["why"]
    metric = fs.under(_criterion(metric="entropy_token_mean"), _criterion(), _many_record(0.1), 1)
    assert metric["verdict"] == "not computable" and "measures entropy_token_mean" in metric["why"]


# ------------------------------------------------------------------ runs shared between claims


def _spec_form(rid: str, experiment: str, arm: str, seed: int) -> dict:
    """A spec's JSON form computing ``lr 1, seed`` (the other sections alike in every claim)."""

    same = {"task": {}, "blanks": {}, "optimizer": {"lr": 1}, "rollout": {}, "budget": {}}
    head = {"experiment": experiment, "arm": arm, "preset": "grpo", "seed": seed}
    tail = {"eval": {}, "model": {}, "warm_start_key": "k", "code_version": "c", "run_id": rid}
    return head | same | tail


def _run(root, claim: str, rid: str, state: str, shared: bool = False, seed: int = 0):
    """A run directory of claim ``claim`` (axis ``budget``) computing ``lr 1, seed``."""

    d = root / claim / "budget" / "runs" / rid
    (d / "checkpoint").mkdir(parents=True)
    (d / "checkpoint" / "state.pt").write_bytes(b"weights")
    spec = _spec_form(rid, f"{claim}-budget", "x", seed)
    (d / "spec.json").write_text(json.dumps(spec))
    (d / "status.json").write_text(json.dumps({"state": state, "run_id": rid, "arm": "x"}))
    if state == "finished":
        (d / "result.json").write_text(json.dumps({"run_id": rid, "counters": {"tokens": 7}}))
    (d / "events.jsonl").write_text(f'{{"trained by": "{claim}"}}\n')
    if shared:
        (d / "shared.json").write_text(json.dumps({"from": "elsewhere", "run_id": "r0"}))
    return d


def _taker_spec(seed: int = 0):
    from sixblanks.harness.runspec import RunSpec

    return RunSpec.from_dict(_spec_form(f"t{seed}", "t-budget", "y", seed))


def test_only_a_run_trained_to_the_end_is_a_source(tmp_path):
    root = tmp_path
    _run(root, "a_copy", "r1", "finished", shared=True)  # sorts first: a copy, not a source
    _run(root, "b_partial", "r2", "running")
    _run(root, "c_killed", "r3", "interrupted")
    trained = _run(root, "d_trained", "r4", "finished")
    pool = fs.finished_runs(root)
    assert list(pool.values()) == [trained]
    _run(root, "e_partial", "r5", "running", seed=1)  # seed 1: nobody finished it
    out = root / "taker" / "budget"
    copied = fs.adopt_specs([_taker_spec(0), _taker_spec(1)], out, root, lambda m: None)
    assert copied == ["t0"]
    run = out / "runs" / "t0"
    assert json.loads((run / "shared.json").read_text())["from"] == "d_trained/budget/runs/r4"
    assert (run / "events.jsonl").read_text() == '{"trained by": "d_trained"}\n'
    assert json.loads((run / "spec.json").read_text()) == _taker_spec(0).as_dict()
    assert json.loads((run / "result.json").read_text())["run_id"] == "t0"
    assert not (run / "checkpoint").exists() and not (out / "runs" / "t1").exists()


def test_a_copy_is_made_once_and_never_half(tmp_path, monkeypatch):
    root = tmp_path
    _run(root, "trainer", "r0", "finished")
    out = root / "taker" / "budget"
    real = shutil.copytree

    def killed(src, dst, **kw):  # the copy dies after its status (finished) is written
        dst.mkdir(parents=True)
        shutil.copy(src / "status.json", dst / "status.json")
        shutil.copy(src / "spec.json", dst / "spec.json")
        raise KeyboardInterrupt

    monkeypatch.setattr(fs.shared.shutil, "copytree", killed)
    with pytest.raises(KeyboardInterrupt):
        fs.adopt_specs([_taker_spec()], out, root, lambda m: None)
    # nothing in runs/ looks finished: neither the resumed command nor another claim takes it
    assert not (out / "runs" / "t0").exists()
    assert list(fs.finished_runs(root).values()) == [root / "trainer" / "budget" / "runs" / "r0"]
    monkeypatch.setattr(fs.shared.shutil, "copytree", real)
    logged = []
    assert fs.adopt_specs([_taker_spec()], out, root, logged.append) == ["t0"]
    assert not (out / fs.shared.COPYING).exists()
    files = {p.name: p.read_bytes() for p in (out / "runs" / "t0").iterdir()}
    assert set(files) == {"spec.json", "status.json", "result.json", "events.jsonl", "shared.json"}
    # the command resumed again: the copy is finished here, so it is not copied a second time
    assert fs.adopt_specs([_taker_spec()], out, root, logged.append) == []
    assert {p.name: p.read_bytes() for p in (out / "runs" / "t0").iterdir()} == files
    assert len(logged) == 1 and "trainer/budget/runs/r0" in logged[0]
    assert fs.shared.shared_in(out) == {"t0": "trainer/budget/runs/r0"}
