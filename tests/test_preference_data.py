"""Preference data from files (data.pairs), the distribution-shift evaluation (shift.* metrics), the
discard reasons of synthetic pairs, and demonstrations played through the agent loop and charged as
rollouts are. Short runs from the golden fixture's initial policy (a character-level tokenizer: one
token a character, BOS before a prompt, EOS id 2)."""

import copy
import json

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.training import RunSettings, Trainer
from tests.short_runs import golden_initial, short_run


@pytest.fixture(scope="module")
def initial():
    torch.set_num_threads(1)
    return golden_initial()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def settings(initial, preset, over, budget, task_rollout=None, evaluate=True):
    cfg = initial[0]
    return RunSettings(
        blanks=resolve(preset, over),
        rollout=cfg.rollout.model_copy(update=task_rollout or {}),
        optimizer=cfg.optimizer,
        budget=budget,
        seed=0,
        eval_size=4,
        name=preset,
        evaluate=evaluate,
    )


# every response two characters: three tokens with EOS, so a step's cost does not depend on which
# pairs the shuffled order serves
PAIRS = [
    {"prompt": f"{a}+0=", "chosen": f"{a}\n", "rejected": f"{(a + 1) % 10}\n"} for a in range(10)
]


def test_a_dpo_run_from_a_file_charges_the_pair_tokens_only_and_evaluates_the_shift(
    initial, tmp_path
):
    _, task, model0, tok = initial
    path = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    over = {"data": {"pairs": {"file": path, "heldout": 4}}}
    s = settings(initial, "dpo", over, {"optimizer_steps": 2.0}, {"prompts_per_step": 3})
    tr = Trainer(s, task, copy.deepcopy(model0), tok)
    res = tr.train()
    c = res.ledger.counters
    # 2 steps x 3 pairs x 2 responses x ("a", newline, EOS): launched = accepted, nothing discarded
    assert c["launched_tokens"] == c["accepted_tokens"] == 2 * 3 * 2 * 3
    assert c["rollouts_launched"] == c["rollouts_accepted"] == 2 * 3 * 2
    assert c["discarded_tokens"] == c["env_steps"] == c["verifier_calls"] == 0
    assert c["prompt_tokens"] == 0 and c["optimizer_steps"] == 2
    assert [m["pairs"] for m in res.steps] == [3.0, 3.0] and res.steps[-1]["pairs_passes"] == 1.0
    # the held-out pairs (4 of 10, fixed) are never served: one pass is the other 6, each once
    served = tr.collector.order.permutation(0)
    assert sorted(tr.collector.file.train[i] for i in served) == tr.collector.file.train
    assert len(tr.collector.file.train) == 6 and len(tr.collector.file.heldout) == 4
    # step 0: the policy is the reference, so its view of the pairs is the reference's
    start, last = res.evals[0]["shift"], res.evals[-1]["shift"]
    assert start["shift.pairs"] == 4.0
    assert start["shift.margin"] == 0.0 and start["shift.self_kl"] == 0.0
    assert start["shift.chosen_logp"] == start["shift.ref_chosen_logp"] < 0
    assert start["shift.rejected_logp"] == start["shift.ref_rejected_logp"] < 0
    assert start["shift.self_logp"] == start["shift.self_ref_logp"]
    # the shift's own samples are the evaluation's cost too (its ledger, its record, the run's)
    for e in res.evals:
        assert e["cost"]["generated_tokens"] >= e["shift"]["shift.self_tokens"] > 0
    assert res.eval_cost["generated_tokens"] == sum(
        e["cost"]["generated_tokens"] for e in res.evals
    )
    assert res.eval_cost["generated_tokens"] == tr.eval_meter.ledger.counters["launched_tokens"]
    assert last["shift.margin"] != 0.0 and last["shift.self_kl"] != 0.0
    assert last["shift.ref_chosen_logp"] == start["shift.ref_chosen_logp"]  # the reference stays
    # its own samples were charged to the evaluation ledger, never to the training budget
    assert tr.eval_meter.ledger.counters["launched_tokens"] >= start["shift.self_tokens"] > 0

    (tmp_path / "bad.jsonl").write_text(
        '{"prompt": "1+1=", "chosen": "2\\n", "rejected": "3\\n"}\n'
        '{"prompt": "2+2=", "chosen": "", "rejected": "5\\n"}\n'
        '{"prompt": "3+3=", "choosen": "6\\n", "rejected": "7\\n"}\n'
        "{not json\n"
    )
    bad = settings(initial, "dpo", {"data": {"pairs": {"file": str(tmp_path / "bad.jsonl")}}}, {})
    with pytest.raises(Exception, match="line 4: not valid JSON"):
        Trainer(bad, task, copy.deepcopy(model0), tok)
    (tmp_path / "bad.jsonl").write_text(
        (tmp_path / "bad.jsonl").read_text().replace("{not json\n", "")
    )
    with pytest.raises(Exception) as err:
        Trainer(bad, task, copy.deepcopy(model0), tok)
    assert err.value.problems == [
        f"data.pairs.file: '{tmp_path / 'bad.jsonl'}' line 2: column 'chosen' is empty",
        f"data.pairs.file: '{tmp_path / 'bad.jsonl'}' line 3: no column 'chosen'; did you mean "
        "'choosen'?",
    ]


