"""Gymnasium environments as tasks (``gymnasium:<env id>``): the text the policy reads, its actions
parsed, the environment's own reward through the counted verifier gate (one verifier call per
environment step), checked against the same environment stepped directly; and FrozenLake run end
to end through the harness under the ledger."""

from __future__ import annotations

# the `gym` extra is installed in both venvs `make test` uses: a missing gymnasium is an error
import gymnasium
import pytest

from sixblanks.harness.rollout.agent import run_episodes
from sixblanks.harness.rollout.engine import Generation, SamplingParams
from sixblanks.harness.seeds import SPLIT_OFFSETS
from sixblanks.harness.tasks import check_task, make_task
from sixblanks.harness.tasks.gymenv import plain_text, state_text
from sixblanks.harness.tasks.verify import VerifierGate

from .conftest import query

LAKE = {
    "kwargs": {"is_slippery": False},
    "max_turns": 8,
    "actions": ["left", "down", "right", "up"],
}


class Moves:
    """A rollout engine that plays a fixed list of actions, the same for every episode."""

    policy_version = 0

    def __init__(self, tok, moves: list[str]):
        self.tok, self.moves, self.calls = tok, moves, 0

    def generate(self, prompts, params, n=1, generator=None):
        text = self.moves[self.calls]
        self.calls += 1
        ids = self.tok(text + "\n", add_special_tokens=False)["input_ids"]
        return [[Generation(ids, [-0.1] * len(ids), "stop", text)] for _ in prompts]


@pytest.fixture(scope="module")
def tok():
    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy

    return load_policy(ModelConfig(), [make_task("gymnasium:FrozenLake-v1", LAKE)])[1]


def _play(task, tok, moves, seeds=(0,)):
    gate = VerifierGate(task)
    batch = run_episodes(
        Moves(tok, moves),
        tok,
        task,
        task.instances(list(seeds)),
        1,
        SamplingParams(max_new_tokens=8),
        gate,
        max_context_tokens=512,
    )
    return batch, gate


def test_the_text_a_policy_reads():
    lake = make_task("gymnasium:FrozenLake-v1", LAKE).make_instance(0)
    assert (
        lake.prompt == "FrozenLake-v1 actions 0=left 1=down 2=right 3=up\n@FFF\nFHFH\nFFFH\nHFFG\n"
    )
    assert plain_text("|\x1b[34;1mR\x1b[0m: |\x1b[43m \x1b[0m: :G|") == "|R: |@: :G|"
    assert state_text((14, 10, False)) == "14 10 0" and state_text(7) == "7"
    jack = make_task("gymnasium:Blackjack-v1", {})
    env = gymnasium.make("Blackjack-v1")
    obs, _ = env.reset(seed=3)
    assert jack.make_instance(3).prompt == f"Blackjack-v1 actions 0-1\n{state_text(obs)}\n"


def test_frozen_lake_by_hand(tok):
    """right, right, down, down, down, right reaches the goal of the 4x4 map: reward 1 at the last
    step, one verifier call per step; a name and an index are the same action."""

    task = make_task("gymnasium:FrozenLake-v1", LAKE)
    batch, gate = _play(task, tok, ["right", "2", "down", "1", "DOWN", "right"])
    assert batch.reward.tolist() == [1.0] and batch.terminated.tolist() == [True]
    assert batch.turn_rewards[0].tolist() == [0, 0, 0, 0, 0, 1.0]
    assert gate.stats.calls == 6 == int(batch.n_turns.sum())
    assert batch.observations[0][1] == "  (Right)\nS@FF\nFHFH\nFFFH\nHFFG\n"
    # into a hole: terminated at once with reward 0; a word it cannot read is not an action
    hole, gate = _play(task, tok, ["jump", "right", "down"])
    assert hole.observations[0][1] == "invalid action; write one of 0=left 1=down 2=right 3=up\n"
    assert hole.reward.tolist() == [0.0] and hole.terminated.tolist() == [True]
    assert gate.stats.calls == 3 and hole.observations[0][-1].endswith("FHFH\nFFFH\nHFFG\n")


