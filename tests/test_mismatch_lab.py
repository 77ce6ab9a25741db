"""The mismatch lab (``rollout.mismatch``, ``model.fp32_lm_head``; docs/guide/mismatch-lab.md): a
controlled sampler-trainer mismatch injected into training rollouts, measured the way the
objectives measure it (``RunContext.batched_logprobs`` against the engine's behaviour log-probs,
``mismatch_stats``), carried from the experiment file to the runs' engines, flagged by the audit.

Measured here on the golden fixture's warm-started policy (float32, CPU, one thread; 16 prompts x 4
samples of up to 6 tokens): with the mismatch off the engine's log-probs equal the trainer's to
float32 rounding (mismatch.kl 9e-13 through the static-cache decoder, 2e-14 through transformers'
forward; 11% and 21% of the tokens bit for bit, never all of them: the decoder's one-token products
and the trainer's whole-sequence forward round differently, and the trainer's own forward changes
its bits with the padded length of its batch, which no sampler can know). Logit noise makes the KL
grow with sigma, a bfloat16 sampler and a sampler-only nucleus make it positive.
"""

from __future__ import annotations

import json

import pytest
import torch

from sixblanks.algorithms.presets import resolve
from sixblanks.algorithms.weights import mismatch_stats
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.config.sections import MismatchConfig
from sixblanks.harness.errors import ConfigError
from sixblanks.harness.models import Fp32Head, load_pretrained, set_fp32_lm_head
from sixblanks.harness.orchestration.definition import definition
from sixblanks.harness.orchestration.orchestrator import build_specs
from sixblanks.harness.orchestration.runner import execute_run, settings_from_spec
from sixblanks.harness.rollout.engine import SamplerMismatch
from sixblanks.harness.tasks import make_task
from tests.golden.record import CONFIG, EVAL_SIZE, INITIAL_DIR

OFF_KL = 1e-10
"""k3 KL of float32 rounding alone (measured 9e-13 through the static-cache decoder, 2e-14
through transformers' forward)."""
OFF_ABS_MAX = 1e-4
"""|log pi_train - log pi_roll| of float32 rounding alone (measured at most 1.5e-5 through the
static-cache decoder, 6e-7 through transformers' forward; means 5e-7 and 1.5e-7)."""


def _trainer(mismatch: dict | None = None, dtype: str = "float32", fp32_head: bool = False):
    """A GRPO trainer on the golden fixture's initial policy, its rollout section with
    ``rollout.mismatch: mismatch``."""

    from sixblanks.harness.training import RunSettings, Trainer

    torch.set_num_threads(1)
    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", dtype)
    set_fp32_lm_head(model, fp32_head)
    rollout = cfg.rollout.model_copy(update={"mismatch": MismatchConfig(**(mismatch or {}))})
    s = RunSettings(
        blanks=resolve("grpo", {}),
        rollout=rollout,
        optimizer=cfg.optimizer,
        budget={"launched_tokens": 800.0},
        seed=0,
        eval_size=EVAL_SIZE,
        name="lab",
    )
    return Trainer(s, make_task("arithmetic"), model, tok)


def _measure(tr, seed: int = 0, n: int = 16, engine=None):
    """A batch of the run's training rollouts (its sampling parameters, its generator seeded with
    ``seed``) and the mismatch the objectives would log for it."""

    ctx = tr.ctx
    ctx.gen.manual_seed(seed)
    batch = ctx.episodes(engine or ctx.engine, ctx.task.instances(list(range(n))), 4)
    train = ctx.batched_logprobs(ctx.model, batch)
    return batch, train, mismatch_stats(train, batch.behavior_logprobs, batch.action_mask)


# --------------------------------------------------------------------------- off


@pytest.mark.parametrize("decode", ["auto", "transformers"])
def test_off_the_engine_reports_the_trainers_logprobs_to_float32_rounding(decode):
    """No mismatch set: the plain sampler (no cast copy, no noise, the trainer's nucleus) and
    behaviour log-probs within a few float32 ulps of the trainer's recomputation. Not bitwise: the
    decoder's logits come from one-token products over a KV cache, the trainer's from a forward
    over whole padded sequences (whose bits depend on the padded length itself)."""

    tr = _trainer()
    assert tr.ctx.params.mismatch is None and tr.ctx.params.sampler() == tr.ctx.score_params
    tr.ctx.engine.decode = decode
    batch, train, m = _measure(tr)
    assert m["mismatch.kl"] < OFF_KL and m["mismatch.logp_abs_max"] < OFF_ABS_MAX, m
    assert m["mismatch.ratio_out_frac"] == 0.0
    assert tr.ctx.engine._cast is None  # noqa: SLF001 - no second copy of the policy was made


