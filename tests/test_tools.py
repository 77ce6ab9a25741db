"""The code tool in the agent loop: calls parsed from a turn (the tag and the tool_call formats),
run in the sandbox and answered as the next observation, each program charged (tool_calls,
tool_seconds) and counted by outcome, the calls of one turn run on rollout.env_workers threads with
exact counts, the task wrapper that keeps the task's instances and verifier, and the warm start's
demonstrations with and without the tool. The configuration, the audit and a run through the
harness are in tests/test_tools_runs.py."""

from __future__ import annotations

import re
import time

import pytest

from sixblanks.harness.rollout.agent import run_episodes
from sixblanks.harness.rollout.engine import Generation, SamplingParams
from sixblanks.harness.tasks import make_task
from sixblanks.harness.tasks.tooled import ToolTask, with_tools
from sixblanks.harness.tasks.verify import VerifierGate
from sixblanks.harness.tools.calls import call_text, parse_turn, resolve_format
from sixblanks.harness.tools.config import ToolsConfig
from sixblanks.harness.tools.limits import SandboxConfig
from sixblanks.harness.tools.toolbox import Toolbox, tally

# --------------------------------------------------------------------------- parsing


def test_tag_calls_are_parsed_by_hand():
    one = parse_turn("<code>print(347*28)</code>\n", "tags", 1)
    assert one.is_call and one.programs == ["print(347*28)"] and one.failures == []
    assert not parse_turn("9716\n", "tags", 1).is_call  # an answer: no call opened
    two = parse_turn("<code>a=1</code> and <code>print(2)</code>", "tags", 2)
    assert two.programs == ["a=1", "print(2)"] and two.order == [("run", 0), ("run", 1)]
    over = parse_turn("<code>a=1</code><code>b=2</code><code>c=3</code>", "tags", 2)
    assert over.programs == ["a=1", "b=2"] and [r for r, _ in over.failures] == ["too_many"]
    cut = parse_turn("<code>print(347*2", "tags", 1)  # cut off at the token limit
    assert cut.is_call and cut.programs == [] and [r for r, _ in cut.failures] == ["unclosed"]
    empty = parse_turn("<code>  </code>", "tags", 1)
    assert [r for r, _ in empty.failures] == ["empty"]


def test_tool_call_blocks_are_parsed_by_hand():
    ok = '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    assert parse_turn(ok, "tool_call", 1).programs == ["print(1)"]
    as_string = (
        '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(2)\\"}"}</tool_call>'
    )
    assert parse_turn(as_string, "tool_call", 1).programs == ["print(2)"]
    cases = {
        "<tool_call>{not json}</tool_call>": "bad_json",
        '<tool_call>{"name": "search", "arguments": {"code": "x"}}</tool_call>': "unknown_tool",
        '<tool_call>{"name": "python", "arguments": {"src": "x"}}</tool_call>': "no_code",
        '<tool_call>["python"]</tool_call>': "bad_json",
        '<tool_call>{"name": "python"': "unclosed",
    }
    for text, reason in cases.items():
        parsed = parse_turn(text, "tool_call", 1)
        assert parsed.is_call and [r for r, _ in parsed.failures] == [reason], text
    # a demonstration's call parses back to its code, in either format
    for fmt in ("tags", "tool_call"):
        code = 'print("a\\nb", 3 * 4)'
        assert parse_turn(call_text(fmt, code), fmt, 1).programs == [code]


def test_auto_format_follows_the_chat_template():
    class Tok:
        chat_template = "{% for m in messages %}<tool_call>{{ m }}</tool_call>{% endfor %}"

    assert resolve_format("auto", Tok()) == "tool_call"
    Tok.chat_template = "{{ messages }}"
    assert resolve_format("auto", Tok()) == "tags"
    assert resolve_format("auto", None) == "tags"
    with pytest.raises(ValueError, match="valid: auto, tags, tool_call"):
        resolve_format("xml", None)


# --------------------------------------------------------------------------- one tool turn


def test_a_tool_turn_runs_each_call_and_reports_each_outcome():
    box = Toolbox(ToolsConfig(calls_per_turn=3, sandbox=SandboxConfig(timeout_seconds=1)))
    turn = box.turn("<code>print(6*7)</code><code>1/0</code><code>x</code>")
    assert turn.is_call
    assert turn.observation == (
        "42\nerror: ZeroDivisionError: division by zero\n"
        "error: NameError: name 'x' is not defined\n"
    )
    assert [o for o, _ in turn.records] == ["ok", "error", "error"]
    assert all(s > 0 for _, s in turn.records)
    slow = box.turn("<code>import time; time.sleep(5)</code><code>print(1</code")
    assert [o for o, _ in slow.records] == ["timeout", "parse_unclosed"]
    assert slow.observation == (
        "timeout: stopped after 1 s of wall-clock time\n"
        "parse error: <code> is not closed by </code>\n"
    )
    assert 1.0 <= slow.records[0][1] < 5.0 and slow.records[1][1] == 0.0
    assert not box.turn("42").is_call
    long = Toolbox(ToolsConfig(observation_chars=20)).turn("<code>print('7' * 100)</code>")
    assert long.observation == "7" * 17 + "...\n"


