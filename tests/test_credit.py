"""Process and agent credit : environment state keys, turn-level advantages
with KL in the reward, GiGPO, and their presets end to end on a multi-turn task."""

import math

import pytest
import torch

from sixblanks.algorithms.loss import compute_advantages
from sixblanks.algorithms.presets import resolve

D = torch.float64

# three episodes of one task: two take two turns, the third is solved at its first turn
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=D)
TURN_IDS = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, -1, -1]])
TURN_REWARDS = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]], dtype=D)
REWARDS = TURN_REWARDS.sum(1)
GROUPS = torch.tensor([0, 0, 0])
# episodes 0 and 1 start in state 10 and reach state 20; episode 2 starts in a state of its own
KEYS = torch.tensor([[10, 20], [10, 20], [11, 0]])


def _gigpo(**adv):
    blanks = resolve("gigpo", {"advantage": {"gamma": 0.5, **adv}})
    return compute_advantages(
        blanks,
        REWARDS,
        MASK,
        GROUPS,
        turn_rewards=TURN_REWARDS,
        turn_ids=TURN_IDS,
        state_keys=KEYS,
    )


def test_gigpo_by_hand_mean_norm():
    adv, _, info = _gigpo()
    # returns (gamma 0.5): ep0 G = [0.5, 1], ep1 [0, 0], ep2 [1]; A^E = R - 2/3
    # anchor (10): {0.5, 0} -> A^S = +-0.25; anchor (20): {1, 0} -> +-0.5; anchor (11): alone -> 0
    want = torch.tensor(
        [
            [1 / 3 + 0.25, 1 / 3 + 0.25, 1 / 3 + 0.5, 1 / 3 + 0.5],
            [-2 / 3 - 0.25, -2 / 3 - 0.25, -2 / 3 - 0.5, -2 / 3 - 0.5],
            [1 / 3, 1 / 3, 0.0, 0.0],
        ]
    )
    assert torch.allclose(adv.float(), want, atol=1e-6)
    assert info["gigpo_anchor_frac"] == pytest.approx(4 / 5)  # 4 of 5 steps found a partner


def test_gigpo_by_hand_mean_std_norm_and_omega():
    adv, _, _ = _gigpo(gigpo_norm="mean_std_norm", gigpo_omega=2.0)
    std_e = math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)  # ddof 1 over R = [1, 0, 1]
    a_e = [x / (std_e + 1e-6) for x in (1 / 3, -2 / 3, 1 / 3)]
    s10 = 0.25 / (math.sqrt(2 * 0.25**2) + 1e-6)  # {0.5, 0}: std 0.3536
    s20 = 0.5 / (math.sqrt(2 * 0.5**2) + 1e-6)  # {1, 0}: std 0.7071
    want = torch.tensor(
        [
            [a_e[0] + 2 * s10] * 2 + [a_e[0] + 2 * s20] * 2,
            [a_e[1] - 2 * s10] * 2 + [a_e[1] - 2 * s20] * 2,
            [a_e[2]] * 2 + [0.0, 0.0],
        ]
    )
    assert torch.allclose(adv.float(), want.float(), atol=1e-5)


def test_an_anchor_state_groups_steps_across_turn_indices():
    keys = torch.tensor([[10, 20], [20, 30], [11, 0]])  # ep1 starts where ep0 is at its turn 1
    blanks = resolve("gigpo", {"advantage": {"gamma": 0.5, "gigpo_omega": 1.0}})
    adv, _, info = compute_advantages(
        blanks, REWARDS, MASK, GROUPS, turn_rewards=TURN_REWARDS, turn_ids=TURN_IDS, state_keys=keys
    )
    # anchor (20): ep0 turn 1 (G = 1) and ep1 turn 0 (G = 0): +-0.5; every other step is alone
    assert adv[0, 2].item() == pytest.approx(1 / 3 + 0.5, abs=1e-6)
    assert adv[1, 0].item() == pytest.approx(-2 / 3 - 0.5, abs=1e-6)
    assert adv[1, 2].item() == pytest.approx(-2 / 3, abs=1e-6)
    assert info["gigpo_anchor_frac"] == pytest.approx(2 / 5)


