"""A corpus of bad experiment files: each is refused by `sixblanks validate` with exit code 2, its
key path, and no traceback, before any model is loaded or any run starts (issue 22, validation
completeness). Fast: no model is built, nothing is run."""

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
]


@pytest.mark.parametrize("label,text", GOOD, ids=[g[0] for g in GOOD])
def test_a_good_config_passes_the_same_checks(cli, write_yaml, tmp_models, label, text):
    code, out, err = cli("validate", write_yaml(ARMS + text.replace("{tmp}", str(tmp_models))))
    assert code == 0, (label, out, err)
