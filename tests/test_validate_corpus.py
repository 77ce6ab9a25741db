"""A corpus of bad experiment files: each is refused by `sixblanks validate` with exit code 2, its
key path, and no traceback, before any model is loaded or any run starts. Fast: no model is built,
nothing is run."""

import json

import pytest

ARMS = "arms: {a: {preset: grpo}}\n"

# (label, YAML text ('{tmp}' is the test's temporary directory), what the message must contain)
CORPUS = [
    ("unknown preset", "arms: {a: {preset: grpoo}}\n", "arms.a.preset: unknown preset 'grpoo'"),
    ("unknown task", ARMS + "task: {name: arithmetc}\n", "task.name: unknown task 'arithmetc'"),
    (
        "unknown task in a list",
        ARMS + "tasks: [{name: arithmetic}, {name: nimm}]\n",
        "tasks[1].name: unknown task 'nimm'",
    ),
    (
        "unknown counter in budget",
        ARMS + "budget: {launched_tokenz: 100}\n",
        "budget.launched_tokenz: unknown counter",
    ),
    (
        "a fraction of a token in a budget",
        ARMS + "budget: {launched_tokens: 1500.5}\n",
        "budget.launched_tokens: 1500.5 is not a whole number (launched_tokens counts whole units",
    ),
    (
        "a fraction of a call in the sweep's trial budget",
        ARMS + "sweep: {trial_budget: {verifier_calls: 40.25}}\n",
        "sweep.trial_budget.verifier_calls: 40.25 is not a whole number",
    ),
    (
        "unknown counter in the sweep's trial budget",
        ARMS + "sweep: {trial_budget: {optimizer_stepz: 3}}\n",
        "sweep.trial_budget.optimizer_stepz: unknown counter",
    ),
    (
        "unknown eval.counter",
        ARMS + "eval: {counter: launched_tokenz}\n",
        "eval.counter: unknown counter 'launched_tokenz'",
    ),
    (
        "missing model.path",
        ARMS + "model: {path: '{tmp}/no_such_model'}\n",
        "model.path: ",
    ),
    ("missing model.gguf", ARMS + "model: {gguf: '{tmp}/x.gguf'}\n", "model.gguf: "),
    ("malformed YAML", "arms:\n  a: {preset: grpo\nseeds: [1]\n", "YAML syntax error at line"),
    (
        "unknown reasoning-gym dataset",
        ARMS + "task: {name: 'reasoning_gym:basic_arithmetc'}\n",
        "task.name: unknown reasoning-gym dataset 'basic_arithmetc'; did you mean "
        "'basic_arithmetic'?",
    ),
    (
        "unknown reasoning-gym config key",
        ARMS + "task: {name: 'reasoning_gym:basic_arithmetic', params: {config: {min_term: 2}}}\n",
        "task.params.config.min_term: unknown key 'min_term'; did you mean 'min_terms'?",
    ),
    (
        "reasoning-gym config its dataset refuses",
        ARMS
        + "task: {name: 'reasoning_gym:basic_arithmetic', "
        + "params: {config: {min_terms: 5, max_terms: 2}}}\n",
        "task.params.config: reasoning-gym's BasicArithmeticDatasetConfig refuses it",
    ),
    (
        "reasoning-gym config setting the seed",
        ARMS + "task: {name: 'reasoning_gym:basic_arithmetic', params: {config: {seed: 3}}}\n",
        "task.params.config.seed: set by the task",
    ),
    (
        "malformed executor address",
        ARMS + "executor: {kind: ray, address: 'ray:/head:10001'}\n",
        "executor.address: 'ray:/head:10001' is not a Ray address",
    ),
    (
        "executor address without a port",
        ARMS + "executor: {kind: ray, address: head-node}\n",
        "executor.address: 'head-node' is not a Ray address",
    ),
    (
        "executor address with a port out of range",
        ARMS + "executor: {kind: ray, address: 'localhost:70000'}\n",
        "executor.address: 'localhost:70000' is not a Ray address",
    ),
    (
        "vllm with a head size 16 tiny model",
        ARMS + "rollout: {backend: vllm}\nmodel: {tiny: {hidden_size: 64, num_heads: 4}}\n",
        "model.tiny: hidden_size 64 / num_heads 4 gives a head size of 16",
    ),
    (
        "vllm with a head size 16 model directory",
        ARMS + "rollout: {backend: vllm}\nmodel: {path: '{tmp}/small16'}\n",
        "model.path: '{tmp}/small16' (config.json) gives a head size of 16",
    ),
    (
        "vllm with a head_dim the CPU attention lacks",
        ARMS + "rollout: {backend: vllm}\nmodel: {path: '{tmp}/head48'}\n",
        "gives a head size of 48",
    ),
    (
        "unknown ladder credit variant",
        ARMS + "ladder: {credit_variants: [ppo_turn, gigppo]}\n",
        "ladder.credit_variants[1]: unknown preset 'gigppo'",
    ),
    (
        "unknown ladder advantage variant",
        ARMS + "ladder: {advantage_variants: [group_nrm]}\n",
        "ladder.advantage_variants[0]: unknown advantage estimator 'group_nrm'",
    ),
    (
        "unknown ladder normalization variant",
        ARMS + "ladder: {normalization_variants: [token_mean]}\n",
        "ladder.normalization_variants[0]: unknown normalization mode 'token_mean'",
    ),
    ("zero group size", ARMS + "rollout: {group_size: 0}\n", "rollout.group_size: must be >= 1"),
    (
        "negative budget",
        ARMS + "budget: {launched_tokens: -5}\n",
        "budget.launched_tokens: must be > 0",
    ),
    ("zero eval size", ARMS + "task: {eval_size: 0}\n", "task.eval_size: must be > 0"),
    ("negative Ray CPUs", ARMS + "executor: {num_cpus: -1}\n", "executor.num_cpus: must be > 0"),
    # settings valid one by one whose runs cannot work, never end or train on nothing
    # (harness/config/checks.py and the *_checks.py modules beside it)
    (
        "a lower clip bound below 0",
        "arms: {a: {preset: grpo, blanks: {weight: {eps_low: 1.5}}}}\n",
        "arms.a.blanks.weight.eps_low: 1.5 puts the lower clip bound at 1 - 1.5 = -0.5",
    ),
    (
        "a lower clip bound of 0 on a sequence-level ratio",
        "arms: {g: {preset: gspo, blanks: {weight: {eps_low: 1}}}}\n",
        "arms.g.blanks.weight.eps_low: 1 puts the lower clip bound at 1 - 1 = 0",
    ),
    (
        "an IS gate band that excludes ratio 1",
        "arms: {a: {preset: grpo, blanks: {weight: {gate: {low: 1.2, high: 2}}}}}\n",
        "arms.a.blanks.weight.gate: the ratio band [1.2, 2] excludes 1",
    ),
    (
        "a truncated-IS cap below 1",
        "arms: {a: {preset: grpo, blanks: {weight: {tis_cap: 0.5}}}}\n",
        "arms.a.blanks.weight.tis_cap: 0.5 < 1",
    ),
    (
        "group size 1 with group-relative advantages",
        "arms: {a: {preset: grpo}, b: {preset: rloo}, c: {preset: ppo}}\n"
        "rollout: {group_size: 1}\n",
        "rollout.group_size: 1 sample per prompt gives arm(s) a (advantage.estimator 'group_norm'"
        " with advantage.singleton 'zero'), b (advantage.estimator 'loo'",
    ),
    (
        "an arm's group size 1 with turn returns against the group",
        "arms: {t: {preset: turn_grpo, blanks: {data: {group_size: 1}}}}\n",
        "arms.t.blanks.data.group_size: 1 sample per prompt with advantage.estimator 'turn_return'",
    ),
    (
        "dynamic sampling with group size 1",
        "arms: {d: {preset: dapo, blanks: {data: {group_size: 1}, advantage: {singleton: raw}}}}\n",
        "arms.d.blanks.data.dynamic_sampling (from preset 'dapo'): with a group size of 1",
    ),
    (
        "a budget below one step's launched tokens",
        ARMS + "budget: {launched_tokens: 5}\n",
        "budget.launched_tokens: 5 is below what one training step reserves before it starts, so "
        "no step would ever run: arm 'a' needs 768 (prompts_per_step 8 x group size 8 x "
        "max_new_tokens 12 x 1 turn(s))",
    ),
    (
        "a verifier-call budget below one multi-turn step",
        ARMS + "task: {name: guess_number}\nbudget: {verifier_calls: 100}\n",
        "budget.verifier_calls: 100 is below what one training step reserves before it starts, "
        "so no step would ever run: arm 'a' needs 320 (prompts_per_step 8 x group size 8 x 5 "
        "turn(s))",
    ),
    (
        "an optimizer-step budget below one step's minibatches",
        "arms: {g: {preset: gspo}}\nbudget: {optimizer_steps: 3}\n",
        "budget.optimizer_steps: 3 is below what one training step reserves before it starts, so "
        "no step would ever run: arm 'g' needs 4 (data.epochs 1 x data.minibatches 4)",
    ),
    (
        "a rollout budget below one ReMax step (greedy rollouts included)",
        "arms: {r: {preset: remax}}\nbudget: {rollouts_launched: 10}\n",
        "budget.rollouts_launched: 10 is below what one training step reserves before it starts, "
        "so no step would ever run: arm 'r' needs 16",
    ),
    (
        "a budget on a counter the arm never charges",
        ARMS + "budget: {search_tokens: 1000}\n",
        "budget.search_tokens: arm 'a' never charges this counter (search_tokens), so its runs "
        "would never end",
    ),
    (
        "an environment-step budget for a file of preference pairs",
        "arms: {d: {preset: dpo, blanks: {data: {pairs: {file: p.jsonl}}}}}\n"
        "budget: {env_steps: 1000, verifier_calls: 1000}\n",
        "budget: arm 'd' never charges any of these counters (env_steps, verifier_calls)",
    ),
    (
        "a trained process reward model on a task without step labels",
        "arms: {p: {preset: prm_grpo}}\n",
        "arms.p.blanks.advantage.prm.scorer: 'trained' learns from step labels, and task "
        "'arithmetic' gives none",
    ),
    (
        "more minibatches than rows",
        "arms: {a: {preset: grpo, blanks: {data: {minibatches: 1000}}}}\n",
        "arms.a.blanks.data.minibatches: 1000 minibatches of a step's batch of at most 64 rows "
        "(prompts_per_step 8 x group size 8)",
    ),
    (
        "a preset's minibatches above a small step's rows",
        "arms: {g: {preset: gspo}}\nrollout: {prompts_per_step: 1, group_size: 2}\n",
        "arms.g.blanks.data.minibatches (from preset 'gspo'): 4 minibatches of a step's batch of "
        "at most 2 rows",
    ),
    (
        "a branching turn the task never reaches",
        "arms: {b: {preset: branch_grpo}}\n",
        "arms.b.blanks.data.branching.turns (from preset 'branch_grpo'): turn 1 never happens in "
        "task 'arithmetic' (at most 1 turn(s), numbered from 0)",
    ),
    (
        "a sweep trial budget below one step",
        ARMS + "sweep:\n  trial_budget: {launched_tokens: 100}\n"
        "  space: {a: {optimizer.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}}}\n",
        "sweep.trial_budget.launched_tokens: 100 is below what one training step reserves",
    ),
    (
        "a ladder budget below one step",
        ARMS + "ladder: {budget: {launched_tokens: 100}}\n",
        "ladder.budget.launched_tokens: 100 is below what one training step reserves",
    ),
]