def test_gigpo_needs_state_keys():
    blanks = resolve("gigpo")
    with pytest.raises(ValueError, match="state_keys"):
        compute_advantages(
            blanks, REWARDS, MASK, GROUPS, turn_rewards=TURN_REWARDS, turn_ids=TURN_IDS
        )


def test_turn_level_advantages_carry_the_kl_penalty_of_each_turn():
    """turn_grpo with k1 KL in the reward (beta 0.5): each turn's reward loses its own tokens'
    penalties, and the return from a turn keeps what comes after it."""

    blanks = resolve(
        "turn_grpo", {"regularizer": {"reward_kl_coef": 0.5, "reward_kl_estimator": "k1"}}
    )
    mask = torch.ones(2, 4, dtype=D)
    turn_ids = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]])
    turn_rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=D)
    ref = torch.full((2, 4), -1.0, dtype=D)
    old = ref + torch.tensor(
        [[0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 0.0]], dtype=D
    )  # k1 = old - ref
    adv, _, info = compute_advantages(
        blanks,
        turn_rewards.sum(1),
        mask,
        torch.tensor([0, 0]),
        old_logp=old,
        ref_logp=ref,
        turn_rewards=turn_rewards,
        turn_ids=turn_ids,
    )
    # ep0 turn rewards: 0 - 0.5 (0.1 + 0.2) = -0.15, 1 - 0.5 (0.3 + 0.4) = 0.65 -> G = [0.5, 0.65]
    # ep1: G = [0, 0]; group means per turn index: 0.25, 0.325
    want = torch.tensor([[0.25, 0.25, 0.325, 0.325], [-0.25, -0.25, -0.325, -0.325]])
    assert torch.allclose(adv.float(), want, atol=1e-6)
    assert info["reward_kl"] == pytest.approx(0.5)  # the mean over samples of summed k1


def _intervals(observations, actions, low, high, turns):
    """The interval the feedback leaves open before each turn, recomputed from the texts."""

    out, lo, hi = [], low, high
    for k in range(len(actions)):
        out.append((lo, hi, turns - k))
        feedback = observations[k + 1].strip() if k + 1 < len(observations) else ""
        guess = actions[k].strip()
        if guess.isdigit() and feedback == "higher":
            lo = max(lo, int(guess) + 1)
        elif guess.isdigit() and feedback == "lower":
            hi = min(hi, int(guess) - 1)
    return out


def _fresh_rollouts(name: str, params: dict, group_size: int):
    """(task, an untrained tiny policy and its tokenizer, a group of rollouts of 2 instances)."""

    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
    from sixblanks.harness.tasks import make_task

    task = make_task(name, params)
    model, tok = load_policy(ModelConfig(), [task])
    params = SamplingParams(temperature=1.0, max_new_tokens=3)
    gen = torch.Generator().manual_seed(0)
    batch = run_episodes(
        HFEngine(model, tok), tok, task, task.instances([0, 1]), group_size, params, generator=gen
    )
    return task, model, tok, batch


def test_guess_number_state_keys_recur_when_the_interval_does():
    """guess_number's environment names its state (the interval still open, the guesses left):
    two steps have the same key exactly when that state is the same, whatever was guessed."""

    from sixblanks.harness.training.contract import check_turns

    task, _, _, batch = _fresh_rollouts("guess_number", {"low": 1, "high": 8, "max_turns": 4}, 8)
    states, keys = [], []
    for b in range(batch.size):
        for k, s in enumerate(
            _intervals(batch.observations[b], batch.actions[b], 1, 8, 4)[: int(batch.n_turns[b])]
        ):
            states.append((int(batch.group_ids[b]), s))
            keys.append((int(batch.group_ids[b]), int(batch.state_keys[b, k])))
    for i in range(len(states)):
        for j in range(len(states)):
            assert (states[i] == states[j]) == (keys[i] == keys[j])
    assert len(set(keys)) < len(keys)  # states recur across the group
    assert check_turns(batch, env_keys=True).passed
    assert not check_turns(batch, env_keys=False).passed  # not the history's hash


