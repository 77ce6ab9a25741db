"""Process credit with a second model: the explicit PRM ('prm') and PRIME's implicit PRM
('prime'): estimators against hand-computed values, the accuracy filter, the PRIME intervention
test, and both presets end to end on chain_arithmetic."""

import copy
import json
import math
import random
import re

import pytest
import torch

from sixblanks.algorithms.advantages import prime, prm
from sixblanks.algorithms.data import group_verdicts
from sixblanks.algorithms.presets import resolve
from tests.conftest import Saved

D = torch.float64
# one task group of three episodes: two take two turns (two tokens each), the third one turn
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=D)
TURN_IDS = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, -1, -1]])
R = torch.tensor([1.0, 0.0, 1.0], dtype=D)
G = torch.tensor([0, 0, 0])
NAN = float("nan")
SCORES = torch.tensor([[0.9, 0.8], [0.2, 0.6], [0.5, NAN]], dtype=D)


# one worker builds the module-scoped fixtures once (split across two, each built its own)
pytestmark = pytest.mark.xdist_group("process_credit")


def _norm(xs):
    """(x - mean) / (std ddof 1 + 1e-6), by hand."""

    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return [(x - m) / (sd + 1e-6) for x in xs]


def _prm(mode, outcome, penalty=None):
    return prm(R, MASK, G, TURN_IDS, SCORES, mode, outcome, token_penalty=penalty)


def test_prm_sum_and_min_by_hand():
    a_sum = _norm([0.9 + 0.8 + 1, 0.2 + 0.6 + 0, 0.5 + 1])  # outcome kept
    a_min = _norm([0.8, 0.2, 0.5])  # outcome dropped
    for mode, outcome, want in (("sum", True, a_sum), ("min", False, a_min)):
        adv = _prm(mode, outcome)
        expect = torch.tensor([[w] * 4 for w in want]) * MASK
        assert torch.allclose(adv.double(), expect, atol=1e-6), mode


def test_prm_step_scores_as_advantages_by_hand():
    """DeepSeekMath process supervision: scores normalized over the group's five steps, summed
    from each step on, plus the group-normalized outcome."""

    z = dict(zip((0.9, 0.8, 0.2, 0.6, 0.5), _norm([0.9, 0.8, 0.2, 0.6, 0.5])))
    o = _norm([1.0, 0.0, 1.0])
    want = [
        [z[0.9] + z[0.8] + o[0]] * 2 + [z[0.8] + o[0]] * 2,
        [z[0.2] + z[0.6] + o[1]] * 2 + [z[0.6] + o[1]] * 2,
        [z[0.5] + o[2]] * 2 + [0.0, 0.0],
    ]
    assert torch.allclose(_prm("advantage", True).double(), torch.tensor(want, dtype=D), atol=1e-5)
    without = _prm("advantage", False)
    assert without[2, 0].item() == pytest.approx(z[0.5], abs=1e-5)


def test_prm_kl_in_the_reward_reaches_each_step():
    pen = torch.zeros(3, 4, dtype=D)
    pen[1, 2:] = 0.1  # episode 1's second turn: 0.2 of KL penalty
    adv = _prm("sum", False, pen)
    want = _norm([1.7, 0.6, 0.5])
    assert adv[:, 0].double().tolist() == pytest.approx(want, abs=1e-5)


