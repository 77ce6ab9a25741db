"""Self-play: the two-player game ``nim`` and its scripted opponents, checked by
hand and by minimax; a pool of past checkpoints as the training opponents (size bound, snapshot
cadence, their tokens charged exactly as ``opponent_tokens``, resumed exactly); and the evaluation
against the fixed external opponents, apart from training, recorded in DuckDB."""

import copy
import json
import random
import re
from functools import cache

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.rollout.agent import encode_observation, run_episodes
from sixblanks.harness.rollout.engine import Generation, HFEngine, RolloutEngine, SamplingParams
from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.selfplay import (
    OptimalPlayer,
    Position,
    optimal_take,
    parse_take,
    winner,
)
from sixblanks.harness.tasks.verify import VerifierGate
from tests.conftest import Saved

NIM = {"low": 4, "high": 9}


# ----------------------------------------------------------------------------- the game


def test_rules_and_the_optimal_player_by_hand():
    assert [optimal_take(p, 3) for p in (5, 6, 7, 9, 10, 11)] == [1, 2, 3, 1, 2, 3]
    assert optimal_take(4, 3) == optimal_take(8, 3) == 1  # a lost pile: take 1 and hope
    assert optimal_take(7, 2) == 1 and optimal_take(8, 5) == 2  # leave a multiple of m + 1
    assert parse_take(" 3 ", 5, 3) == 3 and parse_take("2", 1, 3) is None  # more than the pile
    assert [parse_take(t, 9, 3) for t in ("0", "4", "x", "", "1 2", "3:")] == [None] * 6
    assert winner(5, 3, ["1", "1", "3"]) == 0  # 5 -> 4 -> 3 -> 0: the policy took the last
    assert winner(4, 3, ["3", "1"]) == 1  # 4 -> 1 -> 0: the opponent did
    assert winner(9, 3, ["1", "2"]) is None  # 9 -> 8 -> 6: undecided
    assert winner(5, 3, ["4"]) == 1 and winner(2, 3, ["3"]) == 1  # an illegal move loses
    assert winner(5, 3, ["1", "9"]) == 0  # so does the opponent's


@cache
def _first_player_wins(pile: int, m: int) -> bool:
    """Minimax, independent of the formula: some take leaves the other player a lost pile."""

    return any(not _first_player_wins(pile - k, m) for k in range(1, min(m, pile) + 1))


@pytest.mark.parametrize("m", [2, 3, 4])
def test_minimax_agrees_with_the_optimal_player(m):
    for pile in range(1, 25):
        wins = _first_player_wins(pile, m)
        assert wins == (pile % (m + 1) != 0), pile
        if wins:  # the optimal take leaves a lost pile
            assert not _first_player_wins(pile - optimal_take(pile, m), m)


def _env(task, pile, opponent=None, seed=7):
    inst = task.make_instance(seed)
    inst.data["pile"], inst.prompt = pile, task.prompt(pile)
    inst = task.against(inst, opponent) if opponent is not None else inst
    gate = VerifierGate(task, timeout_s=None)
    env = task.make_env(inst, gate)
    env.reset(seed=inst.seed)
    return env, gate


@pytest.mark.parametrize("pile", [4, 8])
def test_against_optimal_every_line_of_play_from_a_multiple_of_4_loses(pile):
    """Every sequence of legal policy moves, explored through snapshot/restore, loses."""

    task = make_task("nim", {"low": 4, "high": 12})
    env, _ = _env(task, pile, OptimalPlayer())
    outcomes = []

    def explore(state):
        for k in range(1, min(3, state["pile"]) + 1):
            env.restore(state)
            res = env.step(str(k))
            if res.terminated:
                outcomes.append(res.reward)
            else:
                assert res.observation.endswith(f" {env.pile}:") and env.pile % 4 == 0
                explore(env.snapshot())

    explore(env.snapshot())
    assert outcomes and set(outcomes) == {0.0}
    env2, _ = _env(task, pile + 1, OptimalPlayer())  # one more: the first player wins
    while not (res := env2.step(str(optimal_take(env2.pile, 3)))).terminated:
        pass
    assert res.reward == 1.0


