"""Search as a collector : best-of-N with selection, distilled by SFT
(expert iteration, or distillation of the frozen initial policy), and its accounting: every
sample charged to the totals and to the search counters, the unselected ones discarded as
search_selection."""

import copy

import pytest
import torch

from sixblanks.algorithms.presets import resolve


def _batch(rewards, failed=(), n=4):
    from types import SimpleNamespace

    r = torch.tensor(rewards, dtype=torch.float32)
    f = torch.zeros(len(rewards), dtype=torch.bool)
    for i in failed:
        f[i] = True
    groups = torch.arange(len(rewards)) // n
    return SimpleNamespace(reward=r, failed=f, size=len(rewards), group_ids=groups)


def test_selection_by_hand():
    from sixblanks.harness.training.collectors.search import select

    # two prompts of four samples: [0, 1, 1, 0.5] and [0, 0, 0.5, 0.2]
    b = _batch([0, 1, 1, 0.5, 0, 0, 0.5, 0.2])
    assert select(b, "best", 1.0) == [1]  # the first of the tied best; prompt 2 has none
    assert select(b, "all_passing", 1.0) == [1, 2]
    assert select(b, "best", 0.5) == [1, 6]
    assert select(b, "all_passing", 0.5) == [1, 2, 3, 6]
    assert select(b, "all", 1.0) == list(range(8))  # the whole group, whatever it scored
    failed = _batch([0, 1, 1, 0.5], failed=[1])
    assert select(failed, "best", 1.0) == [2]  # a failed sample is never selected
    assert select(failed, "all", 1.0) == [0, 2, 3]
    # groups of unequal size (a tree's leaves per prompt): rows 0-2 and 3-4
    uneven = _batch([0, 1, 0, 1, 1], n=3)
    assert select(uneven, "best", 1.0) == [1, 3]


@pytest.fixture(scope="module")
def arithmetic_policy():
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from tests.golden.record import CONFIG, INITIAL_DIR

    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    return cfg, make_task("arithmetic"), model, tok


def _run(arithmetic_policy, overrides, budget=700.0):
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = arithmetic_policy
    s = RunSettings(
        resolve("rft", overrides), cfg.rollout, cfg.optimizer, {"launched_tokens": budget}, 0
    )
    from tests.conftest import record_batches

    tr = Trainer(s, task, copy.deepcopy(model), tok)
    batches = record_batches(tr)
    return tr, tr.train(), batches


def test_expert_iteration_charges_every_sample_to_the_totals_and_the_search_counters(
    arithmetic_policy,
):
    tr, res, batches = _run(arithmetic_policy, {})
    c = res.ledger.counters
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    # the only data source is the search: its counters equal the totals
    assert c["search_tokens"] == c["launched_tokens"] > 0
    assert c["search_env_steps"] == c["env_steps"] > 0
    assert c["search_verifier_calls"] == c["verifier_calls"] > 0
    # what was not selected is discarded, by reason, and what was selected was trained
    selection = res.ledger.discarded_by_reason["search_selection"]
    assert selection > 0
    trained = [b for b in batches if b is not None]
    assert c["accepted_tokens"] == sum(float(b.action_mask.sum()) for b in trained)
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    assert all(bool((b.reward >= 1.0).all()) for b in trained)  # rejection sampling
    # the census accounts for every prompt's group, as dynamic sampling's does
    for cen in res.census:
        kept = cen["groups_kept"] + sum(cen["groups_dropped"].values())
        assert cen["groups_launched"] == kept == 4
    assert sum(cen["tokens_launched"] for cen in res.census) == c["launched_tokens"]
    assert sum(cen["tokens_accepted"] for cen in res.census) == c["accepted_tokens"]
    steps = [m for m in res.steps if "search.samples" in m]
    assert sum(m["search.selected"] for m in steps) == sum(b.size for b in trained)
    # one iteration per step, its improvement the change of the share of prompts solved
    for k, m in enumerate(steps):
        assert m["expert_iteration.iteration"] == k + 1
        if k:
            want = m["search.success_rate"] - steps[k - 1]["search.success_rate"]
            assert m["expert_iteration.improvement"] == pytest.approx(want)
    # the selection cost: launched tokens per selected (trained) token, step by step
    prev = {"launched": 0.0, "accepted": 0.0}
    for m in res.steps:
        launched = m["ledger.launched_tokens"] - prev["launched"]
        accepted = m["ledger.accepted_tokens"] - prev["accepted"]
        if m.get("search.selected"):
            assert m["search.selection_cost"] == pytest.approx(launched / accepted)
        prev = {"launched": m["ledger.launched_tokens"], "accepted": m["ledger.accepted_tokens"]}


