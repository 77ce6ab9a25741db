"""Registries of the blanks' variants, their declared fields, and `sixblanks explain` built on
them."""

import json
import typing

import pytest
import torch

from sixblanks.algorithms import (
    ESTIMATORS,
    KL_ESTIMATORS,
    NORMALIZATIONS,
    OBJECTIVES,
    PRESETS,
    RATIOS,
    TRUST_REGIONS,
    Blanks,
    Registry,
    UnknownNameError,
    applicable_fields,
    compute_advantages,
    flatten,
    get_preset,
    loss_weights,
    policy_loss,
    resolve,
)
from sixblanks.algorithms.blanks import (
    AdvantageSpec,
    NormalizationSpec,
    RegularizerSpec,
    WeightSpec,
)
from sixblanks.algorithms.fields import SWITCHES, WHEN_ON

D = torch.float64

REGISTRIES = {
    "weight.ratio": (RATIOS, WeightSpec, "ratio"),
    "weight.trust_region": (TRUST_REGIONS, WeightSpec, "trust_region"),
    "advantage.estimator": (ESTIMATORS, AdvantageSpec, "estimator"),
    "normalization.mode": (NORMALIZATIONS, NormalizationSpec, "mode"),
    "regularizer.loss_kl_estimator": (KL_ESTIMATORS, RegularizerSpec, "loss_kl_estimator"),
    "regularizer.reward_kl_estimator": (KL_ESTIMATORS, RegularizerSpec, "reward_kl_estimator"),
    "objective": (OBJECTIVES, Blanks, "objective"),
}


# ----------------------------------------------------------------------------- registries


@pytest.mark.parametrize("path", sorted(REGISTRIES))
def test_each_choice_field_has_exactly_one_variant_per_allowed_value(path):
    registry, model, name = REGISTRIES[path]
    allowed = set(typing.get_args(model.model_fields[name].annotation))
    assert set(registry) == allowed
    assert SWITCHES[path] is registry


@pytest.mark.parametrize(
    "registry,typo,close",
    [
        (RATIOS, "tokne", "token"),
        (TRUST_REGIONS, "clipp", "clip"),
        (ESTIMATORS, "group_nrom", "group_norm"),
        (NORMALIZATIONS, "token_mean", "token-mean"),
        (KL_ESTIMATORS, "k4", None),
        (OBJECTIVES, "sftt", "sft"),
    ],
)
def test_unknown_name_lists_the_valid_names(registry, typo, close):
    with pytest.raises(UnknownNameError) as info:
        registry[typo]
    msg = str(info.value)
    assert msg.startswith(f"unknown {registry.kind} '{typo}'")
    assert f"(valid: {', '.join(sorted(registry))})" in msg
    assert (f"did you mean '{close}'?" in msg) == (close is not None)
    assert typo not in registry and registry.get(typo) is None  # still a KeyError for Mapping


def test_functions_raise_unknown_name_errors_for_their_blanks():
    mask = torch.ones(2, 3)
    with pytest.raises(UnknownNameError, match="unknown normalization mode 'seq-mean'"):
        loss_weights(mask, "seq-mean")
    from sixblanks.algorithms import kl_estimate

    with pytest.raises(UnknownNameError, match="unknown KL estimator 'k5'.*valid: k1, k2, k3"):
        kl_estimate(torch.zeros(2), torch.zeros(2), "k5")


def test_unknown_name_error_has_one_home():
    import sixblanks.algorithms as algorithms
    from sixblanks.algorithms import errors, presets

    assert algorithms.UnknownNameError is errors.UnknownNameError is presets.UnknownNameError
    assert issubclass(errors.UnknownNameError, KeyError)


def test_a_declaration_that_does_not_match_the_signature_fails_at_registration():
    reg = Registry("test variant", inputs=("x",))

    def takes_eps(x, eps_low):
        return x

    def renamed(x, eps):  # declares weight.eps_low but takes `eps`
        return x

    def catch_all(x, **kwargs):
        return x

    def undeclared(x, eps_low, extra=1.0):  # takes a field it does not declare
        return x

    reg.register("ok", reads=("weight.eps_low",))(takes_eps)
    for name, fn in [("renamed", renamed), ("catch_all", catch_all), ("undeclared", undeclared)]:
        with pytest.raises(TypeError, match=f"test variant '{name}'"):
            reg.register(name, reads=("weight.eps_low",))(fn)
    assert list(reg) == ["ok"]
    assert reg["ok"].call({"x": 5, "y": 6}, {"weight.eps_low": 0.1, "weight.eps_high": 0.2}) == 5
    with pytest.raises(ValueError, match="already registered"):
        reg.register("ok", reads=("weight.eps_low",))(takes_eps)


