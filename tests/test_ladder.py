"""The ablation ladder stops at the rung that explains a planted fault, with evidence naming it;
every rung gives one verdict, passes only on evidence that could have failed it, and every
evaluation the ladder makes scores the validation split."""

import json
import sys
from types import SimpleNamespace

import pytest
import torch

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.studies.ladder import (
    MARGIN,
    VERDICT,
    Ladder,
    first_failure,
    paired_diff_ci,
    verdicts,
)

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


def _one_verdict_per_rung(rows):
    """Each rung's rows end with exactly one verdict row; returns {rung: verdict row}."""

    out = {}
    for rung in dict.fromkeys(r["rung"] for r in rows):
        mine = [r for r in rows if r["rung"] == rung]
        assert [r["variant"] for r in mine].count(VERDICT) == 1 and mine[-1]["variant"] == VERDICT
        out[rung] = mine[-1]
    return out


def test_shifted_mask_stops_at_the_contract_rung(tmp_path, monkeypatch, cli, write_yaml):
    import yaml

    import sixblanks.harness.training.contract as contract

    real = contract.run_episodes

    def shifted(*args, **kwargs):
        batch = real(*args, **kwargs)
        batch.action_mask = torch.cat([batch.action_mask[:, 1:], torch.zeros(batch.size, 1)], 1)
        return batch

    monkeypatch.setattr(contract, "run_episodes", shifted)
    path = write_yaml(yaml.safe_dump(json.loads(json.dumps(BASE))))
    code, out, err = cli("ladder", path, "--out", str(tmp_path))
    # the CLI prints the verdict row and exits 1 with the verdict's reason
    assert code == 1 and VERDICT in out
    assert "rung 1 (contract) failed: trajectory contract broken: masks" in err
    rows = json.loads((tmp_path / "ladder.json").read_text())["rungs"]
    assert [(r["rung"], r["variant"], r["status"]) for r in rows] == [
        (1, "fresh rollouts", "fail"),
        (1, VERDICT, "fail"),
    ]
    assert (
        "masks: sample 0, token" in rows[0]["evidence"]
        and "action_mask is 1" in rows[0]["evidence"]
    )


def test_drifting_environment_stops_at_the_no_update_rung(tmp_path, monkeypatch):
    """Also: one verdict per rung that ran, in the results, ladder.json and the store; rung 3's
    evaluations score the validation split."""

    import sixblanks.harness.studies.ladder_rungs as rungs
    from sixblanks.harness.store.database import connect

    real, splits = rungs.evaluate, []

    def recording(*args, **kwargs):
        splits.append(kwargs.get("split", "test"))  # evaluate's default is test
        return real(*args, **kwargs)

    monkeypatch.setattr(rungs, "evaluate", recording)
    cfg = _cfg(task={"name": "tests.drift_task:DriftingArithmetic", "eval_size": 64})
    ladder = Ladder(cfg, tmp_path)
    results = ladder.run()
    fail = first_failure(results)
    assert fail.rung == 3 and fail.variant == VERDICT and "environment drift" in fail.evidence
    assert [(r.rung, r.status) for r in verdicts(results)] == [
        (1, "pass"),
        (2, "pass"),
        (3, "fail"),
    ]
    rows = [r for r in results if r.variant != VERDICT]
    assert [r.status for r in rows] == ["pass", "pass", "fail"]
    assert "environment drift" in rows[2].evidence
    assert [r.detail["engine"] for r in rows] == ["HFEngine"] * 3  # rollout.backend: hf
    # every evaluation the ladder made, and the spec its short runs are built from: validation
    assert splits == ["validation"] * 3 and rows[2].detail["split"] == "validation"
    assert ladder.spec["eval"]["split"] == "validation"
    stored = json.loads((tmp_path / "ladder.json").read_text())["rungs"]
    assert {k: v["status"] for k, v in _one_verdict_per_rung(stored).items()} == {
        1: "pass",
        2: "pass",
        3: "fail",
    }
    con = connect(tmp_path, read_only=True)
    db = con.sql(
        "SELECT rung, status FROM ladder WHERE variant = 'verdict' ORDER BY rung"
    ).fetchall()
    con.close()
    assert db == [(1, "pass"), (2, "pass"), (3, "fail")]


