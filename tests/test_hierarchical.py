"""Hierarchical credit: the two-level task plan_execute (a planning turn chooses
subgoals, executor turns carry them out, the environment reports each subgoal's completion), the
'hierarchical' estimator by hand, and its preset hier_grpo end to end."""

import math
import statistics

import pytest
import torch
from pydantic import ValidationError

from sixblanks.algorithms.advantages import ESTIMATORS
from sixblanks.algorithms.loss import compute_advantages
from sixblanks.algorithms.presets import get_preset, resolve
from sixblanks.harness.tasks import Instance, clone_env, make_task
from sixblanks.harness.tasks.verify import VerifierGate

D = torch.float64
NAN = float("nan")


def _play(task, inst, actions):
    """Step a fresh environment of ``inst`` through ``actions``; (results, verifier calls)."""

    gate = VerifierGate(task, timeout_s=None)
    env = task.make_env(inst, gate)
    env.reset(seed=inst.seed)
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1].terminated:
            break
    return out, gate.stats.calls


def _by_hand(start, target, n, actions):
    """An independent reading of an episode's texts: (levels, subgoal labels, outcome)."""

    parts = actions[0].strip().split(",")
    if len(parts) != n or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return [0], [None], 0.0
    plan, v, labels = [int(p) for p in parts], start, [None]
    for w, op in zip(plan, actions[1:]):
        op = op.strip()
        ok = len(op) == 2 and op[0] in "+-" and op[1].isdigit()
        if ok:
            v += int(op[1]) if op[0] == "+" else -int(op[1])
        labels.append(ok and v == w)
    return [0] + [1] * (len(actions) - 1), labels, 1.0 if v == target else 0.0


# ----------------------------------------------------------------------------- the task


def test_plan_execute_instances_and_params():
    task = make_task("plan_execute", {"subgoals": 3, "high": 40})
    assert task.max_turns == 4 and task.multi_turn and task.has_oracle and task.env_state_keys
    for seed in range(200):
        inst = task.make_instance(seed)
        assert inst.prompt == f"{inst.data['start']}>{inst.data['target']}:"
        assert 0 <= inst.data["start"] <= 40 and 0 <= inst.data["target"] <= 40
        assert abs(inst.data["target"] - inst.data["start"]) <= 9 * 3  # within the plan's reach
        assert task.make_instance(seed).data == inst.data  # deterministic
        assert set(inst.prompt) <= set(task.alphabet())
    assert max(abs(i.data["target"] - i.data["start"]) for i in task.instances(range(200))) > 9
    for bad in ({"subgoals": 0}, {"subgoals": 5}, {"high": 0}, {"waypoints": 2}):
        with pytest.raises(ValidationError):
            make_task("plan_execute", bad)
    from sixblanks.harness.tasks import check_task

    assert check_task("plan_execute", {"subgoals": 9})[0][0] == "params.subgoals"


@pytest.mark.parametrize("subgoals", [1, 2, 3])
def test_the_oracle_plans_within_reach_and_reaches_every_subgoal(subgoals):
    task = make_task("plan_execute", {"subgoals": subgoals, "high": 30})
    for inst in task.instances(range(60)):
        gate = VerifierGate(task, timeout_s=None)
        env = task.make_env(inst, gate)
        seen = [env.reset(seed=inst.seed)[0]]
        results = []
        for _ in range(task.max_turns):
            action = task.oracle(inst, seen)
            assert set(action) <= set(task.alphabet())
            results.append(env.step(action))
            seen.append(results[-1].observation)
        plan = [inst.data["start"], *task.oracle_plan(inst)]
        assert plan[-1] == inst.data["target"]
        assert all(abs(b - a) <= 9 for a, b in zip(plan, plan[1:]))  # each waypoint within reach
        assert [r.info["level"] for r in results] == [0] + [1] * subgoals
        assert "step_correct" not in results[0].info  # the plan has no subgoal label
        assert all(r.info["step_correct"] for r in results[1:])
        assert [r.reward for r in results] == [0.0] * subgoals + [1.0]
        assert [r.terminated for r in results] == [False] * subgoals + [True]
        assert gate.stats.calls == 1  # the outcome, through the counted verifier


