"""LoRA through ``peft`` (``model.lora``): the policy trains low-rank adapters on a
frozen base; the reference policy is the same model with its adapter disabled (no second copy of
the weights); a value model trains an adapter of its own on the same frozen base; a rollout engine
that holds its own weights (vLLM) receives the merged weights; the training state's size is
computed from what trains.

Shapes: ``B`` sequences, ``T`` tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import copy
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


def apply_lora(model, lora: dict[str, Any]):
    """``model`` wrapped by a peft LoRA adapter (``lora``: the model section's ``lora``: r, alpha,
    dropout, target_modules); only the adapter's weights require grad."""

    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=int(lora["r"]),
        lora_alpha=float(lora["alpha"]),
        lora_dropout=float(lora["dropout"]),
        target_modules=lora["target_modules"],
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


class AdapterOff(torch.nn.Module):
    """The reference policy of a LoRA run: ``forward`` runs the policy with its adapter disabled,
    i.e. the frozen base. It holds no weights of its own (the policy is read, not owned)."""

    def __init__(self, peft_model):
        super().__init__()
        self._policy = [peft_model]  # a list: not a submodule, so no second copy in state_dict
        self.config = peft_model.config

    def forward(self, *args, **kwargs):
        with grad_flags_kept(self._policy[0]), self._policy[0].disable_adapter():
            return self._policy[0](*args, **kwargs)

    def parameters(self, recurse: bool = True):
        return self._policy[0].parameters(recurse)

    def get_output_embeddings(self):
        return self._policy[0].get_output_embeddings()

    def body(self):
        """The transformer body of the base (hidden states), run with the adapter disabled."""

        from .models import backbone

        policy, inner = self._policy[0], backbone(self._policy[0])

        def run(*args, **kwargs):
            with grad_flags_kept(policy), policy.disable_adapter():
                return inner(*args, **kwargs)

        return run

    def state_dict(self, *args, **kwargs):
        """The base weights (the adapter's excluded), by their names in the base model."""

        base = self._policy[0].get_base_model()
        return {
            k.replace(".base_layer", ""): v
            for k, v in base.state_dict(*args, **kwargs).items()
            if "lora_" not in k
        }


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def peft_of(model):
    """The peft model behind ``model`` (a peft policy, or its :class:`AdapterOff` reference); None
    for a plain model."""

    if isinstance(model, AdapterOff):
        return model._policy[0]
    return model if is_peft(model) else None


def plain_copy(model):
    """A plain transformers model (every weight its own, trainable) equal to ``model``: for a peft
    policy its merged weights, for an :class:`AdapterOff` reference the base's, otherwise a deep
    copy. For models that learn apart from the policy (a world model) or only sample."""

    if not isinstance(model, AdapterOff) and not is_peft(model):
        return copy.deepcopy(model)
    from transformers import AutoModelForCausalLM

    peft = peft_of(model)
    base = peft.get_base_model()
    plain = AutoModelForCausalLM.from_config(base.config, torch_dtype=base.dtype)
    weights = model.state_dict() if isinstance(model, AdapterOff) else merged_state_dict(model)
    plain.load_state_dict(weights)
    return plain.to(next(base.parameters()).device)


def merged_state_dict(model, adapter: str = "default") -> dict[str, torch.Tensor]:
    """The weights a plain model of the policy's architecture would hold: for a peft model, each
    adapted layer's base weight plus the update of ``adapter`` (scale x B A, as ``merge_and_unload``
    computes it), under the base model's parameter names, other adapters left out; for any other
    model, its own ``state_dict``. The model itself is not changed (no merge in place)."""

    if not is_peft(model):
        return model.state_dict()
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    with torch.no_grad():
        deltas = {
            f"{name}.weight": mod.get_delta_weight(adapter)
            for name, mod in base.named_modules()
            if isinstance(mod, LoraLayer) and adapter in mod.lora_A
        }
        out = {}
        for k, v in base.state_dict().items():
            if "lora_" in k:
                continue
            key = k.replace(".base_layer", "")
            out[key] = v + deltas[key].to(v.dtype) if key in deltas else v
    return out


def add_value_adapter(model, mlp_only: bool = False) -> tuple[str, list[torch.nn.Parameter]]:
    """A second adapter on ``model`` (a peft policy), with the policy's adapter configuration, for a
    value model that shares the frozen base: (its name, its trainable parameters). ``mlp_only``:
    only the adapters of the MLP projections train. The policy's own adapter stays the active
    one."""

    name = f"value{len(model.peft_config)}"
    model.add_adapter(name, model.peft_config["default"])
    params = []
    for n, p in model.named_parameters():
        if "lora_" in n and f".{name}." in n:
            p.requires_grad_(not mlp_only or ".mlp." in n)
            if p.requires_grad:
                params.append(p)
    return name, params


@contextmanager
def grad_flags_kept(model) -> Iterator[None]:
    """Every adapter parameter's ``requires_grad`` is as it was on exit. peft's ``set_adapter`` and
    ``disable_adapter`` rewrite them (they leave only the active adapter trainable), which would
    freeze a second adapter (the value model's) and drop the gradients of graphs already built."""

    flags = [(p, p.requires_grad) for n, p in model.named_parameters() if "lora_" in n]
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@contextmanager
def adapter_active(model, name: str) -> Iterator[None]:
    """Run ``model`` with adapter ``name`` instead of the active one (``requires_grad`` kept)."""

    before = model.active_adapter
    with grad_flags_kept(model):
        model.set_adapter(name)
        try:
            yield
        finally:
            model.set_adapter(before)


def param_counts(model) -> tuple[int, int]:
    """(trainable, total) parameters."""

    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def train_state_bytes(model) -> int:
    """Bytes the optimizer step needs per trainable weight: the weight, its gradient and AdamW's two
    moments (4 tensors of the weight's size), summed over what trains."""

    return sum(4 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def memory_metrics(device) -> dict[str, float]:
    """Peak memory of this process so far: resident set size (MB) and, on CUDA, allocated device
    memory (MB)."""

    out = {"memory.peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    if torch.device(device).type == "cuda":
        out["memory.peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out