# ---------------------------------------------------------------- rung 3 on planted evaluations


class _Engine:
    """Stands in for a rollout engine: counts weight loads (each one a new policy version)."""

    policy_version = 0

    def load_weights(self, state_dict=None):
        self.policy_version += 1


def _bare_ladder(tmp_path, monkeypatch, eval_size=4):
    """A ladder whose set-up (warm start) is skipped: the parts a planted rung needs."""

    from sixblanks.harness.tasks import make_task

    ladder = Ladder(_cfg(), tmp_path)
    ladder.spec = {"eval": {"size": eval_size}, "task": {"eval_size": eval_size}}
    ladder.task = make_task("arithmetic")  # reward range [0, 1]
    model = SimpleNamespace(state_dict=lambda: {})
    monkeypatch.setattr(ladder, "_policy", lambda: (model, None))
    monkeypatch.setattr(ladder, "_engine", lambda m, t: _Engine())
    return ladder


def _planted_evaluations(monkeypatch, planted):
    """evaluate() answers the i-th call with planted[i]; records (split, engine version) per call."""

    import sixblanks.harness.studies.ladder_rungs as rungs

    calls = []

    def fake(engine, tok, task, n, **kw):
        calls.append((kw.get("split", "test"), engine.policy_version))
        per = planted[len(calls) - 1]
        assert n == len(per)
        return {
            "per_instance": per,
            "score": sum(per) / n,
            "n": n,
            "split": kw.get("split", "test"),
        }

    monkeypatch.setattr(rungs, "evaluate", fake)
    return calls


@pytest.mark.parametrize(
    "planted, status, phrase, changed",
    [
        # every instance at the reward floor: a changed but still wrong answer scores 0 again
        (
            [[0.0] * 4] * 3,
            "inconclusive",
            "scored 0 (the reward floor) in all 3 evaluations",
            (0, 0),
        ),
        # every instance at the ceiling: the mirror image
        (
            [[1.0] * 4] * 3,
            "inconclusive",
            "scored 1 (the reward ceiling) in all 3 evaluations",
            (0, 0),
        ),
        # repeats agree; after the version bump instances 0 and 1 swap: the mean stays 0.5, so only
        # a per-instance comparison after the bump can see it
        (
            [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]],
            "fail",
            "engine drift (same weights, new version): 0 of 4 instances changed between the 2 repeats, "
            "2 after the engine version bump",
            (0, 2),
        ),
        # a repeat differs on instance 3
        (
            [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]],
            "fail",
            "environment drift: 1 of 4 instances changed between the 2 repeats, 0 after",
            (1, 0),
        ),
        # mixed outcomes, identical everywhere: evidence that could have failed, so a pass
        (
            [[1.0, 0.0, 1.0, 0.0]] * 3,
            "pass",
            "no instance changed across 3 evaluations, before and after the version bump "
            "(2 of 4 validation instances above the floor)",
            (0, 0),
        ),
    ],
)
def test_no_update_rung_compares_every_instance_across_every_evaluation(
    tmp_path, monkeypatch, planted, status, phrase, changed
):
    ladder = _bare_ladder(tmp_path, monkeypatch)
    calls = _planted_evaluations(monkeypatch, planted)
    row, verdict = ladder.rung_no_update_eval()
    # two evaluations at version 0, the third after the bump; all on the validation split
    assert calls == [("validation", 0), ("validation", 0), ("validation", 1)]
    assert row.detail["split"] == "validation"
    assert verdict.variant == VERDICT and (row.status, verdict.status) == (status, status)
    assert phrase in verdict.evidence, verdict.evidence
    assert (row.detail["changed_between_repeats"], row.detail["changed_after_bump"]) == changed
    assert row.detail["scores"] == [sum(p) / 4 for p in planted]