def test_a_waypoint_out_of_reach_fails_its_subgoal_and_the_outcome_is_the_target():
    task = make_task("plan_execute")
    inst = Instance(0, "3>17:", {"start": 3, "target": 17, "subgoals": 2})
    # 16 is 13 away from 3: the best single-digit move (+9) misses it; the next turn starts from
    # the value reached (12) and can still reach 17, so the outcome is 1 with a failed subgoal
    res, calls = _play(task, inst, ["16,17\n", "+9\n", "+5\n"])
    assert [r.observation for r in res] == ["3>16=", "12>17=", ""]
    assert [r.info.get("step_correct") for r in res] == [None, False, True]
    assert [r.reward for r in res] == [0.0, 0.0, 1.0] and calls == 1
    # every subgoal reached, but the plan does not end on the target: outcome 0
    res, _ = _play(task, inst, ["10,18\n", "+7\n", "+8\n"])
    assert [r.info.get("step_correct") for r in res] == [None, True, True]
    assert res[-1].reward == 0.0
    # a malformed operation does not move the value and fails its subgoal
    res, _ = _play(task, inst, ["10,17\n", "x\n", "+7\n"])
    assert [r.observation for r in res] == ["3>10=", "3>17=", ""]
    assert [r.info.get("step_correct") for r in res] == [None, False, False]
    assert res[-1].info["value"] == 10 and res[-1].reward == 0.0


@pytest.mark.parametrize("plan", ["abc\n", "7\n", "1,2,3\n", "", "7,\n", "-1,17\n", "7\n17\n"])
def test_a_malformed_plan_ends_the_episode_with_reward_0_without_raising(plan):
    task = make_task("plan_execute")
    inst = Instance(0, "3>17:", {"start": 3, "target": 17, "subgoals": 2})
    res, calls = _play(task, inst, [plan, "+7\n", "+7\n"])
    assert len(res) == 1 and res[0].terminated and not res[0].truncated
    assert res[0].reward == 0.0 and res[0].info["level"] == 0 and res[0].info["malformed"]
    assert calls == 1  # scored (0) through the counted verifier all the same


def test_verify_reads_the_whole_transcript_as_the_environment_does():
    task = make_task("plan_execute")
    inst = Instance(0, "3>17:", {"start": 3, "target": 17, "subgoals": 2})
    assert task.verify(inst, "10,17\n+7\n+7") == 1.0
    assert task.verify(inst, "10,17\n+7\n+7\n") == 1.0
    assert task.verify(inst, "16,17\n+9\n+5") == 1.0
    assert task.verify(inst, "10,17\n+7\n+6") == 0.0
    assert task.verify(inst, "10,17\n+7") == 0.0  # the missing operation does not move
    assert task.verify(inst, "17\n+7\n+7") == 0.0  # one waypoint for two subgoals: malformed
    assert task.verify(inst, "") == 0.0 and task.verify(inst, "\n\n\n") == 0.0
    # the environment and the verifier agree on random transcripts
    import random

    rng = random.Random(0)
    for _ in range(300):
        plan = f"{rng.randint(0, 25)},{rng.choice([17, rng.randint(0, 25)])}"
        ops = [rng.choice(["+", "-", "", "*"]) + str(rng.randint(0, 9)) for _ in range(2)]
        res, _ = _play(task, inst, [plan + "\n"] + [o + "\n" for o in ops])
        assert res[-1].reward == task.verify(inst, "\n".join([plan, *ops]))
        _, labels, outcome = _by_hand(3, 17, 2, [plan, *ops])
        assert [r.info.get("step_correct") for r in res] == labels and res[-1].reward == outcome


