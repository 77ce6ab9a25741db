"""Tool calls in a policy's turn: parsed from its text in one of two formats, and their results
written back as the environment's observation.

``tags`` (for small policies that learn the format from demonstrations)::

    <code>print(347*28)</code>

``tool_call`` (the Hermes/Qwen form many chat templates render; the arguments may also be a JSON
string, as OpenAI-style calls write them)::

    <tool_call>{"name": "python", "arguments": {"code": "print(347*28)"}}</tool_call>

A turn that opens a call is a tool turn, whether or not the call parses; a turn that opens none is
the policy's answer. A call that does not parse is not run: it is a parse failure with a reason
(:data:`PARSE_FAILURES`), reported back to the policy as its observation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .limits import SandboxResult

FORMATS = ("tags", "tool_call")
TOOL_NAME = "python"
"""The code tool's name in the ``tool_call`` format."""
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run a Python program in a sandbox; what it prints comes back.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The program."}},
            "required": ["code"],
        },
    },
}
"""The code tool as a chat template's ``tools=`` declares it (the JSON-schema function form that
templates trained on tool calls render)."""

PARSE_FAILURES = ("unclosed", "empty", "bad_json", "unknown_tool", "no_code", "too_many")
"""Why a call was not run: its opening tag has no closing tag (a turn cut off at the token limit);
its code is empty; its JSON does not parse (``tool_call``); it names another tool than
:data:`TOOL_NAME`; its arguments hold no ``code`` string; the turn made more calls than
``calls_per_turn`` (the extra ones)."""

_TAGS = {"tags": ("<code>", "</code>"), "tool_call": ("<tool_call>", "</tool_call>")}


@dataclass
class ParsedTurn:
    """One turn's calls: the programs to run and the failures, in the order they were written
    (``order``: ``("run", i)`` or ``("failed", i)``), and whether the turn opened any call."""

    programs: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    """(reason, a sentence for the policy) of each call that does not run."""
    order: list[tuple[str, int]] = field(default_factory=list)

    @property
    def is_call(self) -> bool:
        return bool(self.order)

    def add_program(self, code: str) -> None:
        self.order.append(("run", len(self.programs)))
        self.programs.append(code)

    def add_failure(self, reason: str, message: str) -> None:
        self.order.append(("failed", len(self.failures)))
        self.failures.append((reason, message))


def resolve_format(fmt: str, tokenizer=None) -> str:
    """``tags`` or ``tool_call``; ``auto``: ``tool_call`` where the tokenizer's chat template
    renders ``<tool_call>`` blocks (it was trained on them), else ``tags``."""

    if fmt in FORMATS:
        return fmt
    if fmt != "auto":
        raise ValueError(f"unknown tool call format '{fmt}' (valid: auto, {', '.join(FORMATS)})")
    template = getattr(tokenizer, "chat_template", None) or ""
    return "tool_call" if "<tool_call>" in template else "tags"


def template_declares(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a ``tools=`` declaration: a conversation
    rendered with :data:`TOOL_SCHEMA` names the tool where the same one rendered without it does
    not (a template that ignores ``tools`` renders both alike)."""

    if not getattr(tokenizer, "chat_template", None):
        return False
    msgs = [{"role": "user", "content": "?"}]

    def render(**kw) -> str:
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)

    plain, with_tool = render(), render(tools=[TOOL_SCHEMA])
    return with_tool != plain and TOOL_NAME in with_tool.replace(plain, "", 1)


def call_text(fmt: str, code: str) -> str:
    """The text of one call of ``code`` in ``fmt`` (what a demonstration writes)."""

    if fmt == "tags":
        return f"<code>{code}</code>"
    payload = {"name": TOOL_NAME, "arguments": {"code": code}}
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


def parse_turn(text: str, fmt: str, calls_per_turn: int) -> ParsedTurn:
    """The calls ``text`` makes in ``fmt`` (``tags`` or ``tool_call``); at most ``calls_per_turn``
    are kept, each one past that is a ``too_many`` failure."""

    opening, closing = _TAGS[fmt]
    out, pos = ParsedTurn(), 0
    while (start := text.find(opening, pos)) >= 0:
        body_at = start + len(opening)
        end = text.find(closing, body_at)
        if end < 0:
            out.add_failure("unclosed", f"{opening} is not closed by {closing}")
            break
        pos = end + len(closing)
        if len(out.order) >= calls_per_turn:
            out.add_failure("too_many", f"more than {calls_per_turn} call(s) in one turn")
            continue
        body = text[body_at:end]
        code, failure = (body, None) if fmt == "tags" else _json_code(body)
        if failure is None and not code.strip():
            failure = ("empty", "the call holds no code")
        if failure is None:
            out.add_program(code)
        else:
            out.add_failure(*failure)
    return out


def _json_code(body: str) -> tuple[str, tuple[str, str] | None]:
    """The code of a ``tool_call`` body, or the reason it has none."""

    try:
        call = json.loads(body)
    except ValueError as exc:
        return "", ("bad_json", f"the call is not valid JSON ({exc.msg})")
    if not isinstance(call, dict):
        return "", ("bad_json", "the call is not a JSON object")
    if call.get("name") != TOOL_NAME:
        return "", ("unknown_tool", f"unknown tool {call.get('name')!r} (tools: {TOOL_NAME})")
    args = call.get("arguments", call.get("parameters"))
    if isinstance(args, str):  # OpenAI-style: the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    code = args.get("code") if isinstance(args, dict) else None
    if not isinstance(code, str):
        return "", ("no_code", 'the arguments hold no "code" string')
    return code, None


def result_text(result: SandboxResult) -> str:
    """What the policy reads of one run: its output where it succeeded, else how it ended (an
    error's last line of stderr: ``error: ZeroDivisionError: division by zero``)."""

    if result.reason == "ok":
        return result.stdout if result.stdout.strip() else "(no output)"
    if result.reason == "error":
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        return f"error: {lines[-1].strip() if lines else result.detail}"
    return f"{result.reason}: {result.detail}"


def observation(texts: list[str], limit: int) -> str:
    """The observation of a tool turn: its calls' texts in order, one per line, cut to ``limit``
    characters, ending with a newline (the next turn starts on a line of its own)."""

    text = "\n".join(t.rstrip("\n") for t in texts)
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text + "\n"
