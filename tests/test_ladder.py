"""The ablation ladder stops at the rung that explains a planted fault, with evidence naming it;
every rung gives one verdict, passes only on evidence that could have failed it, and every
evaluation the ladder makes scores the validation split."""

import json
import sys
from types import SimpleNamespace

import pytest
import torch

from sixblanks.harness.config import validate_mapping
from sixblanks.harness.layout import LADDER_FROZEN_BATCH
from sixblanks.harness.runspec import RunSpec
from sixblanks.harness.studies.ladder import VERDICT, Ladder, ShortRun, first_failure, verdicts
from sixblanks.harness.studies.ladder.stats import MARGIN, paired_diff_ci
from sixblanks.harness.tasks.builtin import Arithmetic

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

    import sixblanks.harness.studies.ladder.no_update as rungs
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
    # rung 2 stored its frozen batch in the output folder, with the policy it was drawn from
    frozen = tmp_path / "ladder.frozen_batch.pt"
    assert rows[1].detail["file"] == str(frozen) and rows[1].detail["kind"] == "pg"
    assert torch.load(frozen, weights_only=True)["policy"] == str(ladder.warm)
    # every evaluation the ladder made, and the spec its short runs are built from: validation
    assert splits == ["validation"] * 3 and rows[2].detail["split"] == "validation"
    assert ladder.spec.eval["split"] == "validation"
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
    # what the check reads; the rest is a placeholder
    task, ev = {"eval_size": eval_size}, {"size": eval_size}
    ladder.spec = RunSpec("e", "a", "grpo", 0, task, {}, {}, {}, {}, ev, {}, "k", "c")
    ladder.task = make_task("arithmetic")  # reward range [0, 1]
    model = SimpleNamespace(state_dict=lambda: {})
    monkeypatch.setattr(ladder, "_policy", lambda: (model, None))
    monkeypatch.setattr(ladder, "_engine", lambda m, t: _Engine())
    return ladder


def _planted_evaluations(monkeypatch, planted):
    """evaluate() answers the i-th call with planted[i]; records (split, engine version) per
    call."""

    import sixblanks.harness.studies.ladder.no_update as rungs

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
            "engine drift (same weights, new version): 0 of 4 instances changed between the 2 "
            "repeats, 2 after the engine version bump",
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

    return ShortRun(
        engine="HFEngine",
        split="validation",
        scores=final,
        start=start,
        final=sum(final) / len(final),
        start_score=sum(start) / len(start),
    )


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


def _edit(ladder, path: str, value) -> None:
    """Set the key at the dotted ``path`` of the ladder's spec (a frozen RunSpec: a new one)."""

    form = ladder.spec.as_dict()
    *parents, last = path.split(".")
    d = form
    for k in parents:
        d = d[k]
    d[last] = value
    ladder.spec = RunSpec.from_dict(form)


def _fake_build_trainer(monkeypatch, by_estimator, key=None):
    """build_trainer that records each spec and trains nothing: its evaluations are planted per
    advantage estimator (or per ``key(spec)``) as (start, final) per-instance scores."""

    import sixblanks.harness.studies.ladder.short_runs as ladder_mod

    specs = []
    key = key or (lambda spec: spec.blanks["advantage"]["estimator"])

    def build(spec, warm):
        specs.append(spec)
        start, final = by_estimator[key(spec)]
        split = spec.eval["split"]
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
    assert ladder.spec.eval["split"] == "test"
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
    assert [s.eval["split"] for s in specs] == ["validation", "validation"]
    assert {settings_from_spec(s).eval_split for s in specs} == {"validation"}
    assert ladder.spec.eval["split"] == "test"  # the ladder's own copy is not what it changed


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


# ---------------------------------------------------------------- the short runs' result