def test_distillation_searches_with_the_frozen_initial_policy(arithmetic_policy):
    tr, res, batches = _run(arithmetic_policy, {"data": {"search": {"policy": "initial"}}})
    assert tr.collector.engine.model is tr.ctx.ref_model  # not the policy being trained
    trained = [b for b in batches if b is not None]
    assert trained and all(int(b.policy_version.max()) == 0 for b in trained)
    initial = arithmetic_policy[2].state_dict()  # the search policy never moved from it
    assert all(torch.equal(v, initial[k]) for k, v in tr.ctx.ref_model.state_dict().items())
    assert res.ledger.counters["optimizer_steps"] > 0  # the policy itself did train


def test_a_step_whose_search_finds_nothing_trains_on_nothing_and_counts_it(arithmetic_policy):
    _, res, batches = _run(arithmetic_policy, {"data": {"search": {"min_reward": 2.0}}}, 300.0)
    c = res.ledger.counters
    assert all(b is None for b in batches)  # arithmetic pays at most 1: nothing passes
    assert c["accepted_tokens"] == 0 and c["optimizer_steps"] == 0
    assert res.ledger.discarded_by_reason["search_selection"] == c["launched_tokens"] > 0
    assert not res.ledger.check_invariants()


def test_search_feeds_sft_or_the_policy_gradient_and_is_explained(cli):
    with pytest.raises(ValueError, match="trains on 'preference_pairs', not 'search'"):
        resolve("dpo", {"data": {"source": "search"}})
    resolve("grpo", {"data": {"source": "search", "search": {"select": "all"}}})
    with pytest.raises(ValueError, match="set weight.ratio: behavior"):  # off-policy samples
        resolve("grpo", {"data": {"source": "search", "search": {"policy": "initial"}}})
    with pytest.raises(ValueError, match="not with dynamic_sampling"):
        resolve("dapo", {"data": {"source": "search"}})
    tree = {"source": "search", "search": {"mode": "tree", "select": "all"}}
    resolve("prm_grpo", {"data": tree})  # mode 'advantage': each step's own score
    with pytest.raises(ValueError, match="use mode 'advantage'"):  # a prefix scored in one leaf
        resolve("prm_grpo", {"data": tree, "advantage": {"prm": {"mode": "sum"}}})
    code, out, _ = cli("explain", "rft")
    assert code == 0 and "search.n" in out and "search_selection" in out


# ----------------------------------------------------------------------------- beam and tree search


@pytest.fixture(scope="module")
def guess8():
    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task

    task = make_task("guess_number", {"low": 1, "high": 8, "max_turns": 4})
    _, tok = load_policy(ModelConfig(), [task])
    return task, tok


class _Bisect:
    """A scripted engine: every other action (counted across calls) is the bisection guess of the
    feedback so far, the others guess 9 (outside 1-8: rules nothing out)."""

    policy_version = 0

    def __init__(self, task, tok):
        self.task, self.tok, self.calls = task, tok, 0

    def generate(self, prompts, params, n=1, generator=None):
        from sixblanks.harness.rollout.engine import Generation

        out = []
        for ids in prompts:
            lines = self.tok.decode(ids, skip_special_tokens=True).split("\n")
            obs = [lines[0]] + [x for x in lines[1:] if x in ("higher", "lower", "invalid")]
            guess = self.task.oracle(None, obs).strip() if self.calls % 2 == 0 else "9"
            self.calls += 1
            t = self.tok(guess + "\n", add_special_tokens=False)["input_ids"]
            out.append([Generation(t, [-0.5] * len(t), "stop")])
        return out


def _search(guess8, mode, **kw):
    from sixblanks.harness.rollout.engine import SamplingParams
    from sixblanks.harness.rollout.search import search
    from sixblanks.harness.tasks.verify import VerifierGate

    task, tok = guess8
    engine = _Bisect(task, tok)
    instances = task.instances([0, 1, 2])  # secrets 7, 3, 1
    assert [i.data["secret"] for i in instances] == [7, 3, 1]
    params = SamplingParams(1.0, max_new_tokens=3)
    return engine, search(engine, tok, task, instances, params, VerifierGate(task), mode=mode, **kw)