# --------------------------------------------------------------------------- injected


def test_logit_noise_mismatch_grows_with_sigma():
    kl, dev = [], []
    for sigma in (0.1, 0.5, 2.0):
        tr = _trainer({"logit_noise": sigma})
        assert tr.ctx.params.mismatch == SamplerMismatch(logit_noise=sigma)
        _, _, m = _measure(tr)
        kl.append(m["mismatch.kl"])
        dev.append(m["mismatch.logp_abs_mean"])
    assert kl[0] > 100 * OFF_KL
    assert kl[0] < kl[1] < kl[2] and dev[0] < dev[1] < dev[2], (kl, dev)


def test_noisy_rollouts_replay_from_their_seed():
    tr = _trainer({"logit_noise": 0.5})
    a, _, _ = _measure(tr, seed=3)
    b, _, _ = _measure(tr, seed=3)
    c, _, _ = _measure(tr, seed=4)
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.behavior_logprobs, b.behavior_logprobs)
    assert not torch.equal(a.tokens, c.tokens)


def test_a_bfloat16_sampler_samples_from_a_cast_copy_refreshed_with_the_weights():
    tr = _trainer({"sampler_dtype": "bfloat16"})
    engine, model = tr.ctx.engine, tr.ctx.model
    _, _, m = _measure(tr)
    assert m["mismatch.kl"] > 100 * OFF_KL and m["mismatch.logp_abs_mean"] > 1e-4, m
    cast = engine._cast  # noqa: SLF001
    assert next(cast.parameters()).dtype == torch.bfloat16
    # made during a generation (inference mode) yet of ordinary tensors: the copy outlives the
    # call, and an inference tensor cannot be updated in place outside inference mode
    assert not any(p.is_inference() for p in cast.parameters())
    assert next(model.parameters()).dtype == torch.float32  # the trainer stays float32
    # the weights move (an optimizer step) and the engine takes them: the copy follows
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(0.5)
    engine.load_weights(None)
    _measure(tr)
    assert engine._cast is cast  # noqa: SLF001 - refreshed in place, not rebuilt
    w = cast.model.layers[0].mlp.up_proj.weight
    assert torch.equal(w, model.model.layers[0].mlp.up_proj.weight.to(torch.bfloat16))


def test_a_sampler_only_nucleus_renormalizes_what_the_trainer_scores_whole():
    """top_p < 1 for the sampler alone: every sampled token's behaviour log-prob is its trainer
    log-prob raised by the nucleus's renormalization (log pi_roll >= log pi_train), and the KL is
    positive; the trainer's nucleus stays rollout.top_p (1)."""

    tr = _trainer({"top_p": 0.7})
    assert tr.ctx.score_params == (1.0, 0, 1.0) and tr.ctx.params.sampler() == (1.0, 0, 0.7)
    batch, train, m = _measure(tr)
    assert m["mismatch.kl"] > 100 * OFF_KL, m
    d = (train - batch.behavior_logprobs)[batch.action_mask > 0]
    assert float(d.max()) < OFF_ABS_MAX and float(d.min()) < -1e-3


# --------------------------------------------------------------------------- fp32 head


def test_a_float32_head_changes_no_bit_of_a_float32_policy():
    tr = _trainer()
    batch, train, _ = _measure(tr)
    set_fp32_lm_head(tr.ctx.model)
    assert type(tr.ctx.model.lm_head) is Fp32Head
    again, train2, _ = _measure(tr)
    assert torch.equal(batch.tokens, again.tokens)
    assert torch.equal(batch.behavior_logprobs, again.behavior_logprobs)
    assert torch.equal(train, train2)