def test_a_real_short_run_reports_what_its_trainer_recorded(tmp_path, monkeypatch):
    """A real short run from the golden fixture's policy: its ShortRun holds the trainer's first
    and last evaluations per instance, their means, and its steps' gradient norms and trainable
    fractions; a second request for the same setting gets the same (frozen) run back."""

    import statistics
    from dataclasses import FrozenInstanceError

    from sixblanks.harness.training import loop

    real, trained = loop.Trainer.train, []
    monkeypatch.setattr(
        loop.Trainer, "train", lambda tr, **kw: trained.append(real(tr, **kw)) or trained[-1]
    )
    ladder = _curriculum_ladder(tmp_path, "arithmetic")
    run = ladder._train(seed=0, name="a short run")
    (res,) = trained
    n = len(ladder.task.eval_instances(8, "validation"))
    assert n > 1 and len(run.scores) == len(run.start) == n
    assert run.start == tuple(res.evals[0]["per_instance"]) and res.evals[0]["step"] == 0
    assert run.scores == tuple(res.evals[-1]["per_instance"]) and res.evals[-1]["step"] > 0
    # the scores are float32 means: their float64 means agree to rounding
    assert run.start_score == pytest.approx(statistics.fmean(run.start), abs=1e-6)
    assert run.final == pytest.approx(statistics.fmean(run.scores), abs=1e-6)
    grads = [m["grad_norm"] for m in res.steps if "grad_norm" in m]
    assert len(grads) >= 2 and run.grad_norm == pytest.approx(statistics.fmean(grads))
    assert run.grad_norm_max == max(grads)
    assert run.trainable == tuple(m.get("trainable_group_frac") for m in res.steps)
    assert dict(run.counters) == res.ledger.counters and 0 < run.counters["launched_tokens"] <= 300
    # a synchronous arm: nothing behind, nothing dropped, no concurrent collector's split
    assert run.versions_behind == 0.0 and set(run.async_dropped.values()) == {0.0}
    assert dict(run.staleness_split) == dict.fromkeys(
        ("inflight_behind", "queue_behind", "version_span")
    )
    assert (run.diverged, run.error, run.engine, run.split) == (
        False,
        None,
        "HFEngine",
        "validation",
    )
    # its record: every field but the error, in the order rows have always kept them
    d = run.as_dict()
    assert list(d) == [
        *("scores", "start", "final", "start_score", "grad_norm", "grad_norm_max", "trainable"),
        *("counters", "versions_behind", "behavior_kl", "staleness_split", "async_dropped"),
        *("diverged", "engine", "split"),
    ]
    assert d["scores"] == list(run.scores) and d["counters"] == res.ledger.counters
    # the same setting again: not trained again, the same run, which no rung can change
    d["scores"].append(9.0)
    d["counters"]["launched_tokens"] = -1
    assert ladder._train(seed=0, name="the same setting") is run and len(trained) == 1
    assert run.as_dict() == run.as_dict() and run.as_dict()["scores"] == list(run.scores)
    assert run.counters["launched_tokens"] == res.ledger.counters["launched_tokens"]
    with pytest.raises(FrozenInstanceError):
        run.scores = ()
    with pytest.raises(TypeError):
        run.counters["launched_tokens"] = 0


def _rich_build_trainer(monkeypatch):
    """build_trainer whose runs record what a short run reads, per advantage estimator: three
    steps with gradient norms 0.5, 1.5, 2.5 and trainable fractions 0.25, None, 0.5; group_mean's
    also lagged (versions behind 1, 2, 3; behaviour KL 0.25, 0.5, 0.75; 0.5, 1.5, 2.5 of them in
    flight, 0.5 queued, spanning 2; 12 tokens dropped stale in the queue, 3 aborted). Every
    finished run goes from 0 to 1 on all 8 instances; loo's fails at its second step."""

    import sixblanks.harness.studies.ladder.short_runs as ladder_mod
    from sixblanks.harness.training import TrainingError

    def build(spec, warm):
        est = spec.blanks["advantage"]["estimator"]
        lagged = est == "group_mean"
        steps = []
        for i, frac in enumerate([0.25, None, 0.5]):
            m = {"grad_norm": 0.5 + i, "trainable_group_frac": frac}
            if lagged:
                m |= {"lag.versions_behind": 1.0 + i, "mismatch.kl": 0.25 * (i + 1)}
                m |= {"lag.inflight_behind": 0.5 + i, "lag.queue_behind": 0.5}
                m |= {"lag.version_span": 2.0}
            steps.append(m)
        evals = [
            {"per_instance": [v] * 8, "score": v, "split": spec.eval["split"]} for v in (0.0, 1.0)
        ]
        dropped = {"stale_queue": 12.0, "aborted": 3.0} if lagged else {}
        ledger = SimpleNamespace(
            counters={"launched_tokens": 2400.0, "rollouts_launched": 96.0},
            discarded_by_reason=dropped,
        )
        res = SimpleNamespace(steps=steps, evals=evals, ledger=ledger)

        def train(on_step=None):
            if est == "loo":
                raise TrainingError("loss is nan at step 2")
            return res

        return SimpleNamespace(engine=_Engine(), train=train)

    monkeypatch.setattr(ladder_mod, "build_trainer", build)