def test_prime_by_hand_exact_leave_one_out():
    r = torch.tensor([[0.1, -0.2, 0.3, 0.0], [0.2, 0.2, 0.0, 0.0], [-0.1, 0.4, 0.1, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=D)
    adv = prime(R, mask, G, r)
    means = [0.2 / 3, 0.4 / 2, 0.4 / 3]  # r(y^j) / |y^j|
    for i in range(3):
        others = [j for j in range(3) if j != i]
        base_p = sum(means[j] for j in others) / 2
        base_r = sum(float(R[j]) for j in others) / 2
        n = int(mask[i].sum())
        for t in range(4):
            want = (
                sum(float(r[i, s]) - base_p for s in range(t, n)) + float(R[i]) - base_r
                if t < n
                else 0.0
            )
            assert adv[i, t].item() == pytest.approx(want, abs=1e-6), (i, t)
    assert adv[0, 0].item() == pytest.approx(0.2, abs=1e-6)  # worked out on paper
    alone = prime(R[:1], mask[:1], G[:1], r[:1])  # a group of one: no baselines, A = 0
    assert alone.abs().sum() == 0


def test_prm_and_prime_keep_task_groups_apart_by_hand():
    """Two task groups (a second one of two episodes), with gaps in the masks: baselines never mix
    groups. prime with KL in the reward and singleton 'raw'; prm min with the outcome kept."""

    mask = torch.tensor(
        [[1, 1, 0, 1], [1, 1, 0, 1], [1, 1, 0, 0], [1, 0, 0, 1], [1, 1, 0, 1]], dtype=D
    )  # position 2: an observation token
    turn_ids = torch.tensor(
        [[0, 0, -1, 1], [0, 0, -1, 1], [0, 0, -1, -1], [0, -1, -1, 1], [0, 0, -1, 1]]
    )
    R = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0], dtype=D)
    groups = torch.tensor([0, 0, 0, 7, 7])
    scores = torch.tensor([[0.9, 0.8], [0.2, 0.6], [0.5, NAN], [0.4, 0.7], [0.3, 0.1]], dtype=D)
    adv = prm(R, mask, groups, turn_ids, scores, "min", True)
    g0 = _norm([0.8 + 1, 0.2 + 0, 0.5 + 1])
    g1 = _norm([0.4 + 1, 0.1 + 0])
    want = [g0[0], g0[1], g0[2], g1[0], g1[1]]
    assert adv[:, 0].double().tolist() == pytest.approx(want, abs=1e-6)
    assert adv[:, 2].abs().sum() == 0  # the observation token gets nothing

    r = torch.tensor(
        [
            [0.1, 0.2, 9.0, 0.3],
            [0.0, 0.1, 9.0, 0.2],
            [0.3, 0.1, 0.0, 0.0],
            [0.2, 0.0, 9.0, 0.4],
            [0.1, 0.3, 9.0, 0.0],
        ],
        dtype=D,
    )  # 9.0 sits under the mask's gap: it must never count
    pen = 0.05 * mask
    got = prime(R, mask, groups, r, "raw", pen)
    for i, members in ((0, (0, 1, 2)), (3, (3, 4))):
        n = {j: int(mask[j].sum()) for j in members}
        rr = {
            j: [float(r[j, t] - pen[j, t]) if mask[j, t] else 0.0 for t in range(4)]
            for j in members
        }
        per = {j: sum(rr[j]) / n[j] for j in members}
        others = [j for j in members if j != i]
        base_p = sum(per[j] for j in others) / len(others)
        base_r = sum(float(R[j]) for j in others) / len(others)
        to_go = sum(rr[i][t] - base_p for t in range(4) if mask[i, t])
        assert got[i, 0].item() == pytest.approx(to_go + float(R[i]) - base_r, abs=1e-6)
    alone = prime(R[:1], mask[:1], groups[:1], r[:1], "raw")  # no baselines: raw returns
    assert alone[0, 0].item() == pytest.approx(0.1 + 0.2 + 0.3 + 1.0, abs=1e-6)


def test_explain_shows_the_new_presets_blanks(cli):
    code, out, _ = cli("explain", "prm_grpo", "prime", "branch_grpo", "--json")
    assert code == 0
    data = json.loads(out)["blanks"]
    assert data["prm_grpo"]["advantage.prm.mode"] == "advantage"
    assert data["prime"]["advantage.prime.beta"] == 0.05
    assert data["prime"]["data.accuracy_filter"] == [0.2, 0.8]
    assert data["branch_grpo"]["data.branching.width"] == 4
    assert data["branch_grpo"]["advantage.estimator"] == "turn_return"