def test_every_declared_field_is_a_field_of_the_blanks():
    paths = list(flatten(Blanks()))
    registries = {id(reg): reg for reg in SWITCHES.values()}.values()
    declared = [f for reg in registries for v in reg.values() for f in v.fields]
    declared += list(WHEN_ON) + [f for fields in WHEN_ON.values() for f in fields]
    for path in declared:
        assert any(p == path or p.startswith(path + ".") for p in paths), path


# ----------------------------------------------------------------------------- estimators


@pytest.mark.parametrize("name", ["loo", "group_norm", "group_mean"])
def test_singleton_field_reaches_every_estimator_that_declares_it(name):
    assert "advantage.singleton" in ESTIMATORS[name].reads
    rewards, mask, groups = (
        torch.tensor([0.7], dtype=D),
        torch.ones(1, 2, dtype=D),
        torch.tensor([0]),
    )
    for rule, want in (("zero", 0.0), ("raw", 0.7)):
        blanks = resolve("grpo", {"advantage": {"estimator": name, "singleton": rule}})
        adv, _, _ = compute_advantages(blanks, rewards, mask, groups)
        assert torch.allclose(adv.double(), torch.full((1, 2), want, dtype=D), atol=1e-6)


def test_reinforce_pp_baseline_singleton_rule_by_hand():
    # two singleton groups: raw keeps A' = R = [1, 0], whitened (ddof 0) to [1, -1]; zero gives 0
    rewards, mask, groups = (
        torch.tensor([1.0, 0.0], dtype=D),
        torch.ones(2, 1),
        torch.tensor([0, 1]),
    )
    sd = (0.25 + 1e-8) ** 0.5
    for rule, want in (("raw", [[0.5 / sd], [-0.5 / sd]]), ("zero", [[0.0], [0.0]])):
        blanks = resolve("reinforce_pp_baseline", {"advantage": {"singleton": rule}})
        adv, _, _ = compute_advantages(blanks, rewards, mask, groups)
        assert torch.allclose(adv.double(), torch.tensor(want, dtype=D), atol=1e-6), rule


def test_missing_estimator_inputs_are_errors():
    rewards, mask = torch.tensor([1.0, 0.0]), torch.ones(2, 3)
    with pytest.raises(ValueError, match="'remax' estimator needs baseline_rewards"):
        compute_advantages("remax", rewards, mask)
    blanks = resolve("grpo", {"advantage": {"estimator": "turn_return"}})
    with pytest.raises(ValueError, match="needs turn_rewards .*; turn_ids"):
        compute_advantages(blanks, rewards, mask)
    ppo = resolve("ppo", {"regularizer": {"reward_kl_coef": 0.0}})
    with pytest.raises(ValueError, match="'gae' estimator needs a value model"):
        compute_advantages(ppo, rewards, mask)


# ----------------------------------------------------------------------------- applicable fields


def _fields(preset, overrides=None):
    from sixblanks.algorithms.presets import resolve

    return applicable_fields(resolve(preset, overrides) if overrides else get_preset(preset).blanks)


def test_grpo_shows_no_critic_sapo_dpo_or_reward_kl_fields():
    f = _fields("grpo")
    assert not [k for k in f if k.startswith("advantage.critic.")]
    for absent in (
        "advantage.lam",
        "advantage.gamma",
        "advantage.whiten_eps",
        "weight.tau_pos",
        "weight.tau_neg",
        "regularizer.dpo_beta",
        "regularizer.dpo_label_smoothing",
        "regularizer.reward_kl_estimator",  # its coefficient is 0
        "data.max_sampling_rounds",
        "normalization.l_max",
    ):
        assert absent not in f, absent
    for present in (
        "weight.eps_low",
        "weight.eps_high",
        "weight.dual_clip_c",
        "advantage.std_ddof",
        "advantage.std_eps",
        "advantage.singleton",
        "normalization.count_empty_rows",
        "regularizer.loss_kl_coef",
        "regularizer.loss_kl_estimator",
        "weight.target_kl",  # any arm with a ratio to pi_old can stop its epochs at a target KL
    ):
        assert present in f, present
    assert "weight.target_kl" not in _fields("reinforce")  # w = 1: no ratio, one pass