def test_env_state_keys_are_checked_against_the_history_of_observations_and_actions():
    """Two guesses answered by the same "higher" leave different intervals open: the same
    observations with different actions may have different environment keys; the same
    observations and actions may not."""

    from sixblanks.harness.training.contract import check_turns

    _, _, _, batch = _fresh_rollouts("guess_number", {"low": 1, "high": 8, "max_turns": 4}, 8)
    assert check_turns(batch, env_keys=True).passed
    b = next(i for i in range(batch.size) if int(batch.n_turns[i]) >= 2)
    twin = batch.select([b, b])  # the same history twice
    assert check_turns(twin, env_keys=True).passed
    twin.state_keys[1, 1] += 1  # the same history, another state
    res = check_turns(twin, env_keys=True)
    assert not res.passed and "sample 0 turn 1 has the same history" in res.detail
    twin.actions[1] = ["x" + a for a in twin.actions[1]]  # another guess, the same answers
    assert check_turns(twin, env_keys=True).passed


@pytest.mark.parametrize("preset", ["turn_grpo", "gigpo"])
def test_turn_level_presets_train_end_to_end_on_guess_number(guess_warm, preset):
    import copy

    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = guess_warm
    s = RunSettings(
        resolve(preset), cfg.rollout, cfg.optimizer, {"launched_tokens": 1000.0}, 0, eval_size=8
    )
    tr = Trainer(s, task, copy.deepcopy(model), tok)
    res = tr.train()
    assert res.ended_because == "budget" and len(res.steps) >= 4
    assert not res.ledger.check_invariants()
    assert all(math.isfinite(m["loss"]) for m in res.steps if "loss" in m)
    # a learning signal reached the tokens: some group's turns differed
    assert any(m["trainable_group_frac"] > 0 for m in res.steps)
    assert any(abs(m.get("adv_abs_mean", 0.0)) > 0 for m in res.steps)
    if preset == "gigpo":
        frac = [m["gigpo.anchor_frac"] for m in res.steps]
        assert all(0 < f <= 1 for f in frac)  # the first turns of a group share their start state


# ----------------------------------------------------------------------------- potential shaping

# a small MDP solved exactly: from s0, "a" goes to s1 (0) and "b" ends the episode (0.6); from s1,
# "a" ends it with 1.0 and "b" goes back to s0 (0). Terminal states have Phi = 0.
MDP = {
    0: {"a": (1, 0.0, False), "b": (None, 0.6, True)},
    1: {"a": (None, 1.0, True), "b": (0, 0.0, False)},
}
GAMMA = 0.9


def _optimal_policy(reward_of):
    """Value iteration; ``reward_of(s, a, s2, terminal, r)`` gives the reward a learner sees."""

    V = {0: 0.0, 1: 0.0}
    for _ in range(500):
        V = {
            s: max(
                reward_of(s, a, s2, t, r) + (0.0 if t else GAMMA * V[s2])
                for a, (s2, r, t) in acts.items()
            )
            for s, acts in MDP.items()
        }
    return {
        s: max(
            acts,
            key=lambda a: (
                reward_of(s, a, *acts[a][:1], acts[a][2], acts[a][1])
                + (0.0 if acts[a][2] else GAMMA * V[acts[a][0]])
            ),
        )
        for s, acts in MDP.items()
    }


