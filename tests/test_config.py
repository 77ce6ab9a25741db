"""Experiment configuration: the default file validates; each malformed file gives
one-line errors naming the key path, exit code 2, no traceback."""

import json
import subprocess
import sys

import pytest

from sixblanks.harness.config import ExperimentConfig, load_config, resolved_dict, validate_mapping
from sixblanks.harness.errors import ConfigError

from .conftest import ROOT

GOOD = """
name: t
arms:
  a: {preset: grpo}
"""


def test_default_experiment_validates_and_prints_plan(cli):
    code, out, err = cli("validate", str(ROOT / "experiments.yaml"))
    assert code == 0, err
    assert "valid" in out
    for arm in ("grpo", "dr_grpo", "dapo", "gspo", "sapo", "rloo", "reinforce_pp", "ppo"):
        assert arm in out
    assert "launched_tokens <= 30,000" in out
    assert "24 runs: 8 arms x 1 task(s) x 3 seeds" in out


def test_the_example_experiments_validate(cli):
    """Every shipped experiment file is valid (the lag ablation of experiments/async.yaml among
    them)."""

    files = sorted((ROOT / "experiments").glob("*.yaml"))
    assert [f.name for f in files] == [
        "async.yaml",
        "credit.yaml",
        "hierarchical.yaml",
        "mismatch.yaml",
        "partial.yaml",
        "search.yaml",
        "selfplay.yaml",
        "smollm2.yaml",
        "testbed.yaml",
        "testbed_findings.yaml",
        "tools.yaml",
        "tree_search.yaml",
        "worldmodel.yaml",
    ]
    outs = {}
    for f in files:
        code, outs[f.name], err = cli("validate", str(f))
        assert code == 0, f"{f.name}: {err}"
    out = outs["async.yaml"]
    assert "grpo_lag4_tis" in out and "grpo_async_bound_tis" in out
    assert "16 runs: 8 arms x 1 task(s) x 2 seeds" in out
    out = outs["credit.yaml"]
    assert "turn_grpo_shaped" in out and "16 runs: 8 arms x 1 task(s) x 2 seeds" in out
    assert all(p in out for p in ("prm_grpo", "prime", "branch_grpo", "gigpo", "ppo_turn"))
    assert "hier_grpo" in outs["hierarchical.yaml"]
    out = outs["testbed.yaml"]
    assert "15 runs: 3 arms x 1 task(s) x 5 seeds" in out and "launched_tokens <= 110,000" in out
    out = outs["partial.yaml"]
    assert all(a in out for a in ("rounds", "continue", "resume", "regenerate", "bounded", "sao"))
    assert "12 runs: 6 arms x 1 task(s) x 2 seeds" in out
    assert "expert_iteration" in outs["search.yaml"] and "distill_initial" in outs["search.yaml"]
    assert "grpo_selfplay" in outs["selfplay.yaml"] and "grpo_vs_random" in outs["selfplay.yaml"]
    out = outs["tree_search.yaml"]
    assert "beam_expert_iteration" in out and "tree_prm" in out
    assert "grpo_world_model" in outs["worldmodel.yaml"]
    assert "6 runs: 3 arms x 1 task(s) x 2 seeds" in outs["smollm2.yaml"]


def test_several_eval_samples_need_a_temperature():
    with pytest.raises(ConfigError, match="need eval.temperature > 0"):
        validate_mapping({"arms": {"a": {"preset": "grpo"}}, "eval": {"samples": 4}})
    cfg = validate_mapping(
        {"arms": {"a": {"preset": "grpo"}}, "eval": {"samples": 4, "temperature": 1.0}}
    )
    assert cfg.eval.samples == 4


