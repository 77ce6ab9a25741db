"""The code tool in an experiment: the ``tools:`` section in the specs (and so the run ids) of the
arms offered it only, the warm start that demonstrates both ways, what validate refuses, the
fairness audit's flags, a machine that cannot isolate refusing the run with the sandbox's sentence,
and experiments/tools.yaml shrunk through the harness with every program counted."""

from __future__ import annotations

import json

import pytest
import yaml

from sixblanks.harness.config import ExperimentConfig
from sixblanks.harness.orchestration.command import as_config
from sixblanks.harness.orchestration.orchestrator import build_specs

from .conftest import ROOT, query

BASE = {
    "task": {"name": "long_arithmetic", "params": {"max_digits": 3}},
    "rollout": {"max_new_tokens": 32, "group_size": 4, "prompts_per_step": 4},
    "budget": {"launched_tokens": 4000},
    "seeds": [0],
    "tracking": {"mlflow": False},
}
TOOLS = {"max_calls": 1, "sandbox": {"timeout_seconds": 5}}


def _cfg(**over) -> ExperimentConfig:
    arms = {"tool": {"preset": "grpo"}, "text": {"preset": "grpo", "tools": False}}
    return as_config({**BASE, "arms": arms, **over})


def test_the_tools_section_enters_the_specs_of_the_arms_offered_it():
    cfg = _cfg(tools=TOOLS)
    assert cfg.tools_for("tool") == cfg.tools and cfg.tools_for("text") is None
    specs = {s.arm: s for s in build_specs(cfg, "key", code="c")}
    assert specs["tool"].tools == cfg.tools.model_dump(mode="json")
    assert specs["tool"].tools["sandbox"]["timeout_seconds"] == 5
    assert specs["text"].tools is None and "tools" not in specs["text"].as_dict()
    # without the section no spec holds the key: the run ids of every other experiment are as
    # they were, and the text arm's run is the one it would be in an experiment without tools
    plain = {s.arm: s for s in build_specs(_cfg(), "key", code="c")}
    assert not any("tools" in s.as_dict() for s in plain.values())
    assert plain["text"].run_id == specs["text"].run_id
    assert plain["tool"].run_id != specs["tool"].run_id
    limits = _cfg(tools={**TOOLS, "sandbox": {"timeout_seconds": 6}})
    changed = {s.arm: s.run_id for s in build_specs(limits, "key", code="c")}
    assert changed["tool"] != specs["tool"].run_id  # a sandbox limit is part of the identity


def test_the_warm_start_demonstrates_as_the_arms_are_offered_the_tool():
    from sixblanks.harness.orchestration.warmstart import tool_modes, warm_start_key
    from sixblanks.harness.tasks import make_task

    tasks = [make_task("long_arithmetic", {"max_digits": 3})]
    both, plain = _cfg(tools=TOOLS), _cfg()
    assert tool_modes(both) == [False, True] and tool_modes(plain) == [False]
    only_tool = as_config({**BASE, "tools": TOOLS, "arms": {"tool": {"preset": "grpo"}}})
    assert tool_modes(only_tool) == [True]
    # a tools section no arm uses leaves the key as it was; one an arm uses changes it
    unused = as_config({**BASE, "tools": TOOLS, "arms": {"t": {"preset": "grpo", "tools": False}}})
    no_section = as_config({**BASE, "arms": {"t": {"preset": "grpo"}}})
    assert warm_start_key(unused, tasks) == warm_start_key(no_section, tasks)
    keys = {warm_start_key(c, tasks) for c in (both, plain, only_tool)}
    assert len(keys) == 3


def test_validate_refuses_what_the_tool_cannot_do(cli, write_yaml):
    concurrent = {
        **BASE,
        "tools": TOOLS,
        "arms": {"a": {"preset": "grpo", "blanks": {"data": {"concurrent": {}}}}},
    }
    code, _, err = cli("validate", write_yaml(json.dumps(concurrent)))
    assert code == 2 and "arms.a: data.concurrent" in err and "arms.a.tools: false" in err
    game = {**BASE, "task": {"name": "nim"}, "tools": TOOLS, "arms": {"a": {"preset": "grpo"}}}
    code, _, err = cli("validate", write_yaml(json.dumps(game)))
    assert code == 2 and "task 'nim': a two-player game" in err
    # a budget on the tool's counters that an arm without the tool never charges
    never = {**BASE, "budget": {"tool_calls": 100}, "arms": {"a": {"preset": "grpo"}}}
    code, _, err = cli("validate", write_yaml(json.dumps(never)))
    assert code == 2 and "budget.tool_calls" in err and "never charges" in err
    # the step's worst case counts the tool turn: 4 x 4 episodes x 32 tokens x 2 turns
    short = {**BASE, "tools": TOOLS, "budget": {"launched_tokens": 1000}}
    code, _, err = cli(
        "validate", write_yaml(json.dumps({**short, "arms": {"a": {"preset": "grpo"}}}))
    )
    assert code == 2 and "needs 1024" in err and "2 turn(s) (1 of the code tool)" in err