def test_the_ladder_records_each_short_run_as_its_rows_always_have(tmp_path, monkeypatch):
    """Each setting's row keeps its short run's figures, key for key and in the same order, in
    ladder.json and in the store: a finished run all but its per-instance lists, with its gain
    (and, a variant, its difference from the nominal); a diverged one its error."""

    from sixblanks.harness.store.database import connect

    _rich_build_trainer(monkeypatch)
    ladder = _spec_ladder(tmp_path)
    ladder.cfg.ladder.advantage_variants = ["group_norm", "loo", "group_mean"]
    ladder.results = ladder.rung_advantage()
    ladder.save(0.0)
    plain = {
        "final": 1.0,
        "start_score": 0.0,
        "grad_norm": 1.5,
        "grad_norm_max": 2.5,
        "counters": {"launched_tokens": 2400.0, "rollouts_launched": 96.0},
        "versions_behind": 0.0,
        "behavior_kl": None,
        "staleness_split": {"inflight_behind": None, "queue_behind": None, "version_span": None},
        "async_dropped": dict.fromkeys(
            ["stale_inflight", "stale_queue", "staleness", "aborted", "unconsumed"], 0.0
        ),
        "diverged": False,
        "engine": "_Engine",
        "split": "validation",
        "gain": [1.0, 1.0, 1.0],
    }
    lagged = plain | {
        "versions_behind": 2.0,
        "behavior_kl": 0.5,
        "staleness_split": {"inflight_behind": 1.5, "queue_behind": 0.5, "version_span": 2.0},
        "async_dropped": plain["async_dropped"] | {"stale_queue": 12.0, "aborted": 3.0},
        "vs_nominal": [0.0, 0.0, 0.0],
    }
    failed = {
        "error": "loss is nan at step 2",
        "diverged": True,
        "grad_norm": None,
        "engine": "_Engine",
        "split": "validation",
    }
    want = {
        "advantage=group_norm (nominal)": ("pass", plain),
        "advantage=loo": ("pass", failed),
        "advantage=group_mean": ("inconclusive", lagged),
    }
    stored = json.loads((tmp_path / "ladder.json").read_text())["rungs"]
    assert [r["variant"] for r in stored] == [*want, VERDICT]
    for row in stored[:-1]:
        status, detail = want[row["variant"]]
        assert row["status"] == status and json.dumps(row["detail"]) == json.dumps(detail)
    assert stored[0]["evidence"] == (
        "a measurable gain over the warm start: score 0.000 -> 1.000 (gain +1.000 [+1.000, "
        "+1.000]) grad norm mean 1.5 max 2.5"
    )
    assert stored[1]["evidence"] == (
        "diverged (loss is nan at step 2) while the nominal setting did not: no better than it"
    )
    con = connect(tmp_path, read_only=True)
    details = con.sql("SELECT variant, detail FROM ladder WHERE variant <> 'verdict'").fetchall()
    con.close()
    assert sorted(details) == sorted((k, json.dumps(d)) for k, (_, d) in want.items())


# ---------------------------------------------------------------- rung 2: every kind of arm


@pytest.fixture(scope="module")
def initial():
    """The golden fixture's initial policy on arithmetic, loaded once."""

    from tests.short_runs import golden_initial

    return golden_initial()


def _rung_2(initial, preset, out):
    from sixblanks.algorithms.presets import resolve
    from sixblanks.harness.rollout.engine import HFEngine
    from sixblanks.harness.studies.ladder.frozen_batch import frozen_batch_rung

    cfg, task, model, tok = initial
    return frozen_batch_rung(
        HFEngine(model, tok), model, tok, task, cfg.rollout, resolve(preset), out
    )