def test_potential_shaping_keeps_the_optimal_policy_a_progress_bonus_changes_it():
    from sixblanks.algorithms.data import potential_shaping

    phi = {0: 0.0, 1: 0.5}

    def plain(s, a, s2, t, r):
        return r

    def shaped(s, a, s2, t, r):  # through the library's shaping, one transition as one turn
        pots = torch.tensor([[phi[s], 0.0 if t else phi[s2]]], dtype=D)
        return float(potential_shaping(torch.tensor([[r]], dtype=D), pots, GAMMA)[0, 0])

    def progress(s, a, s2, t, r):  # +0.5 for reaching the halfway state: not a potential
        return r + (0.5 if s2 == 1 else 0.0)

    base = _optimal_policy(plain)
    assert base == {0: "a", 1: "a"}  # go through s1 and finish: 0.9 > 0.6
    assert _optimal_policy(shaped) == base
    assert _optimal_policy(progress) == {0: "a", 1: "b"}  # it now cycles for the bonus


def test_shaping_telescopes_to_minus_the_start_potential_and_reaches_the_advantages():
    from sixblanks.algorithms.data import potential_shaping

    turn_rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=D)
    pots = torch.tensor([[0.1, 0.4, 0.7, 0.0], [0.1, 0.3, 0.0, 0.0]], dtype=D)  # 0 from the end
    shaped = potential_shaping(turn_rewards, pots, 0.9)
    assert torch.allclose(
        shaped[0], torch.tensor([0.9 * 0.4 - 0.1, 0.9 * 0.7 - 0.4, 1.0 - 0.7], dtype=D)
    )
    disc = torch.tensor([1.0, 0.9, 0.81], dtype=D)
    added = ((shaped - turn_rewards) * disc).sum(1)
    assert torch.allclose(added, torch.tensor([-0.1, -0.1], dtype=D))  # -Phi(s_0), any path

    # through compute_advantages: turn_grpo sees the shaped turn rewards (gamma 1 here)
    blanks = resolve("turn_grpo", {"data": {"potential_shaping": {"enabled": True}}})
    mask = torch.ones(2, 3, dtype=D)
    mask[1, 2] = 0
    turn_ids = torch.tensor([[0, 1, 2], [0, 1, -1]])
    adv, _, info = compute_advantages(
        blanks,
        turn_rewards.sum(1),
        mask,
        torch.tensor([0, 0]),
        turn_rewards=turn_rewards,
        turn_ids=turn_ids,
        potentials=pots,
    )
    # shaped (gamma 1): ep0 [0.3, 0.3, 0.3] -> G [0.9, 0.6, 0.3];
    #                   ep1 [0.2, -0.3, 0] -> G [-0.1, -0.3]
    want = torch.tensor([[0.5, 0.45, 0.0], [-0.5, -0.45, 0.0]])
    assert torch.allclose(adv.float(), want, atol=1e-6)
    assert torch.allclose(info["potential_shaping"], torch.tensor([-0.1, -0.1], dtype=D))


def test_potential_shaping_on_guess_number_and_refused_where_a_task_has_no_potential(guess_warm):
    import copy

    from sixblanks.harness.fairness.audit import shaping_terms
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer, TrainingError

    cfg, task, model, tok = guess_warm
    blanks = resolve("turn_grpo", {"data": {"potential_shaping": {"enabled": True}}})
    assert shaping_terms(blanks) == {"potential": {"gamma": 1.0}}  # the audit lists it
    budget = {"launched_tokens": 500.0}
    s = RunSettings(blanks, cfg.rollout, cfg.optimizer, budget, 0, eval_size=4)
    res = Trainer(s, task, copy.deepcopy(model), tok).train()
    # every episode starts at Phi = 0 and ends at 0: the terms sum to 0 over each episode ...
    assert all(abs(m["potential_shaping_mean"]) < 1e-9 for m in res.steps if "loss" in m)
    # ... but not turn by turn: the same batch gets other advantages than unshaped. A batch of
    # one-turn episodes (the secret guessed at once) has no shaping term, so the two runs take the
    # same updates, and draw the same rollouts, until the first batch with a multi-turn episode:
    # there the advantages must differ
    s0 = RunSettings(resolve("turn_grpo"), cfg.rollout, cfg.optimizer, budget, 0, eval_size=4)
    plain = Trainer(s0, task, copy.deepcopy(model), tok).train()
    pairs = list(zip(plain.steps, res.steps))
    first = next(
        i for i, (p, r) in enumerate(pairs) if p["adv_abs_mean"] != pytest.approx(r["adv_abs_mean"])
    )
    assert all(p["reward_mean"] == r["reward_mean"] for p, r in pairs[: first + 1])  # same rollouts
    with pytest.raises(TrainingError, match="defines no potential"):
        Trainer(s, make_task("arithmetic"), copy.deepcopy(model), tok)


