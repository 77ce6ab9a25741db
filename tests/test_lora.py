"""LoRA through peft (issue 20): only adapter weights train, the base stays as it was, the reference
policy is the base itself (adapter disabled, no second copy), and the training state's size
follows the trainable parameters, against the full fine-tune."""

import copy

import pytest
import torch

from sixblanks.algorithms.presets import resolve

LORA = {"r": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": "all-linear"}


@pytest.fixture(scope="module")
def tiny():
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_policy
    from sixblanks.harness.tasks import make_task

    cfg = validate_mapping(
        {
            "arms": {"a": {"preset": "grpo"}},
            "rollout": {"max_new_tokens": 4, "prompts_per_step": 2, "group_size": 4},
        }
    )
    task = make_task("arithmetic")
    model, tok = load_policy(cfg.model, [task])
    return cfg, task, model, tok


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_only_the_adapter_trains_and_the_reference_is_the_base(tiny):
    from sixblanks.harness.lora import AdapterOff, apply_lora, param_counts, train_state_bytes
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = tiny
    base0 = copy.deepcopy(model)
    # r (in + out) per adapted linear layer (every one but the output head), counted by hand
    want = sum(
        LORA["r"] * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name != "lm_head"
    )
    policy = apply_lora(copy.deepcopy(model), LORA)
    trainable, total = param_counts(policy)
    assert trainable == want and total == sum(p.numel() for p in model.parameters()) + want
    ref = AdapterOff(policy)
    # SFT on demonstrations: a gradient from the first step (an untrained policy's RL has none)
    s = RunSettings(resolve("sft"), cfg.rollout, cfg.optimizer.model_copy(update={"lr": 1e-2}),
                    {"optimizer_steps": 3}, 0, eval_size=4)  # fmt: skip
    tr = Trainer(s, task, policy, tok, ref_model=ref)
    res = tr.train()
    assert res.ledger.counters["optimizer_steps"] == 3
    ids = torch.tensor([tok("3+4=", add_special_tokens=False)["input_ids"]])
    # the base weights did not move; the reference is exactly the base model's output
    assert ref.state_dict().keys() == base0.state_dict().keys()
    assert all(torch.equal(v, base0.state_dict()[k]) for k, v in ref.state_dict().items())
    assert torch.equal(_logits(ref, ids), _logits(base0, ids))
    assert not torch.allclose(_logits(policy, ids), _logits(base0, ids))  # the adapter did
    # memory: the training state (weight, gradient, two AdamW moments) of what trains
    full = train_state_bytes(model)
    assert train_state_bytes(policy) == 16 * trainable and full == 16 * (total - trainable)
    m = res.steps[-1]
    assert m["memory.trainable_params"] == trainable and m["memory.total_params"] == total
    assert m["memory.train_state_mb"] == pytest.approx(16 * trainable / 2**20)
    assert m["memory.peak_rss_mb"] > 0


def test_a_lora_run_from_the_cli_records_its_sizes(run_experiment):
    from tests.conftest import query

    cfg = {
        "name": "lora-e2e",
        "model": {"lora": {"r": 4}},
        "task": {"name": "arithmetic", "eval_size": 8},
        "rollout": {"max_new_tokens": 4, "prompts_per_step": 2, "group_size": 4},
        "warm_start": {"steps": 10, "num_demos": 100},
        "budget": {"optimizer_steps": 2},
        "arms": {"grpo": {"preset": "grpo"}},
    }
    out = run_experiment(cfg, "--no-progress")
    sql = "SELECT name, max(value) FROM metrics WHERE name LIKE 'memory.%' GROUP BY name"
    got = dict(query(out, sql))
    assert 0 < got["memory.trainable_params"] < got["memory.total_params"] / 4
    assert got["memory.peak_rss_mb"] > 0


def test_gradient_checkpointing_gives_the_same_training(tiny):
    """model.gradient_checkpointing recomputes activations in the backward pass: the same losses
    and weights as without it, step for step."""

    from sixblanks.harness.models import set_gradient_checkpointing
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = tiny
    s = RunSettings(resolve("sft"), cfg.rollout, cfg.optimizer.model_copy(update={"lr": 1e-2}),
                    {"optimizer_steps": 3}, 0, eval_size=4)  # fmt: skip
    runs = []
    for on in (False, True):
        m = copy.deepcopy(model)
        set_gradient_checkpointing(m, on)
        assert m.is_gradient_checkpointing == on
        res = Trainer(s, task, m, tok).train()
        runs.append(([x["loss"] for x in res.steps], m.state_dict()))
    (plain, w0), (ckpt, w1) = runs
    assert len(plain) == 3 and plain == pytest.approx(ckpt, rel=1e-6, abs=1e-7)
    assert all(torch.allclose(v, w1[k], atol=1e-6) for k, v in w0.items())