def test_sapo_shows_its_temperatures_and_no_clip():
    f = _fields("sapo")
    assert "weight.tau_pos" in f and "weight.tau_neg" in f
    assert not {"weight.eps_low", "weight.eps_high", "weight.dual_clip_c"} & set(f)


def test_ppo_shows_the_critic_and_gae_fields():
    f = _fields("ppo")
    critic = [k for k in flatten(get_preset("ppo").blanks) if k.startswith("advantage.critic.")]
    vtrace_clips = {f"advantage.critic.{k}" for k in ("rho_bar", "c_bar", "rho_bar_pg")}
    assert len(critic) == 13 and set(critic) - vtrace_clips <= set(f)
    assert not vtrace_clips & set(f)  # only with targets: vtrace
    vtrace = applicable_fields(resolve("ppo", {"advantage": {"critic": {"targets": "vtrace"}}}))
    assert vtrace_clips <= set(vtrace)
    for present in ("advantage.gamma", "advantage.lam", "weight.target_kl", "weight.dual_clip_c"):
        assert present in f
    assert "regularizer.reward_kl_estimator" in f  # KL 0.05 in the reward
    assert "advantage.std_eps" not in f and "advantage.singleton" not in f


def test_switches_and_toggles():
    dapo = _fields("dapo")  # token-mean, dynamic sampling, overlong shaping
    for present in (
        "data.max_sampling_rounds",
        "data.on_round_cap",
        "data.overlong_shaping.cache",
        "data.overlong_shaping.factor",
        "normalization.l_max",  # the shaping's L_max
    ):
        assert present in dapo, present
    assert "normalization.count_empty_rows" not in dapo  # token-mean has no B
    dr = _fields("dr_grpo")
    assert "normalization.l_max" in dr and "normalization.count_empty_rows" in dr
    assert "advantage.std_eps" not in dr  # group_mean: no std
    reinforce = _fields("reinforce")  # ratio none, trust region none
    assert not {"weight.eps_low", "weight.log_ratio_clamp", "weight.tau_pos"} & set(reinforce)
    assert "weight.log_ratio_clamp" in _fields("gspo")
    # SFT passes over its batch data.epochs x data.minibatches times (the shared routine)
    sft = ["objective", "data.source", "data.group_size", "data.epochs", "data.minibatches"]
    assert _fields("sft") == sft
    assert [f for f in _fields("rft") if f.startswith("data.search")] == [
        "data.search.mode",
        "data.search.n",
        "data.search.select",
        "data.search.min_reward",
        "data.search.policy",
    ]  # the search's fields apply with data.source 'search' only, and per mode
    tree = {"data": {"search": {"mode": "tree", "guide": "value"}}}
    assert [f for f in _fields("rft", tree) if f.startswith("data.search")] == [
        "data.search.mode",
        "data.search.expand",
        "data.search.expansions",
        "data.search.guide",
        "data.search.value_lr",
        "data.search.value_steps",
        "data.search.tree_labels",
        "data.search.select",
        "data.search.min_reward",
        "data.search.policy",
    ]
    beam = {"data": {"search": {"mode": "beam"}}}
    assert "data.search.beam" in _fields("rft", beam)
    assert "data.search.value_lr" not in _fields("rft", beam)  # guide: verifier
    dpo = _fields("dpo")
    assert "regularizer.dpo_beta" in dpo and "regularizer.dpo_label_smoothing" in dpo
    assert "weight.ratio" not in dpo and "advantage.estimator" not in dpo


def test_applicable_fields_keep_the_flatten_order():
    for p in PRESETS.values():
        every = list(flatten(p.blanks))
        f = applicable_fields(p.blanks)
        assert f == [k for k in every if k in set(f)] and f[0] == "objective"