# ---------------------------------------------------------------- rungs 5-8 on planted short runs


def _run(final, start):
    """A planted short run: per-instance final and warm-start scores."""

    return {
        "scores": final,
        "start": start,
        "final": sum(final) / len(final),
        "start_score": sum(start) / len(start),
        "grad_norm": None,
        "grad_norm_max": None,
        "trainable": [],
        "diverged": False,
        "engine": "HFEngine",
        "split": "validation",
    }


def test_compare_on_all_zero_scores_is_inconclusive_in_every_row_and_the_verdict(
    tmp_path, monkeypatch
):
    ladder = Ladder(_cfg(), tmp_path)
    zero = [0.0] * 8
    monkeypatch.setattr(ladder, "_train", lambda seed, **kw: _run(zero, zero))
    key = "Z=seq-mean-token-mean (nominal)"
    rows = ladder._compare(
        6,
        "normalization",
        {key: {}, "Z=token-mean": {"blanks_over": {}}, "Z=constant": {"blanks_over": {}}},
        key,
    )
    assert [r.variant for r in rows] == [key, "Z=token-mean", "Z=constant", VERDICT]
    assert [r.status for r in rows] == ["inconclusive"] * 4
    # the interval is [0, 0], of width 0: it says the runs did not tell the settings apart
    assert (rows[1].ci_low, rows[1].ci_high) == (0.0, 0.0)
    assert (
        "every score is 0.000 for both: the runs cannot tell the settings apart" in rows[1].evidence
    )
    assert rows[-1].evidence == (
        "every score of every run is 0.000, before and after training: the runs cannot tell the "
        "settings apart"
    )
    assert rows[-1].detail == {"split": "validation", "n": 8}
    assert first_failure(rows) is None


def _fake_build_trainer(monkeypatch, by_estimator):
    """build_trainer that records each spec and trains nothing: its evaluations are planted per
    advantage estimator as (start, final) per-instance scores."""

    import sixblanks.harness.studies.ladder as ladder_mod

    specs = []

    def build(spec, warm):
        specs.append(spec)
        start, final = by_estimator[spec["blanks"]["advantage"]["estimator"]]
        split = spec["eval"]["split"]
        evals = [
            {"per_instance": p, "score": sum(p) / len(p), "split": split} for p in (start, final)
        ]
        res = SimpleNamespace(steps=[], evals=evals, ledger=SimpleNamespace(counters={}))
        return SimpleNamespace(engine=_Engine(), train=lambda on_step=None: res)

    monkeypatch.setattr(ladder_mod, "build_trainer", build)
    return specs


def _spec_ladder(tmp_path):
    """A ladder with a real resolved run spec (eval split 'test', as the experiment has it) and no
    warm start."""

    from sixblanks.harness.orchestration.orchestrator import build_specs

    cfg = _cfg()
    ladder = Ladder(cfg, tmp_path)
    ladder.spec = build_specs(cfg, "warm", code="test")[0]
    ladder.warm = tmp_path
    return ladder


def test_a_clear_win_fails_the_rung_with_a_verdict_naming_the_variant(tmp_path, monkeypatch):
    from sixblanks.harness.orchestration.runner import settings_from_spec

    zero = [0.0] * 8
    specs = _fake_build_trainer(
        monkeypatch,
        {
            "group_norm": (zero, zero),  # the nominal: learns nothing
            "loo": (
                zero,
                [1.0] * 6 + [0.0] * 2,
            ),  # solves 6 of 8 more: +0.75 on every resample mean
        },
    )
    ladder = _spec_ladder(tmp_path)
    assert ladder.spec["eval"]["split"] == "test"
    rows = ladder.rung_advantage()
    assert [(r.variant, r.status) for r in rows] == [
        ("advantage=group_norm (nominal)", "inconclusive"),  # unchanged from its warm start
        ("advantage=loo", "fail"),
        (VERDICT, "fail"),
    ]
    v = rows[-1]
    assert v.evidence.startswith(
        "advantage=loo beats the nominal advantage=group_norm (nominal) by +0.750 ["
    )
    assert v.evidence.endswith("] on the same 8 validation instances")
    assert v.ci_low > MARGIN and v.detail["best"] == "advantage=loo"
    assert first_failure(rows) is v
    # the short runs were built to evaluate on validation, whatever the experiment's eval split says
    assert [s["eval"]["split"] for s in specs] == ["validation", "validation"]
    assert {settings_from_spec(s).eval_split for s in specs} == {"validation"}
    assert ladder.spec["eval"]["split"] == "test"  # the ladder's own copy is not what it changed


