"""vLLM rollouts for real (run in .venv-vllm by `make test`; see conftest for how they are gated).

Independent references: the trainer's own forward pass (``policy_logprobs``), the model's softmax
for the sampled distribution, and the HF engine for greedy decoding.
"""

import json

import pytest
import torch

from sixblanks.algorithms.weights import mismatch_stats
from sixblanks.harness.config import TinyModelConfig, validate_mapping
from sixblanks.harness.models import build_tiny_model, build_tokenizer
from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
from sixblanks.harness.training.policy import policy_logprobs

pytestmark = pytest.mark.vllm

LOGPROB_TOL = 1e-4  # float32 on CPU: vLLM's kernels vs the transformers forward pass


@pytest.fixture(scope="module")
def tiny():
    from sixblanks.harness.rollout.vllm_engine import VLLMEngine

    tok = build_tokenizer("0123456789+-=")
    model = build_tiny_model(TinyModelConfig(), tok, seed=0)
    model.eval()
    engine = VLLMEngine(model, tok, max_model_len=64, seed=0)
    return model, tok, engine


def _prompts(tok):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in ("12+3=", "7-5=", "40+2=")]


def _recomputed(model, prompt, gen, temperature):
    ids = torch.tensor([prompt + gen.token_ids])
    lp, _ = policy_logprobs(model, ids, torch.ones_like(ids), temperature)
    return lp[0, len(prompt) :]


def _max_diff(model, prompts, result, temperature):
    return max(
        float((_recomputed(model, p, g, temperature) - torch.tensor(g.logprobs)).abs().max())
        for p, gens in zip(prompts, result)
        for g in gens
    )


def test_samples_n_per_prompt_with_stop_strings_and_processed_logprobs(tiny):
    model, tok, engine = tiny
    prompts = _prompts(tok)
    params = SamplingParams(temperature=0.7, max_new_tokens=8, stop=("=", "+"))
    out = engine.generate(prompts, params, n=4, generator=torch.Generator().manual_seed(0))
    assert [len(r) for r in out] == [4, 4, 4]
    reasons = set()
    for gens in out:
        for g in gens:
            reasons.add(g.finish_reason)
            texts = [tok.decode([t]) for t in g.token_ids]
            if g.finish_reason == "stop":
                assert texts[-1] in ("=", "+") and not {"=", "+"} & set(texts[:-1])
            elif g.finish_reason == "length":
                assert len(g.token_ids) == 8 and not {"=", "+"} & set(texts)
            else:
                assert g.token_ids[-1] == tok.eos_token_id
    assert "stop" in reasons  # 2 of ~100 characters are stops: 12 samples of up to 8 tokens hit one
    # log-probs are those of the temperature-0.7 distribution, as the trainer recomputes them
    assert _max_diff(model, prompts, out, 0.7) < LOGPROB_TOL
    # ... and not those of the raw (temperature-1) distribution, vLLM's default logprobs_mode
    assert _max_diff(model, prompts, out, 1.0) > 0.05


def test_samples_follow_the_tempered_softmax(tiny):
    model, tok, engine = tiny
    prompt = _prompts(tok)[0]
    n = 3000
    out = engine.generate([prompt], SamplingParams(temperature=0.7, max_new_tokens=1), n=n)
    counts = torch.bincount(torch.tensor([g.token_ids[0] for g in out[0]]), minlength=len(tok))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    p = torch.softmax(logits / 0.7, -1)[: len(counts)]
    tv = 0.5 * float((counts[: len(p)] / n - p).abs().sum())
    assert tv < 0.12  # sampling noise of 3000 draws over ~100 tokens is ~0.07


def test_seeded_generation_is_reproducible(tiny):
    _model, tok, engine = tiny
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    a = engine.generate(_prompts(tok), params, n=2, generator=torch.Generator().manual_seed(5))
    b = engine.generate(_prompts(tok), params, n=2, generator=torch.Generator().manual_seed(5))
    c = engine.generate(_prompts(tok), params, n=2, generator=torch.Generator().manual_seed(6))
    ids = [[g.token_ids for g in r] for r in a]
    assert ids == [[g.token_ids for g in r] for r in b]
    assert ids != [[g.token_ids for g in r] for r in c]


def test_greedy_matches_the_hf_engine(tiny):
    model, tok, engine = tiny
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    v = engine.generate(_prompts(tok), params)
    h = HFEngine(model, tok).generate(_prompts(tok), params)
    assert [r[0].token_ids for r in v] == [r[0].token_ids for r in h]