def test_pair_files_are_checked_row_by_row_and_segments_train_after_their_prefix(initial, tmp_path):
    from sixblanks.harness.training.collectors.pair_file import (
        pairs_batch,
        pairs_file_problems,
        read_pairs,
        split_heldout,
        tokenize,
    )

    _, task, _, tok = initial
    path = write_jsonl(
        tmp_path / "seg.jsonl",
        [{"prompt": "9+9=", "prefix": "1", "chosen": "8\n", "rejected": "7\n"}, PAIRS[3]],
    )
    pairs = list(read_pairs(path))
    toks = [tokenize(p, tok, task) for p in pairs]
    batch = pairs_batch(pairs, toks, tok, task.name)
    # rows: chosen of both pairs, then rejected; the segment row: BOS "9+9=" and the prefix "1" are
    # context (6 tokens, mask 0), "8\n" trained (no EOS: a segment need not end the response)
    assert batch.size == 4 and batch.reward.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert batch.action_mask[0].tolist()[:8] == [0.0] * 6 + [1.0] * 2
    assert batch.action_mask[0].sum() == 2 and batch.action_mask[2].sum() == 2
    assert tok.decode(batch.tokens[2, 6:8].tolist()) == "7\n"
    # a complete pair: BOS "3+0=" (5), then "3\n" and EOS
    assert batch.action_mask[1].sum() == 3 and int(batch.tokens[1, 7]) == tok.eos_token_id
    assert batch.group_ids.tolist() == [0, 1, 0, 1] and batch.instance_seeds.tolist()[:2] == [1, 2]
    # the held-out draw is fixed: the same for every seed, disjoint from the training pairs
    train, held = split_heldout(10, 3)
    assert split_heldout(10, 3) == (train, held) and sorted(train + held) == list(range(10))

    import polars as pl

    pq = tmp_path / "pairs.parquet"
    pl.DataFrame({"prompt": ["1+1="], "chosen": ["2\n"], "rejectd": ["3\n"]}).write_parquet(pq)
    assert pairs_file_problems(str(pq)) == [
        f"data.pairs.file: '{pq}': no column 'rejected'; did you mean 'rejectd'? (a pair needs "
        "prompt, chosen, rejected; prefix optional)"
    ]
    pq = tmp_path / "same.parquet"
    pl.DataFrame({"prompt": ["1+1="], "chosen": ["2\n"], "rejected": ["2\n"]}).write_parquet(pq)
    assert pairs_file_problems(str(pq)) == [
        f"data.pairs.file: '{pq}' row 1: columns 'chosen' and 'rejected' are the same text (no "
        "preference)"
    ]
    assert "is not a file" in pairs_file_problems(str(tmp_path / "none.jsonl"))[0]
    (tmp_path / "pairs.csv").write_text("prompt,chosen,rejected\n")
    assert (
        "unknown format '.csv' (valid: .jsonl, .parquet)"
        in pairs_file_problems(str(tmp_path / "pairs.csv"))[0]
    )
    with pytest.raises(ValueError, match="data.pairs.file: a file of preference pairs is read by"):
        resolve("grpo", {"data": {"pairs": {"file": path}}})