def test_the_opponent_moves_inside_step_seeded_and_scored_by_the_verifier():
    task = make_task("nim", NIM)
    env, gate = _env(task, 7, seed=11)  # the task's default opponent: random
    res = env.step("3")  # 7 -> 4, then the random player takes k in [1, 3]
    k = random.Random(11).randint(1, 3)  # the environment's RNG, seeded by the instance
    assert res.observation == f"{k} {4 - k}:" and res.reward == 0 and not res.terminated
    assert env.state_key() == 4 - k and gate.stats.calls == 0  # no outcome yet
    res = env.step(str(4 - k))  # the policy takes the rest
    assert res.terminated and res.reward == 1.0 and gate.stats.calls == 1
    assert task.verify(env.instance, "\n".join(env.moves)) == 1.0  # the transcript agrees
    env, gate = _env(task, 7, seed=11)
    assert env.step(" 3\n").observation == f"{k} {4 - k}:"  # the same game again


class _Bad:
    name = "bad"

    def __init__(self, reply):
        self.reply = reply

    def move(self, position, rng):
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def test_illegal_moves_lose_the_game_for_either_player():
    task = make_task("nim", NIM)
    for move in ("4", "8", "x", "0", ""):  # more than max_take, than the pile; unparsable; none
        env, gate = _env(task, 7)
        res = env.step(move)
        assert res.terminated and res.reward == 0.0 and res.info["illegal"] == "policy"
        assert gate.stats.calls == 1  # the loss is the verifier's, counted
    env, _ = _env(task, 7, _Bad("garbage"))
    res = env.step("1")
    assert res.terminated and res.reward == 1.0 and res.info["illegal"] == "opponent"


class Scripted(RolloutEngine):
    """An engine that answers each position with ``answer(pile)`` (the text after the last
    ``"<pile>:"`` of the context), as tokens of ``tok``."""

    def __init__(self, tok, answer):
        self.tok, self.answer = tok, answer

    def generate(self, prompts, params, n=1, generator=None):
        out = []
        for p in prompts:
            text = self.tok.decode(p, skip_special_tokens=True)
            pile = int(re.search(r"(\d+):\s*$", text).group(1))
            ids = self.tok(self.answer(pile), add_special_tokens=False)["input_ids"]
            out.append([Generation(ids, [0.0] * len(ids), "stop") for _ in range(n)])
        return out

    def load_weights(self, state_dict=None):
        self.policy_version += 1


def test_an_opponent_that_raises_fails_its_games_only(nim_warm):
    _, task, _, tok = nim_warm
    insts = task.instances([1, 2, 3])
    insts = [task.against(insts[0], _Bad(RuntimeError("boom")))] + insts[1:]
    engine = Scripted(tok, lambda pile: "1\n")
    batch = run_episodes(engine, tok, task, insts, 2, SamplingParams(max_new_tokens=2))
    assert batch.failed.tolist() == [True, True, False, False, False, False]
    assert "boom" in batch.failure_reasons[0] and float(batch.action_mask[:2].sum()) == 0


def test_external_evaluation_of_scripted_players_by_hand(nim_warm):
    from sixblanks.harness.training.evaluate import greedy_games

    cfg, task, _, tok = nim_warm
    piles = [i.data["pile"] for i in task.heldout_games(16, "test")]
    winnable = sum(p % 4 != 0 for p in piles)  # by hand: a perfect first player wins these
    perfect = greedy_games(
        Scripted(tok, lambda pile: f"{optimal_take(pile, 3)}\n"), tok, task, cfg.rollout
    )
    row = task.play_external(perfect, "optimal", 16, "test")
    assert (row["wins"], row["losses"], row["draws"]) == (winnable, 16 - winnable, 0)
    assert row["winnable"] == winnable and row["win_rate"] == winnable / 16
    assert row["verifier_calls"] == 16  # one outcome per game
    row = task.play_external(perfect, "random", 16, "test")
    assert winnable <= row["wins"] <= 16 and row["draws"] == 0
    cheat = greedy_games(Scripted(tok, lambda pile: "9\n"), tok, task, cfg.rollout)
    row = task.play_external(cheat, "random", 16, "test")  # always illegal: every game lost
    assert (row["wins"], row["losses"], row["draws"]) == (0, 16, 0)