def test_state_keys_snapshots_and_restore():
    task = make_task("plan_execute")
    inst = Instance(0, "3>17:", {"start": 3, "target": 17, "subgoals": 2})
    gate = VerifierGate(task, timeout_s=None)
    a, b = task.make_env(inst, gate), task.make_env(inst, gate)
    a.reset(seed=0), b.reset(seed=0)
    assert a.state_key() == b.state_key() == (0, 3, None)
    a.step("10,17\n"), b.step("12,17\n")
    assert a.state_key() == (1, 3, 10) != b.state_key() == (1, 3, 12)
    a.step("+7\n"), b.step("+7\n")  # b misses its waypoint 12: the same value, the same next
    assert a.state_key() == b.state_key() == (2, 10, 17)
    clone = clone_env(task, inst, gate, a, ["10,17\n", "+7\n"])
    assert clone.how == "snapshot" and clone.env.state_key() == a.state_key()
    ra, rc = a.step("+7\n"), clone.env.step("+7\n")
    assert (ra.reward, ra.info, ra.terminated) == (rc.reward, rc.info, rc.terminated)
    assert ra.info == {"level": 1, "step_correct": True, "subgoal": 1, "value": 17}
    assert ra.reward == 1.0 and ra.terminated


# ----------------------------------------------------------------------------- the estimator

# two task groups; each turn is two tokens; turns 0 (plan, level 0), 1 and 2 (execute, level 1).
# Group 0: episodes a, b, c. Group 1: d, and e whose plan was malformed (one turn, no more levels).
MASK = torch.ones(5, 6, dtype=D)
MASK[4, 2:] = 0
TURN_IDS = torch.tensor([[0, 0, 1, 1, 2, 2]] * 5)
TURN_IDS[4, 2:] = -1
LEVELS = torch.tensor([[0, 1, 1]] * 4 + [[0, -1, -1]])
LABELS = torch.tensor(
    [[NAN, 1, 1], [NAN, 1, 0], [NAN, 0, 1], [NAN, 1, 0], [NAN, NAN, NAN]], dtype=D
)
R = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0], dtype=D)
GROUPS = torch.tensor([0, 0, 0, 1, 1])


def _hier(**kw):
    args = dict(
        rewards=R, mask=MASK, group_ids=GROUPS, turn_ids=TURN_IDS, levels=LEVELS, step_labels=LABELS
    )
    return ESTIMATORS["hierarchical"].fn(**{**args, **kw})


def _per_turn(rows):
    """[[A_turn0, A_turn1, A_turn2], ...] -> [B, T] on the two tokens of each turn (0 off the
    mask)."""

    return (torch.tensor(rows, dtype=D).repeat_interleave(2, dim=1) * MASK).float()


def test_hierarchical_by_hand_mean_norm():
    # high: group 0 R = {1, 0, 1} (mean 2/3); group 1 {1, 0} (mean 1/2)
    # low, subgoal 0: group 0 {1, 1, 0} (mean 2/3); group 1 {1}: alone -> 0
    # low, subgoal 1: group 0 {1, 0, 1} (mean 2/3); group 1 {0}: alone -> 0
    want = _per_turn(
        [
            [1 / 3, 1 / 3, 1 / 3],
            [-2 / 3, 1 / 3, -2 / 3],
            [1 / 3, -2 / 3, 1 / 3],
            [0.5, 0.0, 0.0],
            [-0.5, 0.0, 0.0],
        ]
    )
    assert torch.allclose(_hier(), want, atol=1e-6)


def test_hierarchical_by_hand_mean_std_norm():
    s3 = math.sqrt(1 / 3)  # std (ddof 1) of {1, 0, 1} and of {1, 1, 0}
    s2 = math.sqrt(0.5)  # of {1, 0}
    hi, lo = (1 / 3) / (s3 + 1e-6), (-2 / 3) / (s3 + 1e-6)
    want = _per_turn(
        [
            [hi, hi, hi],
            [lo, hi, lo],
            [hi, lo, hi],
            [0.5 / (s2 + 1e-6), 0.0, 0.0],
            [-0.5 / (s2 + 1e-6), 0.0, 0.0],
        ]
    )
    assert torch.allclose(_hier(hierarchical_norm="mean_std_norm"), want, atol=1e-6)