def test_plan_is_arm_x_task_x_seed(write_yaml):
    cfg = load_config(
        write_yaml("""
arms: {a: {preset: grpo}, b: {preset: dapo}}
tasks: [{name: arithmetic}, {name: guess_number}]
seeds: [3, 4, 5]
""")
    )
    plan = cfg.plan()
    assert len(plan) == 2 * 2 * 3
    assert {(p["arm"], p["task"], p["seed"]) for p in plan} == {
        (a, t, s) for a in "ab" for t in ("arithmetic", "guess_number") for s in (3, 4, 5)
    }


def test_defaults_in_one_place_and_resolved(cli, write_yaml):
    path = write_yaml(GOOD)
    code, out, _ = cli("validate", "--resolved", path)
    assert code == 0
    import yaml

    resolved = yaml.safe_load(out)
    assert (
        resolved["rollout"]["group_size"]
        == ExperimentConfig.model_fields["rollout"].default.group_size
    )
    assert (
        resolved["arms"]["a"]["blanks"]["regularizer"]["loss_kl_coef"] == 0.04
    )  # grpo's preset value
    assert resolved["arms"]["a"]["optimizer"]["lr"] == 3e-4
    assert resolved["tasks"][0]["name"] == "arithmetic"


def test_arm_override_of_blank_field_applies(write_yaml):
    cfg = load_config(
        write_yaml("""
arms:
  d: {preset: dapo, blanks: {weight: {eps_high: 0.3}}, optimizer: {lr: 0.01}}
""")
    )
    blanks = cfg.resolved_blanks("d")
    assert blanks.weight.eps_high == 0.3
    assert blanks.weight.eps_low == 0.2  # from the preset
    assert blanks.data.dynamic_sampling is True
    assert cfg.optimizer_for("d").lr == 0.01
    assert resolved_dict(cfg)["arms"]["d"]["blanks"]["weight"]["eps_high"] == 0.3