def test_accuracy_filter_drops_groups_outside_the_band():
    rewards = torch.tensor([1.0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1])  # means 0.75, 0.25, 1
    groups = torch.tensor([0] * 4 + [1] * 4 + [2] * 4)
    assert group_verdicts(rewards, groups, (0.2, 0.8)) == {0: "keep", 1: "keep", 2: "all_correct"}
    assert group_verdicts(rewards, groups, (0.3, 0.7)) == {
        0: "accuracy",
        1: "accuracy",
        2: "all_correct",
    }
    assert group_verdicts(rewards, groups) == {0: "keep", 1: "keep", 2: "all_correct"}
    with pytest.raises(ValueError, match="dynamic_sampling"):
        resolve("grpo", {"data": {"accuracy_filter": (0.2, 0.8)}})


# ----------------------------------------------------------------------------- PRIME's implicit PRM


class _Scripted:
    """A rollout engine that answers each chain_arithmetic step right or, with probability ``p``,
    with one digit changed: labelled data for the implicit PRM without a trained policy."""

    policy_version = 0

    def __init__(self, tok, p: float, seed: int):
        self.tok, self.p, self.rng = tok, p, random.Random(seed)

    def generate(self, prompts, params, n=1, generator=None):
        from sixblanks.harness.rollout.engine import Generation

        out = []
        for ids in prompts:
            text = self.tok.decode(ids, skip_special_tokens=True)
            value = int(re.match(r"\s*(-?\d+)", text).group(1))
            value += sum(int(op) for op in re.findall(r"([+-]\d+)=", text))  # the true chain
            ans = str(value)
            if self.rng.random() < self.p:
                i = len(ans) - 1
                ans = ans[:i] + str((int(ans[i]) + self.rng.randint(1, 9)) % 10)
            t = self.tok(ans + "\n", add_special_tokens=False)["input_ids"]
            out.append([Generation(t, [0.0] * len(t), "stop")])
        return out

    def load_weights(self, state_dict=None):
        pass


@pytest.fixture(scope="module")
def chain_all():
    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task

    torch.manual_seed(0)
    task = make_task("chain_arithmetic", {"steps": 2, "outcome": "all"})
    model, tok = load_policy(ModelConfig(), [task])
    return task, model, tok


def test_prime_intervention_a_corrupted_step_loses_process_reward(chain_all):
    """Trained on outcome labels only, the implicit PRM's process reward must drop at a step that
    is corrupted, and predict held-out outcomes; untrained (pi_phi = pi_ref) it cannot."""

    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import SamplingParams
    from sixblanks.harness.training.context import frozen_copy
    from sixblanks.harness.training.policy import policy_logprobs
    from sixblanks.harness.training.process_reward import ImplicitPRM, auc, intervention

    task, model, tok = chain_all
    ref = frozen_copy(model)

    def score(m, b, grad=False):
        with torch.enable_grad() if grad else torch.no_grad():
            return policy_logprobs(m, b.tokens, b.attention_mask)[0]

    params = SamplingParams(temperature=1.0, max_new_tokens=4)
    instances = task.instances(list(range(8)))

    def episodes(p, seed, g=4):
        return run_episodes(_Scripted(tok, p, seed), tok, task, instances, g, params)

    prm = ImplicitPRM(model, beta=0.1, lr=3e-3)
    clean = episodes(0.0, 99, 2)
    assert bool((clean.reward == 1).all())
    before = intervention(prm, ref, clean, task, tok, score, 16, random.Random(0))
    assert before["prime.intervention_n"] == 16 and before["prime.intervention_frac"] == 0.0
    for step in range(50):
        b = episodes(0.3, step)
        prm.train_step(b, score(ref, b), score, 32, 1.0)
    after = intervention(prm, ref, clean, task, tok, score, 16, random.Random(0))
    assert after["prime.intervention_frac"] >= 0.75 and after["prime.intervention_drop"] > 0
    held = episodes(0.3, 1234)
    z = prm.sequence_logits(score(prm.phi, held), score(ref, held), held.action_mask)
    assert auc(z, held.reward) > 0.8


# ----------------------------------------------------------------------------- presets end to end

CHAIN = {"steps": 2, "outcome": "all"}


@pytest.fixture(scope="module")
def chain_warm(tmp_path_factory):
    """A policy warm-started on chain_arithmetic (2 steps, reward only when both are right)."""

    from tests.conftest import warm_policy

    return warm_policy(
        tmp_path_factory,
        "chain_arithmetic",
        CHAIN,
        {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 4},
        {"steps": 40, "num_demos": 400},
    )