@pytest.mark.parametrize(
    "preset, kind", [("grpo", "pg"), ("ppo", "critic"), ("dpo", "dpo"), ("sft", "sft")]
)
def test_rung_2_reproduces_the_arms_own_update_on_a_batch_stored_to_disk(
    initial, tmp_path, monkeypatch, preset, kind
):
    """Each kind of arm: its own objective's update, computed three times from the batch reloaded
    from disk; a critic's advantages come from its critic (GAE), not A = 0; DPO's loss at the
    reference is log 2 on every pair; no weight moves."""

    import math

    import sixblanks.harness.studies.ladder.frozen_batch as rungs
    from sixblanks.algorithms.presets import resolve

    real, loads = rungs.load_frozen_batch, []
    monkeypatch.setattr(rungs, "load_frozen_batch", lambda p: loads.append(p) or real(p))
    model = initial[2]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    row, v = _rung_2(initial, preset, tmp_path)
    assert (row.status, v.status) == ("pass", "pass"), row.evidence
    path = tmp_path / LADDER_FROZEN_BATCH
    assert row.detail["file"] == str(path) and loads == [path] * 3  # every computation reloads it
    assert row.detail["kind"] == kind and v.evidence.startswith(f"the {rungs.KINDS[kind]} repro")
    stored, p, record = real(path)
    assert stored == kind and record["blanks"]["objective"] == resolve(preset).objective
    losses = row.detail["loss"]
    assert row.detail["grad.policy"]["abs_max"] > 0
    if kind == "critic":
        # the critic's advantages (GAE on its values), and its value loss and gradient, checked
        assert float((p.tensors["adv"] * p.mask).abs().max()) > 0 and "ret" in p.tensors
        assert losses["value_loss"][0] > 0 and row.detail["grad.critic"]["abs_max"] > 0
    if kind == "dpo":  # chosen rows, then rejected: the pairs of the frozen batch
        assert p.units >= 2 and p.batch.size == 2 * p.units and "ref_logp" in p.tensors
        assert row.detail["unit"] == "pairs" and row.detail["micro_batch_sizes"][2] < p.units
        assert (p.batch.reward[: p.units] > p.batch.reward[p.units :]).all()
        assert losses["loss"][0] == pytest.approx(math.log(2), abs=1e-6)
    if kind == "sft":
        assert row.detail["data"] == "16 oracle demonstrations"
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "preset, module, name",
    [
        ("grpo", "pg_pass", "policy_loss"),  # the policy-gradient objective's update pass
        ("ppo", "actor_critic", "value_loss"),
        ("dpo", "dpo", "dpo_loss"),
        ("sft", "sft", "sft_loss"),
    ],
)
def test_rung_2_fails_an_update_that_depends_on_its_micro_batches(
    initial, tmp_path, monkeypatch, preset, module, name
):
    """A loss planted in the objective's own module (a per-micro-batch quantity where a sum
    belongs: scaled by the micro-batch's size) fails the rung: it checks the code that runs."""

    import importlib

    mod = importlib.import_module(f"sixblanks.harness.training.objectives.{module}")
    real = getattr(mod, name)

    def planted(*args, **kwargs):
        n = next(a for a in args if isinstance(a, torch.Tensor)).shape[0]
        out = real(*args, **kwargs)
        return (out[0] * n, *out[1:]) if isinstance(out, tuple) else out * n

    monkeypatch.setattr(mod, name, planted)
    row, v = _rung_2(initial, preset, tmp_path)
    assert (row.status, v.status) == ("fail", "fail"), row.evidence
    assert row.evidence.startswith("update not reproducible on a frozen batch: ")
    assert v.evidence.endswith(f"({tmp_path / 'ladder.frozen_batch.pt'} replays it)")
    assert max(d["rel_diff_split"] for k, d in row.detail.items() if k.startswith("grad.")) > 1e-3


# ---------------------------------------------------------------- rung 4: reward variance


class AlwaysRight(Arithmetic):
    """Planted: every response scores 1, so every group's rewards are all equal."""

    name = "always_right"

    def verify(self, instance, response):
        return 1.0


class AlwaysWrong(Arithmetic):
    """Planted: every response scores 0."""

    name = "always_wrong"

    def verify(self, instance, response):
        return 0.0


def _spy_instances(monkeypatch, task) -> list[int]:
    """The seeds ``task.instances`` is asked for from now on (appended as it is called)."""

    seen: list[int] = []
    real = task.instances

    def instances(seeds):
        seen.extend(seeds)
        return real(seeds)

    monkeypatch.setattr(task, "instances", instances)
    return seen


def _curriculum_ladder(tmp_path, task: str):
    """A ladder on ``task`` from the golden fixture's initial policy (no warm start of its own),
    its short runs under 300 launched tokens and evaluated on 8 validation instances."""

    from sixblanks.harness.orchestration.orchestrator import build_specs
    from sixblanks.harness.tasks import make_task
    from tests.golden.record import INITIAL_DIR

    cfg = _cfg(task={"name": task, "eval_size": 8})
    ladder = Ladder(cfg, tmp_path)
    ladder.spec = build_specs(cfg, "warm", code="test")[0]
    _edit(ladder, "budget", {"launched_tokens": 300})
    _edit(ladder, "eval.every", None)
    ladder.task, ladder.warm = make_task(task), INITIAL_DIR
    return ladder