def test_a_task_evaluates_apart_through_its_hook(nim_warm):
    """The loop's evaluation apart goes through the task: a plain task measures nothing apart;
    nim plays each external opponent once, ``eval_games`` games (else the evaluation size)."""

    from sixblanks.harness.tasks.base import Games

    calls = []

    def play(label, instances):
        calls.append((label, len(instances)))
        n = len(instances)
        return Games([1.0] * (n - 1) + [0.0], [True] * (n - 1) + [False], {"generated_tokens": 5.0})

    assert make_task("arithmetic").evaluate_apart(play, 8, "test") == {} and not calls
    _, task, _, _ = nim_warm
    rows = task.evaluate_apart(play, 3, "validation")["selfplay"]
    assert calls == [("selfplay random", 3), ("selfplay optimal", 3)]
    assert [(r["opponent"], r["split"], r["wins"], r["losses"], r["draws"]) for r in rows] == [
        ("random", "validation", 2, 0, 1),
        ("optimal", "validation", 2, 0, 1),
    ]
    assert rows[0]["generated_tokens"] == 5.0
    calls.clear()
    make_task("nim", {"eval_games": 2, "eval_opponents": ["optimal"]}).evaluate_apart(
        play, 3, "test"
    )
    assert calls == [("selfplay optimal", 2)]


def test_bad_configuration_is_named():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"opponent: unknown scripted opponent 'optimum'"):
        make_task("nim", {"opponent": "optimum"})
    with pytest.raises(ValidationError, match=r"eval_opponents\[1\]: unknown scripted"):
        make_task("nim", {"eval_opponents": ["random", "perfect"]})
    with pytest.raises(ValidationError, match="high: must be >= low"):
        make_task("nim", {"low": 9, "high": 4})
    with pytest.raises(ValidationError, match="self_play.pool_size"):
        resolve("grpo", {"data": {"self_play": {"pool_size": 0}}})
    with pytest.raises(ValidationError, match="data.self_play: games against the pool"):
        resolve("grpo", {"data": {"self_play": {}, "branching": {"turns": [1]}}})


def test_self_play_needs_a_game_task():
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.training import RunSettings, Trainer, TrainingError
    from tests.golden.record import CONFIG, INITIAL_DIR

    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    s = RunSettings(resolve("grpo", {"data": {"self_play": {}}}), cfg.rollout, cfg.optimizer, {}, 0)
    with pytest.raises(TrainingError, match="needs a two-player game task.*'arithmetic'"):
        Trainer(s, make_task("arithmetic"), model, tok, ref_model=model)


# ----------------------------------------------------------------------------- the pool


@pytest.fixture(scope="module")
def nim_warm(tmp_path_factory):
    """A policy warm-started briefly on nim (piles 4-9): it knows the format, plays badly."""

    from tests.conftest import warm_policy

    return warm_policy(
        tmp_path_factory,
        "nim",
        NIM,
        {"max_new_tokens": 2, "prompts_per_step": 2, "group_size": 4},
        {"steps": 12, "num_demos": 200},
    )


def test_the_pool_keeps_at_most_pool_size_and_draws_by_its_rule(nim_warm):
    from sixblanks.harness.training.opponents import PolicyPool

    _, task, model, tok = nim_warm
    params = SamplingParams(1.0, max_new_tokens=2, stop=("\n",))
    pool = PolicyPool(model, tok, task, params, 3, "uniform", seed=0)
    state = model.state_dict()
    evicted = [pool.add(v, state) for v in range(6)]
    assert sorted(pool.members) == [3, 4, 5] and evicted == [[], [], [], [0], [1], [2]]
    draws = [pool.draw().version for _ in range(200)]
    assert set(draws) == {3, 4, 5}  # uniform: every member plays
    again = PolicyPool(model, tok, task, params, 3, "uniform", seed=0)
    for v in range(6):
        again.add(v, state)
    assert [again.draw().version for _ in range(200)] == draws  # seeded by the run
    pool.rule = "latest"
    assert {pool.draw().version for _ in range(20)} == {5}
    pos = Position(pile=7, max_take=3, seed=123, ply=1)
    first = pool.play(5, pos)
    assert pool.play(5, pos) == first  # a position replays the same move
    assert pool.tokens == sum(m["tokens"] for m in pool.moves) > 0
    # each member plays with its own weights: greedy replies against independent generation
    greedy = SamplingParams(0.0, max_new_tokens=2, stop=("\n",))
    pool = PolicyPool(model, tok, task, greedy, 2, "latest", seed=0)
    noisy = {
        k: t + torch.randn(t.shape, generator=torch.Generator().manual_seed(1))
        for k, t in state.items()
    }
    pool.add(0, state)
    pool.add(1, noisy)
    ids = encode_observation(tok, "7:", first=True)
    replies = {}
    for v, weights in ((0, state), (1, noisy), (0, state)):
        alone = copy.deepcopy(model)
        alone.load_state_dict(weights)
        want = HFEngine(alone, tok).generate([ids], greedy)[0][0].text
        replies[v] = pool.play(v, pos)
        assert replies[v] == want, v
    assert replies[0] != replies[1]  # the check can tell the members apart