def _train(chain_warm, preset, overrides=None, budget=240.0, run=True):
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = chain_warm
    s = RunSettings(
        resolve(preset, overrides or {}),
        cfg.rollout,
        cfg.optimizer,
        {"launched_tokens": budget},
        0,
        eval_size=4,
    )
    tr = Trainer(s, task, copy.deepcopy(model), tok)
    return tr, tr.train() if run else None


def _calibration_total(m):
    return sum(v for k, v in m.items() if k.startswith("prm_calib.") and k.endswith(".n"))


def test_prm_preset_trains_its_scorer_and_charges_it(chain_warm):
    tr, res = _train(chain_warm, "prm_grpo")
    assert res.ended_because == "budget" and len(res.steps) >= 3
    assert not res.ledger.check_invariants()
    assert tr.ctx.meter.time_by_kind["prm"]["device_seconds"] > 0  # its own label, same budget
    for m in res.steps:
        assert m["credit_seconds"] > 0 and math.isfinite(m["prm.loss"])
        # the reliability counts cover exactly the labelled steps the scorer was scored on
        assert _calibration_total(m) == m["prm.labelled_steps"] > 0
        assert 0 <= m["prm.brier"] <= 1
    losses = [m["prm.loss"] for m in res.steps]
    assert losses[-1] < losses[0]  # it learns the step labels
    # the scorer and its optimizer are checkpointed: a fresh objective resumes them exactly
    state = tr.objective.state_dict()
    tr2, _ = _train(chain_warm, "prm_grpo", run=False)
    tr2.objective.load_state_dict(state)
    batch = tr2.collector.collect().batch
    with torch.no_grad():
        a = tr.objective.scorer.logits(batch, "cpu")
        b = tr2.objective.scorer.logits(batch, "cpu")
    assert torch.equal(a.nan_to_num(), b.nan_to_num())


def test_prime_preset_runs_with_its_filter_auc_and_probe(guess_warm):
    """PRIME as preset (accuracy filter on) on guess_number, where the warm start wins some groups
    and loses others: the PRM is charged, validated on each batch, probed every step."""

    tr, res = _train(guess_warm, "prime", budget=1200.0)
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    # a last step whose batch the budget ran out filling (the filter dropped its groups) trains
    # nothing and is logged as skipped, with no PRM update
    trained = [m for m in res.steps if not m.get("skipped")]
    assert len(trained) >= 2 and all(m.get("skipped") for m in res.steps[len(trained) :])
    assert tr.ctx.meter.time_by_kind["prime"]["device_seconds"] > 0
    for c in res.census:  # every launched group is kept or dropped with its verdict
        assert c["groups_launched"] == c["groups_kept"] + sum(c["groups_dropped"].values())
    for m in trained:
        assert math.isfinite(m["prime.loss"]) and m["credit_seconds"] > 0
        assert "prime.auc" in m  # every kept group holds both outcomes: measured every step
        assert m["prime.intervention_n"] > 0  # correct episodes were probed
    # the estimator saw the PRM's rewards: nonzero process rewards once pi_phi moved from pi_ref
    assert any(m["prime.token_reward_mean"] != 0.0 for m in trained[1:])


def oracle_scorer(observations, actions):
    """A user-supplied step scorer for chain_arithmetic: 1 where the step's answer is right."""

    value = int(re.match(r"\s*(-?\d+)", observations[0]).group(1))
    ops = [re.search(r"([+-]\d+)=", o).group(1) for o in observations]
    out = []
    for op, act in zip(ops, actions):
        value += int(op)
        out.append(1.0 if act.strip() == str(value) else 0.0)
    return out


def test_a_user_supplied_step_scorer_is_counted_as_judge_calls(chain_warm):
    over = {"advantage": {"prm": {"scorer": "tests.test_process_credit:oracle_scorer"}}}
    tr, res = _train(chain_warm, "prm_grpo", over)
    assert not res.ledger.check_invariants()
    episodes = res.ledger.counters["rollouts_launched"]
    assert res.ledger.counters["judge_calls"] == episodes  # one call per episode
    # the oracle scorer agrees with the environment's labels: perfectly calibrated
    for m in res.steps:
        assert m["prm.brier"] == 0.0