@pytest.mark.parametrize(
    "task, status",
    [
        ("tests.test_ladder:AlwaysRight", "fail"),
        ("tests.test_ladder:AlwaysWrong", "fail"),
        ("arithmetic", "pass"),
    ],
)
def test_rung_4_fails_when_no_group_has_reward_variance(tmp_path, task, status):
    """A real short run: a verifier that scores every response alike leaves no group with reward
    variance (too easy, too hard): the rung fails; the fixture's policy on arithmetic passes."""

    row, v = _curriculum_ladder(tmp_path, task).rung_curriculum()
    assert (row.status, v.status) == (status, status), row.evidence
    tr = row.detail["trainable"]
    assert len(tr) >= 2 and row.detail["split"] == "validation"
    if status == "fail":
        assert set(tr) == {0.0}
        assert v.evidence == "no group has reward variance (every task too easy or too hard)"
    else:
        assert row.detail["trainable_mean"] >= 0.1 and v.evidence.endswith("over a short run")
    # arithmetic's difficulty (digits of the answer): 1 and 2
    assert set(row.detail["difficulty_hist"]) == {"1", "2"}


@pytest.mark.parametrize(
    "trainable, diverged, status, phrase",
    [
        ([], False, "inconclusive", "no training step fit the rung budget"),
        ([None, None], False, "inconclusive", "no step measured the trainable-group fraction"),
        ([0.0, 0.0, 0.0], False, "fail", "no group has reward variance"),
        ([0.0, 0.1, 0.05], False, "inconclusive", "only 0.05 of the groups carry"),
        ([0.5, 0.25], False, "pass", "0.38 of the groups carry a learning signal"),
        ([0.5], True, "inconclusive", "the short run diverged: loss is nan"),
    ],
)
def test_rung_4_verdict_on_planted_short_runs(
    tmp_path, monkeypatch, trainable, diverged, status, phrase
):
    from sixblanks.harness.tasks import make_task

    ladder = Ladder(_cfg(), tmp_path)
    ladder.task, ladder.seeds = make_task("guess_number"), [0]
    out = ShortRun("HFEngine", "validation", trainable=trainable)
    if diverged:
        out = ShortRun("HFEngine", "validation", diverged=True, error="loss is nan")
    monkeypatch.setattr(ladder, "_train", lambda **kw: out)
    seen = _spy_instances(monkeypatch, ladder.task)
    row, v = ladder.rung_curriculum()
    # the histogram counts training problems: 200 of them, not one a held-out secret
    assert len(seen) == 200 and all(ladder.task.trains_on(s) for s in seen)
    assert (row.status, v.status) == (status, status) and phrase in v.evidence
    # guess_number 1-16: the guesses bisection needs (1 to 5), not one bar
    hist = row.detail.get("difficulty_hist") or row.detail["hist"]
    assert set(hist) == {"1", "2", "3", "4", "5"}


# ---------------------------------------------------------------- rung 6: scale-matched Z