def test_beam_search_by_hand(guess8):
    """beam 1, expand 2 on guess_number 1-8 (4 turns): the verifier guide (potential: the share of
    the range ruled out) keeps the bisection child each turn, so the best leaf of every prompt is
    the oracle's binary search (7: 4, 6, 7)."""

    engine, tree = _search(guess8, "beam", beam=1, expand=2)
    # 2 children of the one kept node, every turn, for 3 prompts: 24 actions of 2 tokens each
    assert engine.calls == 24
    cost = tree.cost()
    assert cost["launched_tokens"] == 48 and cost["env_steps"] == 24
    assert tree.restored == 24 and tree.replayed_steps == 0  # guess_number snapshots
    best = {}
    for leaf in tree.leaves:
        g, r = leaf.episode.group, sum(leaf.episode.turn_rewards)
        if r > best.get(g, (-1, None))[0]:
            best[g] = (r, leaf.episode.actions)
    assert best == {
        0: (1.0, ["4\n", "6\n", "7\n"]),
        1: (1.0, ["4\n", "2\n", "3\n"]),
        2: (1.0, ["4\n", "2\n", "1\n"]),
    }
    # per prompt: the solved leaf at turn 3, the two children at the last turn, and the pruned
    # "9" children of turns 1 and 2: 3 leaves, 5 tips
    assert len(tree.leaves) == 9 and len(tree.tips) == 15 and cost["rollouts_launched"] == 15
    # Monte Carlo node values: the first bisection node of prompt 0 has three leaves under it,
    # one solved (4 6 7) and two not (4 6 9 x)
    first = next(n for n in tree.leaves if n.episode.group == 0).path[0]
    under = [sum(n.episode.turn_rewards) for n in tree.leaves if first in n.path]
    assert under == [1.0, 0.0, 0.0]
    assert tree.node_values()[first] == pytest.approx(1 / 3)
    labels = tree.labels(tree.leaves)
    assert labels.shape == (9, 4) and labels[0, 0] == pytest.approx(1 / 3)
    assert labels[0, 2] == 1.0 and labels[0, 3].isnan()  # a leaf's own node: its reward


def test_tree_search_by_hand_and_replay_without_snapshots(guess8, monkeypatch):
    """Best-first, 3 expansions of 2 children: the bisection line is expanded until it solves,
    the "9" children stay unexpanded on the frontier (tips); without snapshots every fork
    replays its parent's actions, each replayed step counted."""

    engine, tree = _search(guess8, "tree", expand=2, expansions=3)
    assert engine.calls == 18 and len(tree.leaves) == 3 and len(tree.tips) == 12
    assert sorted(sum(n.episode.turn_rewards) for n in tree.leaves) == [1.0, 1.0, 1.0]
    assert {len(n.episode.actions) for n in tree.tips if not n.episode.done} == {1, 2, 3}
    assert tree.cost()["env_steps"] == 18 and tree.restored == 18

    from sixblanks.harness.tasks.builtin import GuessNumberEnv

    monkeypatch.setattr(GuessNumberEnv, "snapshot", lambda self: None)
    engine, tree = _search(guess8, "beam", beam=1, expand=2)
    # forks at turn t replay the t-1 actions of their parent: 2 x (0 + 1 + 2 + 3) per prompt
    assert tree.restored == 0 and tree.replayed_steps == 36
    assert tree.cost()["env_steps"] == 24 + 36
    best = max(sum(n.episode.turn_rewards) for n in tree.leaves if n.episode.group == 0)
    assert best == 1.0  # the replayed environments are in the same states


def test_a_shared_prefix_trains_once():
    from sixblanks.harness.training.collectors.search import train_once

    # two leaves of one tree: turns 0 and 1 of each; they share the node of turn 0
    turn_ids = torch.tensor([[-1, 0, 0, -1, 1], [-1, 0, 0, -1, 1]])
    b = type("B", (), {})()
    b.turn_ids, b.action_mask = turn_ids, (turn_ids >= 0).float()
    train_once(b, [[1, 2], [1, 3]], [0, 1])
    assert b.action_mask.tolist() == [[0, 1, 1, 0, 1], [0, 0, 0, 0, 1]]