def test_a_float32_head_on_a_bfloat16_policy_gives_float32_logits_on_both_sides():
    """model.fp32_lm_head on a bfloat16 policy: the trainer's forwards (shared-prefix and full)
    and the engine's decoder project in float32, and sampler and trainer come closer to each other
    and to the float32 policy than with a bfloat16 head."""

    from sixblanks.harness.training.policy import policy_forward

    measured = {}
    for head in (False, True):
        tr = _trainer(dtype="bfloat16", fp32_head=head)
        batch, train, m = _measure(tr)
        ref = _trainer()  # the same weights in float32 (the fixture's are float32)
        full = ref.ctx.batched_logprobs(ref.ctx.model, batch)
        mask = batch.action_mask > 0
        measured[head] = (m["mismatch.kl"], float((train - full)[mask].abs().mean()))
        with torch.no_grad():
            for split in (0, 3):
                out = tr.ctx.model(input_ids=batch.tokens[:4]).logits
                assert out.dtype == (torch.float32 if head else torch.bfloat16)
                lp, _, _ = policy_forward(
                    tr.ctx.model, batch.tokens[:8], batch.attention_mask[:8], split=split
                )
                assert torch.isfinite(lp).all()
    assert measured[True][0] < measured[False][0], measured
    assert measured[True][1] < measured[False][1], measured


# ----------------------------------------------------------------------- the concurrent collector


def test_the_concurrent_collectors_engine_samples_with_the_runs_mismatch(tmp_path):
    from sixblanks.harness import checkpoint
    from sixblanks.harness.training.collectors.worker import CollectorCore, collector_init

    tr = _trainer({"logit_noise": 1.0})
    core = CollectorCore(collector_init(tr.ctx, tmp_path, "w0"))
    assert core.params.mismatch == SamplerMismatch(logit_noise=1.0)
    weights = tmp_path / "weights.pt"
    torch.save(tr.ctx.model.state_dict(), weights)
    assert core.load(1, str(weights))
    req = {"round": 0, "seeds": list(range(8)), "gen_seed": 7, "group_offset": 0}
    batch = checkpoint.load_record(tmp_path / core.round(req))["batch"]
    train = tr.ctx.batched_logprobs(tr.ctx.model, batch)
    m = mismatch_stats(train, batch.behavior_logprobs, batch.action_mask)
    assert m["mismatch.kl"] > 1e-3, m


# --------------------------------------------------------------------------- the experiment file

TINY = {
    "name": "lab",
    "task": {"name": "arithmetic", "eval_size": EVAL_SIZE},
    "rollout": CONFIG[
        "rollout"
    ],  # the golden fixture's: its stored initial policy is the warm start
    "budget": {"launched_tokens": 200},
    "eval": {"every": 10000},
    "seeds": [0],
    "arms": {"a": {"preset": "grpo"}},
    "tracking": {"mlflow": False},
}


def _cfg(arms: dict, **over) -> object:
    return validate_mapping({**TINY, "arms": arms, **over})


def test_unknown_keys_and_bad_values_are_refused_with_their_key_path():
    with pytest.raises(ConfigError) as err:
        _cfg({"a": {"preset": "grpo", "rollout": {"mismatch": {"noise": 0.5}}}})
    assert "arms.a.rollout.mismatch.noise" in str(err.value) and "logit_noise" in str(err.value)
    bad = {"sampler_dtype": "float8", "logit_noise": -1.0, "top_p": 0.0, "extra": 1}
    with pytest.raises(ConfigError) as err:
        _cfg({"a": {"preset": "grpo"}}, rollout={**CONFIG["rollout"], "mismatch": bad})
    for key in bad:
        assert f"rollout.mismatch.{key}" in str(err.value), key
    with pytest.raises(ConfigError, match=r"model\.fp32_lm_heads"):
        _cfg({"a": {"preset": "grpo"}}, model={"fp32_lm_heads": True})


def test_vllm_refuses_logit_noise_naming_the_key_and_takes_the_rest():
    vllm = {**CONFIG["rollout"], "backend": "vllm"}
    with pytest.raises(
        ConfigError, match=r"^.*arms\.b\.rollout\.mismatch\.logit_noise: 0\.5 needs"
    ):
        _cfg(
            {
                "a": {"preset": "grpo"},
                "b": {"preset": "grpo", "rollout": {"mismatch": {"logit_noise": 0.5}}},
            },
            rollout=vllm,
        )
    with pytest.raises(ConfigError) as err:
        _cfg(
            {"a": {"preset": "grpo"}, "b": {"preset": "grpo"}},
            rollout={**vllm, "mismatch": {"logit_noise": 0.5}},
        )
    assert str(err.value).count("rollout.mismatch.logit_noise") == 1  # one line, not one an arm
    ok = {"sampler_dtype": "bfloat16", "top_p": 0.9}
    _cfg({"a": {"preset": "grpo"}}, rollout={**vllm, "mismatch": ok}, model={"fp32_lm_head": True})