def test_rung_6_runs_each_z_as_is_and_scale_matched(tmp_path, monkeypatch):
    """The nominal seq-mean-token-mean sums its weights to 1 on any batch; on a planted batch of
    2, 4, 2 and 4 action tokens (L_max 6) token-mean sums to 1 too, constant to 12 / (4 x 6) = 0.5
    and token-sum to 12: constant and token-sum also run scale-matched, their gradient-norm clip
    x0.5 and x12. Constant wins only with its own scale (a changed step size); token-sum wins
    scale-matched too (estimator bias)."""

    import sixblanks.harness.rollout.agent as agent
    from sixblanks.harness.tasks import make_task

    mask = torch.zeros(4, 6)
    for i, n in enumerate([2, 4, 2, 4]):
        mask[i, :n] = 1
    batch = SimpleNamespace(
        action_mask=mask,
        size=4,
        unit_ids=lambda rows: {"group_ids": torch.tensor([0, 0, 1, 1]), "turn_ids": mask - 1},
    )
    monkeypatch.setattr(agent, "run_episodes", lambda *a, **kw: batch)
    zero, half = [0.0] * 8, [1.0] * 4 + [0.0] * 4
    planted = {
        ("seq-mean-token-mean", 1.0): (zero, half),  # the nominal
        ("token-mean", 1.0): (zero, [1.0] * 2 + [0.0] * 6),  # worse: passes
        ("constant", 1.0): (zero, [1.0] * 8),  # +0.5: wins
        ("constant", 0.5): (zero, [1.0] * 3 + [0.0] * 5),  # scale-matched: no better
        ("token-sum", 1.0): (zero, [1.0] * 8),
        ("token-sum", 12.0): (zero, [1.0] * 8),  # scale-matched: still wins
    }
    planted |= {(m, None): v for (m, c), v in planted.items() if c == 1.0}
    specs = _fake_build_trainer(
        monkeypatch,
        planted,
        key=lambda s: (s.blanks["normalization"]["mode"], s.optimizer["grad_clip"]),
    )
    ladder = _spec_ladder(tmp_path)
    ladder.cfg.ladder.normalization_variants = ["token-mean", "constant", "token_sum"]
    ladder.task = make_task("arithmetic")  # its batch is planted: no policy, no engine
    monkeypatch.setattr(ladder, "_policy", lambda: (None, None))
    monkeypatch.setattr(ladder, "_engine", lambda m, t: None)
    seen = _spy_instances(monkeypatch, ladder.task)
    rows = ladder.rung_normalization()
    # the rung's batch poses training problems only (arithmetic's seeds 0..7 include test ones)
    assert seen and all(ladder.task.trains_on(s) for s in seen)
    assert [(r.variant, r.status) for r in rows] == [
        ("Z=seq-mean-token-mean (nominal)", "pass"),
        ("Z=token-mean", "pass"),
        ("Z=constant", "fail"),
        ("Z=constant (scale-matched: grad_clip x0.5)", "pass"),
        ("Z=token-sum", "fail"),
        ("Z=token-sum (scale-matched: grad_clip x12)", "fail"),
        (VERDICT, "fail"),
    ]
    assert [s.optimizer["grad_clip"] for s in specs] == [1.0, 1.0, 1.0, 0.5, 1.0, 12.0]
    assert [r.detail["scale_ratio"] for r in rows[1:-1]] == [1.0, 0.5, 0.5, 12.0, 12.0]
    assert [r.detail["scale_matched"] for r in rows[1:-1]] == [True, False, True, False, True]
    v = rows[-1]
    assert v.detail["scale"]["Z=constant"]["total_weight"] == 0.5
    for said in (
        "Z=token-mean changes the weighting only (the same total loss weight)",
        "Z=constant changes the weighting and the gradient scale (total loss weight x0.5 of the "
        "nominal's), Z=constant (scale-matched: grad_clip x0.5) the weighting only",
        "Z=constant wins only with its own gradient scale (Z=constant (scale-matched: grad_clip "
        "x0.5) passes): a changed step size, not estimator bias",
        "Z=token-sum wins with its step size matched too: estimator bias",
    ):
        assert said in v.evidence, v.evidence

    # without a gradient-norm clip AdamW ignores a constant scale: no scale-matched variant
    specs.clear()
    _edit(ladder, "optimizer.grad_clip", None)
    rows = ladder.rung_normalization()
    assert [r.variant for r in rows] == [
        "Z=seq-mean-token-mean (nominal)",
        "Z=token-mean",
        "Z=constant",
        "Z=token-sum",
        VERDICT,
    ]
    assert "Z=constant changes the weighting only (optimizer.grad_clip off" in rows[-1].evidence

    # a step's scale is its minibatch's: with 2 minibatches (rows 0-1 and 2-3, 6 tokens each)
    # token-sum sums to 6 a step, not the batch's 12; the mean modes still to 1 each
    _edit(ladder, "optimizer.grad_clip", 1.0)
    _edit(ladder, "blanks.data.minibatches", 2)
    batch.unit_ids = lambda rows: {
        "group_ids": torch.tensor([0, 0, 1, 1])[rows],
        "turn_ids": (mask - 1)[rows],
    }
    totals = ladder._total_loss_weights(["seq-mean-token-mean", "token-mean", "token-sum"])
    assert totals == {"seq-mean-token-mean": 1.0, "token-mean": 1.0, "token-sum": 6.0}
    # an actor-critic arm: its critic steps under the same clip, its value loss a token mean
    # whatever Z is, so no variant is scale-matched, and the verdict says why
    _edit(ladder, "blanks.data.minibatches", 1)
    _edit(ladder, "blanks.advantage.estimator", "gae")
    rows = ladder.rung_normalization()
    assert not any("scale-matched" in r.variant for r in rows)
    assert (
        "Z=token-sum changes the weighting and the gradient scale (total loss weight x12 of "
        "the nominal's), with no scale-matched twin: the arm's critic" in rows[-1].evidence
    )