MALFORMED = [
    (
        "wrong type",
        "arms: {a: {preset: grpo}}\nrollout: {group_size: two}\n",
        ["rollout.group_size: must be an integer"],
    ),
    (
        "unknown top-level key",
        "arms: {a: {preset: grpo}}\nmodle: {}\n",
        ["modle: unknown key 'modle'; did you mean 'model'?"],
    ),
    (
        "unknown nested key",
        "arms: {a: {preset: grpo}}\nmodel: {tiny: {hiden_size: 3}}\n",
        ["model.tiny.hiden_size: unknown key 'hiden_size'; did you mean 'hidden_size'?"],
    ),
    (
        "unknown key in an arm",
        "arms: {a: {preset: grpo, extra: 1}}\n",
        ["arms.a.extra: unknown key 'extra'"],
    ),
    (
        "unknown preset with suggestion",
        "arms: {a: {preset: grpoo}}\n",
        ["arms.a.preset: unknown preset 'grpoo'; did you mean 'grpo'?"],
    ),
    (
        "negative budget",
        "arms: {a: {preset: grpo}}\nbudget: {launched_tokens: -5}\n",
        ["budget.launched_tokens: must be > 0"],
    ),
    (
        "zero budget",
        "arms: {a: {preset: grpo}}\nbudget: {launched_tokens: 0}\n",
        ["budget.launched_tokens: must be > 0"],
    ),
    (
        "empty budget",
        "arms: {a: {preset: grpo}}\nbudget: {}\n",
        ["budget: at least one limit is required"],
    ),
    ("empty arms", "arms: {}\n", ["arms: must have at least 1 item"]),
    ("missing arms", "name: x\n", ["arms: required key is missing"]),
    (
        "duplicate seeds",
        "arms: {a: {preset: grpo}}\nseeds: [1, 2, 1]\n",
        ["seeds: duplicate seed(s) [1]"],
    ),
    (
        "unknown task",
        "arms: {a: {preset: grpo}}\ntask: {name: arithmetc}\n",
        ["task.name: unknown task 'arithmetc'; did you mean 'arithmetic'?"],
    ),
    (
        "unknown reasoning-gym dataset",
        "arms: {a: {preset: grpo}}\ntask: {name: 'reasoning_gym:basic_arithmetc'}\n",
        [
            "task.name: unknown reasoning-gym dataset 'basic_arithmetc'; "
            "did you mean 'basic_arithmetic'?"
        ],
    ),
    (
        "invalid task params",
        "arms: {a: {preset: grpo}}\ntask: {name: arithmetic, params: {operators: '+/'}}\n",
        ["task.params.operators: unsupported operator(s) '/'"],
    ),
    (
        "zero temperature",
        "arms: {a: {preset: grpo}}\nrollout: {temperature: 0}\n",
        ["rollout.temperature: must be > 0"],
    ),
    (
        "negative temperature",
        "arms: {a: {preset: grpo}}\nrollout: {temperature: -1.0}\n",
        ["rollout.temperature: must be > 0"],
    ),
    (
        "override of a blank field that does not exist",
        "arms: {d: {preset: dapo, blanks: {weight: {eps_hgh: 0.3}}}}\n",
        ["arms.d.blanks.weight.eps_hgh: unknown key 'eps_hgh'; did you mean 'eps_high'?"],
    ),
    (
        "invalid blank value",
        "arms: {dapo: {preset: dapo, blanks: {weight: {eps_high: 0}}}}\n",
        ["arms.dapo.blanks.weight.eps_high: must be > 0"],
    ),
    (
        "unknown blank",
        "arms: {d: {preset: dapo, blanks: {advantge: {}}}}\n",
        ["arms.d.blanks.advantge: unknown key 'advantge'; did you mean 'advantage'?"],
    ),
    (
        "budget on an unknown counter",
        "arms: {a: {preset: grpo}}\nbudget: {launched_tokenz: 100}\n",
        [
            "budget.launched_tokenz: unknown counter 'launched_tokenz'; "
            "did you mean 'launched_tokens'?"
        ],
    ),
    (
        "invalid literal",
        "arms: {a: {preset: grpo}}\nrollout: {backend: vlm}\n",
        ["rollout.backend: must be one of 'hf' or 'vllm' (got 'vlm'); did you mean 'vllm'?"],
    ),
    ("top level not a mapping", "- a\n- b\n", ["the top level must be a mapping"]),
    (
        "both task and tasks",
        "arms: {a: {preset: grpo}}\ntask: {name: arithmetic}\ntasks: [{name: guess_number}]\n",
        ["tasks: set either 'task' or 'tasks', not both"],
    ),
    (
        "duplicate YAML key",
        "arms: {a: {preset: grpo}}\nseeds: [1]\nseeds: [2]\n",
        ["YAML syntax error at line 3, column 1: duplicate key 'seeds'"],
    ),
    (
        "ladder arm unknown",
        "arms: {a: {preset: grpo}}\nladder: {arm: b}\n",
        ["ladder.arm: unknown arm 'b'"],
    ),
    (
        "sweep space bounds",
        "arms: {a: {preset: grpo}}\n"
        "sweep: {space: {a: {optimizer.lr: {type: float, low: 1, high: 0.1}}}}\n",
        ["sweep.space.a.optimizer.lr.high: must be > low (1.0)"],
    ),
]