def test_an_arm_override_merges_into_the_experiments_mismatch_and_reaches_its_runs_only():
    cfg = _cfg(
        {
            "a": {"preset": "grpo"},
            "b": {"preset": "grpo", "rollout": {"mismatch": {"logit_noise": 0.5}}},
            "c": {"preset": "grpo", "rollout": {"mismatch": {"top_p": 0.8}}},
        },
        rollout={**CONFIG["rollout"], "mismatch": {"top_p": 0.9}},
    )
    got = {a: cfg.rollout_for(a).mismatch.model_dump() for a in cfg.arms}
    assert got["a"] == {"sampler_dtype": None, "logit_noise": 0.0, "top_p": 0.9}
    assert got["b"] == {"sampler_dtype": None, "logit_noise": 0.5, "top_p": 0.9}
    assert got["c"] == {"sampler_dtype": None, "logit_noise": 0.0, "top_p": 0.8}
    settings = {s.arm: settings_from_spec(s) for s in build_specs(cfg, "k")}
    assert settings["b"].rollout.mismatch.logit_noise == 0.5


def test_a_default_arm_has_no_trace_of_the_keys_in_its_spec_or_definition():
    """Off, the keys are left out of every dump: the run spec (so the run id is what it was before
    the keys existed), the definition, the warm-start key's model section; set, the spec carries
    them and the run id changes."""

    plain = _cfg({"a": {"preset": "grpo"}})
    spec = build_specs(plain, "k", code="c")[0]
    assert "mismatch" not in spec.rollout and "fp32_lm_head" not in spec.model
    d = definition(plain)
    assert "mismatch" not in d["rollout"] and "mismatch" not in d["arms"]["a"]["rollout"]
    assert "fp32_lm_head" not in d["model"]
    # the keys written out at their defaults are the same experiment
    explicit = _cfg(
        {"a": {"preset": "grpo", "rollout": {"mismatch": {"logit_noise": 0.0}}}},
        rollout={**CONFIG["rollout"], "mismatch": {"top_p": 1.0}},
        model={"fp32_lm_head": False},
    )
    assert build_specs(explicit, "k", code="c")[0].run_id == spec.run_id
    noisy = _cfg({"a": {"preset": "grpo", "rollout": {"mismatch": {"logit_noise": 0.5}}}})
    headed = _cfg({"a": {"preset": "grpo"}}, model={"fp32_lm_head": True})
    ids = {build_specs(c, "k", code="c")[0].run_id for c in (plain, noisy, headed)}
    assert len(ids) == 3
    assert build_specs(noisy, "k", code="c")[0].rollout["mismatch"]["logit_noise"] == 0.5


def _steps(spec, tmp_path) -> list[dict]:
    execute_run(spec, tmp_path / spec.arm, INITIAL_DIR, threads=1, checkpoint_seconds=3600)
    lines = (tmp_path / spec.arm / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, filter(None, lines)) if e["type"] == "step"]


def test_runs_of_an_arm_with_a_mismatch_log_it_and_the_others_do_not(tmp_path):
    """From the experiment file to the run's engine: an arm's override reaches the spec, the run
    settings and the in-process engine; its steps log the injected mismatch, a plain arm's the
    rounding noise; an fp32 head is applied to the run's policy and reference."""

    from sixblanks.harness.orchestration.runner import build_trainer

    cfg = _cfg(
        {
            "a": {"preset": "grpo"},
            "b": {"preset": "grpo", "rollout": {"mismatch": {"logit_noise": 1.0}}},
        }
    )
    specs = {s.arm: s for s in build_specs(cfg, "k")}
    plain, noisy = _steps(specs["a"], tmp_path), _steps(specs["b"], tmp_path)
    assert plain and noisy
    assert all(m["mismatch.kl"] < OFF_KL for m in plain)
    assert all(m["mismatch.kl"] > 1e-2 for m in noisy), [m["mismatch.kl"] for m in noisy]
    headed = build_specs(_cfg({"a": {"preset": "grpo"}}, model={"fp32_lm_head": True}), "k")[0]
    tr = build_trainer(headed, INITIAL_DIR)
    assert type(tr.ctx.model.lm_head) is Fp32Head and type(tr.ctx.ref_model.lm_head) is Fp32Head