def test_kl_in_the_reward_reaches_both_levels():
    """Each turn's reward, outcome or subgoal, loses its own tokens' penalties: episode a pays
    0.05 a token on its plan (P = 0.1) and 0.1 a token on its first executor turn (P = 0.2)."""

    pen = torch.zeros(5, 6, dtype=D)
    pen[0, :2], pen[0, 2:4] = 0.05, 0.1
    pen[4, 2:] = 9.0  # off the mask: never counted
    # high, group 0: {0.9, 0, 1}, mean 19/30; low subgoal 0, group 0: {0.8, 1, 0}, mean 0.6
    want = _per_turn(
        [
            [0.9 - 19 / 30, 0.8 - 0.6, 1 / 3],
            [-19 / 30, 1 - 0.6, -2 / 3],
            [1 - 19 / 30, -0.6, 1 / 3],
            [0.5, 0.0, 0.0],
            [-0.5, 0.0, 0.0],
        ]
    )
    assert torch.allclose(_hier(token_penalty=pen), want, atol=1e-6)
    # through compute_advantages: k1 KL in the reward (beta 0.5) arrives token by token, and the
    # outcome is not charged a second time
    blanks = resolve(
        "hier_grpo",
        {
            "advantage": {"hierarchical_norm": "mean_norm"},
            "regularizer": {"reward_kl_coef": 0.5, "reward_kl_estimator": "k1"},
        },
    )
    ref = torch.full((5, 6), -1.0, dtype=D)
    adv, _, info = compute_advantages(
        blanks,
        R,
        MASK,
        GROUPS,
        old_logp=ref + 2 * pen,  # k1 = old - ref = 2 pen; times beta 0.5 = pen
        ref_logp=ref,
        turn_ids=TURN_IDS,
        levels=LEVELS,
        step_labels=LABELS,
    )
    assert torch.allclose(adv, want, atol=1e-6)
    assert torch.equal(info["shaped_rewards"], R)


def test_an_unlabelled_low_level_turn_gets_0_and_stays_out_of_the_baseline():
    labels = LABELS.clone()
    labels[0, 1] = NAN  # a's first executor turn has no label
    adv = _hier(step_labels=labels)
    assert torch.all(adv[0, 2:4] == 0)
    # subgoal 0, group 0 is now {b: 1, c: 0}: mean 1/2
    assert adv[1, 2].item() == pytest.approx(0.5) and adv[2, 2].item() == pytest.approx(-0.5)


def test_without_levels_a_single_turn_task_gets_grpo_s_advantage():
    mask = torch.ones(6, 3, dtype=D)
    turn_ids = torch.zeros(6, 3, dtype=torch.long)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5], dtype=D)
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    none = dict(levels=torch.full((6, 1), -1), step_labels=torch.full((6, 1), NAN))
    got, _, _ = compute_advantages(
        resolve("hier_grpo"), rewards, mask, groups, turn_ids=turn_ids, **none
    )
    want, _, _ = compute_advantages(resolve("grpo"), rewards, mask, groups)
    assert torch.allclose(got, want, atol=1e-7)
    assert torch.all(got[3:] == 0)  # equal rewards and a group of one: exactly 0


def test_the_estimator_needs_levels_and_step_labels():
    with pytest.raises(ValueError, match="levels"):
        compute_advantages(resolve("hier_grpo"), R, MASK, GROUPS, turn_ids=TURN_IDS)


