"""LoRA through ``peft`` (issue 20, ``model.lora``): the policy trains low-rank adapters on a
frozen base; the reference policy is the same model with its adapter disabled (no second copy of
the weights); the training state's size is computed from what trains.

Shapes: ``B`` sequences, ``T`` tokens, ``V`` vocabulary.
"""

from __future__ import annotations

import resource
from typing import Any

import torch


def apply_lora(model, spec: dict[str, Any]):
    """``model`` wrapped by a peft LoRA adapter (``spec``: r, alpha, dropout, target_modules);
    only the adapter's weights require grad."""

    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=int(spec["r"]),
        lora_alpha=float(spec["alpha"]),
        lora_dropout=float(spec["dropout"]),
        target_modules=spec["target_modules"],
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
        with self._policy[0].disable_adapter():
            return self._policy[0](*args, **kwargs)

    def parameters(self, recurse: bool = True):
        return self._policy[0].parameters(recurse)

    def state_dict(self, *args, **kwargs):
        """The base weights (the adapter's excluded), by their names in the base model."""

        base = self._policy[0].get_base_model()
        return {
            k.replace(".base_layer", ""): v
            for k, v in base.state_dict(*args, **kwargs).items()
            if "lora_" not in k
        }


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