def test_the_audit_flags_an_unisolated_sandbox_and_an_arm_without_the_tool():
    from sixblanks.harness.fairness.tools import sandbox_flags, tools_reason
    from sixblanks.harness.tools import SandboxConfig, audit_flag

    none = {**TOOLS, "sandbox": {"isolation": "none"}}
    base = build_specs(_cfg(), "key", code="c")[0]
    specs = [
        base.replace(arm="a", tools=_cfg(tools=none).tools.model_dump(mode="json")),
        base.replace(arm="a", tools=_cfg(tools=none).tools.model_dump(mode="json")),  # a 2nd seed
        base.replace(arm="b", tools=_cfg(tools=TOOLS).tools.model_dump(mode="json")),
        base.replace(arm="c", tools=None),
    ]
    sentence = audit_flag(SandboxConfig(isolation="none"))
    assert [f.as_dict() for f in sandbox_flags(specs)] == [
        {"arm": "a", "item": "sandbox", "reason": sentence}
    ]
    offered = specs[2].tools
    assert tools_reason(None, offered).startswith("only the experiment's reference arm is offered")
    assert "format tags, 1 call turn(s), namespaces" in tools_reason(None, offered)
    assert tools_reason(offered, None).startswith("only this arm is offered")
    assert tools_reason(specs[0].tools, offered).startswith("the code tool differs in sandbox")


def test_a_machine_that_cannot_isolate_refuses_the_run(cli, write_yaml, monkeypatch, tmp_path):
    """Before the warm start, with the sandbox's own sentences; `isolation: none` is named as the
    explicit way out, never taken silently."""

    from sixblanks.harness.tools import sandbox
    from sixblanks.harness.tools.machine import Isolation

    missing = "util-linux's unshare is not on PATH"
    machine = Isolation(None, False, False, "6.1.0", "x86_64", (missing,))
    monkeypatch.setattr(sandbox, "_machine", lambda: machine)
    arms = {"tool": {"preset": "grpo"}}
    exp = write_yaml(json.dumps({**BASE, "tools": TOOLS, "arms": arms}))
    code, _, err = cli("run", exp, "--out", str(tmp_path / "out"))
    assert code == 1
    assert f"sandbox (isolation: namespaces): {missing}" in err
    assert "set isolation: none only for code you trust" in err
    assert not (tmp_path / "out" / "warm_start").exists()


@pytest.mark.slow
def test_the_tools_experiment_shrunk_counts_every_program(run_experiment, cli):
    """experiments/tools.yaml with a smaller policy, a short warm start and two training steps:
    the ledger's tool_calls are the programs the step metrics count by outcome, the text
    arm runs none, and the audit records which arm was offered the tool."""

    cfg = yaml.safe_load((ROOT / "experiments" / "tools.yaml").read_text())
    rollout = {**cfg["rollout"], "group_size": 4, "prompts_per_step": 4}
    per_step = rollout["group_size"] * rollout["prompts_per_step"]
    small = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128}
    cfg.update(
        seeds=[0],
        model={"tiny": small},
        rollout=rollout,
        # enough for this policy to write calls that parse (a few dozen in the run)
        warm_start={"steps": 40, "num_demos": 32, "lr": 1e-2},
        budget={"optimizer_steps": 8},  # two steps of 4 minibatches each, for either arm
        eval={"size": 8, "every": None},
    )
    out = run_experiment(cfg)
    rows = query(
        out,
        "select r.arm, max(l.tool_calls), max(l.tool_seconds), max(l.rollouts_launched), "
        "count(*) from ledger l join runs r using (run_id) group by r.arm order by r.arm",
    )
    (text, calls0, secs0, _, _), (tool, calls, secs, episodes, steps) = rows
    assert (text, tool) == ("text", "tool") and calls0 == secs0 == 0.0
    assert steps == 2 and episodes == 2 * per_step and 0 < calls <= episodes and secs > 0
    metrics = dict(
        query(
            out,
            "select m.name, sum(m.value) from metrics m join runs r using (run_id) "
            "where r.arm = 'tool' and m.name like 'tools.%' group by m.name",
        )
    )
    ran = ("ok", "error", "timeout", "killed", "output_limit", "refused")
    assert metrics["tools.calls"] == calls == sum(metrics[f"tools.{k}"] for k in ran)
    assert metrics["tools.seconds"] == pytest.approx(secs)
    assert not query(
        out,
        "select 1 from metrics m join runs r using (run_id) "
        "where r.arm = 'text' and m.name like 'tools.%'",
    )
    flags = json.loads((out / "fairness.json").read_text())["flags"]
    assert [f["arm"] for f in flags if f["item"] == "tools"] == ["text"]
    _eval_offers_the_tool_as_the_run_trained(out, cli)


def _eval_offers_the_tool_as_the_run_trained(out, cli):
    """`sixblanks eval` of the tool arm's policy replays the run's last evaluation (greedy, the
    same held-out problems): the same score and the same programs, the tool offered as the arm
    was; --no-tools scores it without the tool, and --tools on the text arm is refused."""

    runs = {json.loads(p.read_text())["arm"]: p.parent for p in out.glob("runs/*/spec.json")}
    last = [json.loads(line) for line in (runs["tool"] / "events.jsonl").read_text().splitlines()]
    last = [e for e in last if e["type"] == "eval"][-1]

    def evaluate(arm: str, *flags: str):
        code, text, err = cli("eval", str(runs[arm]), "--n", "8", "--json", *flags)
        return code, text + err

    code, text = evaluate("tool")
    assert code == 0, text
    ev = json.loads(text)
    assert (ev["score"], ev["n"]) == (last["score"], last["n"])
    assert ev["tool_calls"] == last["cost"]["tool_calls"]
    code, text = evaluate("tool", "--no-tools")
    assert code == 0 and "tool_calls" not in json.loads(text)
    code, text = evaluate("text", "--tools")
    assert code == 2 and "the run's arm was not offered it" in text