def test_a_variant_the_interval_shows_worse_passes_the_rung(tmp_path, monkeypatch):
    """A pass needs an interval that could have failed: the nominal gains on all 8 instances, the
    variant on 4 of them, so (variant - nominal) is 0 on four instances and -1 on four: -0.5, and no
    resample mean exceeds 0."""

    zero = [0.0] * 8
    _fake_build_trainer(
        monkeypatch,
        {"group_norm": (zero, [1.0] * 8), "loo": (zero, [1.0] * 4 + [0.0] * 4)},
    )
    rows = _spec_ladder(tmp_path).rung_advantage()
    assert [r.status for r in rows] == ["pass", "pass", "pass"]
    assert rows[1].evidence.startswith("vs nominal -0.500 [") and rows[1].ci_high <= 0.0
    assert rows[-1].evidence.startswith(
        "no setting beats the nominal advantage=group_norm (nominal) by more than 0.05 on the same "
        "8 validation instances"
    )


def test_rung_9_compares_the_lagged_arm_with_its_synchronous_setting(tmp_path, monkeypatch):
    """A lagged arm (data.lag 4, no staleness bound) that the synchronous setting beats on 6 of 8
    instances fails rung 9; a synchronous arm has nothing to compare."""

    import sixblanks.harness.studies.ladder as ladder_mod

    zero = [0.0] * 8
    specs = []

    def build(spec, warm):
        specs.append(spec)
        lag = spec["blanks"]["data"]["lag"]
        final = zero if lag else [1.0] * 6 + [0.0] * 2  # the planted fault: the lag learns nothing
        evals = [
            {"per_instance": p, "score": sum(p) / 8, "split": "validation"} for p in (zero, final)
        ]
        res = SimpleNamespace(steps=[], evals=evals, ledger=SimpleNamespace(counters={}))
        return SimpleNamespace(engine=_Engine(), train=lambda on_step=None: res)

    monkeypatch.setattr(ladder_mod, "build_trainer", build)
    ladder = _spec_ladder(tmp_path)
    assert [r.status for r in ladder.rung_asynchrony()] == ["inconclusive", "inconclusive"]
    ladder.spec["blanks"]["data"]["lag"] = 4
    rows = ladder.rung_asynchrony()
    assert [(r.variant, r.status) for r in rows] == [
        ("lag=4 (nominal)", "inconclusive"),
        ("lag=0 (synchronous)", "fail"),
        (VERDICT, "fail"),
    ]
    assert rows[-1].evidence.startswith(
        "lag=0 (synchronous) beats the nominal lag=4 (nominal) by +0.750"
    )
    assert [s["blanks"]["data"]["lag"] for s in specs] == [4, 0]  # the same arm, lag removed
    assert first_failure(rows) is rows[-1]