@pytest.mark.parametrize("label,text,expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_config_one_line_per_problem_exit_2(cli, write_yaml, label, text, expected):
    code, out, err = cli("validate", write_yaml(text))
    assert code == 2, (label, out, err)
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert all(line.startswith("error: ") for line in lines), lines
    for needle in expected:
        assert any(needle in line for line in lines), (needle, lines)


def test_all_problems_reported_at_once(cli, write_yaml):
    code, _, err = cli(
        "validate",
        write_yaml("""
rollout: {temperature: 0}
budget: {launched_tokens: -1, bogus: 1}
seeds: [1, 1]
arms: {a: {preset: nope}, b: {preset: dapo, blanks: {weight: {eps_high: -1}}}}
"""),
    )
    assert code == 2
    lines = err.strip().splitlines()
    for path in (
        "rollout.temperature",
        "budget.launched_tokens",
        "budget.bogus",
        "seeds",
        "arms.a.preset",
        "arms.b.blanks.weight.eps_high",
    ):
        assert any(line.startswith(f"error: {path}:") for line in lines), (path, lines)


def test_yaml_syntax_error_gives_line_and_column(cli, write_yaml):
    code, _, err = cli("validate", write_yaml("arms:\n  a: {preset: grpo\nseeds: [1]\n"))
    assert code == 2
    assert "YAML syntax error at line" in err and "column" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file(cli, tmp_path):
    missing = tmp_path / "nope.yaml"
    code, _, err = cli("validate", str(missing))
    assert code == 2
    assert err.strip() == f"error: {missing}: file not found"


def test_yaml_is_loaded_safely(cli, write_yaml, tmp_path):
    marker = tmp_path / "pwned"
    text = (
        f"arms: {{a: {{preset: grpo}}}}\nname: !!python/object/apply:os.system ['touch {marker}']\n"
    )
    code, _, err = cli("validate", write_yaml(text))
    assert code == 2
    assert not marker.exists()
    assert "YAML" in err


def test_debug_shows_traceback(write_yaml):
    path = write_yaml("arms: {a: {preset: nope}}\n")
    plain = subprocess.run(
        [sys.executable, "-m", "sixblanks.harness.cli", "validate", path],
        capture_output=True,
        text=True,
    )
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    debug = subprocess.run(
        [sys.executable, "-m", "sixblanks.harness.cli", "--debug", "validate", path],
        capture_output=True,
        text=True,
    )
    assert "Traceback" in debug.stderr and "ConfigError" in debug.stderr


def test_validate_json(cli, write_yaml):
    code, out, _ = cli("validate", "--json", write_yaml(GOOD))
    assert code == 0
    data = json.loads(out)
    assert data["valid"] is True and data["plan"][0]["preset"] == "grpo"


def test_schema_is_json_schema_of_the_config(cli, tmp_path):
    target = tmp_path / "schema.json"
    code, _, _ = cli("--quiet", "schema", "-o", str(target))
    assert code == 0
    schema = json.loads(target.read_text())
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) >= {
        "name",
        "model",
        "task",
        "tasks",
        "rollout",
        "warm_start",
        "budget",
        "seeds",
        "eval",
        "arms",
        "executor",
        "tracking",
        "ladder",
        "sweep",
    }
    # arms: required of a file, unless it names a base (which may hold them)
    assert "arms" in schema["then"]["required"] and schema["if"] == {"not": {"required": ["base"]}}
    assert "base" in schema["properties"]


def test_config_error_lists_problems():
    with pytest.raises(ConfigError) as info:
        load_config("/nonexistent/dir/x.yaml")
    assert info.value.exit_code == 2


def test_validate_catches_what_would_fail_inside_every_run(tmp_path, cli, write_yaml):
    """An unknown eval.counter, a missing model directory or GGUF file: exit 2 at validate, with
    the key path, before any warm start."""

    path = write_yaml(
        "arms: {a: {preset: grpo}}\n"
        "eval: {counter: launched_tokenz}\n"
        f"model: {{path: {tmp_path / 'no_model'}}}\n"
    )
    code, _, err = cli("validate", path)
    assert code == 2
    assert "eval.counter: unknown counter 'launched_tokenz'; did you mean 'launched_tokens'" in err
    assert "model.path:" in err and "is not a directory" in err
    code, _, err = cli(
        "validate",
        write_yaml(
            f"arms: {{a: {{preset: grpo}}}}\nmodel: {{gguf: {tmp_path / 'x.gguf'}}}\n", "g.yaml"
        ),
    )
    assert code == 2 and "model.gguf:" in err and "no such file" in err
    code, _, err = cli(
        "validate",
        write_yaml(
            "arms: {a: {preset: grpo}}\nmodel: {gguf: 'package:no_such_pkg_abc'}\n", "p.yaml"
        ),
    )
    assert code == 2 and "model.gguf: package 'no_such_pkg_abc' is not installed" in err
    (tmp_path / "m").mkdir()
    ok = write_yaml(
        f"arms: {{a: {{preset: grpo}}}}\nmodel: {{path: {tmp_path / 'm'}}}\n"
        "eval: {counter: optimizer_steps}\n",
        "ok.yaml",
    )
    assert cli("validate", ok)[0] == 0