@pytest.fixture
def tmp_models(tmp_path):
    """Model directories with a config.json and no weights (validation never reads weights)."""

    for name, cfg in {
        "small16": {"hidden_size": 64, "num_attention_heads": 4},
        "head48": {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 48},
        "fine": {"hidden_size": 256, "num_attention_heads": 4},
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"model_type": "llama", **cfg}))
    return tmp_path


@pytest.mark.parametrize("label,text,expected", CORPUS, ids=[c[0] for c in CORPUS])
def test_a_bad_config_is_refused_at_validate(cli, write_yaml, tmp_models, label, text, expected):
    tmp = str(tmp_models)
    code, out, err = cli("validate", write_yaml(text.replace("{tmp}", tmp)))
    assert code == 2, (label, out, err)
    assert "Traceback" not in out + err
    assert expected.replace("{tmp}", tmp) in err, (label, err)
    assert all(line.startswith("error: ") for line in err.strip().splitlines()), err


GOOD = [
    ("vllm with the default tiny model (head size 32)", "rollout: {backend: vllm}\n"),
    (
        "vllm with a head size 64 model directory",
        "rollout: {backend: vllm}\nmodel: {path: '{tmp}/fine'}\n",
    ),
    (
        "a head size 16 tiny model on the hf backend",
        "model: {tiny: {hidden_size: 64, num_heads: 4}}\n",
    ),
    (
        "a head size 16 tiny model for vLLM on a GPU",
        "rollout: {backend: vllm}\nmodel: {device: cuda, tiny: {hidden_size: 64}}\n",
    ),
    ("executor address auto", "executor: {kind: ray, address: auto}\n"),
    ("executor address local", "executor: {kind: ray, address: local}\n"),
    ("executor address host:port", "executor: {kind: ray, address: '10.0.0.5:6379'}\n"),
    ("executor address ray://", "executor: {kind: ray, address: 'ray://head.example.org:10001'}\n"),
    ("executor address IPv6", "executor: {kind: ray, address: '[::1]:6379'}\n"),
    (
        "a reasoning-gym config",
        "task: {name: 'reasoning_gym:basic_arithmetic', "
        "params: {config: {min_terms: 2, max_terms: 3}}}\n",
    ),
    ("ladder variants", "ladder: {credit_variants: [gigpo], advantage_variants: [loo]}\n"),
    ("a budget of exactly one step", "budget: {launched_tokens: 768}\n"),
    (
        "as many minibatches as rows",
        "rollout: {prompts_per_step: 2, group_size: 2}\n"
        "arms: {b: {preset: grpo, blanks: {data: {minibatches: 4}}}}\n",
    ),
    (
        "group size 1 with singletons keeping their reward",
        "rollout: {group_size: 1}\n"
        "arms: {b: {preset: grpo, blanks: {advantage: {singleton: raw}}}}\n",
    ),
    (
        "group size 1 with batch-whitened returns",
        "rollout: {group_size: 1}\narms: {b: {preset: reinforce_pp}}\n",
    ),
    ("ReMax's and SAO's one sample per prompt", "arms: {r: {preset: remax}, s: {preset: sao}}\n"),
    ("a GSPO-scale clip range", "arms: {g: {preset: gspo, blanks: {weight: {eps_low: 0.9}}}}\n"),
    (
        "a search budget for a search arm",
        "arms: {e: {preset: rft}}\nbudget: {search_tokens: 100000}\n",
    ),
    (
        "branching on a multi-turn task",
        "arms: {b: {preset: branch_grpo}}\ntask: {name: chain_arithmetic, params: {steps: 2}}\n",
    ),
]


@pytest.mark.parametrize("label,text", GOOD, ids=[g[0] for g in GOOD])
def test_a_good_config_passes_the_same_checks(cli, write_yaml, tmp_models, label, text):
    text = text if text.startswith("arms:") or "\narms:" in text else ARMS + text
    code, out, err = cli("validate", write_yaml(text.replace("{tmp}", str(tmp_models))))
    assert code == 0, (label, out, err)
