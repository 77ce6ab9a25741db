"""The value model: a scalar head on a separate copy of the policy's trunk, or on the policy's own
trunk; with a LoRA policy, on the policy's frozen base with an adapter of its own (no copy)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..lora import adapter_active, add_value_adapter, peft_of
from ..models import backbone


class ValueModel(nn.Module):
    """``forward(tokens, attention_mask, hidden=None) -> values [B, T]`` at every position.

    ``values[:, p]`` is the value of the state after token p (so the value of the state in which
    action token t is generated is ``values[:, t - 1]``; see :func:`token_values`).

    Args:
        policy: a transformers causal LM; its trunk (``base_model``) is copied for
            ``trunk="separate"``.
        trunk: "separate" (own copy, initialized from the policy, i.e. from SFT), "frozen_attention"
            (own copy with only its MLP projections trainable) or "shared" (the caller passes the
            policy's last hidden states).
    """

    def __init__(self, policy, trunk: str = "separate"):
        super().__init__()
        self.trunk = trunk
        hidden = policy.config.hidden_size
        self._policy, self.adapter = None, None
        peft = peft_of(policy)  # a LoRA policy or its reference (the base, adapter off)
        if trunk != "shared" and peft is not None:  # the frozen base is shared, not copied
            self._policy = [peft]  # a list: not a submodule (the policy's weights stay its own)
            self.adapter, params = add_value_adapter(peft, mlp_only=trunk == "frozen_attention")
            self.adapter_params = nn.ParameterList(params)
        self.backbone = (
            copy.deepcopy(backbone(policy)) if trunk != "shared" and not self.adapter else None
        )
        if self.backbone is not None:
            for name, p in self.backbone.named_parameters():
                # frozen_attention: only the MLP projections train (SAO's stand-in, see the blanks)
                p.requires_grad_(trunk == "separate" or ".mlp." in name)
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor, hidden: torch.Tensor | None = None
    ):
        if self.backbone is not None:
            hidden = self.backbone(
                input_ids=tokens, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        elif self.adapter is not None:
            policy = self._policy[0]
            with adapter_active(policy, self.adapter):
                hidden = backbone(policy)(
                    input_ids=tokens, attention_mask=attention_mask, use_cache=False
                ).last_hidden_state
        if hidden is None:
            raise ValueError("a shared-trunk value head needs the policy's hidden states")
        return self.head(hidden.float()).squeeze(-1)


def token_values(v_all: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values of the states of action tokens [B, T], value after the last action token [B]).

    ``v_all[:, p]`` is V after token p, so action token t is generated in state ``v_all[:, t-1]``.
    """

    B, T = v_all.shape
    v_tok = torch.cat([torch.zeros(B, 1, dtype=v_all.dtype, device=v_all.device), v_all[:, :-1]], 1)
    pos = torch.arange(T, device=mask.device).expand(B, T)
    last = torch.where(mask > 0, pos, torch.zeros_like(pos)).max(1).values
    boot = v_all.gather(1, last[:, None]).squeeze(1)
    return v_tok, boot


def pool_values(v_tok: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor, granularity: str):
    """Values at the declared granularity: (values used [B, T], value positions mask [B, T]).

    token: every action token; turn: the first action token of each turn, held for that turn;
    sequence: the first action token of the row, held for the whole row.
    """

    m = mask > 0
    if granularity == "token":
        return v_tok * m, m.to(v_tok.dtype)
    B, T = v_tok.shape
    key = torch.where(
        m,
        turn_ids if granularity == "turn" else torch.zeros_like(turn_ids),
        torch.full_like(turn_ids, -1),
    )
    # the first action token of each turn: key changes from the previous *action* token
    first = torch.zeros_like(m)
    last_key = torch.full((B,), -2, dtype=key.dtype, device=key.device)
    for t in range(T):
        is_first = m[:, t] & (key[:, t] != last_key)
        first[:, t] = is_first
        last_key = torch.where(m[:, t], key[:, t], last_key)
    # hold the value of each first token over its turn
    held = torch.zeros_like(v_tok)
    cur = torch.zeros(B, dtype=v_tok.dtype, device=v_tok.device)
    for t in range(T):
        cur = torch.where(first[:, t], v_tok[:, t], cur)
        held[:, t] = torch.where(m[:, t], cur, torch.zeros_like(cur))
    return held, first.to(v_tok.dtype)
