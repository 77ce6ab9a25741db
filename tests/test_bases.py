"""An experiment file that builds on another (``base:``): the base's sections with the file's own
laid over them key by key (arms replaced whole, the name never inherited), the base's relative
paths read from its own directory, a chain of bases, and the errors of a missing or circular
base; a finding file on a base validates and resolves to the same experiment as written out."""

from __future__ import annotations

import json

import pytest

from sixblanks.harness.config import load_config
from sixblanks.harness.config.finding_file import load_finding
from sixblanks.harness.errors import ConfigError

BASE = """
name: bed
task: {name: arithmetic, params: {digits: 1}, eval_size: 16}
rollout: {max_new_tokens: 6, group_size: 4, prompts_per_step: 4, temperature: 1.0}
budget: {launched_tokens: 900}
optimizer: {lr: 2.0e-4}
seeds: [0, 1, 2]
arms:
  grpo: {preset: grpo}
  rloo: {preset: rloo}
tracking: {mlflow: false}
"""


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_file_laid_over_its_base(tmp_path):
    _write(tmp_path / "bed.yaml", BASE)
    child = _write(
        tmp_path / "claims" / "one.yaml",
        "base: ../bed.yaml\nrollout: {group_size: 8}\nseeds: [4]\narms: {a: {preset: dr_grpo}}\n",
    )
    cfg = load_config(child)
    # merged key by key: the child's group size, the base's other rollout settings
    assert (cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (8, 6)
    assert cfg.rollout.prompts_per_step == 4 and cfg.optimizer.lr == 2.0e-4
    assert cfg.seeds == [4] and list(cfg.arms) == ["a"]  # a list and the arms replace
    assert cfg.tasks[0].params == {"digits": 1} and cfg.budget["launched_tokens"] == 900
    assert cfg.name != "bed"  # an experiment is named by itself
    written_out = _write(
        tmp_path / "whole.yaml",
        BASE.replace("name: bed\n", "")
        .replace("group_size: 4", "group_size: 8")
        .replace("seeds: [0, 1, 2]", "seeds: [4]")
        .replace("  grpo: {preset: grpo}\n  rloo: {preset: rloo}\n", "  a: {preset: dr_grpo}\n"),
    )
    whole = load_config(written_out)
    assert json.dumps(cfg.model_dump(exclude={"name"}), sort_keys=True, default=str) == (
        json.dumps(whole.model_dump(exclude={"name"}), sort_keys=True, default=str)
    )


def test_a_chain_of_bases_and_the_base_paths_read_from_the_base(tmp_path):
    rows = "".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(40))
    data = _write(tmp_path / "shared" / "data" / "q.jsonl", rows)
    _write(
        tmp_path / "shared" / "bed.yaml",
        "task: {name: dataset, params: {path: data/q.jsonl}, eval_size: 1}\n"
        "arms: {g: {preset: grpo}}\nbudget: {launched_tokens: 1000}\n",
    )
    _write(
        tmp_path / "mid" / "mid.yaml", "base: ../shared/bed.yaml\nbudget: {launched_tokens: 1200}\n"
    )
    top = _write(tmp_path / "top" / "top.yaml", "base: ../mid/mid.yaml\nseeds: [3]\n")
    cfg = load_config(top)
    assert cfg.tasks[0].params["path"] == str(data.resolve())
    assert cfg.budget["launched_tokens"] == 1200 and cfg.seeds == [3] and list(cfg.arms) == ["g"]


def test_a_missing_a_circular_and_a_finding_base_are_named(tmp_path):
    gone = _write(tmp_path / "a.yaml", "base: nowhere.yaml\narms: {g: {preset: grpo}}\n")
    with pytest.raises(ConfigError, match="nowhere.yaml: file not found"):
        load_config(gone)
    _write(tmp_path / "b.yaml", "base: c.yaml\n")
    circle = _write(tmp_path / "c.yaml", "base: b.yaml\narms: {g: {preset: grpo}}\n")
    with pytest.raises(ConfigError, match="leads back to a file that names it"):
        load_config(circle)
    bad = _write(tmp_path / "d.yaml", "base: [1, 2]\n")
    with pytest.raises(ConfigError, match="expected the path of an experiment file"):
        load_config(bad)
    _write(tmp_path / "claim.yaml", "finding: {claim: x}\narms: {g: {preset: grpo}}\n")
    on_claim = _write(tmp_path / "e.yaml", "base: claim.yaml\n")
    with pytest.raises(ConfigError, match="is not an experiment file"):
        load_config(on_claim)


def test_a_finding_on_a_base_validates(tmp_path, cli):
    _write(tmp_path / "bed.yaml", BASE)
    claim = _write(
        tmp_path / "findings" / "c.yaml",
        "base: ../bed.yaml\n"
        "finding:\n  claim: rloo is no worse\n  source: a test\n  about: [advantage.estimator]\n"
        "  arm: rloo\n  than: grpo\n  metric: final_score\n  expect: not_smaller\n"
        "  smallest_effect: 0.05\n"
        "arms:\n  grpo: {preset: grpo}\n"
        "  rloo: {preset: grpo, blanks: {advantage: {estimator: loo}}}\n",
    )
    f = load_finding(claim)
    assert f.name == "c" and f.experiment["budget"] == {"launched_tokens": 900}
    assert f.experiment["optimizer"] == {"lr": 2.0e-4} and set(f.experiment["arms"]) == {
        "grpo",
        "rloo",
    }
    code, out, err = cli("validate", str(claim))
    assert code == 0, err