def test_synthetic_pairs_discard_unselected_and_unpreferred_responses_by_their_own_reasons(
    initial,
):
    tr, res = short_run(initial, "dpo", budget=400.0, data={"pairs": {"heldout": 0}})
    led, g = res.ledger, tr.collector.group_size
    pairs = sum(int(m.get("pairs", 0)) for m in res.steps)
    groups = len(res.steps) * tr.collector.n_prompts
    assert pairs > 0 and groups > pairs  # some groups made a pair, some had no preference
    assert led.discarded_rollouts_by_reason["pair_selection"] == (g - 2) * pairs
    assert led.discarded_rollouts_by_reason["no_preference"] == g * (groups - pairs)
    assert led.discarded_by_reason["dynamic_sampling"] == 0
    assert all("shift" not in e for e in res.evals)  # heldout 0: no shift evaluation


def test_the_shift_evaluation_of_synthetic_pairs_rolls_the_reference_on_held_out_instances(
    initial,
):
    from sixblanks.budgets.ledger import Ledger
    from sixblanks.harness.training.evaluate import evaluate_shift
    from sixblanks.harness.training.meter import Meter

    _, task, model0, tok = initial
    s = settings(initial, "dpo", {"data": {"pairs": {"heldout": 3}}}, {})
    tr = Trainer(s, task, copy.deepcopy(model0), tok)
    meter = Meter(Ledger(), tr.eval_meter.timer)
    shift = evaluate_shift(tr.ctx, meter)
    c = meter.ledger.counters
    # 3 held-out instances x G 4 single-turn episodes (one env step and verifier call each), then
    # one sample of the policy per pair made (or per instance, when none was)
    assert c["env_steps"] == c["verifier_calls"] == 12
    assert c["rollouts_launched"] == 12 + (shift["shift.pairs"] or 3)
    assert shift.get("shift.margin", 0.0) == 0.0 and shift["shift.self_kl"] == 0.0
    grpo = Trainer(settings(initial, "grpo", {}, {}), task, copy.deepcopy(model0), tok)
    assert evaluate_shift(grpo.ctx, meter) == {}


def chain_task():
    from sixblanks.harness.tasks import make_task

    return make_task("chain_arithmetic", {"steps": 3})


def test_demonstrations_play_through_the_agent_loop_and_charge_its_steps_and_calls(initial):
    from sixblanks.harness.training.collectors import Demonstrations
    from sixblanks.harness.training.collectors.demonstrations import demonstration_pool
    from sixblanks.harness.training.objectives import SFT

    _, _, model0, tok = initial
    task = chain_task()
    # 3 steps a chain, the verifier called at the last one only: 2 demonstrations a step, 2 steps
    s = settings(
        initial,
        "sft",
        {},
        {"optimizer_steps": 2.0},
        {"prompts_per_step": 2, "group_size": 1},
        evaluate=False,
    )
    tr = Trainer(s, task, copy.deepcopy(model0), tok)
    c = tr.train().ledger.counters
    assert c["rollouts_launched"] == c["rollouts_accepted"] == 4
    assert c["env_steps"] == 4 * 3 and c["verifier_calls"] == 4
    assert c["prompt_tokens"] == 0 and c["launched_tokens"] == c["accepted_tokens"] > 0

    # a pool (the warm start) was played once: what that took is charged once, in the first step
    pool, cost = demonstration_pool(task, tok, [11, 12, 13])
    assert cost == {"env_steps": 9.0, "verifier_calls": 3.0, "judge_calls": 0.0}
    assert pool.n_turns.tolist() == [3, 3, 3] and bool(pool.terminated.all())
    values = [task.make_instance(seed).data["values"] for seed in (11, 12, 13)]
    assert pool.actions == [[f"{v}\n" for v in vs[1:]] for vs in values]
    s = settings(initial, "sft", {}, {"optimizer_steps": 3.0}, evaluate=False)
    tr = Trainer(
        s,
        task,
        copy.deepcopy(model0),
        tok,
        collector=lambda ctx: Demonstrations(ctx, pool, 2, 0, pool_cost=cost),
        objective=lambda ctx: SFT(ctx, kl_to_reference=False),
    )
    c = tr.train().ledger.counters
    assert c["env_steps"] == 9 and c["verifier_calls"] == 3 and c["rollouts_launched"] == 6


