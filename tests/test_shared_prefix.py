"""The training forward with shared prompts (harness/training/shared_prefix.py) against
transformers' own forward over every full sequence: log-probs, entropies and gradients, on batches
with groups of prompts of different lengths, continuations of different lengths (right padding),
grouped-query attention, temperature; and the cases that must take transformers' forward."""

import pytest
import torch

from sixblanks.harness.training.policy import policy_forward
from sixblanks.harness.training.shared_prefix import prefix_logits, split_point, usable
from tests.conftest import tiny_llama


def _model(kv_heads: int, seed: int = 0):
    return tiny_llama(kv_heads, seed, max_position_embeddings=64).train()


def _batch(prompt_lengths=(5, 7, 6), group=3, seed=1):
    """Groups of ``group`` rows sharing a prompt; continuations 8-15 tokens; right-padded."""

    g = torch.Generator().manual_seed(seed)
    B, T = len(prompt_lengths) * group, max(prompt_lengths) + 17
    toks = torch.zeros(B, T, dtype=torch.long)
    am = torch.zeros(B, T, dtype=torch.long)
    act = torch.zeros(B, T)
    for i, L in enumerate(prompt_lengths):
        p = torch.randint(1, 50, (L,), generator=g)
        for j in range(group):
            r, n = group * i + j, 8 + 3 * j + i
            toks[r, :L] = p
            toks[r, L : L + n] = torch.randint(1, 50, (n,), generator=g)
            am[r, : L + n] = 1
            act[r, L : L + n] = 1
    return toks, am, act


def _forward_and_grads(model, toks, am, act, split):
    model.zero_grad()
    lp, ent, _ = policy_forward(model, toks, am, 0.7, entropy=True, split=split)
    ((lp * act).sum() + 0.1 * (ent * act).sum()).backward()
    return lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kv_heads,native", [(4, True), (2, True), (2, False)])
def test_shared_prompts_give_the_full_forwards_logprobs_and_gradients(
    kv_heads, native, monkeypatch
):
    """``native``: grouped-query attention by SDPA's enable_gqa (the CPU), or by repeating keys
    and values per query head (what an accelerator takes)."""

    import sixblanks.harness.training.shared_prefix as sp

    monkeypatch.setattr(sp, "native_gqa", lambda device: native)
    model = _model(kv_heads)
    toks, am, act = _batch()
    split = split_point(act, am)
    assert split == 5  # the shortest prompt
    assert usable(model)
    # the split path is taken: 3 distinct prefixes for 9 rows
    assert prefix_logits(model, toks, split) is not None
    lp0, ent0, g0 = _forward_and_grads(model, toks, am, act, 0)
    lp1, ent1, g1 = _forward_and_grads(model, toks, am, act, split)
    real = am.bool()
    real[:, 0] = False  # position 0 predicts nothing (0 on both)
    # every real position, not only the trained ones (the prompts' own tokens too)
    torch.testing.assert_close(lp1[real], lp0[real], atol=2e-6, rtol=0)
    torch.testing.assert_close(ent1[real], ent0[real], atol=2e-6, rtol=0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, atol=2e-6 * float(b.abs().max()) + 1e-9, rtol=1e-5)
    assert any(float(g.abs().max()) > 0.1 for g in g0)  # the gradients are not all near zero


def test_the_split_is_the_shortest_prompt_and_rows_without_a_trained_token_count_whole():
    toks, am, act = _batch((5, 7))
    assert split_point(act, am) == 5
    act[0] = 0  # a failed sample: no trained token; its whole length (13) counts
    assert split_point(act, am) == 5
    act[:3] = 0
    assert split_point(act, am) == 7
    am2 = am.clone()
    am2[3:] = 0
    am2[3:, :4] = 1
    act2 = torch.zeros_like(act)
    act2[:3, 5:8] = 1
    assert split_point(act2, am2) == 4  # rows of 4 real tokens and no trained one


def test_batches_where_sharing_does_not_pay_take_the_models_own_forward():
    model = _model(4)
    toks, am, act = _batch((5, 6, 7, 8), group=1)  # every prompt once
    assert prefix_logits(model, toks, split_point(act, am)) is None
    toks, _, _ = _batch((5, 5, 5), group=3)
    assert prefix_logits(model, toks, 0) is None  # nothing to share
    assert prefix_logits(model, toks, toks.shape[1] - 1) is None  # nothing after it
    assert prefix_logits(model, toks, 5) is not None
    (
        getattr(model, "activation_checkpointing_enable", None)
        or model.gradient_checkpointing_enable
    )()
    assert not usable(model)


def test_the_run_context_uses_it_and_a_setting_turns_it_off(monkeypatch):
    """Through the trainer's log-prob call on a real GRPO batch of the tiny policy: the split path
    runs (counted) with ``rollout.shared_prefix`` on, not with it off, and both give the same
    log-probs."""

    import copy

    import sixblanks.harness.training.policy as policy
    from sixblanks.algorithms.presets import resolve
    from sixblanks.harness.config import ModelConfig, validate_mapping
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer

    task = make_task("arithmetic")
    model, tok = load_policy(ModelConfig(), [task])
    calls = []
    real = policy.prefix_logits

    def counted(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(policy, "prefix_logits", counted)
    got, batch = {}, None
    for on in (True, False):
        cfg = validate_mapping(
            {
                "task": {"name": "arithmetic"},
                "arms": {"a": {"preset": "grpo"}},
                "rollout": {
                    "max_new_tokens": 6,
                    "prompts_per_step": 2,
                    "group_size": 4,
                    "shared_prefix": on,
                },
            }
        )
        s = RunSettings(
            resolve("grpo"),
            cfg.rollout,
            cfg.optimizer,
            {"optimizer_steps": 9},
            0,
            evaluate=False,
            name="grpo",
        )
        ctx = Trainer(s, task, copy.deepcopy(model), tok).ctx
        if batch is None:
            batch = ctx.episodes(ctx.engine, ctx.train_instances(2), 4)
            assert batch.size == 8
        calls.clear()
        got[on] = ctx.logprobs(ctx.model, batch)[0]
        assert calls == ([True] if on else []), calls
    mask = batch.action_mask.bool()
    assert mask.sum() > 0
    torch.testing.assert_close(got[True][mask], got[False][mask], atol=2e-6, rtol=0)


def test_the_rows_after_the_prefix_are_computed_without_their_padding():
    """With the attention mask (rollout.skip_padding), the tokens after the prefix go through the
    projections and the MLP packed: the real positions' logits equal the padded computation's to
    float32 rounding, the padding's are 0 (the padded computation gives them values), and the
    gradients of a loss on the real positions agree."""

    model = _model(2)
    toks, am, act = _batch()
    split = split_point(act, am)
    padded = prefix_logits(model, toks, split)
    packed = prefix_logits(model, toks, split, am)
    real = am[:, :-1].bool()
    real[:, : split - 1] = True  # the prefix's positions (all real)
    assert (~real).sum() > 20  # the batch has padding after its rows
    torch.testing.assert_close(packed[real], padded[real], atol=2e-6, rtol=0)
    assert not packed[~real].any() and padded[~real].abs().min() > 0
    grads = []
    for mask in (None, am):
        model.zero_grad()
        logits = prefix_logits(model, toks, split, mask)
        (torch.log_softmax(logits, -1).amax(-1) * act[:, 1:]).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=2e-6 * float(b.abs().max()) + 1e-9, rtol=1e-5)