# Alternative values for the fields the algorithms functions read (the data fields are read by the
# harness's loop, the critic fields by its actor-critic objective, target_kl by its minibatch
# routine).
ALTERNATIVES = {
    "weight.eps_low": 0.05,
    "weight.eps_high": 0.07,
    "weight.dual_clip_c": 1.5,
    "weight.tau_pos": 0.3,
    "weight.tau_neg": 3.0,
    "weight.tis_cap": 1.01,
    "weight.ratio_cap": 1.1,
    "weight.old_policy": "rollout",
    "advantage.batch_std": "centered",
    "weight.log_ratio_clamp": 0.01,
    "advantage.std_ddof": 0,
    "advantage.std_eps": 0.5,
    "advantage.singleton": "raw",
    "advantage.whiten_eps": 0.3,
    "advantage.gamma": 0.5,
    "advantage.lam": 0.5,
    "advantage.turn_baseline": "none",
    "advantage.gigpo_omega": 0.3,
    "advantage.gigpo_norm": "mean_std_norm",
    "advantage.hierarchical_norm": "mean_norm",
    "advantage.prm.mode": "min",
    "advantage.prm.outcome": False,
    "normalization.l_max": 3,
    "normalization.count_empty_rows": True,
    "regularizer.reward_kl_estimator": "k2",
    "regularizer.dpo_beta": 0.7,
    "regularizer.dpo_label_smoothing": 0.2,
}


def _override(path, value):
    out = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


def _run(blanks, data):
    """compute_advantages + policy_loss as the harness wires them (L_max: normalization.l_max
    or T)."""

    rewards, mask, groups, old, ref, behavior, logp0, truncated, greedy = data
    l_max = blanks.normalization.l_max or mask.shape[1]
    adv, m, info = compute_advantages(
        blanks,
        rewards,
        mask,
        groups,
        old_logp=old,
        ref_logp=ref,
        baseline_rewards=greedy,
        truncated=truncated,
        l_max=l_max,
        **_turns(mask),
    )
    n = blanks.normalization
    w = loss_weights(
        m, n.mode, l_max, n.count_empty_rows, group_ids=groups, turn_ids=_turns(mask)["turn_ids"]
    ).double()
    logp = logp0.clone().requires_grad_()
    loss, _ = policy_loss(
        blanks, logp, old, adv.double(), m, w, behavior_logp=behavior, ref_logp=ref
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return adv, m, info["shaped_rewards"], loss.detach(), grad


def _turns(mask):
    """Two turns of three tokens each, per-turn rewards, environment state keys that recur
    within groups (turn and GiGPO estimators), and levels and step labels (hierarchical)."""

    B, T = mask.shape
    turn_ids = torch.tensor([0, 0, 0, 1, 1, 1]).expand(B, T).clone()
    turn_rewards = torch.tensor(
        [[0.2, 0.8], [0.0, 0.0], [0.5, 0.0], [0.0, 1.0], [0.1, 0.1], [0.0, 0.9], [0.3, 0.0]],
        dtype=D,
    )
    state_keys = torch.tensor([[1, 5], [1, 5], [1, 6], [2, 7], [2, 7], [2, 8], [3, 9]])
    # a plan turn (level 0) then an executor turn (level 1) whose subgoal was or was not reached
    levels = torch.tensor([[0, 1]] * B)
    nan = float("nan")
    step_labels = torch.tensor(
        [[nan, 1.0], [nan, 0.0], [nan, 0.0], [nan, 1.0], [nan, 0.0], [nan, 1.0], [nan, 1.0]]
    )
    # a PRM's step scores (both steps scored) and PRIME-style token process rewards
    step_scores = torch.tensor(
        [[0.9, 0.7], [0.2, 0.1], [0.6, 0.3], [0.8, 0.95], [0.4, 0.5], [0.3, 0.9], [0.7, 0.2]],
        dtype=D,
    )
    process = 0.1 * torch.arange(B * T, dtype=D).reshape(B, T).sin()
    return {
        "turn_rewards": turn_rewards,
        "turn_ids": turn_ids,
        "state_keys": state_keys,
        "levels": levels,
        "step_labels": step_labels,
        "step_scores": step_scores,
        "process_rewards": process,
    }


def _data():
    g = torch.Generator().manual_seed(3)
    B, T = 7, 6
    mask = torch.ones(B, T, dtype=D)
    mask[0, 4:] = 0
    mask[1, 2:] = 0
    mask[5] = 0  # an empty row (count_empty_rows)
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.2, 0.9, 0.3], dtype=D)
    # group 3 is a singleton; group 2 holds only the empty row (a group with no action token)
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 3])
    old = -1 - torch.rand(B, T, generator=g, dtype=D)
    ref = old + 0.3 * torch.randn(B, T, generator=g, dtype=D)
    behavior = old + 0.2 * torch.randn(B, T, generator=g, dtype=D)
    logp0 = old + 0.6 * torch.randn(B, T, generator=g, dtype=D)  # ratios far outside any clip
    truncated = torch.tensor([False, False, True, False, True, False, False])
    greedy = torch.tensor([0.0, 1.0, 0.5, 0.0, 0.0, 1.0, 1.0], dtype=D)
    return rewards, mask, groups, old, ref, behavior, logp0, truncated, greedy