def test_the_reward_is_the_environments_own(tok):
    """Blackjack stepped through the task and directly, at the same seeds, pays the same."""

    task = make_task("gymnasium:Blackjack-v1", {"max_turns": 4})
    seeds = list(range(20, 32))
    batch, gate = _play(task, tok, ["1", "0", "0", "0"], seeds)  # hit once, then stick
    direct = []
    for s in seeds:
        env = gymnasium.make("Blackjack-v1")
        env.reset(seed=s)
        _, r, done, _, _ = env.step(1)
        total = r
        if not done:
            _, r, done, _, _ = env.step(0)
            total += r
        direct.append(float(total))
    assert batch.reward.tolist() == direct and len(set(direct)) > 1
    assert gate.stats.calls == int(batch.n_turns.sum())


def test_bad_names_and_settings_are_named():
    ((where, why),) = check_task("gymnasium:FrozenLak-v1", {})
    assert where == "name" and "did you mean 'FrozenLake-v1'" in why
    assert (
        "kwargs: gymnasium.make('FrozenLake-v1') refused them"
        in check_task("gymnasium:FrozenLake-v1", {"kwargs": {"slippery": False}})[0][1]
    )
    assert (
        "render needs an ansi render mode"
        in check_task("gymnasium:Blackjack-v1", {"observation": "render"})[0][1]
    )
    assert (
        "2 name(s) for 4 actions"
        in check_task("gymnasium:FrozenLake-v1", {"actions": ["a", "b"]})[0][1]
    )
    assert "is not discrete" in check_task("gymnasium:Pendulum-v1", {})[0][1]


def test_held_out_by_seed_or_by_start_state():
    # one map: each seed its own problem, the held-out ones in the test split's own seed range
    lake = make_task("gymnasium:FrozenLake-v1", LAKE)
    seeds = [i.seed for i in lake.eval_instances(8)]
    assert seeds == list(range(SPLIT_OFFSETS["test"], SPLIT_OFFSETS["test"] + 8))
    assert lake.preflight() == []
    # Taxi's start states (taxi, passenger, destination): a held-out start is never trained on
    taxi = make_task("gymnasium:Taxi-v4", {"split": "observation", "observation": "both"})
    test = taxi.eval_instances(16)
    keys = [taxi.problem_key(i) for i in test]
    assert len(set(keys)) == 16 and not any(taxi.trains_on(i.seed) for i in test)
    env = gymnasium.make("Taxi-v4")
    assert keys[0] == str(env.reset(seed=test[0].seed)[0])  # the state, as the environment says
    assert test[0].prompt.endswith(f"state {keys[0]}\n")
    one = make_task("gymnasium:FrozenLake-v1", {**LAKE, "split": "observation"})
    (problem,) = one.preflight()
    assert "starts in too few states" in problem and "use split: seed" in problem


@pytest.mark.slow
def test_frozen_lake_runs_as_a_task_under_the_ledger(run_experiment):
    """A shrunk experiment on FrozenLake (no warm start: no oracle): every environment step is a
    verifier call on the training ledger and in each evaluation."""

    cfg = {
        "model": {
            "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64}
        },
        "task": {
            "name": "gymnasium:FrozenLake-v1",
            "params": LAKE,
            "eval_size": 8,
        },
        "rollout": {
            "max_new_tokens": 4,
            "group_size": 4,
            "prompts_per_step": 2,
            "max_prompt_tokens": 256,
        },
        "warm_start": {"enabled": False},
        "budget": {"optimizer_steps": 2},
        "eval": {"size": 8, "every": None},
        "arms": {"grpo": {"preset": "grpo"}},
    }
    out = run_experiment(cfg)
    ((steps, env_steps, calls, rollouts),) = query(
        out,
        "select count(*), max(env_steps), max(verifier_calls), max(rollouts_launched) from ledger",
    )
    assert steps == 2 and rollouts == 16 and calls == env_steps and 16 <= env_steps <= 16 * 8
    evals = query(out, "select n, eval_verifier_calls from evals order by step")
    assert len(evals) >= 2 and all(n == 8 and 8 <= c <= 8 * 8 for n, c in evals)
    ((task,),) = query(out, "select distinct task from runs")
    assert task == "gymnasium:FrozenLake-v1"