def test_tree_value_model_learns_the_tree_labels(guess8):
    """The value model trained on a tree's Monte Carlo node values: its Brier score on them
    falls."""

    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.rollout.agent import episodes_to_batch
    from sixblanks.harness.training.process_reward import TreeValue

    task, tok = guess8
    torch.manual_seed(0)
    model, _ = load_policy(ModelConfig(), [task])
    _, tree = _search(guess8, "beam", beam=1, expand=2)
    tips = tree.tips
    batch = episodes_to_batch([n.episode for n in tips], tok, 0, task.name)
    value = TreeValue(model, lr=3e-2, steps=30, device="cpu")
    first = value.fit(batch, tree.labels(tips))
    assert first["search.value_labels"] == float((~tree.labels(tips).isnan()).sum())
    again = value.fit(batch, tree.labels(tips))
    assert again["search.value_brier"] < first["search.value_brier"] - 0.02
    assert all(0.0 < v < 1.0 for v in value.scores(batch))


def _train_guess(guess_warm, preset, overrides, budget, engine=None):
    from sixblanks.harness.training import RunSettings, Trainer
    from tests.conftest import record_batches

    cfg, task, model, tok = guess_warm
    s = RunSettings(
        resolve(preset, overrides), cfg.rollout, cfg.optimizer, {"launched_tokens": budget}, 0
    )
    tr = Trainer(s, task, copy.deepcopy(model), tok)
    if engine is not None:
        tr.collector.engine = engine
    batches = record_batches(tr)
    return tr, tr.train(), [b for b in batches if b is not None]


def test_beam_search_distilled_charges_every_node_once(guess_warm):
    over = {"data": {"search": {"mode": "beam", "beam": 2, "expand": 2, "select": "all_passing"}}}
    tr, res, trained = _train_guess(guess_warm, "rft", over, 500.0)
    c = res.ledger.counters
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    assert c["search_tokens"] == c["launched_tokens"] > 0
    assert (
        c["search_env_steps"] == c["env_steps"]
        and c["search_verifier_calls"] == c["verifier_calls"]
    )
    assert c["accepted_tokens"] == sum(float(b.action_mask.sum()) for b in trained) > 0
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    # a token several selected leaves share trains once: never more trained than generated
    steps = [m for m in res.steps if "search.nodes" in m]
    assert all(m["search.restored_frac"] == 1.0 and m["search.replayed_steps"] == 0 for m in steps)
    assert sum(cen["tokens_launched"] for cen in res.census) == c["launched_tokens"]
    assert sum(cen["responses_launched"] for cen in res.census) == c["rollouts_launched"]
    for m in steps:  # the selection's shift: selected leaves pass, the mean leaf does not always
        assert m.get("search.selection_bias", 0.0) >= 0.0


def test_a_policy_gradient_on_tree_leaves_with_a_prm_on_the_tree_labels(guess_warm):
    """prm_grpo fed by a value-guided tree search: the selected leaves carry the behaviour log-probs
    of what was sampled and the tree's node values as step labels; the value model and the PRM
    are measured and trained on them (guess_number has no step labels of its own)."""

    from tests.test_process_credit import TREE_PRM

    tr, res, trained = _train_guess(guess_warm, "prm_grpo", TREE_PRM, 500.0)
    assert res.ended_because == "budget" and not res.ledger.check_invariants()
    c = res.ledger.counters  # the tree is the only data source: its counters are the totals
    assert (
        c["search_tokens"] == c["launched_tokens"] > 0 and c["search_env_steps"] == c["env_steps"]
    )
    assert c["search_verifier_calls"] == c["verifier_calls"]
    assert c["launched_tokens"] == c["accepted_tokens"] + c["discarded_tokens"]
    assert trained and len(res.steps) >= 2
    for b in trained:
        on = b.action_mask > 0
        assert bool((b.behavior_logprobs[on] < 0).all())  # the sampling distribution's log-probs
        lab = b.step_labels[~b.step_labels.isnan()]
        assert lab.numel() > 0 and bool(((lab >= 0) & (lab <= 1)).all())
    assert any("search.value_brier" in m for m in res.steps)
    assert any("prm.brier" in m for m in res.steps)  # the PRM trained on the tree's labels