PG_PRESETS = sorted(
    n
    for n, p in PRESETS.items()
    if p.blanks.objective == "pg" and p.blanks.advantage.estimator != "gae"
)


@pytest.mark.parametrize("preset", PG_PRESETS)
def test_a_field_changes_the_loss_only_if_it_applies(preset):
    """Every field the explain view hides is truly unread (changing it leaves advantages, loss and
    gradient bit-identical), and on this batch every shown field of ALTERNATIVES changes them."""

    base_blanks = get_preset(preset).blanks
    applies = set(applicable_fields(base_blanks))
    data = _data()
    base = _run(base_blanks, data)
    current = flatten(base_blanks)
    for path, value in ALTERNATIVES.items():
        if current.get(path) == value:  # the preset's own value: no alternative to try
            continue
        try:
            blanks = resolve(preset, _override(path, value))
        except ValueError as exc:  # e.g. dual clip with SAPO: the combination is invalid, not
            # unread; or the value is refused with one the preset sets (the bypass form with
            # gspo's measured clip scale), which the refusal names
            assert path not in applies or "weight.clip_scale" in str(exc)
            continue
        got = _run(blanks, data)
        same = all(torch.equal(a, b) for a, b in zip(base, got))
        if path in applies:
            assert not same, f"{preset}: {path} is shown but changing it changes nothing"
        else:
            assert same, f"{preset}: {path} is hidden but changing it changes the result"


# ----------------------------------------------------------------------------- explain


def test_explain_shows_only_the_fields_that_apply(cli):
    code, out, _ = cli("explain", "grpo", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data["blanks"]["grpo"]) == _fields("grpo") == data["applies"]["grpo"]
    code, out, _ = cli("explain", "grpo", "--all", "--json")
    assert code == 0
    assert list(json.loads(out)["blanks"]["grpo"]) == list(flatten(get_preset("grpo").blanks))


def test_explain_side_by_side_shows_the_union(cli):
    code, out, _ = cli("explain", "grpo", "ppo", "sapo", "--json")
    assert code == 0
    data = json.loads(out)
    union = set(_fields("grpo")) | set(_fields("ppo")) | set(_fields("sapo"))
    for label in ("grpo", "ppo", "sapo"):
        assert set(data["blanks"][label]) == union
    assert data["blanks"]["ppo"]["advantage.lam"] == 0.95 and "advantage.lam" in data["differs"]
    assert "advantage.lam" not in data["applies"]["grpo"]
    assert "weight.tau_neg" in union and "regularizer.dpo_beta" not in union


def test_explain_table_hides_fields_and_marks_those_of_other_columns(cli):
    code, out, _ = cli("explain", "grpo")
    assert code == 0
    assert "eps_high" in out and "tau_pos" not in out and "vf_coef" not in out
    hidden = len(flatten(get_preset("grpo").blanks)) - len(_fields("grpo"))
    assert f"{hidden} fields that apply to no column are hidden (--all shows them)" in out
    code, out, _ = cli("explain", "grpo", "--all")
    assert code == 0 and "tau_pos" in out and "vf_coef" in out and "hidden" not in out
    code, out, _ = cli("explain", "grpo", "sapo")
    assert code == 0
    (row,) = [line for line in out.splitlines() if "tau_pos" in line]
    assert row.split("│")[3].strip() == "-" and row.split("│")[4].strip() == "1.0"