def _settings(cfg, sp, budget=260.0):
    from sixblanks.harness.training import RunSettings

    blanks = resolve("grpo", {"data": {"self_play": sp}})
    return RunSettings(
        blanks, cfg.rollout, cfg.optimizer, {"launched_tokens": budget}, 0, eval_size=4
    )


def test_snapshot_cadence_pool_bound_and_opponent_tokens_recounted(nim_warm):
    """Pool of 2, a snapshot every 2 steps, the newest member plays greedily: each step's
    opponent tokens are recounted by replaying every game by the rules and regenerating each reply
    with the member's stored weights; the evaluations play the external opponents apart."""

    from sixblanks.harness.training import Trainer
    from sixblanks.harness.training.contract import check_contract

    cfg, task, model, tok = nim_warm
    sp = {"pool_size": 2, "snapshot_every": 2, "opponents": "latest", "opponent_temperature": 0}
    tr = Trainer(_settings(cfg, sp), task, copy.deepcopy(model), tok)
    col, seen = tr.collector, []
    collect = col.collect

    def recording():
        got = collect()
        v = max(col.pool.members)
        if got.metrics["selfplay.snapshot_added"]:  # the policy as it is now (before its update)
            live = tr.ctx.model.state_dict()
            assert all(torch.equal(t, live[k]) for k, t in col.pool.members[v].items())
        report = check_contract(  # the trajectory contract holds on games against the pool
            got.batch,
            tr.ctx.model,
            tok,
            temperature=cfg.rollout.temperature,
            group_size=cfg.rollout.group_size,
            policy_version=tr.ctx.engine.policy_version,
            env_keys=True,
        )
        assert report.passed, report.summary()
        if got.metrics["selfplay.opponent_tokens"]:  # the member that played held its own weights
            held = col.pool.model.state_dict()
            assert all(torch.equal(t, held[k]) for k, t in col.pool.members[v].items())
        seen.append((got, v, {k: t.clone() for k, t in col.pool.members[v].items()}))
        return got

    col.collect = recording
    initial = model.state_dict()
    assert all(torch.equal(t, initial[k]) for k, t in col.pool.members[0].items())
    res = tr.train()
    assert res.ended_because == "budget" and len(res.steps) >= 5
    frozen = copy.deepcopy(model)
    greedy = SamplingParams(0.0, max_new_tokens=cfg.rollout.max_new_tokens, stop=("\n",))
    total = 0
    for k, (got, v, weights) in enumerate(seen):
        members = sorted({0, *range(2, k + 1, 2)})[-2:]  # by hand: the last two of v0, v2, v4...
        m = got.metrics
        assert m["selfplay.pool_size"] == len(members) and m["selfplay.pool_newest"] == v
        assert (m["selfplay.pool_oldest"], v) == (members[0], members[-1])
        assert m["selfplay.snapshot_added"] == float(k > 0 and k % 2 == 0)
        assert m["selfplay.opponent_version_mean"] == v  # the newest played every game
        frozen.load_state_dict(weights)
        engine, count = HFEngine(frozen, tok), 0
        b = got.batch
        for i in range(b.size):
            pile = task.make_instance(int(b.instance_seeds[i])).data["pile"]
            for j, action in enumerate(b.actions[i]):
                take = parse_take(" ".join(action.split()), pile, 3)
                if take is None or take == pile:
                    break
                pile -= take
                ids = encode_observation(tok, f"{pile}:", first=True)
                (gen,) = engine.generate([ids], greedy)[0]
                count += len(gen.token_ids)
                reply = parse_take(" ".join(gen.text.split()), pile, 3)
                if reply is None or reply == pile:
                    break
                pile -= reply
                assert b.observations[i][j + 1] == f"{reply} {pile}:"
        assert m["selfplay.opponent_tokens"] == count > 0, k
        total += count
    counters = res.ledger.counters
    assert counters["opponent_tokens"] == total and not res.ledger.check_invariants()
    # the external opponents, at every evaluation, apart from the training ledger
    assert len(res.evals) >= 3
    for e in res.evals:
        assert [r["opponent"] for r in e["selfplay"]] == ["random", "optimal"]
        for r in e["selfplay"]:
            assert r["games"] == 4 and r["wins"] + r["losses"] + r["draws"] == 4
    evaluated = tr.eval_meter.ledger.counters["launched_tokens"]
    main = sum(e["cost"]["generated_tokens"] for e in res.evals)
    games = sum(r["generated_tokens"] for e in res.evals for r in e["selfplay"])
    assert evaluated == main + games and games > 0