def test_validate_reads_the_pairs_file_and_its_content_enters_the_run_id(cli, write_yaml, tmp_path):
    """`sixblanks validate` refuses a broken file before any run, naming arm, file, line and
    column; an edit to a good file changes the run ids of the arms that read it (not the others)."""

    from sixblanks.harness.config import load_config
    from sixblanks.harness.orchestration.orchestrator import build_specs

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "1+1=", "chosen": "2\\n"}\n')
    cfg = {
        "name": "p",
        "task": {"name": "arithmetic"},
        "budget": {"optimizer_steps": 4},
        "arms": {
            "f": {
                "preset": "dpo",
                "blanks": {"data": {"pairs": {"file": str(pairs), "heldout": 0}}},
            },
            "r": {"preset": "dpo"},
        },
    }
    path = write_yaml(json.dumps(cfg))
    code, _, err = cli("validate", path)
    assert code == 2
    assert f"arms.f: data.pairs.file: '{pairs}' line 1: no column 'rejected'" in err
    ids = []
    for rejected in ("3\\n", "4\\n"):
        pairs.write_text(f'{{"prompt": "1+1=", "chosen": "2\\n", "rejected": "{rejected}"}}\n')
        assert cli("validate", path)[0] == 0
        specs = build_specs(load_config(path), "warm", code="c")
        ids.append({s.arm: s.run_id for s in specs})
    assert ids[0]["f"] != ids[1]["f"] and ids[0]["r"] == ids[1]["r"]
    # the held-out pairs must leave some to train on (one pair, 16 held out by default)
    cfg["arms"]["f"]["blanks"]["data"]["pairs"]["heldout"] = 1
    code, _, err = cli("validate", write_yaml(json.dumps(cfg)))
    assert code == 2 and "arms.f.blanks.data.pairs.heldout: 1 held out of the 1 pair(s)" in err


def test_the_example_runs_and_its_shift_evaluation_reaches_duckdb(cli, tmp_path):
    """examples/preference/experiment.yaml end to end (its file arm, a short warm start): the
    shift.* metrics of every evaluation point are rows of the store's metrics table."""

    import yaml

    from tests.conftest import ROOT, query

    cfg = yaml.safe_load((ROOT / "examples/preference/experiment.yaml").read_text())
    cfg["arms"] = {"dpo_file": cfg["arms"]["dpo_file"]}
    cfg["arms"]["dpo_file"]["blanks"]["data"]["pairs"]["file"] = str(
        ROOT / "examples/preference/pairs.jsonl"
    )
    cfg.update(warm_start={"steps": 10, "num_demos": 100}, budget={"optimizer_steps": 4})
    cfg["eval"] = {"size": 8, "counter": "optimizer_steps", "every": 2}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code, _, err = cli("--quiet", "run", str(path), "--out", str(out), "--no-progress")
    assert code == 0, err[-2000:]
    rows = query(out, "SELECT step, value FROM metrics WHERE name = 'shift.margin' ORDER BY step")
    assert [s for s, _ in rows] == [0, 2, 4] and rows[0][1] == 0.0
    [(pairs,)] = query(out, "SELECT DISTINCT value FROM metrics WHERE name = 'shift.pairs'")
    assert pairs == 8.0  # the example's heldout
