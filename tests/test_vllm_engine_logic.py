"""The vLLM engine's own logic without vLLM: mismatch metrics by hand, the weight-sync routes and
their loud failure, output mapping, and the set-up error. (tests/test_vllm.py runs vLLM for
real.)"""

import math
import sys
from types import SimpleNamespace

import pytest
import torch

from sixblanks.algorithms.weights import mismatch_stats
from sixblanks.harness.config import RolloutConfig, TinyModelConfig
from sixblanks.harness.models import build_tiny_model, build_tokenizer
from sixblanks.harness.rollout.backends import make_engine
from sixblanks.harness.rollout.engine import RolloutError, SamplingParams
from sixblanks.harness.rollout.vllm_engine import VLLMEngine


def test_mismatch_stats_by_hand():
    train = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, -3.0, -0.1, 9.0]])
    engine = torch.tensor([[0.0, -1.5, -2.0, -0.5], [0.0, -1.0, -0.2, 9.0]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]])
    m = mismatch_stats(train, engine, mask)
    d = [0.5, 0.0, 0.0, -2.0, 0.1]  # train - engine on the 5 masked tokens
    assert m["mismatch.logp_abs_mean"] == pytest.approx(sum(abs(x) for x in d) / 5)
    assert m["mismatch.logp_abs_max"] == pytest.approx(2.0)
    k3 = [math.exp(x) - 1 - x for x in d]
    assert m["mismatch.kl"] == pytest.approx(sum(k3) / 5)
    # ratios e^0.5=1.65 (in), 1, 1, e^-2=0.135 (out), e^0.1 (in): one of five leaves [0.5, 2]
    assert m["mismatch.ratio_out_frac"] == pytest.approx(0.2)
    assert mismatch_stats(train, engine, torch.zeros_like(mask)) == {}


def test_mismatch_kl_estimates_the_true_kl():
    """k3 over tokens sampled from pi_roll converges to KL(pi_roll || pi_train) computed exactly."""

    g = torch.Generator().manual_seed(0)
    p_roll = torch.softmax(torch.randn(50, generator=g), -1)
    p_train = torch.softmax(torch.log(p_roll) + 0.3 * torch.randn(50, generator=g), -1)
    exact = float((p_roll * (p_roll.log() - p_train.log())).sum())
    a = torch.multinomial(p_roll, 200_000, replacement=True, generator=g)
    m = mismatch_stats(p_train.log()[a][None], p_roll.log()[a][None], torch.ones(1, len(a)))
    assert m["mismatch.kl"] == pytest.approx(exact, rel=0.05)


class FakeLLM:
    """Stands in for vllm.LLM: records pushed weights; routes can be made to fail."""

    def __init__(self, rpc_fails=False, apply_fails=False):
        self.rpc_fails, self.apply_fails = rpc_fails, apply_fails
        self.pushed, self.resets, self.version = [], 0, "0.0-fake"
        self.outputs = []

    def collective_rpc(self, method, kwargs=None):
        if self.rpc_fails:
            raise NotImplementedError(f"Method '{method}' is not implemented.")
        self.pushed.append(("rpc", dict(kwargs["weights_iterator"])))
        return [None]

    def apply_model(self, fn):
        if self.apply_fails:
            raise AttributeError("'LLM' object has no attribute 'apply_model'")
        model = SimpleNamespace(load_weights=lambda it: self.pushed.append(("apply", dict(it))))
        return [fn(model)]

    def reset_prefix_cache(self):
        self.resets += 1

    def generate(self, prompts, params, use_tqdm=False):
        self.last = (prompts, params)
        return self.outputs


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer("0123456789+-=")
    return build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1), tok), tok


def test_sync_pushes_the_trainer_weights_and_advances_the_version(tiny):
    model, tok = tiny
    llm = FakeLLM()
    eng = VLLMEngine(model, tok, max_model_len=64, llm=llm)
    eng.load_weights(None)
    eng.load_weights(None)
    assert eng.policy_version == 2 and llm.resets == 2
    route, weights = llm.pushed[-1]
    assert route == "rpc" and eng.sync_method == "collective_rpc('reload_weights')"
    assert set(weights) == set(model.state_dict())
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_sync_falls_back_to_apply_model(tiny):
    model, tok = tiny
    llm = FakeLLM(rpc_fails=True)
    eng = VLLMEngine(model, tok, max_model_len=64, llm=llm)
    eng.load_weights(None)
    assert llm.pushed[-1][0] == "apply" and eng.sync_method == "apply_model(model.load_weights)"


def test_sync_fails_loudly_when_no_route_works(tiny):
    model, tok = tiny
    eng = VLLMEngine(model, tok, max_model_len=64, llm=FakeLLM(rpc_fails=True, apply_fails=True))
    with pytest.raises(RolloutError) as e:
        eng.load_weights(None)
    msg = str(e.value)
    assert "0.0-fake" in msg and "reload_weights" in msg and "apply_model" in msg
    assert eng.policy_version == 0  # a failed sync does not pretend to advance


def _completion(index, ids, lps, finish, stop_reason=None):
    return SimpleNamespace(
        index=index,
        token_ids=ids,
        logprobs=[{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps)],
        finish_reason=finish,
        stop_reason=stop_reason,
    )