# --------------------------------------------------------------------------- the audit


def test_the_audit_flags_arms_whose_mismatch_differs_naming_the_values(tmp_path):
    from sixblanks.harness.fairness.audit import fairness_audit
    from sixblanks.harness.fairness.identity import tokenizer_identity
    from sixblanks.harness.models import build_tokenizer

    warm = {"policy_hash": "p0", "key": "k", "tokenizer": tokenizer_identity(build_tokenizer("01"))}
    cfg = _cfg(
        {
            "a": {"preset": "grpo"},
            "b": {"preset": "grpo", "rollout": {"mismatch": {"sampler_dtype": "bfloat16"}}},
            "c": {"preset": "grpo", "rollout": {"mismatch": {"logit_noise": 0.0}}},  # = a's
        }
    )
    audit = fairness_audit(cfg, build_specs(cfg, "k"), tmp_path, warm)
    held = [f for f in audit["flags"] if f["item"] not in ("consumption", "code")]
    # b's mismatch differs (sampling); and b corrects for none of it (correction)
    assert [(f["arm"], f["item"]) for f in held] == [("b", "sampling"), ("b", "correction")]
    reason = held[0]["reason"]
    assert "rollout.mismatch" in reason and "sampler_dtype bfloat16" in reason
    assert "experiment's value none" in reason
    assert "mismatch" not in audit["arms"]["a"]["items"]["sampling"]
    assert audit["arms"]["b"]["items"]["sampling"]["mismatch"] == {
        "sampler_dtype": "bfloat16",
        "logit_noise": 0.0,
        "top_p": 1.0,
    }


# --------------------------------------------------------------------------- vLLM


@pytest.mark.vllm
def test_vllm_samples_in_the_sampler_dtype_with_a_float32_head_and_refuses_logit_noise():
    """vLLM (run by `make test` in .venv-vllm): sampler_dtype is the engine's dtype (weights synced
    in it), model.fp32_lm_head its ``head_dtype`` float32, mismatch.top_p its nucleus; logit noise
    is refused by name."""

    from sixblanks.harness.config import TinyModelConfig
    from sixblanks.harness.models import build_tiny_model, build_tokenizer
    from sixblanks.harness.rollout.engine import RolloutError, SamplingParams
    from sixblanks.harness.rollout.vllm_engine import VLLMEngine
    from sixblanks.harness.training.policy import policy_logprobs

    tok = build_tokenizer("0123456789+-=")
    model = build_tiny_model(TinyModelConfig(), tok, seed=0).eval()
    with torch.no_grad():  # a sharper policy than the initial one: 16-bit rounding shows
        model.lm_head.weight.mul_(3.0)
    set_fp32_lm_head(model)
    engine = VLLMEngine(model, tok, max_model_len=64, seed=0, options={"dtype": "bfloat16"})
    assert engine.dtype == "bfloat16"
    config = engine.llm.llm_engine.model_config
    assert config.dtype == torch.bfloat16 and config.head_dtype == torch.float32
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("12+3=", "7-5=", "40+2=")]

    def stats(mismatch):
        params = SamplingParams(1.0, max_new_tokens=6, ignore_eos=True, mismatch=mismatch)
        out = engine.generate(prompts, params, n=4, generator=torch.Generator().manual_seed(0))
        train, roll = [], []
        for p, gens in zip(prompts, out):
            for g in gens:
                ids = torch.tensor([p + g.token_ids])
                with torch.no_grad():
                    lp, _ = policy_logprobs(model, ids, torch.ones_like(ids))
                train.append(lp[0, len(p) :])
                roll.append(torch.tensor(g.logprobs))
        t, r = torch.cat(train)[None], torch.cat(roll)[None]
        return t - r, mismatch_stats(t, r, torch.ones_like(t))

    _, m = stats(SamplerMismatch("bfloat16"))
    assert m["mismatch.kl"] > 100 * OFF_KL, m
    d, m = stats(SamplerMismatch("bfloat16", top_p=0.8))
    assert m["mismatch.kl"] > 1e-3 and float(d.min()) < -1e-2, m
    with pytest.raises(RolloutError, match="rollout.mismatch.logit_noise"):
        stats(SamplerMismatch("bfloat16", logit_noise=0.5))
    with pytest.raises(RolloutError, match="rollout.mismatch.sampler_dtype"):
        stats(SamplerMismatch("float16"))