# ----------------------------------------------------------------------------- cloning states


def _counting_gate(task):
    from sixblanks.harness.tasks.verify import VerifierGate

    return VerifierGate(task)


def test_an_environment_restored_from_a_snapshot_continues_as_the_original():
    """guess_number with noisy feedback: a clone made mid-episode (snapshot and restore) answers
    the next guesses exactly as the original, randomness included; no replay needed."""

    from sixblanks.harness.tasks import clone_env, make_task

    task = make_task("guess_number", {"low": 1, "high": 16, "max_turns": 8, "noise": 0.4})
    inst = task.instances([5])[0]
    gate = _counting_gate(task)
    env = task.make_env(inst, gate)
    env.reset(seed=inst.seed)
    for a in ("8\n", "4\n"):
        env.step(a)
    calls = gate.stats.calls
    clone = clone_env(task, inst, gate, env, ["8\n", "4\n"])
    assert clone.how == "snapshot" and clone.replayed_steps == 0 and gate.stats.calls == calls
    assert clone.env.state_key() == env.state_key()
    for a in ("2\n", "3\n", "12\n", "1\n"):
        r1, r2 = env.step(a), clone.env.step(a)
        assert (r1.observation, r1.reward, r1.terminated) == (
            r2.observation,
            r2.reward,
            r2.terminated,
        )
        assert env.state_key() == clone.env.state_key()


def test_an_environment_without_snapshots_is_replayed_and_says_so():
    from sixblanks.harness.tasks import clone_env, make_task

    task = make_task("arithmetic")
    inst = task.instances([3])[0]
    gate = _counting_gate(task)
    env = task.make_env(inst, gate)
    env.reset(seed=inst.seed)
    env.step("7\n")
    clone = clone_env(task, inst, gate, env, ["7\n"])
    assert clone.how == "replay" and clone.replayed_steps == 1
    assert gate.stats.calls == 2  # the replay's verifier call is made (and must be charged)
    assert clone.env.turn == env.turn


# ----------------------------------------------------------------------------- chain_arithmetic


def test_chain_arithmetic_labels_each_step_and_rewards_the_last():
    from sixblanks.harness.tasks import make_task

    task = make_task("chain_arithmetic", {"steps": 3})
    inst = task.instances([11])[0]
    values, ops = inst.data["values"], inst.data["ops"]
    # the chain, recomputed: each value is the previous one with the operation applied
    for k, op in enumerate(ops):
        assert values[k + 1] == values[k] + int(op)
    gate = _counting_gate(task)
    env = task.make_env(inst, gate)
    obs, _ = env.reset(seed=inst.seed)
    assert obs == f"{values[0]}{ops[0]}="
    answers = [values[1], values[2] + 1, values[3]]  # the second step slips
    results = [env.step(f"{a}\n") for a in answers]
    assert [r.info["step_correct"] for r in results] == [True, False, True]
    assert [r.reward for r in results] == [0.0, 0.0, 1.0]  # the outcome: the last value exact
    assert [r.terminated for r in results] == [False, False, True]
    assert [r.observation for r in results[:2]] == [f"{ops[1]}=", f"{ops[2]}="]
    assert gate.stats.calls == 1  # the outcome goes through the counted verifier
    # the oracle answers every step right
    seen = [obs]
    env2 = task.make_env(inst, gate)
    env2.reset(seed=inst.seed)
    for _ in range(3):
        r = env2.step(task.oracle(inst, seen))
        assert r.info["step_correct"]
        seen.append(r.observation)
    assert r.reward == 1.0