def test_tally_counts_records_by_outcome():
    counts = tally([[("ok", 0.25), ("parse_unclosed", 0.0)], [], [("timeout", 1.5)]])
    assert counts["calls"] == 2 and counts["seconds"] == 1.75
    assert counts["ok"] == counts["timeout"] == counts["parse_unclosed"] == 1
    assert counts["error"] == 0


# --------------------------------------------------------------------------- the agent loop


class Script:
    """A rollout engine that answers each episode's turns from a script keyed by its expression
    (``347*28``): turn k gets ``script[expr][k]``, ending with ``finish`` ("stop" or "eos")."""

    policy_version = 0

    def __init__(self, tok, script: dict[str, list[str]], finish: str = "stop"):
        self.tok, self.script, self.finish = tok, script, finish
        self.turns: dict[str, int] = {}

    def generate(self, prompts, params, n=1, generator=None):
        out = []
        for ids in prompts:
            expr = re.search(r"(\d+[*+-]\d+)=", self.tok.decode(ids)).group(1)
            k = self.turns.get(expr, 0)
            self.turns[expr] = k + 1
            text = self.script[expr][k]
            t = self.tok(text, add_special_tokens=False)["input_ids"]
            out.append([Generation(t, [-0.1] * len(t), self.finish, text)])
        return out


@pytest.fixture(scope="module")
def arith():
    from sixblanks.harness.config import ModelConfig
    from sixblanks.harness.models import load_policy

    task = make_task("long_arithmetic", {"min_digits": 2, "max_digits": 4})
    _, tok = load_policy(ModelConfig(), [task])
    return task, tok


def _play(arith, script, tools: ToolsConfig, finish="stop", workers=1):
    """The episodes of seeds 0.. (one each, in the script's order: it is made by :func:`_exprs`)
    with the tool of ``tools``, played by the script."""

    task, tok = arith
    tooled = with_tools(task, tools, tok)
    instances = task.instances(list(range(len(script))))
    gate = VerifierGate(tooled)
    engine = Script(tok, script, finish)
    params = SamplingParams(temperature=1.0, max_new_tokens=40, env_workers=workers)
    batch = run_episodes(engine, tok, tooled, instances, 1, params, gate, max_context_tokens=256)
    return batch, gate, instances


def _exprs(task, n: int) -> list[tuple[str, int]]:
    """(expression, answer) of the instances of seeds 0 to n - 1."""

    out = [task.make_instance(s).data for s in range(n)]
    assert len({d["expr"] for d in out}) == n  # the script is keyed by expression
    return [(d["expr"], d["answer"]) for d in out]


def test_an_episode_calls_the_tool_then_answers(arith):
    task, _ = arith
    (e1, a1), (e2, a2), (e3, a3) = _exprs(task, 3)
    script = {
        e1: [f"<code>print({e1})</code>\n", f"{a1}\n"],  # calls, reads, answers right
        e2: [f"{a2}\n"],  # answers at once, right: no tool turn
        e3: ["<code>print(1</code\n", f"{a3 + 1}\n"],  # a call that does not parse, then wrong
    }
    batch, gate, instances = _play(arith, script, ToolsConfig(max_calls=2))
    assert batch.reward.tolist() == [1.0, 1.0, 0.0]
    assert batch.n_turns.tolist() == [2, 1, 2]
    assert batch.observations[0] == ["tool: python in <code></code>\n" + f"{e1}=", f"{a1}\n"]
    assert batch.observations[2][1] == "parse error: <code> is not closed by </code>\n"
    assert [[o for o, _ in log] for log in batch.tool_log] == [["ok"], [], ["parse_unclosed"]]
    assert gate.stats.calls == 3  # one verifier call per answer, none for a tool turn
    assert batch.turn_rewards[0].tolist() == [0.0, 1.0]  # the tool turn earns nothing


def test_a_call_after_the_tool_turns_are_spent_is_the_graded_answer(arith):
    task, _ = arith
    ((e1, a1),) = _exprs(task, 1)
    script = {e1: [f"<code>print({e1})</code>\n", f"<code>print({e1})</code>\n", f"{a1}\n"]}
    batch, gate, _ = _play(arith, script, ToolsConfig(max_calls=1))
    assert batch.n_turns.tolist() == [2] and batch.reward.tolist() == [0.0]
    assert [o for o, _ in batch.tool_log[0]] == ["ok"] and gate.stats.calls == 1