def test_weight_sync_after_an_update_restores_the_match(tiny):
    model, tok, engine = tiny
    prompts = _prompts(tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    version = engine.policy_version
    # one real optimizer step of the trainer-side model (maximise the log-prob of "999")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.tensor([prompts[0] + tok("999", add_special_tokens=False)["input_ids"]])
    lp, _ = policy_logprobs(model, ids, torch.ones_like(ids), 1.0)
    (-lp.sum()).backward()
    opt.step()
    opt.zero_grad()

    stale = engine.generate(prompts, params, n=4, generator=torch.Generator().manual_seed(1))
    before = _max_diff(model, prompts, stale, 1.0)
    assert before > 0.05  # the engine still samples from the pre-update weights

    engine.load_weights(None)
    assert engine.policy_version == version + 1
    assert engine.sync_method == "collective_rpc('reload_weights')"
    fresh = engine.generate(prompts, params, n=4, generator=torch.Generator().manual_seed(1))
    after = _max_diff(model, prompts, fresh, 1.0)
    assert after < LOGPROB_TOL, (before, after)

    # the step metrics the trainer logs, computed on the same tokens
    rec = torch.cat([_recomputed(model, p, g, 1.0) for p, r in zip(prompts, stale) for g in r])
    eng = torch.cat([torch.tensor(g.logprobs) for r in stale for g in r])
    m = mismatch_stats(rec[None], eng[None], torch.ones(1, len(rec)))
    assert m["mismatch.logp_abs_max"] == pytest.approx(before, rel=1e-4)


def test_multi_turn_episodes_with_vllm_keep_the_trajectory_contract(tiny):
    """guess_number through the agent loop: the task's stop string ends each turn in vLLM, and the
    contract checks (log-probs within 1e-4 of the trainer's, masks, turn ids) pass."""

    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.vllm_engine import VLLMEngine
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training.contract import check_contract

    _, tok, _ = tiny
    # a fresh policy (earlier tests trained the shared one towards "999") and a longer context: the
    # process's engine is shut down and a new one built
    model = build_tiny_model(TinyModelConfig(), tok, seed=1)
    engine = VLLMEngine(model, tok, max_model_len=256, seed=0)
    task = make_task("guess_number")
    batch = run_episodes(
        engine,
        tok,
        task,
        task.instances(list(range(8))),
        2,
        SamplingParams(temperature=0.8, max_new_tokens=6),
        max_context_tokens=200,
        generator=torch.Generator().manual_seed(0),
    )
    report = check_contract(
        batch,
        model,
        tok,
        temperature=0.8,
        reward_range=task.reward_range,
        group_size=2,
        env_keys=task.env_state_keys,
        policy_version=engine.policy_version,
    )
    assert report.passed, report.summary()  # log-probs of the fresh weights: the reuse synced them
    assert int(batch.n_turns.max()) > 1  # really multi-turn
    stop_id = tok.convert_tokens_to_ids(task.stop)
    stopped = 0
    for b in range(batch.size):
        actions = [(s, e) for kind, s, e in batch.segments[b] if kind == "action"]
        for s_, e in actions[
            :-1
        ]:  # a turn before the last ended at the stop string or at the limit
            assert int(batch.tokens[b, e - 1]) == stop_id or e - s_ == 6
            assert stop_id not in batch.tokens[b, s_ : e - 1].tolist()
            stopped += int(batch.tokens[b, e - 1]) == stop_id
    assert stopped > 0


def _vllm_cfg(name: str, arms: dict, budget: int, **extra):
    """A tiny arithmetic experiment whose rollouts run on vLLM."""

    return validate_mapping(
        {
            "name": name,
            "task": {"name": "arithmetic", "eval_size": 16},
            "rollout": {
                "backend": "vllm",
                "max_new_tokens": 6,
                "prompts_per_step": 4,
                "group_size": 4,
            },
            "warm_start": {"steps": 40, "num_demos": 300},
            "budget": {"launched_tokens": budget},
            "seeds": [0],
            "arms": arms,
            "executor": {"workers": 1},
            "tracking": {"mlflow": False},  # MLflow is tested in the main suite
            **extra,
        }
    )


@pytest.mark.slow
def test_grpo_run_with_vllm_backend_stores_mismatch_metrics(tmp_path):
    from sixblanks.harness.orchestration.orchestrator import Orchestrator
    from sixblanks.harness.store.database import connect

    # truncated IS against the engine's log-probs: the weight blank reads them
    cfg = _vllm_cfg(
        "vllm-grpo",
        {"grpo": {"preset": "grpo", "blanks": {"weight": {"tis_cap": 2.0}}}},
        budget=1000,
        eval={"every": 500},
    )
    orch = Orchestrator(cfg, tmp_path / "exp", progress=False)
    orch.run()
    con = connect(tmp_path / "exp", read_only=True)
    ((status, steps),) = con.sql("SELECT status, steps FROM runs").fetchall()
    assert status == "finished" and steps >= 4
    rows = con.sql(
        "SELECT name, count(*), max(value) FROM metrics WHERE name LIKE 'mismatch.%' GROUP BY name"
    ).fetchall()
    got = {n: (c, v) for n, c, v in rows}
    assert set(got) == {
        "mismatch.logp_abs_mean",
        "mismatch.logp_abs_max",
        "mismatch.kl",
        "mismatch.ratio_out_frac",
        "mismatch.ratio_abs_dev",
        "mismatch.ratio_p1",
        "mismatch.ratio_p50",
        "mismatch.ratio_p99",
        "mismatch.ess",
        "mismatch.seq_ess",
    }
    assert all(c == steps for c, _ in got.values())
    # synced every step: the engine's log-probs stay within float32 noise of the trainer's
    assert got["mismatch.logp_abs_max"][1] < 1e-3
    assert got["mismatch.ratio_out_frac"][1] == 0.0
    versions = [
        v
        for (v,) in con.sql(
            "SELECT value FROM metrics WHERE name = 'policy_version' ORDER BY step"
        ).fetchall()
    ]
    assert versions == list(range(len(versions)))
    spec = json.loads(con.sql("SELECT spec FROM runs").fetchall()[0][0])
    assert spec["rollout"]["backend"] == "vllm"


@pytest.mark.slow
def test_a_concurrent_collector_with_its_own_vllm_engine(tmp_path):
    """data.concurrent with rollout.backend vllm: the collector process builds a vLLM engine of its
    own, loads the broadcast weights into it by version, and its samples arrive behind the
    trainer; its log-probs are the behaviour policy's, so the mismatch is real lag, not noise."""

    from sixblanks.harness.orchestration.orchestrator import Orchestrator
    from sixblanks.harness.store.database import connect

    cfg = _vllm_cfg(
        "vllm-async",
        {
            "async": {
                "preset": "grpo",
                "blanks": {
                    "data": {"concurrent": {"queue": 2, "keep_spool": True}},
                    "weight": {"tis_cap": 2.0},
                },
            }
        },
        budget=700,
    )
    Orchestrator(cfg, tmp_path / "exp", progress=False).run()
    con = connect(tmp_path / "exp", read_only=True)
    ((status, steps, run_id),) = con.sql("SELECT status, steps, run_id FROM runs").fetchall()
    assert status == "finished" and steps >= 4
    behind = [
        v
        for (v,) in con.sql(
            "SELECT value FROM metrics WHERE name = 'lag.versions_behind' ORDER BY step"
        ).fetchall()
    ]
    assert behind[0] == 0 and max(behind) >= 1  # sampled ahead by the collector
    # the version a step trained on was made by the collector's engine at that version: where it
    # was on-policy (0 behind), its vLLM log-probs match the trainer's to float32 noise
    rows = con.sql(
        "SELECT m.step, m.value FROM metrics m WHERE m.name = 'mismatch.logp_abs_max' ORDER BY step"
    ).fetchall()
    assert rows[0][1] < 1e-3
    spool = sorted((tmp_path / "exp" / "runs" / run_id / "spool").glob("round-*.pt"))
    rec = torch.load(spool[0], weights_only=False)
    assert rec["version"] == 0 and rec["cost"]["launched_tokens"] > 0


def test_a_lora_policy_samples_in_vllm_from_its_merged_weights(tiny, capfd):
    """A LoRA policy's engine holds base + adapter: the log-probs vLLM reports match the trainer's
    forward of the LoRA policy, after the first sync and after an update of the adapter alone. Its
    per-sync reload warnings are printed once per layer class and counted."""

    import copy

    from sixblanks.harness.lora import apply_lora
    from sixblanks.harness.rollout.vllm_engine import VLLMEngine, reload_warning_counts

    model, tok, _ = tiny
    policy = apply_lora(
        copy.deepcopy(model), {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}
    )
    with torch.no_grad():  # a trained adapter: B starts at 0, which would merge to the base
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(3))
    policy.eval()
    engine = VLLMEngine(policy, tok, max_model_len=64, seed=0)
    prompts = _prompts(tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    out = engine.generate(prompts, params, n=4, generator=torch.Generator().manual_seed(1))
    assert _max_diff(policy, prompts, out, 1.0) < LOGPROB_TOL
    assert _max_diff(model, prompts, out, 1.0) > 0.01  # not the base's log-probs
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.mul_(-1.0)
    engine.load_weights(None)
    engine.load_weights(None)
    out = engine.generate(prompts, params, n=4, generator=torch.Generator().manual_seed(1))
    assert _max_diff(policy, prompts, out, 1.0) < LOGPROB_TOL
    printed = [x for x in capfd.readouterr().err.splitlines() if "Failed to load weights" in x]
    counts = reload_warning_counts()
    assert "RotaryEmbedding" in counts  # vLLM 0.32 warns for it at every reload
    assert len(printed) <= len(counts)  # at most once per layer class
    assert all(n >= 2 for n in counts.values())  # every class warned at each sync, all counted
