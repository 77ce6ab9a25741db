"""LoRA through peft: only adapter weights train, the base stays as it was, the reference
policy is the base itself (adapter disabled, no second copy), and the training state's size
follows the trainable parameters, against the full fine-tune."""

import copy
import math

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
    s = RunSettings(
        resolve("sft"),
        cfg.rollout,
        cfg.optimizer.model_copy(update={"lr": 1e-2}),
        {"optimizer_steps": 3},
        0,
        eval_size=4,
    )
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
    s = RunSettings(
        resolve("sft"),
        cfg.rollout,
        cfg.optimizer.model_copy(update={"lr": 1e-2}),
        {"optimizer_steps": 3},
        0,
        eval_size=4,
    )
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


def test_a_lora_critic_shares_the_frozen_base_with_an_adapter_of_its_own(tiny):
    """PPO on a LoRA policy: the value model holds no copy of the weights. It trains a second
    adapter on the same frozen base; the policy's optimizer never steps it; the base stays as it
    was; and both the policy and the critic equal plain models built from their merged weights."""

    from transformers import AutoModelForCausalLM

    from sixblanks.harness.lora import AdapterOff, apply_lora, merged_state_dict
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = tiny
    base0 = {k: v.clone() for k, v in model.state_dict().items()}
    policy = apply_lora(copy.deepcopy(model), LORA)
    s = RunSettings(
        resolve("ppo"),
        cfg.rollout,
        cfg.optimizer.model_copy(update={"lr": 1e-2}),
        {"optimizer_steps": 8},  # two steps of 4 epochs
        0,
        eval_size=4,
    )
    tr = Trainer(s, task, policy, tok, ref_model=AdapterOff(policy))
    critic = tr.objective.critic
    assert critic.backbone is None and critic.adapter in policy.peft_config
    with torch.no_grad():  # a critic with something to learn (its zero head passes no gradient)
        critic.head.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(0))
        critic.head.bias.fill_(0.5)
    value0 = [p.detach().clone() for p in critic.adapter_params]
    pol0 = {n: p.detach().clone() for n, p in policy.named_parameters() if ".default." in n}
    stepped = {id(p) for g in tr.ctx.optimizer.param_groups for p in g["params"]}
    assert not stepped & {id(p) for p in critic.adapter_params}  # the critic's own optimizer does
    assert tr.sizes["memory.total_params"] == sum(p.numel() for p in model.parameters()) + 2 * sum(
        p.numel()
        for p in pol0.values()  # base + two adapters, no second trunk
    )
    assert len(tr.train().steps) == 2
    assert any(not torch.equal(p, p0) for p, p0 in zip(critic.adapter_params, value0))
    assert any(not torch.equal(p, pol0[n]) for n, p in policy.named_parameters() if n in pol0)
    ref = AdapterOff(policy).state_dict()
    assert all(torch.equal(ref[k], v) for k, v in base0.items())
    # second method: plain models holding each adapter's merged weights
    ids = torch.tensor([tok("3+4=1", add_special_tokens=False)["input_ids"]])
    plain = {}
    for name in ("default", critic.adapter):
        m = AutoModelForCausalLM.from_config(model.config)
        m.load_state_dict(merged_state_dict(policy, name))
        plain[name] = m.eval()
    policy.eval()
    critic.eval()
    with torch.no_grad():
        assert torch.allclose(_logits(policy, ids), _logits(plain["default"], ids), atol=1e-5)
        hidden = plain[critic.adapter].model(input_ids=ids).last_hidden_state
        want = critic.head(hidden).squeeze(-1)
        assert torch.allclose(critic(ids, torch.ones_like(ids)), want, atol=1e-5)
        assert torch.equal(_logits(AdapterOff(policy), ids), _logits(model, ids))


@pytest.mark.parametrize(
    "preset, overrides",
    [
        ("grpo", {"data": {"world_model": {"warmup_steps": 1}}}),
        (
            "rft",
            {
                "data": {
                    "search": {
                        "mode": "tree",
                        "guide": "value",
                        "policy": "initial",
                        "expand": 2,
                        "expansions": 3,
                    }
                }
            },
        ),
        ("dpo", {}),
    ],
    ids=["world_model", "tree_search_from_the_initial_policy", "dpo"],
)
def test_lora_with_the_models_beside_the_policy(guess_warm, preset, overrides):
    """The parts that read the initial policy (the reference) work on a LoRA run's reference, the
    base with its adapter off: a world model learns as a plain copy of the base, the initial
    policy's tree search and its value model sample and score the base, DPO's reference is the
    base. The base never moves and only the policy's adapter trains."""

    from sixblanks.harness.lora import AdapterOff, apply_lora, is_peft
    from sixblanks.harness.training import RunSettings, Trainer

    cfg, task, model, tok = guess_warm
    policy = apply_lora(copy.deepcopy(model), LORA)
    pol0 = {n: p.detach().clone() for n, p in policy.named_parameters() if ".default." in n}
    s = RunSettings(
        resolve(preset, overrides),
        cfg.rollout,
        cfg.optimizer,
        {"launched_tokens": 200},
        0,
        eval_size=4,
    )
    tr = Trainer(s, task, policy, tok, ref_model=AdapterOff(policy))
    res = tr.train()
    assert res.steps and all(math.isfinite(m["loss"]) for m in res.steps if "loss" in m)
    ref = AdapterOff(policy).state_dict()
    assert all(torch.equal(ref[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(p, pol0[n]) for n, p in policy.named_parameters() if n in pol0)
    wm = getattr(tr.collector, "model", None)
    if preset == "grpo":  # the world model: every weight its own and trained, from the base
        assert wm is not None and not is_peft(wm.lm)
        assert all(p.requires_grad for p in wm.lm.parameters())
        assert any(not torch.equal(p, model.state_dict()[n]) for n, p in wm.lm.named_parameters())