def test_a_trained_prm_needs_step_labels_and_a_bad_scorer_is_named(chain_warm):
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer, TrainingError

    cfg, _, model, tok = chain_warm
    s = RunSettings(resolve("prm_grpo"), cfg.rollout, cfg.optimizer, {"launched_tokens": 50.0}, 0)
    with pytest.raises(TrainingError, match="guess_number.*step labels|step labels.*guess_number"):
        Trainer(s, make_task("guess_number", {}), model, tok)
    bad = resolve("prm_grpo", {"advantage": {"prm": {"scorer": "no_such_module:f"}}})
    s = RunSettings(bad, cfg.rollout, cfg.optimizer, {"launched_tokens": 50.0}, 0)
    with pytest.raises(TrainingError, match="no_such_module"):
        Trainer(s, chain_warm[1], model, tok)


# ----------------------------------------------------------------------------- branching


def test_branches_restart_from_the_state_before_the_turn_and_credit_it(guess_warm):
    """Branch episodes restart where their source was before turn 1 (restored from its snapshot;
    replayed where a task has none), keep the prefix as context, and the turn-level group baseline
    credits the branched action by its continuation return against its siblings."""

    from sixblanks.algorithms.loss import compute_advantages
    from sixblanks.harness.rollout.agent import branch_episodes, run_episodes
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
    from sixblanks.harness.tasks.verify import VerifierGate

    cfg, task, model, tok = guess_warm
    engine, gate = HFEngine(model, tok), VerifierGate(task)
    params = SamplingParams(temperature=1.0, max_new_tokens=3)
    gen = torch.Generator().manual_seed(0)
    src = run_episodes(
        engine, tok, task, task.instances([5, 6]), 4, params, gate, generator=gen, snapshots=True
    )
    points = [(i, 1) for i in range(src.size) if len(src.actions[i]) > 1][:2]
    assert points, "no episode reached a second turn"
    out = branch_episodes(engine, tok, task, src, points, 3, params, gate, generator=gen)
    b = out.batch
    assert out.restored == b.size == 3 * len(points) and out.replayed_steps == 0
    for p, (i, k) in enumerate(points):
        start = [s for kind, s, _ in src.segments[i] if kind == "action"][k]
        for r in range(p * 3, p * 3 + 3):
            assert b.tokens[r, :start].tolist() == src.tokens[i, :start].tolist()
            assert b.action_mask[r, :start].sum() == 0  # the prefix is context
            assert int(b.state_keys[r, k]) == int(src.state_keys[i, k])  # the same state
            assert b.turn_ids[r][b.action_mask[r] > 0].min() == k  # acting from turn k on
            assert int(b.group_ids[r]) == p
    # the action at turn k: its return from k on, minus the siblings' mean
    adv, _, _ = compute_advantages(
        resolve("branch_grpo"), b.reward, b.action_mask, b.group_ids, **b.advantage_inputs()
    )
    for p, (_, k) in enumerate(points):
        rows = list(range(p * 3, p * 3 + 3))
        ret = [float(b.turn_rewards[r, k:].sum()) for r in rows]
        for r, g in zip(rows, ret):
            first = int(((b.turn_ids[r] == k) & (b.action_mask[r] > 0)).nonzero()[0])
            assert adv[r, first].item() == pytest.approx(g - sum(ret) / 3, abs=1e-6)
    # a task that cannot snapshot is replayed from its seed and actions, and says so
    src.snapshots = [[] for _ in range(src.size)]
    replayed = branch_episodes(engine, tok, task, src, points[:1], 2, params, gate, generator=gen)
    assert replayed.restored == 0 and replayed.replayed_steps == 2 * 1
    i, k = points[0]
    assert int(replayed.batch.state_keys[0, k]) == int(src.state_keys[i, k])
    # a restore that raises fails that continuation only, with its reason (no trained tokens)
    src.snapshots = [["not a state"] * 4 for _ in range(src.size)]
    broken = branch_episodes(engine, tok, task, src, points[:1], 2, params, gate, generator=gen)
    assert broken.batch.failed.all() and broken.batch.action_mask.sum() == 0
    assert all("branch restore raised" in r for r in broken.batch.failure_reasons)