def test_a_tree_search_that_finishes_nothing_trains_on_nothing_and_counts_it(guess_warm):
    """One expansion of 2 children per prompt on a 4-turn task, with an engine that always guesses
    9 (outside 1-8): no episode finishes, nothing trains, every action is counted and discarded."""

    over = {"data": {"search": {"mode": "tree", "expansions": 1, "expand": 2}}}
    engine = _Bisect(guess_warm[1], guess_warm[3])
    engine.generate = _nines(engine)  # every action: 9
    _, res, trained = _train_guess(guess_warm, "rft", over, 150.0, engine)
    c = res.ledger.counters
    assert res.steps and not trained
    assert c["accepted_tokens"] == 0 and c["launched_tokens"] > 0
    assert res.ledger.discarded_by_reason["search_selection"] == c["launched_tokens"]
    # per step: 2 prompts x 2 children, one action each, all unfinished tips
    assert c["env_steps"] == 4 * len(res.steps) and c["rollouts_launched"] == 4 * len(res.steps)
    assert c["launched_tokens"] == 2 * 4 * len(res.steps)  # "9\n": 2 tokens
    assert not res.ledger.check_invariants()


def _nines(engine):
    inner = engine.generate

    def generate(prompts, params, n=1, generator=None):
        out = []
        for p in prompts:
            engine.calls = 1  # odd: 9
            out += inner([p], params, n, generator)
        return out

    return generate


def test_search_arms_and_beam_evaluation_end_to_end(tmp_path, cli, write_yaml):
    """`sixblanks run` + `report` on guess_number: a single-sample arm (grpo) and a beam-search
    expert-iteration arm, both evaluated with one sample and with inference-time beam search. The
    beam's score and compute reach DuckDB; the report gives each mode its own row; the audit
    flags the arm that trains on a search's selection."""

    import json

    import yaml

    cfg = {
        "name": "search-e2e",
        "task": {
            "name": "guess_number",
            # 48 secrets: an eighth of them (6) are test problems, the evaluation's distinct set
            "params": {"low": 1, "high": 48, "max_turns": 3},
            "eval_size": 6,
        },
        "rollout": {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 4},
        "warm_start": {"steps": 20, "num_demos": 200},
        "budget": {"launched_tokens": 160},
        "eval": {"every": 160, "beam": {"beam": 2, "expand": 2}},
        "seeds": [0],
        "arms": {
            "grpo": {"preset": "grpo"},
            "beam_ei": {
                "preset": "rft",
                "blanks": {
                    "data": {"search": {"mode": "beam", "beam": 1, "expand": 2, "min_reward": 0.0}}
                },
            },
        },
        "tracking": {"mlflow": False},
    }
    out = tmp_path / "out"
    path = write_yaml(yaml.safe_dump(cfg, sort_keys=False))  # grpo first: the reference arm
    code, _, err = cli("run", path, "--out", str(out), "--no-progress")
    assert code == 0, err
    from sixblanks.harness.store.database import connect

    con = connect(out, read_only=True)
    rows = con.sql(
        "SELECT r.arm, e.step, e.n, e.search_mode, e.search_score, e.search_generated_tokens, "
        "e.eval_generated_tokens, e.run_id FROM evals e JOIN runs r USING (run_id) ORDER BY 1, 2"
    ).fetchall()
    con.close()
    assert {r[0] for r in rows} == {"grpo", "beam_ei"} and all(r[3] == "beam 2x2" for r in rows)
    for _arm, step, n, _, score, tokens, _single, rid in rows:
        assert n == 6 and 0.0 <= score <= 1.0
        # at most 3 turns x 2 kept x 2 children per instance, 3 tokens each; at least one action
        assert 6 * 2 <= tokens <= 6 * 3 * 2 * 2 * 3
        res = json.loads((out / "runs" / rid / "result.json").read_text())
        ev = next(e for e in res["evals"] if e["step"] == step)
        assert ev["search"]["generated_tokens"] == tokens
        assert ev["search"]["score"] == pytest.approx(sum(ev["search"]["per_instance"]) / 6)
    for rid in {r[7] for r in rows}:  # the run's evaluation compute: single samples and beams
        res = json.loads((out / "runs" / rid / "result.json").read_text())
        mine = [r for r in rows if r[7] == rid]
        assert res["eval_cost"]["generated_tokens"] == sum(r[5] + r[6] for r in mine)
    code, _, err = cli("report", str(out), "--resamples", "100")
    assert code == 0, err
    md = (out / "report" / "report.md").read_text()
    for arm in ("grpo", "beam_ei"):
        assert f"| {arm} | pass@1: one sample |" in md
        assert f"| {arm} | beam 2x2 search over turns, leaf chosen by the verifier |" in md
    audit = json.loads((out / "fairness.json").read_text())
    flag = next(f for f in audit["flags"] if f["item"] == "training_search")
    assert flag["arm"] == "beam_ei" and flag["value"]["mode"] == "beam"