def test_a_chat_turn_that_ends_with_eos_after_a_call_goes_on(arith):
    """A chat model closes every turn with its end token: after a tool call the episode goes on
    (without a tool, an end token ends it, as before)."""

    task, _ = arith
    ((e1, a1),) = _exprs(task, 1)
    script = {e1: [f"<code>print({e1})</code>", f"{a1}"]}
    batch, _, _ = _play(arith, script, ToolsConfig(max_calls=1), finish="eos")
    assert batch.n_turns.tolist() == [2] and batch.reward.tolist() == [1.0]


def test_calls_of_one_turn_run_in_parallel_and_are_counted_exactly(arith):
    """Twelve episodes' calls in one turn on four threads: each program sleeps 0.4 s, so one after
    another they would take 4.8 s; the counts by outcome are exactly the script's."""

    task, _ = arith
    exprs = _exprs(task, 12)
    kinds = ["ok"] * 6 + ["error"] * 3 + ["timeout"] * 1 + ["parse_unclosed"] * 2
    code = {
        "ok": "import time; time.sleep(0.4); print({v})",
        "error": "import time; time.sleep(0.4); raise SystemExit(3)",
        "timeout": "import time; time.sleep(10)",
    }
    script = {}
    for (e, a), kind in zip(exprs, kinds):
        call = (
            "<code>print(1\n"
            if kind == "parse_unclosed"
            else f"<code>{code[kind].format(v=a)}</code>\n"
        )
        script[e] = [call, f"{a}\n"]
    tools = ToolsConfig(max_calls=1, sandbox=SandboxConfig(timeout_seconds=1.5))
    t0 = time.perf_counter()
    batch, gate, _ = _play(arith, script, tools, workers=4)
    elapsed = time.perf_counter() - t0
    counts = tally(batch.tool_log)
    assert {k: counts[k] for k in ("ok", "error", "timeout", "parse_unclosed")} == {
        "ok": 6,
        "error": 3,
        "timeout": 1,
        "parse_unclosed": 2,
    }
    assert counts["calls"] == 10 and gate.stats.calls == 12
    serial = sum(s for log in batch.tool_log for _, s in log)
    assert serial > 0.4 * 9 + 1.5  # what one thread would have waited
    assert elapsed < 0.75 * serial, (elapsed, serial)
    # every episode answered right after its call, whatever the call did
    assert batch.reward.tolist() == [1.0] * 12

    from sixblanks.harness.training.context import tool_cost

    assert tool_cost([batch]) == {"tool_calls": 10.0, "tool_seconds": pytest.approx(serial)}
    # a call that did not parse runs no program; a batch without any call charges nothing
    assert tool_cost([batch.select([10])]) == {"tool_calls": 0.0, "tool_seconds": 0.0}
    assert tool_cost([batch.select([1])]) == {
        "tool_calls": 1.0,
        "tool_seconds": pytest.approx(batch.tool_log[1][0][1]),
    }
    tok = arith[1]
    untooled = Script(tok, {e: [f"{a}\n"] for e, a in exprs[:2]})
    plain = run_episodes(untooled, tok, task, task.instances([0, 1]), 1, SamplingParams())
    assert plain.reward.tolist() == [1.0, 1.0] and tool_cost([plain]) == {}


# --------------------------------------------------------------------------- the wrapper


def test_the_wrapper_keeps_the_tasks_instances_split_and_verifier(arith):
    task, tok = arith
    tooled = with_tools(task, ToolsConfig(max_calls=3), tok)
    assert isinstance(tooled, ToolTask) and tooled.name == task.name
    assert tooled.max_turns == task.max_turns + 3 and tooled.multi_turn
    assert [i.seed for i in tooled.eval_instances(16)] == [i.seed for i in task.eval_instances(16)]
    assert all(tooled.trains_on(s) == task.trains_on(s) for s in range(200))
    inst = task.make_instance(5)
    assert tooled.problem_key(inst) == task.problem_key(inst) == inst.data["expr"]
    assert tooled.verify(inst, f"{inst.data['answer']}\n") == 1.0
    assert tooled.space_size() == task.space_size()
    assert with_tools(task, None, tok) is task


