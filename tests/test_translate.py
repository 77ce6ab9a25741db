"""``sixblanks translate``: TRL and verl configurations read as sixblanks arms. The frameworks'
defaults (an empty TRL GRPOConfig, verl's GRPO example) become arms the experiment validator
accepts; hand-checked mappings land on the blanks the frameworks' code computes; each trap fires
exactly when its condition holds; unknown fields are reported, malformed files refused naming the
file. Fast: nothing is trained, no model is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sixblanks.algorithms.fields import applicable_fields
from sixblanks.algorithms.presets import resolve
from sixblanks.harness.config import validate_mapping
from sixblanks.harness.errors import ConfigError, SixblanksError
from sixblanks.harness.translate import (
    TRL_OTHER_FIELDS,
    VERL_OTHER,
    Translation,
    parse_fields,
    translate,
    translate_file,
)

ROOT = Path(__file__).resolve().parents[1]
TRL_DEFAULTS = ROOT / "examples" / "foreign" / "trl_grpo_defaults.yaml"
VERL_GRPO = ROOT / "examples" / "foreign" / "verl_grpo_default.yaml"
A, R, AL = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "algorithm."
RC = AL + "rollout_correction."


def blanks(t: Translation):
    return resolve(t.preset, t.blanks)


def fired(t: Translation) -> set[str]:
    return {tr.id for tr in t.traps if tr.fired}


def lacking(t: Translation) -> set[str]:
    return {n["field"] for n in t.not_represented}


def experiment(t: Translation, budget: float = 3e7) -> dict:
    """The default experiment with the translated arm as its only arm, the experiment's settings
    the translation names, and a budget one of the framework's steps fits in (verl's GRPO step
    launches 1024 x 5 x 2048 tokens)."""

    exp = yaml.safe_load((ROOT / "experiments.yaml").read_text())
    exp["arms"] = {t.arm_name: t.arm()}
    exp["budget"] = {"launched_tokens": budget}

    def merge(into: dict, new: dict) -> None:
        for k, v in new.items():
            if isinstance(v, dict) and isinstance(into.get(k), dict):
                merge(into[k], v)
            else:
                into[k] = v

    merge(exp, t.experiment)
    return exp


# --------------------------------------------------------------------------- the defaults


def test_trl_defaults_are_an_arm_the_validator_accepts(tmp_path, cli):
    t = translate_file("trl", TRL_DEFAULTS)
    assert t.preset == "grpo" and t.arm_name == "trl_grpo"
    # TRL's defaults against the grpo preset: token-mean ('dapo'), no KL, std + 1e-4, G = 8
    assert t.blanks == {
        "advantage": {"std_eps": 1e-4},
        "normalization": {"mode": "token-mean"},
        "regularizer": {"loss_kl_coef": 0.0},
        "data": {"group_size": 8},
    }
    assert t.rollout == {
        "prompts_per_step": 1,  # 8 sequences per device x 1 process / 8 generations
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": 512,
    }
    assert t.optimizer["lr"] == 1e-6 and t.optimizer["weight_decay"] == 0.0
    assert fired(t) == {"default_aggregation", "dapo_name_only"}
    assert lacking(t) == {"lr_scheduler_type"}  # TRL decays linearly; sixblanks does not
    assert not t.unknown

    cfg = validate_mapping(experiment(t), "trl")
    b = cfg.resolved_blanks("trl_grpo")
    assert (b.normalization.mode, b.advantage.std_eps, b.regularizer.loss_kl_coef) == (
        "token-mean",
        1e-4,
        0.0,
    )
    # and the same through the command line, as a user would: translate, paste, validate
    code, out, _ = cli("translate", "trl", str(TRL_DEFAULTS))
    assert code == 0
    exp = yaml.safe_load((ROOT / "experiments.yaml").read_text())
    exp["arms"] = yaml.safe_load(out)  # the output is the arm, the report is comments
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    code, out, err = cli("validate", str(path))
    assert code == 0, err
    code, out, err = cli("explain", "-c", str(path), "trl_grpo", "--json")
    assert code == 0, err
    shown = json.loads(out)["blanks"]["trl_grpo (grpo)"]
    assert shown["normalization.mode"] == "token-mean" and shown["data.group_size"] == 8


def test_verl_grpo_example_is_an_arm_the_validator_accepts():
    t = translate_file("verl", VERL_GRPO)
    assert t.preset == "grpo"
    assert t.blanks == {
        "weight": {"dual_clip_c": 3.0},  # vanilla always dual-clips at clip_ratio_c
        "advantage": {"singleton": "raw"},  # a group of one: mean 0, std 1
        "normalization": {"mode": "token-mean"},
        "regularizer": {"loss_kl_coef": 0.001},
        "data": {"group_size": 5, "minibatches": 4},  # 1024 prompts / 256 per mini-batch
    }
    assert t.rollout["prompts_per_step"] == 1024 and t.rollout["max_new_tokens"] == 2048
    assert t.optimizer == {
        "lr": 1e-6,
        "weight_decay": 0.01,
        "betas": [0.9, 0.999],
        "grad_clip": 1.0,
        "warmup_steps": 0,
    }
    assert fired(t) == {"off_policy_uncorrected", "default_aggregation", "dual_clip_default"}
    assert not t.not_represented and not t.unknown
    assert "data.filter_overlong_prompts" in t.ignored and "data.truncation" in t.ignored
    # read, not ignored: the prompt limit is the experiment's; 15 epochs of an unsized dataset
    # are no budget, and the note says so
    assert t.experiment == {"rollout": {"max_prompt_tokens": 1024}}
    assert "data.max_prompt_length" not in t.ignored and "trainer.total_epochs" not in t.ignored
    assert "trainer.total_epochs=15 passes" in t.budget_note
    assert "optimizer_steps = 15 x (D // 1024) x 4" in t.budget_note  # 1024 / 256 mini-batches
    cfg = validate_mapping(experiment(t), "verl")
    b = cfg.resolved_blanks(t.arm_name)
    assert b.regularizer.loss_kl_estimator == "k3" and b.weight.dual_clip_c == 3.0
    assert cfg.rollout.max_prompt_tokens == 1024


def test_verl_defaults_are_ppo():
    t = translate("verl", {})
    assert t.preset == "ppo"
    b = blanks(t)
    assert (b.advantage.estimator, b.advantage.lam, b.advantage.critic.value_clip) == (
        "gae",
        1.0,
        0.5,
    )
    assert b.regularizer.reward_kl_coef == 0.0 and b.data.group_size == 1
    validate_mapping(experiment(t), "verl defaults")


# --------------------------------------------------------------------------- hand-checked mappings

CASES = [
    # (label, framework, fields, preset, {blank path: value})
    (
        "TRL dr_grpo without std: both halves of Dr. GRPO",
        "trl",
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "dr_grpo",
        {
            "normalization.mode": "constant",
            "normalization.l_max": None,  # B x max_completion_length: the generation budget
            "normalization.count_empty_rows": True,
            "advantage.estimator": "group_mean",
        },
    ),
    (
        "TRL dr_grpo alone keeps the group std: Dr. GRPO with its std put back",
        "trl",
        {"loss_type": "dr_grpo"},
        "dr_grpo",
        {"normalization.mode": "constant", "advantage.estimator": "group_norm"},
    ),
    (
        "TRL dr_grpo with scale_rewards batch: Dr. GRPO's denominator, the raw rewards' batch std",
        "trl",
        {"loss_type": "dr_grpo", "scale_rewards": "batch"},
        "dr_grpo",
        {
            "normalization.mode": "constant",
            "advantage.estimator": "group_mean_batch_std",
            "advantage.batch_std": "rewards",
        },
    ),
    (
        "TRL cispo with epsilon_high 5: min(r, 5) is the band [0, 5]",
        "trl",
        {"loss_type": "cispo", "epsilon_high": 5.0},
        "cispo",
        {
            "weight.trust_region": "cispo",
            "weight.eps_low": 1.0,
            "weight.eps_high": 4.0,
            "weight.ratio": "token",
            "normalization.mode": "token-mean",
            "data.minibatches": 1,
        },
    ),
    (
        "TRL grpo: seq-mean-token-mean, empty rows in B",
        "trl",
        {"loss_type": "grpo", "beta": 0.04},
        "grpo",
        {
            "normalization.mode": "seq-mean-token-mean",
            "normalization.count_empty_rows": True,
            "regularizer.loss_kl_coef": 0.04,
            "regularizer.loss_kl_estimator": "k3",
        },
    ),
    (
        "TRL scale_rewards batch: Lite PPO's std of the raw rewards",
        "trl",
        {"scale_rewards": "batch"},
        "lite_ppo",
        {
            "advantage.estimator": "group_mean_batch_std",
            "advantage.batch_std": "rewards",
            "advantage.std_eps": 1e-4,
        },
    ),
    (
        "TRL sapo: temperatures, seq-mean-token-mean",
        "trl",
        {"loss_type": "sapo", "sapo_temperature_neg": 2.0},
        "sapo",
        {"weight.trust_region": "sapo", "weight.tau_neg": 2.0, "weight.tau_pos": 1.0},
    ),
    (
        "TRL sequence-level ratio: GSPO",
        "trl",
        {
            "loss_type": "grpo",
            "importance_sampling_level": "sequence",
            "epsilon": 3e-4,
            "epsilon_high": 4e-4,
        },
        "gspo_paper",
        {"weight.ratio": "sequence", "weight.eps_low": 3e-4, "weight.eps_high": 4e-4},
    ),
    (
        "TRL luspo: GSPO's ratio summed over each sequence's tokens",
        "trl",
        {"loss_type": "luspo", "importance_sampling_level": "sequence"},
        "gspo_paper",
        {"weight.ratio": "sequence", "normalization.mode": "seq-mean-token-sum"},
    ),
    (
        "TRL delta above 1+eps: PPO's dual clip at c = delta",
        "trl",
        {"delta": 4.0},
        "grpo",
        {"weight.dual_clip_c": 4.0},
    ),
    (
        "TRL DAPO recipe: clip-higher, truncated completions masked",
        "trl",
        {"epsilon_high": 0.28, "mask_truncated_completions": True},
        "dapo",
        {"weight.eps_high": 0.28, "mask.overlong_filter": True},
    ),
    (
        "TRL generation batch over 4 optimizer steps, 2 passes",
        "trl",
        {"steps_per_generation": 4, "num_iterations": 2, "num_generations": 4},
        "grpo",
        {"data.minibatches": 4, "data.epochs": 2, "data.group_size": 4},
    ),
    (
        "TRL vLLM with its default correction: sequence_mask at 3",
        "trl",
        {"use_vllm": True},
        "grpo",
        {  # the product kept where <= 3, weighing by itself; 0 outside, in Z: exact
            "weight.gate": {
                "level": "sequence_sum",
                "metric": "ratio",
                "mode": "weight",
                "low": 0.0,
                "high": 3.0,
            },
        },
    ),
    (
        "TRL vLLM token_mask: IcePop's weight",
        "trl",
        {
            "use_vllm": True,
            "vllm_importance_sampling_mode": "token_mask",
            "vllm_importance_sampling_clip_min": 0.5,
            "vllm_importance_sampling_clip_max": 5.0,
        },
        "icepop",
        {
            "weight.gate": {
                "level": "token",
                "metric": "ratio",
                "mode": "weight",
                "low": 0.5,
                "high": 5.0,
            },
            "weight.tis_cap": None,
        },
    ),
    (
        "TRL vLLM token_truncate: truncated IS",
        "trl",
        {"use_vllm": True, "vllm_importance_sampling_mode": "token_truncate"},
        "grpo",
        {"weight.tis_cap": 3.0, "weight.tis_form": "token", "weight.gate": None},
    ),
    (
        "verl token-sum",
        "verl",
        {AL + "adv_estimator": "grpo", A + "loss_agg_mode": "token-sum"},
        "grpo",
        {"normalization.mode": "token-sum"},
    ),
    (
        "verl low_var_kl+: straight-through k3",
        "verl",
        {AL + "adv_estimator": "grpo", A + "use_kl_loss": True, A + "kl_loss_type": "low_var_kl+"},
        "grpo",
        {"regularizer.loss_kl_estimator": "k3+", "regularizer.loss_kl_coef": 0.001},
    ),
    (
        "verl k3+",
        "verl",
        {AL + "adv_estimator": "grpo", A + "use_kl_loss": True, A + "kl_loss_type": "k3+"},
        "grpo",
        {"regularizer.loss_kl_estimator": "k3+"},
    ),
    (
        "verl Dr. GRPO with a constant loss_scale_factor",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            AL + "norm_adv_by_std_in_grpo": False,
            A + "loss_agg_mode": "seq-mean-token-sum-norm",
            A + "loss_scale_factor": 4096,
        },
        "dr_grpo",
        {
            "advantage.estimator": "group_mean",
            "normalization.mode": "constant",
            "normalization.l_max": 4096,
            "advantage.singleton": "raw",
        },
    ),
    (
        "verl cispo with the example script's bounds: [-9, 1.2] is [0, 1.2]",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            A + "policy_loss.loss_mode": "cispo",
            A + "clip_ratio_low": 10,
            A + "clip_ratio_high": 0.2,
        },
        "cispo",
        {
            "weight.trust_region": "cispo",
            "weight.eps_low": 1.0,
            "weight.eps_high": 0.2,
            "weight.dual_clip_c": None,
        },
    ),
    (
        "verl dppo_tv: anchored on pi_old, truncated at clip_ratio_c",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            A + "policy_loss.loss_mode": "dppo_tv",
            A + "clip_ratio_low": 0.15,
            A + "clip_ratio_high": 0.15,
        },
        "dppo",
        {
            "weight.trust_region": "dppo_tv",
            "weight.ratio": "token",
            "weight.ratio_cap": 3.0,
            "weight.eps_low": 0.15,
            "weight.eps_high": 0.15,
        },
    ),
    (
        "verl dppo_kl: no preset has its trust region, so DPPO's family is overridden",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            A + "policy_loss.loss_mode": "dppo_kl",
            A + "clip_ratio_low": 0.05,
            A + "clip_ratio_high": 0.05,
            A + "clip_ratio_c": 10.0,
        },
        "dppo",
        {"weight.trust_region": "dppo_kl", "weight.ratio": "token", "weight.ratio_cap": 10.0},
    ),
    (
        "verl bypass with cispo: verl's bypass loss (PPO-clip against pi_rollout) replaces it",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            RC + "bypass_mode": True,
            A + "policy_loss.loss_mode": "cispo",
        },
        "grpo",
        {"weight.trust_region": "clip", "weight.old_policy": "rollout", "weight.dual_clip_c": 3.0},
    ),
    (
        "verl gspo: the stop-gradient token form, clamp 10, seq-mean-token-mean whatever the mode",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            A + "policy_loss.loss_mode": "gspo",
            A + "clip_ratio_low": 3e-4,
            A + "clip_ratio_high": 4e-4,
        },
        "gspo_token_paper",
        {
            "weight.ratio": "gspo_token",
            "weight.log_ratio_clamp": 10.0,
            "normalization.mode": "seq-mean-token-mean",
            "data.minibatches": 4,
        },
    ),
    (
        "verl rollout_is token 2.0: token TIS",
        "verl",
        {AL + "adv_estimator": "grpo", RC + "rollout_is": "token"},
        "grpo",
        {"weight.tis_cap": 2.0, "weight.tis_form": "token", "weight.old_policy": "recomputed"},
    ),
    (
        "verl IcePop: rollout_is token with a 'lo_hi' threshold",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            RC + "rollout_is": "token",
            RC + "rollout_is_threshold": "0.5_5.0",
        },
        "icepop",
        {
            "weight.gate": {
                "level": "token",
                "metric": "ratio",
                "mode": "weight",
                "low": 0.5,
                "high": 5.0,
            }
        },
    ),
    (
        "verl token_k1 rejection: the bounds apply to 1/k",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            RC + "rollout_rs": "token_k1",
            RC + "rollout_rs_threshold": "0.5_4.0",
        },
        "grpo",
        {
            "weight.gate": {
                "level": "token",
                "metric": "ratio",
                "mode": "mask",
                "low": 0.25,
                "high": 2.0,
            }
        },
    ),
    (
        "verl bypass_pg_is: REINFORCE against pi_rollout with a sequence TIS",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            RC + "bypass_mode": True,
            RC + "loss_type": "reinforce",
            RC + "rollout_is": "sequence",
            A + "ppo_mini_batch_size": 1024,
        },
        "reinforce",
        {
            "weight.ratio": "none",
            "weight.trust_region": "none",
            "weight.old_policy": "rollout",
            "weight.tis_cap": 2.0,
            "weight.tis_form": "sequence",
        },
    ),
    (
        "verl DAPO: dynamic sampling, clip-higher, overlong buffer",
        "verl",
        {
            AL + "adv_estimator": "grpo",
            R + "n": 8,
            AL + "filter_groups.enable": True,
            AL + "filter_groups.metric": "acc",
            AL + "filter_groups.max_num_gen_batches": 10,
            A + "clip_ratio_high": 0.28,
            A + "clip_ratio_c": 10.0,
            "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
            "reward.reward_kwargs.overlong_buffer_cfg.len": 512,
        },
        "dapo",
        {
            "data.dynamic_sampling": True,
            "data.max_sampling_rounds": 10,
            "data.on_round_cap": "error",
            "weight.eps_high": 0.28,
            "weight.dual_clip_c": 10.0,
            "data.overlong_shaping.enabled": True,
            "data.overlong_shaping.cache": 512,
        },
    ),
    (
        "verl rloo with KL in the reward",
        "verl",
        {
            AL + "adv_estimator": "rloo",
            AL + "use_kl_in_reward": True,
            AL + "kl_ctrl.kl_coef": 0.05,
            AL + "kl_penalty": "low_var_kl",
        },
        "rloo",
        {
            "advantage.estimator": "loo",
            "regularizer.reward_kl_coef": 0.05,
            "regularizer.reward_kl_estimator": "k3",
        },
    ),
]


@pytest.mark.parametrize("label,framework,fields,preset,expect", CASES, ids=[c[0] for c in CASES])
def test_hand_checked_mappings(label, framework, fields, preset, expect):
    t = translate(framework, fields)
    assert t.preset == preset, label
    dump = blanks(t).model_dump()
    for path, value in expect.items():
        node = dump
        for part in path.split("."):
            node = node[part]
        assert node == pytest.approx(value) if isinstance(value, float) else node == value, path
    # every override is a field the arm's blanks read (explain shows it), and the arm validates
    applies = set(applicable_fields(blanks(t)))

    def leaves(tree, prefix=""):
        for k, v in tree.items():
            if isinstance(v, dict) and not (prefix + k).endswith("gate"):
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield prefix + k

    for path in leaves(t.blanks):
        assert path in applies or any(a.startswith(path + ".") for a in applies), path
    validate_mapping(experiment(t, budget=1e8), label)


def test_trl_cispo_without_epsilon_high_is_named_not_represented():
    t = translate("trl", {"loss_type": "cispo"})
    assert "cispo_cap" in fired(t)
    assert "epsilon" in lacking(t)  # min(r, 0.2) cannot be a band ending above 1
    b = blanks(t)
    assert (b.weight.eps_low, b.weight.eps_high) == (1.0, 4.0)  # the recommended cap 5
    t = translate("trl", {"loss_type": "cispo", "epsilon_high": 0.5})
    assert "cispo_cap" in fired(t) and "epsilon_high" in lacking(t)


# ---------------------------------------------------------------------- the experiment's settings


def test_prompt_length_is_the_experiments_max_prompt_tokens(cli, tmp_path):
    default = yaml.safe_load((ROOT / "experiments.yaml").read_text())
    assert default.get("rollout", {}).get("max_prompt_tokens", 192) != 512  # else proves nothing
    t = translate("trl", {"max_prompt_length": 512})  # GRPOConfig's until TRL 0.28
    assert t.experiment == {"rollout": {"max_prompt_tokens": 512}}
    assert "max_prompt_length" not in t.ignored and not t.unknown
    mapped = {m["path"]: m for m in t.mapping}["rollout.max_prompt_tokens"]
    assert (mapped["scope"], mapped["from"]) == ("experiment", ["max_prompt_length=512"])
    assert validate_mapping(experiment(t), "trl").rollout.max_prompt_tokens == 512
    assert "rollout" not in translate("trl", {}).experiment  # not a field of TRL f2cd577
    assert "max_prompt_length" in lacking(translate("trl", {"max_prompt_length": None}))
    with pytest.raises(SixblanksError, match="max_prompt_tokens: Input should be greater than 0"):
        translate("trl", {"max_prompt_length": 0})  # checked as the experiment would check it
    # verl: its dataset's limit, 512 by default (_generated_ppo_trainer.yaml:509)
    assert translate("verl", {}).experiment["rollout"] == {"max_prompt_tokens": 512}
    t = translate("verl", {"data.max_prompt_length": 4096})
    assert t.experiment["rollout"] == {"max_prompt_tokens": 4096}
    assert "data.max_prompt_length" not in t.ignored
    # the command prints them as commented YAML that parses back to the same settings
    cfg = tmp_path / "trl.yaml"
    cfg.write_text("max_prompt_length: 512\nmax_steps: 300\n")
    code, out, err = cli("translate", "trl", str(cfg))
    assert code == 0, err
    lines = out.split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith("# the experiment's settings"))
    block = []
    for line in lines[i + 1 :]:
        if not line.startswith("#   "):
            break
        block.append(line[4:])
    assert yaml.safe_load("\n".join(block)) == {
        "rollout": {"max_prompt_tokens": 512},
        "budget": {"optimizer_steps": 300},
    }
    assert list(yaml.safe_load(out)) == ["trl_grpo"]  # the arm alone outside the comments
    code, out, _ = cli("translate", "trl", str(cfg), "--json", "--blanks-only")
    assert json.loads(out)["experiment"]["rollout"] == {"max_prompt_tokens": 512}


def test_trl_max_steps_is_the_budget_and_the_warm_up_counts_steps():
    t = translate("trl", {"max_steps": 500, "warmup_ratio": 0.1})
    assert t.experiment == {"budget": {"optimizer_steps": 500}}
    assert t.optimizer["warmup_steps"] == 50  # ceil(0.1 x 500) updates, one per step
    assert "max_steps=500" in t.budget_note and "max_steps" not in t.ignored
    assert "warmup_ratio" not in lacking(t)
    cfg = validate_mapping(experiment(t), "trl")
    assert cfg.budget["optimizer_steps"] == 500
    # four optimizer batches per generation batch: a sixblanks step makes 4 updates
    t = translate("trl", {"max_steps": 502, "warmup_steps": 0.1, "steps_per_generation": 4})
    assert blanks(t).data.minibatches == 4
    assert t.experiment["budget"] == {"optimizer_steps": 502}
    assert "the run ends after 125 steps, 2 updates short" in t.budget_note
    assert t.optimizer["warmup_steps"] == 13  # ceil(0.1 x 502) = 51 updates, in steps of 4
    # an integer warm-up counts updates too: 100 updates, 4 minibatches x 2 passes a step
    fields = {"warmup_steps": 100, "steps_per_generation": 4, "num_iterations": 2}
    assert translate("trl", fields).optimizer["warmup_steps"] == 13  # ceil(100 / 8)
    assert translate("trl", {"warmup_steps": 100}).optimizer["warmup_steps"] == 100


def test_trl_epochs_are_no_budget_and_say_why():
    t = translate("trl", {"warmup_ratio": 0.1, "num_train_epochs": 2})
    assert "budget" not in t.experiment
    assert "num_train_epochs=2 passes" in t.budget_note
    assert "dataset's size is not in the configuration" in t.budget_note
    assert "optimizer_steps = 2 x (D // 1) x 1" in t.budget_note  # 8 sequences / 8 per prompt
    assert "warmup_ratio" in lacking(t) and "warmup_steps" not in t.optimizer
    assert "num_train_epochs" not in t.ignored


def test_verl_total_training_steps_is_the_budget():
    fields = {
        AL + "adv_estimator": "grpo",
        "trainer.total_training_steps": 200,
        A + "optim.lr_warmup_steps_ratio": 0.05,
        A + "ppo_epochs": 2,
    }
    t = translate("verl", fields)
    # 200 steps x 2 epochs x (1024 prompts / 256 per mini-batch) optimizer updates
    assert t.experiment["budget"] == {"optimizer_steps": 200 * 2 * 4}
    assert t.optimizer["warmup_steps"] == 10  # int(0.05 x 200): verl's scheduler steps per step
    assert "trainer.total_training_steps=200" in t.budget_note
    assert validate_mapping(experiment(t, 1e12), "verl").budget["optimizer_steps"] == 1600
    fields.pop("trainer.total_training_steps")
    t = translate("verl", fields)
    assert "budget" not in t.experiment and A + "optim.lr_warmup_steps_ratio" in lacking(t)
    assert "trainer.total_epochs=30 (default) passes" in t.budget_note


def test_dr_grpo_with_batch_std_is_named_for_dr_grpo():
    t = translate("trl", {"loss_type": "dr_grpo", "scale_rewards": "batch"})
    assert (t.preset, t.arm_name) == ("dr_grpo", "trl_dr_grpo")
    b = blanks(t)
    assert (b.advantage.estimator, b.normalization.mode) == ("group_mean_batch_std", "constant")
    # the preset only starts the arm: the recipe's blanks are Lite PPO's scale under Dr. GRPO's Z
    assert t.blanks["advantage"]["estimator"] == "group_mean_batch_std"
    assert translate("trl", {"scale_rewards": "batch"}).preset == "lite_ppo"  # TRL's token-mean
    assert translate("trl", {}).preset == "grpo"


def test_dr_grpo_half_says_which_std_is_kept():
    def detail(fields):
        return next(tr.detail for tr in translate("trl", fields).traps if tr.id == "dr_grpo_half")

    text = detail({"loss_type": "dr_grpo", "scale_rewards": "batch"})
    assert "batch std" in text and "group std" not in text and "raw rewards" in text
    text = detail({"loss_type": "dr_grpo"})
    assert "group std" in text and "batch" not in text
    assert "no std" in detail({"scale_rewards": "none"})


def test_model_settings_are_the_experiments():
    fields = {
        "use_peft": True,
        "lora_r": 32,
        "lora_target_modules": ["q_proj", "v_proj"],
        "dtype": "bfloat16",
        "cast_lm_head_to_fp32": True,
    }
    t = translate("trl", fields)
    assert t.experiment["model"] == {
        "dtype": "bfloat16",
        "fp32_lm_head": True,
        # lora_alpha 32 and lora_dropout 0.05: TRL ModelConfig's defaults
        "lora": {"r": 32, "alpha": 32.0, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]},
    }
    assert not set(fields) & set(t.ignored)
    model = validate_mapping(experiment(t), "trl").model
    assert (model.lora.r, model.lora.dropout, model.dtype) == (32, 0.05, "bfloat16")
    assert "lora_target_modules" in lacking(translate("trl", {"use_peft": True}))
    assert "model" not in translate("trl", {"lora_r": 64}).experiment  # no effect without use_peft
    t = translate("verl", {"actor_rollout_ref.model.lora_rank": 64})
    assert t.experiment["model"] == {
        "lora": {"r": 64, "alpha": 16.0, "target_modules": "all-linear"}  # verl's defaults
    }
    assert not any("lora" in n for n in t.notes)
    assert "trainer.critic_warmup" in lacking(translate("verl", {"trainer.critic_warmup": 5}))


def test_fields_that_act_are_read_the_others_say_why_not():
    # a field that changes the update is mapped or named, never ignored
    t = translate("trl", {"neftune_noise_alpha": 5.0, "load_in_4bit": True, "use_peft": True})
    assert {"neftune_noise_alpha", "load_in_4bit"} <= lacking(t) and not t.ignored
    fields = {R + "over_sample_rate": 0.1, R + "enable_rollout_routing_replay": True}
    t = translate("verl", {**fields, R + "ignore_eos": True})
    assert set(fields) <= lacking(t) and not t.ignored
    assert t.experiment["rollout"]["ignore_eos"] is True  # sixblanks' rollout.ignore_eos
    # every other known field is ignored with its reason
    t = translate("trl", dict.fromkeys(TRL_OTHER_FIELDS))
    assert set(t.ignored) == TRL_OTHER_FIELDS and all(t.ignored.values())
    assert "mixed precision" in t.ignored["bf16"] and "seed" in t.ignored["seed"]
    assert (
        "vespo" in t.ignored["vespo_k_pos"]
        and "use_adaptive_entropy" in t.ignored["entropy_target"]
    )
    assert "mixture-of-experts" in t.ignored["router_aux_loss_coef"]
    t = translate("verl", dict.fromkeys(VERL_OTHER))
    assert set(t.ignored) == VERL_OTHER
    assert not any(why.startswith("infrastructure") for why in t.ignored.values())
    assert "clip_cov" in t.ignored[A + "policy_loss.clip_cov_ratio"]
    assert "critic" in t.ignored["critic.ppo_epochs"] and "seed" in t.ignored["data.seed"]
    assert "dataset" in t.ignored["data.train_files"]
    assert "trainer.total_training_steps" in t.ignored[A + "optim.total_training_steps"]
    out = translate("verl", {"trainer.logger": ["console"], "data.train_files": "x"}).to_yaml()
    assert (
        "#   the trainer's bookkeeping: logging, checkpoints, evaluation schedule, machines: "
        "trainer.logger" in out
    )


# --------------------------------------------------------------------------- traps

TRAPS = [
    # (framework, fields, trap, fires)
    ("trl", {"loss_type": "cispo"}, "cispo_cap", True),
    ("trl", {"loss_type": "cispo", "epsilon_high": 5.0}, "cispo_cap", False),
    ("trl", {}, "cispo_cap", False),
    ("verl", {A + "policy_loss.loss_mode": "cispo"}, "cispo_cap", True),
    (
        "verl",
        {A + "policy_loss.loss_mode": "cispo", A + "clip_ratio_high": 4.0},
        "cispo_cap",
        False,
    ),
    ("trl", {"scale_rewards": "batch"}, "batch_std", True),
    ("trl", {"scale_rewards": "group"}, "batch_std", False),
    (
        "trl",
        {"use_vllm": True, "vllm_importance_sampling_correction": False},
        "off_policy_uncorrected",
        True,
    ),
    (
        "trl",
        {"use_vllm": True, "vllm_importance_sampling_correction": False, "steps_per_generation": 4},
        "off_policy_uncorrected",
        True,
    ),
    ("trl", {"use_vllm": True}, "off_policy_uncorrected", False),
    ("trl", {"steps_per_generation": 4}, "off_policy_uncorrected", False),  # samples itself
    ("verl", {}, "off_policy_uncorrected", True),
    ("verl", {RC + "rollout_is": "token"}, "off_policy_uncorrected", False),
    ("verl", {RC + "bypass_mode": True}, "off_policy_uncorrected", False),
    ("trl", {}, "default_aggregation", True),
    ("trl", {"loss_type": "dapo"}, "default_aggregation", False),
    ("verl", {}, "default_aggregation", True),
    ("verl", {A + "loss_agg_mode": "token-mean"}, "default_aggregation", False),
    ("verl", {A + "loss_agg_mode": "seq-mean-token-sum-norm"}, "norm_length_unstable", True),
    (
        "verl",
        {A + "loss_agg_mode": "seq-mean-token-sum-norm", A + "loss_scale_factor": 512},
        "norm_length_unstable",
        False,
    ),
    ("verl", {A + "loss_agg_mode": "token-sum"}, "token_sum_scale", True),
    ("verl", {}, "token_sum_scale", False),
    (
        "verl",
        {A + "policy_loss.loss_mode": "gspo", A + "loss_agg_mode": "token-mean"},
        "loss_agg_ignored",
        True,
    ),
    ("verl", {A + "policy_loss.loss_mode": "gspo"}, "loss_agg_ignored", False),
    ("verl", {A + "policy_loss.loss_mode": "dppo_tv"}, "dppo_truncation", True),
    (
        "verl",
        {A + "policy_loss.loss_mode": "dppo_kl", A + "clip_ratio_c": 10.0},
        "dppo_truncation",
        False,
    ),
    ("verl", {}, "dppo_truncation", False),
    ("trl", {"loss_type": "dr_grpo"}, "dr_grpo_half", True),
    ("trl", {"scale_rewards": "none"}, "dr_grpo_half", True),
    ("trl", {"loss_type": "dr_grpo", "scale_rewards": "none"}, "dr_grpo_half", False),
    (
        "verl",
        {AL + "adv_estimator": "grpo", AL + "norm_adv_by_std_in_grpo": False},
        "dr_grpo_half",
        True,
    ),
    (
        "verl",
        {
            AL + "adv_estimator": "grpo",
            AL + "norm_adv_by_std_in_grpo": False,
            A + "loss_agg_mode": "seq-mean-token-sum-norm",
        },
        "dr_grpo_half",
        False,
    ),
    ("verl", {AL + "adv_estimator": "grpo"}, "dr_grpo_half", False),
    ("trl", {}, "dapo_name_only", True),
    ("trl", {"epsilon_high": 0.28}, "dapo_name_only", False),
    ("trl", {"loss_type": "grpo"}, "dapo_name_only", False),
    ("verl", {A + "clip_ratio": 0.3}, "clip_ratio_ignored", True),
    (
        "verl",
        {A + "clip_ratio": 0.3, A + "clip_ratio_low": 0.3, A + "clip_ratio_high": 0.3},
        "clip_ratio_ignored",
        False,
    ),
    (
        "verl",
        {RC + "bypass_mode": True, A + "policy_loss.loss_mode": "cispo"},
        "bypass_replaces_loss",
        True,
    ),
    ("verl", {RC + "bypass_mode": True}, "bypass_replaces_loss", False),
    ("verl", {}, "dual_clip_default", True),
    ("verl", {A + "policy_loss.loss_mode": "sapo"}, "dual_clip_default", False),
    (
        "trl",
        {"importance_sampling_level": "sequence", "loss_type": "grpo"},
        "gspo_clip_range",
        True,
    ),
    (
        "trl",
        {
            "importance_sampling_level": "sequence",
            "loss_type": "grpo",
            "epsilon": 3e-4,
            "epsilon_high": 4e-4,
        },
        "gspo_clip_range",
        False,
    ),
    ("verl", {A + "policy_loss.loss_mode": "gspo"}, "gspo_clip_range", True),
]


@pytest.mark.parametrize("framework,fields,trap,fires", TRAPS)
def test_traps_fire_exactly_when_they_should(framework, fields, trap, fires):
    t = translate(framework, fields)
    ids = [tr.id for tr in t.traps]
    assert trap in ids and len(ids) == len(set(ids))
    assert (trap in fired(t)) is fires, next(tr.detail for tr in t.traps if tr.id == trap)


def test_verl_dppo_truncation_is_clip_ratio_c():
    assert blanks(translate("verl", {A + "policy_loss.loss_mode": "dppo_tv"})).weight.ratio_cap == 3
    t = translate("verl", {A + "policy_loss.loss_mode": "dppo_tv", A + "clip_ratio_c": 20})
    assert blanks(t).weight.ratio_cap == 20


def test_every_trap_and_the_command_are_documented():
    page = (ROOT / "docs" / "guide" / "translate.md").read_text()
    ids = {tr.id for fw in ("trl", "verl") for tr in translate(fw, {}).traps}
    assert {
        "cispo_cap",
        "batch_std",
        "off_policy_uncorrected",
        "default_aggregation",
        "dppo_truncation",
    } <= ids
    for tid in ids:
        assert f"`{tid}`" in page, tid
    assert "`sixblanks translate" in (ROOT / "docs" / "reference" / "commands.md").read_text()


# --------------------------------------------------------------------------- unknown and malformed


def test_unknown_fields_are_reported_not_read():
    t = translate("trl", {"epsilonn": 0.3, "loss_type": "grpo", "my_flag": True})
    hints = {u["field"]: u["hint"] for u in t.unknown}
    assert hints["epsilonn"] == "did you mean 'epsilon'?"
    assert hints["my_flag"] == "not a GRPOConfig field"
    assert blanks(t).weight.eps_low == 0.2  # the misspelt value was not read
    t = translate(
        "verl",
        {A + "clip_ratio_hgih": 0.28, "foo.bar": 1, "trainer.anything": 1, R + "n": 4},
    )
    hints = {u["field"]: u["hint"] for u in t.unknown}
    assert hints[A + "clip_ratio_hgih"] == f"did you mean '{A}clip_ratio_high'?"
    assert set(hints) == {A + "clip_ratio_hgih", "foo.bar"}  # trainer.* is known, not read
    assert blanks(t).data.group_size == 4 and "trainer.anything" in t.ignored


def test_a_pasted_verl_command_reads_its_overrides(tmp_path):
    cmd = tmp_path / "run.sh"
    cmd.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n"
        "  actor_rollout_ref.rollout.n=8\n"
    )
    t = translate_file("verl", cmd)
    assert t.preset == "grpo" and blanks(t).data.group_size == 8
    assert [u["field"] for u in t.unknown] == ["python3", "-m", "verl.trainer.main_ppo"]
    cmd.write_text("python3 -m verl.trainer.main_ppo\n")
    with pytest.raises(ConfigError, match="expected a mapping of verl configuration fields"):
        translate_file("verl", cmd)


def test_verl_nested_dotted_and_overrides_read_alike(tmp_path):
    nested = tmp_path / "nested.yaml"
    nested.write_text(
        "algorithm: {adv_estimator: grpo}\n"
        "actor_rollout_ref:\n  actor: {clip_ratio_high: 0.28, optim: {lr: 2e-6}}\n"
        "  rollout: {n: 4}\n"
    )
    dotted = tmp_path / "dotted.yaml"
    dotted.write_text(
        "algorithm.adv_estimator: grpo\nactor_rollout_ref.actor.clip_ratio_high: 0.28\n"
        "actor_rollout_ref.actor.optim.lr: 2.0e-6\nactor_rollout_ref.rollout.n: 4\n"
    )
    cli_args = tmp_path / "overrides.txt"
    cli_args.write_text(
        "algorithm.adv_estimator=grpo \\\n  actor_rollout_ref.actor.clip_ratio_high=0.28 \\\n"
        "  +actor_rollout_ref.actor.optim.lr=2e-6 actor_rollout_ref.rollout.n=4\n"
    )
    ts = [translate_file("verl", p) for p in (nested, dotted, cli_args)]
    assert ts[0].arm() == ts[1].arm() == ts[2].arm()
    assert blanks(ts[0]).weight.eps_high == 0.28 and ts[0].optimizer["lr"] == 2e-6
    assert blanks(ts[0]).data.group_size == 4


@pytest.mark.parametrize(
    "framework,text,message",
    [
        ("trl", "loss_type: [grpo\n", "YAML syntax error at line"),
        ("trl", "- 1\n- 2\n", "expected a mapping of trl configuration fields"),
        ("trl", "epsilon: abc\n", "epsilon: 'abc' is not a number"),
        ("trl", "loss_type: grpoo\n", "loss_type: unknown value 'grpoo'; did you mean 'grpo'?"),
        ("trl", "num_generations: 1\n", "num_generations: TRL needs at least 2"),
        ("trl", "loss_type: luspo\n", "'luspo' needs importance_sampling_level='sequence'"),
        ("verl", "algorithm.adv_estimator: grop\n", "algorithm.adv_estimator: unknown value"),
        ("verl", "actor_rollout_ref.actor.clip_ratio_c: 0.5\n", "clip_ratio_c > 1"),
        ("verl", "a: {b: 1}\na.b: 2\n", "field 'a.b' is given twice"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_file(tmp_path, cli, framework, text, message):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        translate_file(framework, path)
    assert str(path) in str(exc.value) and message in str(exc.value)
    code, out, err = cli("translate", framework, str(path))
    assert code == 2 and out == "" and str(path) in err and "Traceback" not in err


def test_missing_and_json_files(tmp_path, cli):
    code, _, err = cli("translate", "trl", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml: file not found" in err
    bad = tmp_path / "cfg.json"
    bad.write_text('{"loss_type": "grpo",}')
    with pytest.raises(ConfigError, match=r"cfg\.json: JSON syntax error at line 1"):
        translate_file("trl", bad)
    good = tmp_path / "good.json"
    good.write_text('{"loss_type": "grpo", "beta": 0.04}')
    assert blanks(translate_file("trl", good)).regularizer.loss_kl_coef == 0.04
    assert parse_fields("", "trl") == {}


# --------------------------------------------------------------------------- the command


def test_command_json_arm_name_and_blanks_only(tmp_path, cli):
    cfg = tmp_path / "trl.yaml"
    cfg.write_text("loss_type: cispo\nepsilon_high: 5.0\nlearning_rate: 1.0e-6\nfoo: 1\n")
    code, out, err = cli("translate", "trl", str(cfg), "--json", "--arm", "mine")
    assert code == 0, err
    data = json.loads(out)
    assert data["preset"] == "cispo" and list(data["arm"]) == ["mine"]
    assert "weight" not in data["arm"]["mine"]["blanks"]  # cispo's band is [0, 5] already
    assert data["unknown"] == [{"field": "foo", "hint": "not a GRPOConfig field"}]
    assert {t["id"]: t["fired"] for t in data["traps"]}["cispo_cap"] is False
    mapped = {m["path"]: m for m in data["mapping"]}
    assert mapped["weight.trust_region"]["from"] == ["loss_type='cispo'"]
    assert mapped["optimizer.lr"]["from"] == ["learning_rate=1e-06"]
    assert mapped["rollout.temperature"]["from"] == ["temperature=1.0 (default)"]

    code, out, err = cli("translate", "trl", str(cfg), "--blanks-only")
    assert code == 0
    arm = yaml.safe_load(out)["trl_cispo"]
    assert set(arm) == {"preset", "blanks"}
    assert "1 unknown field(s), not read: foo" in err
    code, _, err = cli("translate", "trl", str(cfg), "--arm", "bad name")
    assert code == 2 and "--arm" in err
    code, _, err = cli("translate", "megatron", str(cfg))
    assert code != 0 and "'megatron' is not one of 'trl', 'verl'" in err


def test_world_size_scales_trl_batches():
    fields = {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 2}
    t = translate("trl", fields, world_size=4)
    assert t.rollout["prompts_per_step"] == 16 * 4 * 2 // 8
    assert not any("assumed 1" in n for n in t.notes)
    assert any("assumed 1" in n for n in translate("trl", fields).notes)