def test_outputs_map_to_generations(tiny):
    model, tok = tiny
    llm = FakeLLM()
    eq, eos = tok.convert_tokens_to_ids("="), tok.eos_token_id
    llm.outputs = [
        SimpleNamespace(
            outputs=[
                _completion(1, [5, eq], [-1.0, -2.0], "stop", "="),
                _completion(0, [5, eos], [-0.5, -0.1], "stop", None),
            ]
        ),
        SimpleNamespace(outputs=[_completion(0, [6, 6, 6], [-1.0] * 3, "length")]),
    ]
    eng = VLLMEngine(model, tok, max_model_len=64, llm=llm)
    out = eng.generate([[1, 2], [3]], SamplingParams(max_new_tokens=3), n=1)
    assert [g.finish_reason for g in out[0]] == ["eos", "stop"]  # ordered by sample index
    assert out[0][1].token_ids == [5, eq] and out[0][1].logprobs == [-1.0, -2.0]
    assert out[1][0].truncated and eng.stats.generated_tokens == 7
    llm.outputs[1].outputs[0].logprobs[1] = {6: SimpleNamespace(logprob=float("nan"))}
    with pytest.raises(RolloutError, match="non-finite"):
        eng.generate([[1, 2], [3]], SamplingParams(max_new_tokens=3))


def test_prompt_longer_than_the_engine_context_is_a_clear_error(tiny):
    model, tok = tiny
    eng = VLLMEngine(model, tok, max_model_len=16, llm=FakeLLM())
    with pytest.raises(RolloutError, match="max_model_len 16"):
        eng.generate([[1] * 12], SamplingParams(max_new_tokens=8))


def test_backend_vllm_without_vllm_names_the_setup_command(tiny, monkeypatch):
    model, tok = tiny
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(RolloutError, match="make vllm"):
        make_engine(RolloutConfig(backend="vllm"), model, tok)


def test_an_experiment_with_backend_vllm_fails_before_the_warm_start_without_vllm(
    tmp_path, monkeypatch
):
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.errors import SixblanksError
    from sixblanks.harness.orchestration import orchestrator
    from sixblanks.harness.rollout import vllm_engine

    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: False)
    cfg = validate_mapping(
        {"rollout": {"backend": "vllm"}, "arms": {"grpo": {"preset": "grpo"}}, "seeds": [0]}
    )
    with pytest.raises(SixblanksError, match="make vllm"):
        orchestrator.Orchestrator(cfg, tmp_path / "out", progress=False).run()
    assert not (tmp_path / "out" / "warm_start").exists()


def test_a_lora_policy_reaches_vllm_as_merged_weights(tiny, tmp_path):
    """vLLM holds plain weights: the sync and the export give base + scale x B A under the base
    model's names (the adapter itself never reaches it), checked against peft's merge_and_unload
    and against the LoRA policy's own logits."""

    import copy

    from transformers import AutoModelForCausalLM

    from sixblanks.harness.lora import apply_lora
    from sixblanks.harness.rollout.vllm_engine import export_weights

    model, tok = tiny
    policy = apply_lora(
        copy.deepcopy(model), {"r": 2, "alpha": 4.0, "dropout": 0.0, "target_modules": "all-linear"}
    )
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a trained adapter (B starts at 0, which would merge to the base)
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    llm = FakeLLM()
    eng = VLLMEngine(policy, tok, max_model_len=64, llm=llm)
    eng.load_weights(None)
    pushed = llm.pushed[-1][1]
    merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert set(pushed) == set(model.state_dict()) == set(merged)
    assert all(torch.allclose(pushed[k], merged[k], atol=1e-6) for k in merged)
    assert any(not torch.equal(pushed[k], v) for k, v in model.state_dict().items())
    plain = AutoModelForCausalLM.from_pretrained(export_weights(policy, tok, tmp_path / "w"))
    ids = torch.tensor([[1, 5, 7, 3]])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        assert torch.allclose(plain(input_ids=ids).logits, want, atol=1e-5)


def test_reload_warnings_print_once_per_layer_class_and_are_counted():
    """vLLM warns at every weight sync for layers whose tensors are computed (rotary caches): the
    first of each layer class is printed, with a note, later ones are counted only; other messages
    pass untouched."""

    import logging

    from sixblanks.harness.rollout.vllm_engine import ReloadWarnings

    log = logging.getLogger("sixblanks-test.reload")
    log.propagate = False
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: seen.append(r.getMessage())
    flt = ReloadWarnings()
    log.addHandler(handler)
    log.addFilter(flt)
    try:
        for _ in range(5):  # five syncs: each warns for the rotary layer
            log.warning("%s: Failed to load weights", "RotaryEmbedding")
        log.warning("%s: Failed to load weights", "QKVParallelLinear")  # a real failure
        log.warning("%s: Failed to load weights", "QKVParallelLinear")
        log.warning("something else")
    finally:
        log.removeHandler(handler)
    assert flt.counts == {"RotaryEmbedding": 5, "QKVParallelLinear": 2}
    assert len(seen) == 3 and seen[-1] == "something else"
    assert seen[0].startswith("RotaryEmbedding: Failed to load weights (expected: its cos/sin")
    assert seen[1].startswith("QKVParallelLinear: Failed to load weights; repeats")