def test_rung_9_compares_the_lagged_arm_with_its_synchronous_setting(tmp_path, monkeypatch):
    """A lagged arm (data.lag 4, no staleness bound) that the synchronous setting beats on 6 of 8
    instances fails rung 9; a synchronous arm has nothing to compare."""

    import sixblanks.harness.studies.ladder.short_runs as ladder_mod

    zero = [0.0] * 8
    specs = []

    def build(spec, warm):
        specs.append(spec)
        lag = spec.blanks["data"]["lag"]
        final = zero if lag else [1.0] * 6 + [0.0] * 2  # the planted fault: the lag learns nothing
        evals = [
            {"per_instance": p, "score": sum(p) / 8, "split": "validation"} for p in (zero, final)
        ]
        res = SimpleNamespace(steps=[], evals=evals, ledger=SimpleNamespace(counters={}))
        return SimpleNamespace(engine=_Engine(), train=lambda on_step=None: res)

    monkeypatch.setattr(ladder_mod, "build_trainer", build)
    ladder = _spec_ladder(tmp_path)
    assert [r.status for r in ladder.rung_asynchrony()] == ["inconclusive", "inconclusive"]
    _edit(ladder, "blanks.data.lag", 4)
    rows = ladder.rung_asynchrony()
    assert [(r.variant, r.status) for r in rows] == [
        ("lag=4 (nominal)", "inconclusive"),
        ("lag=0 (synchronous)", "fail"),
        (VERDICT, "fail"),
    ]
    assert rows[-1].evidence.startswith(
        "lag=0 (synchronous) beats the nominal lag=4 (nominal) by +0.750"
    )
    assert [s.blanks["data"]["lag"] for s in specs] == [4, 0]  # the same arm, lag removed
    assert first_failure(rows) is rows[-1]