def _chain_run(preset, task, model, tok, tokens, eval_size):
    """A short run of ``preset`` on chain_arithmetic (2 steps), 2 prompts x 4 samples."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.training import RunSettings, Trainer

    cfg = validate_mapping(
        {
            "task": {"name": "chain_arithmetic", "params": {"steps": 2}},
            "arms": {"a": {"preset": preset}},
            "rollout": {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 4},
        }
    )
    s = RunSettings(
        resolve(preset),
        cfg.rollout,
        cfg.optimizer,
        {"launched_tokens": tokens},
        0,
        eval_size=eval_size,
    )
    return Trainer(s, task, model, tok).train()


def test_gigpo_on_chain_arithmetic_finds_anchor_groups_at_every_step():
    from sixblanks.harness.training.contract import check_turns

    torch.manual_seed(0)
    task, model, tok, batch = _fresh_rollouts("chain_arithmetic", {"steps": 2}, 4)
    assert check_turns(batch, env_keys=True).passed
    res = _chain_run("gigpo", task, model, tok, 150.0, eval_size=4)
    assert not res.ledger.check_invariants() and len(res.steps) >= 2
    # every step of a group sees the same observation of the same true chain: one anchor group
    assert all(m["gigpo.anchor_frac"] == 1.0 for m in res.steps)


def test_step_labels_reach_the_trajectory_and_the_metrics():
    """chain_arithmetic's step labels are recorded per turn (NaN past an episode's end and for
    tasks without labels); a run logs the share of labelled steps that were right."""

    from sixblanks.harness.rollout.trajectory import TrajectoryBatch

    torch.manual_seed(0)
    task, model, tok, batch = _fresh_rollouts("chain_arithmetic", {"steps": 2}, 4)
    for b in range(batch.size):
        n = int(batch.n_turns[b])
        acts = batch.actions[b]
        inst = task.instances([int(batch.instance_seeds[b])])[0]
        want = [float(a.strip() == str(inst.data["values"][k + 1])) for k, a in enumerate(acts)]
        got = batch.step_labels[b, :n].tolist()
        assert got == want and all(math.isnan(x) for x in batch.step_labels[b, n:].tolist())
    _, _, _, plain = _fresh_rollouts("guess_number", {"low": 1, "high": 8, "max_turns": 2}, 2)
    assert plain.step_labels.isnan().all()  # guess_number labels no steps
    both = TrajectoryBatch.concat([batch, plain])  # widths padded with NaN, not a label
    assert both.step_labels.shape[1] == max(batch.step_labels.shape[1], plain.step_labels.shape[1])
    res = _chain_run("turn_grpo", task, model, tok, 100.0, eval_size=2)
    assert all(0.0 <= m["step_accuracy"] <= 1.0 for m in res.steps)


def test_a_snapshot_without_restore_is_a_clear_error():
    from sixblanks.harness.tasks import Env, clone_env, make_task

    class Half(Env):
        def snapshot(self):
            return {"turn": self.turn}

    task = make_task("arithmetic")
    inst = task.instances([0])[0]
    gate = _counting_gate(task)
    task.make_env = lambda instance, verify: Half(task, instance, verify)
    env = task.make_env(inst, gate)
    with pytest.raises(TypeError, match="defines no restore"):
        clone_env(task, inst, gate, env, [])