def test_the_schema_flags_misspelt_presets_task_names_and_task_parameters(cli):
    """An editor validating against the JSON Schema flags `grpoo`, `arithmatic` and `digitz`;
    the shipped experiments and the other task forms pass."""

    import json

    import jsonschema
    import yaml

    code, out, _ = cli("schema")
    schema = json.loads(out)
    check = jsonschema.Draft202012Validator(schema)

    def errors(doc):
        return [e.message for e in check.iter_errors(doc)]

    for f in [ROOT / "experiments.yaml", *sorted((ROOT / "experiments").glob("*.yaml"))]:
        assert errors(yaml.safe_load(f.read_text())) == [], f.name
    assert errors({"arms": {"a": {"preset": "grpoo"}}})  # not a preset
    assert errors({"arms": {"a": {"preset": "grpo"}}, "task": {"name": "arithmatic"}})
    bad = {
        "arms": {"a": {"preset": "grpo"}},
        "task": {"name": "arithmetic", "params": {"digitz": 2}},
    }
    assert any("digitz" in m for m in errors(bad))
    ok = {
        "arms": {"a": {"preset": "grpo"}},
        "tasks": [{"name": "reasoning_gym:leg_counting"}, {"name": "examples.my_tasks:Reverse"}],
    }
    assert errors(ok) == []


def test_validate_resolved_shows_the_task_parameters_defaults(cli, write_yaml):
    import yaml

    code, out, _ = cli(
        "validate",
        write_yaml("arms: {a: {preset: grpo}}\ntask: {name: guess_number}\n"),
        "--resolved",
    )
    assert code == 0
    params = yaml.safe_load(out)["tasks"][0]["params"]
    assert params["low"] == 1 and params["high"] == 16 and params["max_turns"] == 5


def test_environment_steps_on_threads_are_refused_for_self_play_and_episodes_need_a_process():
    base = {"task": {"name": "nim"}, "rollout": {"env_workers": 4}}
    arms = {"s": {"preset": "grpo", "blanks": {"data": {"self_play": {}}}}}
    with pytest.raises(ConfigError, match="env_workers 4 with data.self_play"):
        validate_mapping({**base, "arms": arms})
    with pytest.raises(ConfigError, match="backend 'ray' takes whole rounds"):
        resolve_blanks = {"data": {"concurrent": {"consume": "episode", "backend": "ray"}}}
        validate_mapping({"arms": {"a": {"preset": "grpo", "blanks": resolve_blanks}}})
    with pytest.raises(ConfigError, match="partial 'resume'.*needs consume: episode"):
        over = {"data": {"concurrent": {"partial": "resume"}}}
        validate_mapping({"arms": {"a": {"preset": "grpo", "blanks": over}}})


def _golden_spreads() -> tuple[float, float]:
    """The smallest and the largest per-step spread of the sequence log-ratio that the golden
    fixture's GSPO runs (absolute and scaled bounds) measured on the built-in tiny policy."""

    golden = json.loads((ROOT / "tests" / "golden" / "presets.json").read_text())
    spreads = [
        m["ratio.seq_logratio_spread"]
        for preset in ("gspo", "gspo_paper")
        for m in golden["presets"][preset]["steps"]
        if m.get("ratio.seq_logratio_spread", 0) > 0
    ]
    return min(spreads), max(spreads)


