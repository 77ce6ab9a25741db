"""The engine a run's ``rollout.backend`` names (a factory apart from the engines themselves, which
it imports: the vLLM engine builds on the HF engine's module)."""

from __future__ import annotations

from .engine import HFEngine, RolloutEngine


def make_engine(rollout_cfg, model, tokenizer, seed: int = 0) -> RolloutEngine:
    """The engine ``rollout.backend`` names: ``hf`` (default) or ``vllm`` (colocated vllm.LLM)."""

    if rollout_cfg.backend == "hf":
        return HFEngine(
            model, tokenizer, decode=rollout_cfg.decode, skip_padding=rollout_cfg.skip_padding
        )
    from .vllm_engine import VLLMEngine  # only where vLLM is asked for: it imports vllm

    limit = getattr(model.config, "max_position_embeddings", None) or 10**9
    max_len = min(limit, rollout_cfg.max_prompt_tokens + rollout_cfg.max_new_tokens)
    options = rollout_cfg.vllm.model_dump()
    mismatch = getattr(rollout_cfg, "mismatch", None)
    if mismatch is not None and mismatch.sampler_dtype is not None:
        options["dtype"] = mismatch.sampler_dtype  # the mismatch lab: vLLM runs in that dtype
    return VLLMEngine(model, tokenizer, max_model_len=max_len, seed=seed, options=options)