def test_branching_preset_charges_every_branch_token_and_step(guess_warm):
    from tests.conftest import record_batches

    tr, _ = _train(guess_warm, "branch_grpo", budget=1000.0, run=False)
    batches = record_batches(tr)
    res = tr.train()
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    main = tr.collector.n_prompts * tr.ctx.group_size  # the round's rows; the branches follow
    launched = steps = 0.0
    for b in batches:
        if b is None:
            continue
        launched += b.launched_tokens()  # branch rows: only their own actions are launched
        steps += float(b.n_turns[:main].sum()) + float((b.n_turns[main:] - 1).sum())  # k = 1
    assert res.ledger.counters["launched_tokens"] == launched
    assert res.ledger.counters["env_steps"] == steps  # restored: the prefix is not stepped again
    branch_tokens = sum(m.get("branch.launched_tokens", 0.0) for m in res.steps)
    assert 0 < branch_tokens < launched
    assert all(m["branch.restored_frac"] == 1.0 for m in res.steps if m.get("branch.rows"))


def test_chain_outcome_all_pays_only_a_flawless_chain_and_its_potential_follows():
    """``outcome: all``: one slip costs the reward even when the last step is right; the state key
    and the potential (the share of the chain done while it can still pay) say so."""

    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.tasks.verify import VerifierGate

    task = make_task("chain_arithmetic", {"steps": 3, "outcome": "all"})
    inst = task.make_instance(4)
    values = inst.data["values"]

    def play(answers):
        env = task.make_env(inst, VerifierGate(task))
        env.reset(seed=inst.seed)
        phis, keys, reward = [env.potential()], [env.state_key()], 0.0
        for a in answers:
            res = env.step(f"{a}\n")
            reward += res.reward
            phis.append(env.potential())
            keys.append(env.state_key())
        return reward, phis, keys

    right = values[1:]
    assert play(right)[0] == 1.0
    slip = [right[0] + 1, *right[1:]]
    reward, phis, keys = play(slip)
    assert reward == 0.0  # the last step was right, the chain was not
    assert phis == [0.0, 0.0, 0.0, 0.0]  # it could not pay after the slip
    assert play(right)[1] == pytest.approx([0, 1 / 3, 2 / 3, 1.0])
    assert keys[1] != play(right)[2][1]  # same step, same true value, no longer winnable
    last = make_task("chain_arithmetic", {"steps": 3})  # outcome: last, as before
    env = last.make_env(inst, VerifierGate(last))
    env.reset(seed=inst.seed)
    assert sum(env.step(f"{a}\n").reward for a in slip) == 1.0


# ----------------------------------------------------------------------------- the report