def test_demonstrations_with_and_without_the_tool(arith):
    """The warm start's two kinds: where the tool is announced, a call then the answer; where it
    is not, the answer alone; both right, each program and verifier call counted."""

    from sixblanks.harness.training.collectors.demonstrations import demonstration_pool

    task, tok = arith
    seeds = [s for s in range(40) if task.trains_on(s)][:6]
    tooled = with_tools(task, ToolsConfig(max_calls=1), tok)
    batch, cost = demonstration_pool(tooled, tok, seeds, 192, env_workers=2)
    inst = task.make_instance(seeds[0])
    assert batch.actions[0] == [
        f"<code>print({inst.data['expr']})</code>\n",
        f"{inst.data['answer']}\n",
    ]
    assert batch.observations[0][1] == f"{inst.data['answer']}\n"  # the sandbox's output
    assert batch.reward.tolist() == [1.0] * 6
    assert cost["tool_calls"] == 6 and cost["verifier_calls"] == 6 and cost["env_steps"] == 12
    plain, plain_cost = demonstration_pool(task, tok, seeds, 192)
    assert plain.actions[0] == [f"{inst.data['answer']}\n"] and plain.reward.tolist() == [1.0] * 6
    assert "tool_calls" not in plain_cost and plain_cost["env_steps"] == 6


# --------------------------------------------------------------------------- the task


def test_long_arithmetic_by_hand():
    """Operands of 1 to 4 digits, each digit count equally likely; the answer and the difficulty
    (the operands' digits) recomputed from the prompt; 10^8 products at the defaults."""

    task = make_task("long_arithmetic", {})
    assert task.space_size() == (10 + 90 + 900 + 9000) ** 2
    counts = {d: 0 for d in range(1, 5)}
    for seed in range(2000):
        inst = task.make_instance(seed)
        a, b = inst.prompt.removesuffix("=").split("*")
        assert inst.data["answer"] == int(a) * int(b)
        assert inst.difficulty == len(a) + len(b)
        counts[len(a)] += 1
    assert all(abs(c / 2000 - 0.25) < 0.04 for c in counts.values()), counts
    inst = task.make_instance(7)
    assert task.oracle(inst, [inst.prompt]) == f"{inst.data['answer']}\n"
    assert task.tool_oracle(inst, [inst.prompt]) == ("code", f"print({inst.data['expr']})")
    after = [inst.prompt, f"{inst.data['answer']}\n"]
    assert task.tool_oracle(inst, after) == ("answer", f"{inst.data['answer']}\n")
    assert task.verify(inst, f" {inst.data['answer']}\n") == 1.0
    assert task.verify(inst, f"{inst.data['answer'] + 1}") == 0.0
    mixed = make_task("long_arithmetic", {"min_digits": 2, "max_digits": 2, "operators": "*+"})
    space = list(mixed.problem_space())
    assert len(space) == len(set(space)) == mixed.space_size() == 90 * 90 * 2
    with pytest.raises(ValueError, match="max_digits: must be >= min_digits"):
        make_task("long_arithmetic", {"min_digits": 3, "max_digits": 2})
    with pytest.raises(ValueError, match="unsupported operator"):
        make_task("long_arithmetic", {"operators": "*/"})


# ------------------------------------------------------- a chat template that declares the tool

DECLARES = (
    "{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }}: "
    "{{ t['function']['description'] }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[end]\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)
IGNORES = DECLARES.split("{% endif %}", 1)[1]  # the same template without the declaration


def test_a_template_that_declares_tools_carries_the_tool_instead_of_the_announcement(arith):
    """Where the chat template renders tools= (the tool_call format), the prompt is the template's
    rendering with the code tool declared, and no announcement text is added; a template that
    ignores tools=, and the tags format, keep the announcement."""

    import copy

    from sixblanks.harness.rollout.agent import encode_observation
    from sixblanks.harness.tools.calls import TOOL_SCHEMA, template_declares

    task, tok = arith
    declaring, ignoring = copy.deepcopy(tok), copy.deepcopy(tok)
    declaring.chat_template, ignoring.chat_template = DECLARES, IGNORES
    assert template_declares(declaring) and not template_declares(ignoring)
    assert not template_declares(tok)  # no template at all
    call = ToolsConfig(format="tool_call")
    box = Toolbox(call, declaring)
    assert box.chat_tools == (TOOL_SCHEMA,) and box.announce == ""
    assert Toolbox(call, ignoring).chat_tools == () and Toolbox(call, ignoring).announce
    assert Toolbox(ToolsConfig(format="tags"), declaring).chat_tools == ()
    # the prompt's tokens: the template's own rendering of the user message with the tool
    tooled = with_tools(task, call, declaring)
    env = tooled.make_env(task.make_instance(0), VerifierGate(tooled))
    prompt, _ = env.reset()
    assert prompt == task.make_env(task.make_instance(0), VerifierGate(task)).reset()[0]
    rendered = declaring.apply_chat_template(
        [{"role": "user", "content": prompt}],
        tools=[TOOL_SCHEMA],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered.startswith("<tools>python: Run a Python program")
    want = declaring(rendered, add_special_tokens=False)["input_ids"]
    assert encode_observation(declaring, prompt, True, tooled) == want
    assert encode_observation(declaring, prompt, True, task) != want  # without the tool