class _Killed(Exception):
    pass


def test_a_selfplay_run_killed_after_step_2_resumes_exactly(nim_warm):
    from sixblanks.harness.training import Trainer

    cfg, task, model, tok = nim_warm
    sp = {"pool_size": 2, "snapshot_every": 1, "opponents": "uniform"}  # sampled moves, drawn
    runs = [Trainer(_settings(cfg, sp, 220.0), task, copy.deepcopy(model), tok) for _ in range(3)]
    full = runs[0].train()
    saved = Saved()

    def kill(tr, metrics):
        if tr.step_idx == 2:
            saved.save(tr)
            raise _Killed

    with pytest.raises(_Killed):
        runs[1].train(on_step=kill)
    runs[2].load_state_dict(saved.load())
    again = runs[2].train(evaluate_start=False)
    timeless = {k: v for k, v in full.ledger.counters.items() if not k.endswith("_seconds")}
    assert timeless["optimizer_steps"] >= 4 and timeless["opponent_tokens"] > 0
    assert {k: again.ledger.counters[k] for k in timeless} == timeless
    assert sorted(runs[2].collector.pool.members) == sorted(runs[0].collector.pool.members)
    for k, v in runs[0].model.state_dict().items():
        assert torch.equal(v, runs[2].model.state_dict()[k]), k

    def games(res):  # the last evaluation's tallies (not its measured time)
        return [
            {k: v for k, v in r.items() if "seconds" not in k} for r in res.evals[-1]["selfplay"]
        ]

    assert games(again) == games(full)


# ----------------------------------------------------------------------------- end to end


def test_end_to_end_the_external_evaluation_is_in_duckdb(tmp_path, cli, write_yaml):
    import yaml

    from sixblanks.harness.store.database import connect, ingest

    exp = {
        "name": "sp",
        "task": {"name": "nim", "params": {**NIM, "eval_games": 6}, "eval_size": 4},
        "rollout": {"max_new_tokens": 2, "prompts_per_step": 2, "group_size": 4},
        "warm_start": {"steps": 8, "num_demos": 100},
        "budget": {"launched_tokens": 150},
        "eval": {"every": 75},
        "seeds": [0],
        "arms": {
            "selfplay": {"preset": "grpo", "blanks": {"data": {"self_play": {"pool_size": 2}}}},
            "vs_random": {"preset": "grpo"},
        },
        "executor": {"workers": 1},
        "tracking": {"mlflow": False},
    }
    out = tmp_path / "out"
    code, _, err = cli("run", write_yaml(yaml.safe_dump(exp)), "--out", str(out), "--no-progress")
    assert code == 0, err
    con = connect(out, read_only=True)
    rows = con.execute(
        "SELECT r.arm, s.step, s.opponent, s.games, s.wins + s.losses + s.draws, s.win_rate, "
        "s.wins FROM selfplay_evals s JOIN runs r USING (run_id) ORDER BY ALL"
    ).fetchall()
    evals = con.execute("SELECT r.arm, e.step FROM evals e JOIN runs r USING (run_id)").fetchall()
    tokens = dict(
        con.execute(
            "SELECT r.arm, max(l.opponent_tokens) FROM ledger l JOIN runs r USING (run_id) "
            "GROUP BY 1"
        ).fetchall()
    )
    con.close()
    # both arms, every evaluation, both external opponents, eval_games games each
    assert sorted((a, s, o) for a, s, o, *_ in rows) == sorted(
        (a, s, o) for a, s in evals for o in ("optimal", "random")
    )
    assert {a for a, *_ in rows} == {"selfplay", "vs_random"}
    assert all(g == 6 and n == 6 and r == w / 6 for _, _, _, g, n, r, w in rows)
    assert tokens["selfplay"] > 0 and tokens["vs_random"] == 0
    counts = ingest(out)  # ingesting again adds nothing
    assert counts["selfplay_evals"] == len(rows)
    md = (out / "report" / "report.md").read_text()
    assert "## Self-play: against fixed external opponents" in md
    assert "pool of past checkpoints (size 2" in md and "the scripted random player" in md
    assert json.loads((out / "experiment.json").read_text())["runs"]


def test_the_report_section_is_absent_without_selfplay_rows():
    from types import SimpleNamespace

    import polars as pl

    from sixblanks.reports.selfplay import selfplay_blocks

    assert selfplay_blocks(SimpleNamespace(selfplay=pl.DataFrame())) == []