def test_validate_cautions_absolute_sequence_bounds_far_from_the_measured_spread(cli, write_yaml):
    """On the built-in tiny policy, whose sequence log-ratios spread from `lo` to `hi` a step in the
    golden runs: the paper's 3e-4/4e-4 lie far below `lo` (each side named, with its multiple of
    it), an eps_high whose log is 20 x `hi` far above it; bounds at the spread itself, a scaled
    arm, an arm updating once per batch (every sequence ratio 1) and a token ratio get nothing."""

    import math

    lo, hi = _golden_spreads()
    arms = {
        "paper": {"preset": "gspo_paper"},
        "wide": {
            "preset": "gspo_token_paper",
            "blanks": {"weight": {"eps_low": lo, "eps_high": math.expm1(20 * hi)}},
        },
        "at_spread": {
            "preset": "gspo_paper",
            "blanks": {"weight": {"eps_low": lo, "eps_high": lo}},
        },
        "once": {"preset": "gspo_paper", "blanks": {"data": {"minibatches": 1}}},
        "scaled": {"preset": "gspo"},
        "token": {"preset": "grpo", "blanks": {"weight": {"eps_low": 3e-4, "eps_high": 4e-4}}},
    }
    # an evaluation the task's held-out space can fill (1-digit arithmetic holds 25 test
    # problems), so the only cautions are the bounds'
    cfg = {"name": "c", "task": {"name": "arithmetic"}, "eval": {"size": 16}, "arms": arms}
    code, out, err = cli("validate", write_yaml(json.dumps(cfg)), "--json")
    assert code == 0, err
    notes = {n.split(":")[0]: n for n in json.loads(out)["cautions"]}
    assert set(notes) == {"arms.paper", "arms.wide"}
    paper = notes["arms.paper"]
    from sixblanks.harness.config.checks import SPREAD_FAR

    below_low = lo / -math.log1p(-3e-4)  # the bound's distance in log s, against the spread
    below_high = lo / math.log1p(4e-4)
    assert below_low >= SPREAD_FAR
    assert f"weight.eps_low 0.0003 (from preset 'gspo_paper') is {below_low:.0f}x below" in paper
    assert "negative advantage whose ratio fell gets no gradient" in paper
    # the upper bound is named only where it too lies SPREAD_FAR below the spread
    high_named = "weight.eps_high 0.0004 (from preset 'gspo_paper')" in paper
    assert high_named == (below_high >= SPREAD_FAR)
    assert ("positive advantage whose ratio rose gets no gradient" in paper) == high_named
    assert "weight.clip_scale" in paper and "ratio.seq_logratio_spread" in paper
    wide = notes["arms.wide"]
    assert f"weight.eps_high {math.expm1(20 * hi):g} is 20x above the largest" in wide
    assert "no trust region for a positive advantage" in wide and "eps_low" not in wide
    code, _, err = cli("validate", write_yaml(json.dumps(cfg)))
    assert code == 0 and err.count("caution:") == 2


@pytest.mark.parametrize(
    "change",
    [{"model": {"path": "."}}, {"optimizer": {"lr": 1e-5}}, {"optimizer": {"lr": 3e-3}}],
    ids=["pretrained", "lr_far_below", "lr_far_above"],
)
def test_no_sequence_bound_caution_where_the_spread_is_unknown(cli, write_yaml, change):
    """Another policy, or the tiny one at a learning rate 3x or more from the one its spread was
    measured at: the spread the bounds should be compared with is unknown before a run."""

    cfg = {
        "name": "c",
        "task": {"name": "arithmetic"},
        "eval": {"size": 16},
        "arms": {"p": {"preset": "gspo_paper"}},
    }
    code, out, err = cli("validate", write_yaml(json.dumps(cfg | change)), "--json")
    assert code == 0, err
    assert json.loads(out)["cautions"] == []