def test_explain_shows_the_preset_s_blanks(cli):
    import json

    code, out, _ = cli("explain", "hier_grpo", "--json")
    assert code == 0
    data = json.loads(out)
    shown = data["blanks"]["hier_grpo"]
    assert shown["advantage.estimator"] == "hierarchical"
    assert shown["advantage.hierarchical_norm"] == "mean_std_norm"
    assert "advantage.gamma" not in shown and "advantage.gigpo_omega" not in shown
    preset = get_preset("hier_grpo")
    assert preset.summary and preset.notes
    code, out, _ = cli("explain", "hier_grpo")
    assert code == 0 and "hierarchical_norm" in out


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def plan_warm(tmp_path_factory):
    """A policy warm-started (SFT on oracle demonstrations) on plan_execute, 2 subgoals."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.warmstart import warm_start

    torch.manual_seed(0)
    cfg = validate_mapping(
        {
            "task": {"name": "plan_execute"},
            "arms": {"a": {"preset": "hier_grpo"}},
            "rollout": {"max_new_tokens": 6, "prompts_per_step": 2, "group_size": 8},
            "warm_start": {"steps": 100, "num_demos": 500},
        }
    )
    task = make_task("plan_execute")
    model, tok, _ = warm_start(cfg, [task], tmp_path_factory.mktemp("warm"))
    return cfg, task, model, tok


def test_rollouts_record_levels_and_subgoal_labels_and_the_advantages_match_by_hand(plan_warm):
    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
    from sixblanks.harness.training.contract import check_contract

    _, task, model, tok = plan_warm
    engine = HFEngine(model, tok)
    batch = run_episodes(
        engine,
        tok,
        task,
        task.instances([0, 1, 2]),
        8,
        SamplingParams(temperature=1.0, max_new_tokens=6),
        generator=torch.Generator().manual_seed(0),
    )
    report = check_contract(
        batch,
        model,
        tok,
        temperature=1.0,
        reward_range=task.reward_range,
        group_size=8,
        policy_version=engine.policy_version,
        env_keys=task.env_state_keys,
    )
    assert report.passed, report.summary()
    x = {}  # (group, pool) -> [(row, turn, value)]: the baselines, recomputed
    for b in range(batch.size):
        inst = task.instances([int(batch.instance_seeds[b])])[0]
        d, acts, n = inst.data, batch.actions[b], int(batch.n_turns[b])
        levels, labels, outcome = _by_hand(d["start"], d["target"], 2, acts)
        assert batch.levels[b, :n].tolist() == levels == [0, 1, 1][:n]
        assert all(v == -1 for v in batch.levels[b, n:].tolist())
        got = batch.step_labels[b, :n].tolist()
        assert math.isnan(got[0]) and got[1:] == [float(v) for v in labels[1:]]
        assert float(batch.reward[b]) == (outcome if n == 3 else 0.0)  # cut short: no outcome
        g = int(batch.group_ids[b])
        for k in range(n):
            value = float(batch.reward[b]) if k == 0 else float(labels[k])
            x.setdefault((g, k), []).append((b, k, value))
    assert (batch.levels == 1).any() and (batch.levels[:, 0] == 0).all()  # executor turns ran
    assert 0 < batch.step_labels[batch.levels == 1].sum() < (batch.levels == 1).sum()
    want = torch.zeros(batch.step_labels.shape, dtype=D)
    for members in x.values():
        values = [v for _, _, v in members]
        if len(values) < 2 or len(set(values)) == 1:
            continue
        mean, std = statistics.mean(values), statistics.stdev(values)
        for b, k, v in members:
            want[b, k] = (v - mean) / (std + 1e-6)
    adv, _, _ = compute_advantages(
        resolve("hier_grpo"),
        batch.reward,
        batch.action_mask,
        batch.group_ids,
        **batch.advantage_inputs(),
    )
    for b in range(batch.size):
        for k in range(int(batch.n_turns[b])):
            on = (batch.turn_ids[b] == k) & (batch.action_mask[b] > 0)
            assert on.any()
            assert torch.allclose(adv[b][on].double(), want[b, k].expand(int(on.sum())), atol=1e-5)
        assert torch.all(adv[b][batch.action_mask[b] == 0] == 0)


def test_hier_grpo_trains_end_to_end_on_plan_execute(plan_warm):
    import copy

    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = plan_warm
    s = RunSettings(
        resolve("hier_grpo"), cfg.rollout, cfg.optimizer, {"launched_tokens": 900.0}, 0, eval_size=8
    )
    res = Trainer(s, task, copy.deepcopy(model), tok).train()
    assert res.ended_because == "budget" and len(res.steps) >= 3
    assert not res.ledger.check_invariants()
    assert all(math.isfinite(m["loss"]) for m in res.steps if "loss" in m)
    assert any(m.get("adv_abs_mean", 0.0) > 0 for m in res.steps)  # credit reached the tokens
    accuracy = [m["step_accuracy"] for m in res.steps if "step_accuracy" in m]
    assert accuracy and all(0.0 <= a <= 1.0 for a in accuracy)  # subgoal labels recorded