@pytest.mark.slow
def test_learning_rate_far_too_high_stops_at_rung_7_and_default_arm_passes(
    tmp_path, cli, write_yaml, capsys, monkeypatch
):
    """Also: with stderr not a terminal, each short run says each evaluation and how it ended."""

    import yaml

    bad = _cfg(
        arms={"grpo": {"preset": "grpo", "optimizer": {"lr": 3.0}}},
        ladder={"lr_factors": [1e-4, 1.0]},
    )
    from sixblanks.harness.training import loop

    real, evaluated = loop.Trainer.evaluate, []

    def recording(trainer):  # every evaluation a short run makes, as it records it
        evaluated.append(real(trainer))
        return evaluated[-1]

    monkeypatch.setattr(loop.Trainer, "evaluate", recording)
    results = Ladder(bad, tmp_path / "bad", log=lambda m: print(m, file=sys.stderr)).run()
    monkeypatch.undo()
    _check_plain_lines(capsys.readouterr().err, results, evaluated)
    fail = first_failure(results)
    assert fail is not None and fail.rung == 7, [
        (r.rung, r.variant, r.status, r.evidence) for r in results
    ]
    assert fail.variant == VERDICT and "lr=3 (nominal)" in fail.evidence
    assert "lr=0.0003" in fail.evidence or "diverged" in fail.evidence
    assert all(r.status != "fail" for r in results if r.rung < 7)

    # the default arm passes every rung it can run (it is synchronous: rung 9 is inconclusive)
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
    verdicts = _one_verdict_per_rung(rows)
    assert verdicts[9]["status"] == "inconclusive"
    assert set(verdicts) == set(range(1, 10))
    # the checks that need no statistics pass outright (all-inconclusive would not be a pass)
    assert [verdicts[k]["status"] for k in (1, 2, 3)] == ["pass"] * 3
    settings = [r for r in rows if r["variant"] != VERDICT]
    ran = [r for r in settings if r["rung"] <= 8 and r["detail"]]  # not the rows that cannot apply
    assert {r["detail"]["engine"] for r in ran} == {"HFEngine"}
    # arithmetic gives no step labels: the PRM variant of rung 8 says so instead of running
    (prm,) = [r for r in settings if r["rung"] == 8 and "+prm" in r["variant"]]
    assert prm["status"] == "inconclusive" and "needs step labels" in prm["evidence"]
    import duckdb

    con = duckdb.connect(str(tmp_path / "good" / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(DISTINCT rung) FROM ladder").fetchone()[0] == 9
    con.close()
    # the report renders the ladder table
    from sixblanks.harness.orchestration.orchestrator import Orchestrator
    from sixblanks.reports.build import build_report

    Orchestrator(
        validate_mapping(json.loads(json.dumps(BASE)) | {"budget": {"launched_tokens": 600}}),
        tmp_path / "good",
        progress=False,
    ).ingest()
    html = build_report(tmp_path / "good", resamples=200).read_text()
    assert "Ablation ladder" in html and "asynchrony" in html
    assert html.count("<tr class='verdict'>") == 9  # one verdict line per rung, in bold


def _check_plain_lines(err: str, results, evaluated: list[dict]) -> None:
    """One line per evaluation the short runs' trainers made (``evaluated``, in order), then each
    run's end: finished after its steps (its last evaluation at that step), or FAILED with the row's
    error; a compared setting's first and last lines give the scores its row records."""

    lines = err.splitlines()
    runs = [r for r in results if r.rung >= 4 and r.variant != VERDICT]
    assert {r.rung for r in runs} == {4, 5, 6, 7}
    names = [f"ladder rung {r.rung} ({r.rung_name}) {r.variant}: " for r in runs]
    said = [ln.removeprefix(n) for ln in lines for n in names if ln.startswith(n)]
    assert [ln for ln in said if ln.startswith("eval at step ")] == [
        f"eval at step {e['step']}: score {e['score']:.3f} "
        f"(launched_tokens {e['position']['launched_tokens']:g}/2500)"
        for e in evaluated
    ]
    reused = 0
    for i, (r, name) in enumerate(zip(runs, names, strict=True)):
        mine = [ln.removeprefix(name) for ln in lines if ln.startswith(name)]
        if mine[0].startswith("the same setting as "):  # the nominal setting: trained once
            first = mine[0].removeprefix("the same setting as ")
            assert len(mine) == 1 and first.endswith(": its result reused (not trained again)")
            assert f"{first.split(': its result')[0]}: " in names[:i]  # trained by a rung before
            reused += 1
            continue
        assert mine[0].startswith("eval at step 0: ") and "(launched_tokens 0/2500)" in mine[0]
        assert all(ln.startswith("eval at step ") for ln in mine[:-1]), mine
        d = r.detail
        if d.get("diverged"):
            assert mine[-1] == f"FAILED: {d['error']}"
            continue
        steps = mine[-1].removeprefix("finished after ").removesuffix(" steps")
        assert mine[-1] == f"finished after {steps} steps" and steps.isdigit(), mine
        assert mine[-2].startswith(f"eval at step {steps}: score ")
        if "final" in d:  # a compared setting's row (rung 4's gives the curriculum instead)
            assert mine[0].startswith(f"eval at step 0: score {d['start_score']:.3f} ")
            assert mine[-2].startswith(f"eval at step {steps}: score {d['final']:.3f} ")
            assert mine[-2].endswith(f"(launched_tokens {d['counters']['launched_tokens']:g}/2500)")
    assert reused == 3  # the nominal setting of rungs 5, 6 and 7 is rung 4's short run


@pytest.mark.vllm
@pytest.mark.slow
def test_ladder_of_a_vllm_arm_samples_with_vllm(tmp_path):
    """The ladder builds its engines as runs do: rollout.backend vllm means vLLM in every rung
    (contract, frozen batch, repeated evaluation, and the short training run of rung 4)."""

    from sixblanks.harness.store.database import connect

    # BASE's warm start: a 40-step one scores 0 on every instance, where rung 3 can only be
    # inconclusive (with hf, this warm start solves 6 of these 16 validation instances)
    cfg = _cfg(
        task={"name": "arithmetic", "eval_size": 16},
        rollout={"backend": "vllm"},
        ladder={"budget": {"launched_tokens": 150}},
    )
    results = Ladder(cfg, tmp_path).run(until=4)
    rows = [r for r in results if r.variant != VERDICT]
    assert [r.rung for r in rows] == [1, 2, 3, 4], [(r.rung, r.evidence) for r in results]
    assert [r.status for r in rows][:3] == ["pass"] * 3, [r.evidence for r in results]
    assert [r.detail["engine"] for r in rows] == ["VLLMEngine"] * 4
    con = connect(tmp_path, read_only=True)
    stored = [
        json.loads(d)["engine"]
        for (d,) in con.sql("SELECT detail FROM ladder WHERE variant <> 'verdict'").fetchall()
    ]
    con.close()
    assert stored == ["VLLMEngine"] * 4


# a lag far beyond what the arm's off-policy gate tolerates, and no staleness bound: every sample
# comes from the initial policy, and the gate lets only a biased few through
LAGGED_PPO = {
    "preset": "ppo",
    "blanks": {
        "data": {"lag": 32},
        "weight": {"gate": {"level": "sequence", "metric": "kl", "high": 0.001}},
    },
}


@pytest.mark.slow
def test_a_lag_that_diverges_without_a_staleness_bound_stops_the_ladder_at_rung_9(
    tmp_path, cli, write_yaml
):
    """`sixblanks ladder --arm` on a lagged arm runs rung 9 for real: both settings train under the
    rung budget and the synchronous one wins on the same validation instances."""

    import yaml

    data = json.loads(json.dumps(BASE))
    data["task"]["eval_size"] = 128
    data["arms"] = {"grpo": {"preset": "grpo"}, "ppo_lag32": LAGGED_PPO}
    data["ladder"] = {
        "budget": {"launched_tokens": 4000},
        **{k: [] for k in ("advantage_variants", "normalization_variants", "clip_variants")},
        "kl_variants": [],
        "credit_variants": [],
        "lr_factors": [1.0],
    }
    path = write_yaml(yaml.safe_dump(data))
    code, out, err = cli("ladder", path, "--arm", "ppo_lag32", "--out", str(tmp_path), "--json")
    assert code == 1 and "rung 9 (asynchrony) failed" in err
    rows = json.loads(out)
    verdicts = _one_verdict_per_rung(rows)
    assert set(verdicts) == set(range(1, 10))  # it walked every rung, and stopped at the last
    assert [r for r, v in verdicts.items() if v["status"] == "fail"] == [9]
    nominal, sync = (r for r in rows if r["rung"] == 9 and r["variant"] != VERDICT)
    assert nominal["variant"] == "lag=32 (nominal)" and sync["variant"] == "lag=0 (synchronous)"
    # really lagged: its samples were behind and measurably off the current policy; the
    # synchronous setting sampled on-policy
    assert nominal["detail"]["versions_behind"] > 10 and nominal["detail"]["behavior_kl"] > 1e-3
    assert sync["detail"]["versions_behind"] == 0 and sync["detail"]["behavior_kl"] < 1e-6
    assert sync["status"] == "fail" and sync["ci_low"] > 0.05
    assert verdicts[9]["evidence"].startswith("lag=0 (synchronous) beats the nominal lag=32")


def test_rung_9_runs_a_concurrent_arm_against_its_synchronous_setting(tmp_path):
    """An arm with a concurrent collector: rung 9 trains it for real (rounds sampled ahead in a
    process of its own) and its synchronous setting (no collector, no lag), paired."""

    data = json.loads(json.dumps(BASE))
    data["arms"] = {"async": {"preset": "grpo", "blanks": {"data": {"concurrent": {"queue": 2}}}}}
    data["ladder"] = {"budget": {"launched_tokens": 600}}
    ladder = Ladder(validate_mapping(data), tmp_path)
    ladder.prepare()
    rows = ladder.rung_asynchrony()
    nominal, sync, final = rows
    assert (nominal.variant, sync.variant, final.variant) == (
        "concurrent queue=2 (nominal)",
        "lag=0 (synchronous)",
        VERDICT,
    )
    # sampled ahead by the collector: behind the trainer; the synchronous setting never is
    assert nominal.detail["versions_behind"] > 0.5 and sync.detail["versions_behind"] == 0
    assert nominal.detail["counters"]["launched_tokens"] <= 600
    assert sync.detail["counters"]["launched_tokens"] <= 600


def test_rung_8_adds_credit_by_the_advantage_blank_alone(tmp_path, monkeypatch):
    """Each credit variant differs from the arm in the advantage blank only (one axis); GiGPO's
    clear win fails the rung; a variant that cannot apply to the arm is its own inconclusive row."""

    zero = [0.0] * 8
    specs = _fake_build_trainer(
        monkeypatch,
        {
            "group_norm": (zero, zero),  # the nominal learns nothing
            "gae": (zero, zero),
            "gigpo": (zero, [1.0] * 7 + [0.0]),
        },
    )
    ladder = _spec_ladder(tmp_path)
    rows = ladder.rung_credit()
    assert [(r.variant, r.status) for r in rows] == [
        ("+prm credit (prm_grpo's advantage blank)", "inconclusive"),  # arithmetic: no step labels
        ("advantage=group_norm (nominal)", "inconclusive"),
        ("+gae credit (ppo_turn's advantage blank)", "inconclusive"),
        ("+gigpo credit (gigpo's advantage blank)", "fail"),
        (VERDICT, "fail"),
    ]
    assert "needs step labels" in rows[0].evidence
    nominal = specs[0]["blanks"]
    for spec in specs[1:]:
        changed = {k for k in nominal if spec["blanks"][k] != nominal[k]}
        assert changed == {"advantage"}  # the arm's Z, clip, KL, data: untouched
    assert specs[1]["blanks"]["advantage"]["critic"]["granularity"] == "turn"

    # DAPO's overlong shaping has no critic form: the critic variant is shown as not applicable
    from sixblanks.algorithms.presets import resolve

    specs.clear()
    ladder.spec["preset"] = "dapo"
    ladder.spec["blanks"] = resolve("dapo").model_dump(mode="json")
    rows = ladder.rung_credit()
    assert rows[0].status == "inconclusive" and "not applicable to this arm" in rows[0].evidence
    assert [s["blanks"]["advantage"]["estimator"] for s in specs] == ["group_norm", "gigpo"]