@pytest.mark.slow
def test_learning_rate_far_too_high_stops_at_rung_7_and_default_arm_passes(
    tmp_path, cli, write_yaml, capsys, monkeypatch
):
    """Also: with stderr not a terminal, each short run says each evaluation and how it ended."""

    import yaml

    bad = _cfg(
        arms={"grpo": {"preset": "grpo", "optimizer": {"lr": 3.0}}},
        # x1e-4 (lr 3e-4) still costs the policy half its score in the rung's budget, which puts
        # its lead over lr=3's collapse near the margin, on one CPU above it and on another not;
        # x1e-5 keeps the warm start's score: a lead of about 0.2, far past the margin
        ladder={"lr_factors": [1e-5, 1.0]},
        # one-digit arithmetic holds 25 validation problems: one greedy answer each cannot put the
        # collapse at lr=3 past the margin; 16 samples each measure every problem's success rate
        eval={"samples": 16, "temperature": 0.5},
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
    assert "lr=3e-05" in fail.evidence or "diverged" in fail.evidence
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
def test_a_lagged_arm_runs_rung_9_for_real_and_its_verdict_follows_the_margin_rule(
    tmp_path, cli, write_yaml
):
    """`sixblanks ladder --arm` on a lagged arm runs rung 9 for real: both settings train under the
    rung budget on the same validation problems, the lagged one really behind, and the verdict, the
    exit code and the evidence follow the margin rule applied to the interval the row reports.

    On held-out problems of one-digit arithmetic this budget cannot say which setting wins (both
    lose some of the warm start's 0.18, the lag more: 0.06 against 0.16, paired interval
    [-0.04, +0.25] on 25 problems): a testbed where the policy learns what it is not trained on is
    what a test that the ladder stops here needs."""

    import yaml

    data = json.loads(json.dumps(BASE))
    data["task"]["eval_size"] = 128
    # the 25 validation problems of one-digit arithmetic, each scored on 16 samples
    data["eval"] = {"samples": 16, "temperature": 0.5}
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
    rows = json.loads(out)
    verdicts = _one_verdict_per_rung(rows)
    assert set(verdicts) == set(range(1, 10))  # it walked every rung
    nominal, sync = (r for r in rows if r["rung"] == 9 and r["variant"] != VERDICT)
    assert nominal["variant"] == "lag=32 (nominal)" and sync["variant"] == "lag=0 (synchronous)"
    # really lagged: its samples were behind and measurably off the current policy; the
    # synchronous setting sampled on-policy
    assert nominal["detail"]["versions_behind"] > 10 and nominal["detail"]["behavior_kl"] > 1e-3
    assert sync["detail"]["versions_behind"] == 0 and sync["detail"]["behavior_kl"] < 1e-6
    assert verdicts[9]["detail"]["n"] == 25 and verdicts[9]["detail"]["split"] == "validation"
    lo, hi = sync["ci_low"], sync["ci_high"]
    assert lo <= sync["detail"]["vs_nominal"][0] <= hi
    expected = "fail" if lo > MARGIN else "pass" if hi <= MARGIN else "inconclusive"
    assert sync["status"] == expected and verdicts[9]["status"] == expected
    failed = [r for r, v in verdicts.items() if v["status"] == "fail"]
    assert (code == 1) == bool(failed) and (code == 1 or code == 0), err
    if expected == "fail":
        assert "rung 9 (asynchrony) failed" in err
        assert verdicts[9]["evidence"].startswith("lag=0 (synchronous) beats the nominal lag=32")


def test_rung_9_runs_a_concurrent_arm_against_its_synchronous_setting(tmp_path):
    """An arm with a concurrent collector: rung 9 trains it for real (rounds sampled ahead in a
    process of its own) and its synchronous setting (no collector, no lag), paired."""

    data = json.loads(json.dumps(BASE))
    stream = {"queue": 2, "consume": "episode", "partial": "resume"}
    data["arms"] = {"async": {"preset": "grpo", "blanks": {"data": {"concurrent": stream}}}}
    data["ladder"] = {"budget": {"launched_tokens": 600}}
    ladder = Ladder(validate_mapping(data), tmp_path)
    ladder.prepare()
    rows = ladder.rung_asynchrony()
    nominal, sync, final = rows
    assert (nominal.variant, sync.variant, final.variant) == (
        "concurrent queue=2, each group as it finishes, partial resume (nominal)",
        "lag=0 (synchronous)",
        VERDICT,
    )
    # sampled ahead by the collector: behind the trainer; the synchronous setting never is
    assert nominal.detail["versions_behind"] > 0.5 and sync.detail["versions_behind"] == 0
    # the verdict says where the lag passed: the nominal run's own split, in flight and queued
    split = nominal.detail["staleness_split"]
    assert final.detail["staleness_split"]["inflight_behind"] == split["inflight_behind"]
    assert f"{split['inflight_behind']:.2f} passed while they were generated" in final.evidence
    assert f"{split['queue_behind']:.2f} while they waited to be consumed" in final.evidence
    # in flight plus queued is the whole lag (each step's means add up)
    whole = split["inflight_behind"] + split["queue_behind"]
    assert whole == pytest.approx(nominal.detail["versions_behind"], abs=1e-9)
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
    nominal = specs[0].blanks
    for spec in specs[1:]:
        changed = {k for k in nominal if spec.blanks[k] != nominal[k]}
        assert changed == {"advantage"}  # the arm's Z, clip, KL, data: untouched
    assert specs[1].blanks["advantage"]["critic"]["granularity"] == "turn"

    # DAPO's overlong shaping has no critic form: the critic variant is shown as not applicable
    from sixblanks.algorithms.presets import resolve

    specs.clear()
    _edit(ladder, "preset", "dapo")
    _edit(ladder, "blanks", resolve("dapo").model_dump(mode="json"))
    rows = ladder.rung_credit()
    assert rows[0].status == "inconclusive" and "not applicable to this arm" in rows[0].evidence
    assert [s.blanks["advantage"]["estimator"] for s in specs] == ["group_norm", "gigpo"]


def test_rung_4_names_why_an_arm_measures_no_groups(tmp_path, monkeypatch):
    """Steps that measured no group: one sample per prompt, or a collector that samples no
    groups of the policy's own (DPO's pairs)."""

    from sixblanks.harness.tasks import make_task

    for arm, phrase in (
        ({"preset": "reinforce_baseline", "blanks": {"data": {"group_size": 1}}}, "one response"),
        ({"preset": "dpo"}, "data.source 'preference_pairs'"),
    ):
        ladder = Ladder(_cfg(arms={"a": arm}, ladder={"arm": "a"}), tmp_path)
        ladder.task, ladder.seeds = make_task("arithmetic"), [0]
        out = ShortRun("HFEngine", "validation", trainable=[None, None])
        monkeypatch.setattr(ladder, "_train", lambda out=out, **kw: out)
        _, v = ladder.rung_curriculum()
        assert v.status == "inconclusive" and phrase in v.evidence, v.evidence