def test_credit_report_shows_each_schemes_extra_cost_next_to_its_score(tmp_path):
    """A small credit experiment through the orchestrator: the report's arm table and its credit
    section give each scheme's extra model seconds and branch tokens, equal to the sums of the
    runs' own metrics; the PRM's reliability plot and PRIME's validation plot are drawn."""

    import duckdb

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.orchestrator import Orchestrator
    from sixblanks.reports.build import build_report

    spec = {
        "name": "credit_small",
        "task": {"name": "chain_arithmetic", "params": {"steps": 2}},
        "rollout": {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 4},
        "warm_start": {"steps": 60, "num_demos": 400},
        "budget": {"launched_tokens": 600},
        "seeds": [0],
        "eval": {"every": 600},
        "arms": {
            "grpo": {"preset": "grpo"},
            "prime": {"preset": "prime", "blanks": {"data": {"accuracy_filter": [0.0, 1.0]}}},
            "branching": {"preset": "branch_grpo"},
            "prm_user": {
                "preset": "prm_grpo",
                "blanks": {
                    "advantage": {"prm": {"scorer": "tests.test_process_credit:oracle_scorer"}}
                },
            },
        },
        "tracking": {"mlflow": False},
    }
    Orchestrator(validate_mapping(spec), tmp_path, progress=False).run()
    index = build_report(tmp_path, resamples=200)
    md = (index.parent / "report.md").read_text()
    assert "## Credit schemes: extra cost and validation" in md
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    sums = dict(
        con.sql(
            "SELECT r.arm, sum(m.value) FROM metrics m JOIN runs r USING (run_id) WHERE m.name = "
            "'credit_seconds' GROUP BY r.arm"
        ).fetchall()
    )
    tokens = con.sql(
        "SELECT sum(value) FROM metrics WHERE name = 'branch.launched_tokens'"
    ).fetchall()[0][0]
    status = dict(con.sql("SELECT arm, status FROM runs").fetchall())
    con.close()
    assert set(status.values()) == {"finished"}
    lines = md.splitlines()
    head = next(i for i, line in enumerate(lines) if "of which the credit scheme" in line)
    table = lines[head + 2 : lines.index("", head)]  # the arm table's rows (one seed: sum = mean)
    rows = {line.split(" | ")[0].strip("| "): line for line in table}
    assert f"| {sums['prime']:.1f} s |" in rows["prime"]
    assert f"{tokens:.0f} branch tokens" in rows["branching"]
    assert rows["grpo"].rstrip(" |").endswith("—")  # no extra model, no branches
    assert (index.parent / "prm_reliability.png").exists()
    assert (index.parent / "prime_validation.png").exists()


def test_ladder_rung_2_takes_process_reward_arms(guess_warm):
    """Rung 2 (one update on a frozen batch) runs for prm and prime arms too: their second
    model's inputs are stood in for, and the loss and gradient still agree across repeats and
    micro-batch splits."""

    from sixblanks.harness.rollout.engine import HFEngine
    from sixblanks.harness.studies.ladder.frozen_batch import frozen_batch_rung

    cfg, task, model, tok = guess_warm
    for preset in ("prm_grpo", "prime"):
        rows = frozen_batch_rung(
            HFEngine(model, tok), model, tok, task, cfg.rollout, resolve(preset)
        )
        assert rows[-1].status == "pass", (preset, rows[-1].evidence)


class _Killed(Exception):
    pass


TREE_PRM = {  # a PRM trained on a value-guided tree search's node values, by the policy gradient
    "data": {
        "source": "search",
        "search": {"mode": "tree", "guide": "value", "tree_labels": True, "select": "all"},
    }
}


@pytest.mark.parametrize(
    "preset", ["prm_grpo", "prime", "branch_grpo", "rft", "tree_prm", "world_model"]
)
def test_the_new_presets_resume_from_a_checkpoint_exactly(chain_warm, preset):
    """Killed after step 2 and resumed from its checkpoint, a run with a second model (PRM, implicit
    PRM, a search's value model, a world model), branches or a search ends as the uninterrupted
    one: same counters, same weights."""

    over = {
        "prime": {"data": {"dynamic_sampling": False, "accuracy_filter": None}},
        "rft": {"data": {"search": {"min_reward": 0.0}}},  # the weak warm start: select anyway
        "tree_prm": TREE_PRM,
        "world_model": {"data": {"world_model": {"warmup_steps": 1, "train_steps": 2}}},
    }.get(preset, {})
    preset = {"tree_prm": "prm_grpo", "world_model": "grpo"}.get(preset, preset)
    full, res = _train(chain_warm, preset, over, budget=300.0)
    saved = Saved()

    def kill(tr, metrics):
        if tr.step_idx == 2:
            saved.save(tr)
            raise _Killed

    first, _ = _train(chain_warm, preset, over, budget=300.0, run=False)
    with pytest.raises(_Killed):
        first.train(on_step=kill)
    resumed, _ = _train(chain_warm, preset, over, budget=300.0, run=False)
    resumed.load_state_dict(saved.load())
    again = resumed.train(evaluate_start=False)
    timeless = {k: v for k, v in res.ledger.counters.items() if not k.endswith("_seconds")}
    assert timeless["optimizer_steps"] >= 3  # it trained before and after the kill (step 2)
    assert {k: again.ledger.counters[k] for k in timeless} == timeless
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
