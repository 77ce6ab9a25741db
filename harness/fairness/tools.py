"""The fairness audit's items about the code tool: an arm offered it where another is not (the
``tools`` item's reason) and an arm whose tool runs programs without isolation (flag
``sandbox``)."""

from __future__ import annotations

from typing import Any

from ..runspec import RunSpec
from .flag import Flag


def sandbox_flags(specs: list[RunSpec]) -> list[Flag]:
    """An arm whose code tool runs the policy's programs without isolation (``isolation: none``):
    the sandbox's own sentence (:func:`~sixblanks.harness.tools.audit_flag`), one flag per arm."""

    from ..tools import SandboxConfig, audit_flag

    flags, seen = [], set()
    for s in specs:
        if s.arm in seen or not s.tools:
            continue
        seen.add(s.arm)
        sentence = audit_flag(SandboxConfig.model_validate(s.tools.get("sandbox") or {}))
        if sentence is not None:
            flags.append(Flag(s.arm, "sandbox", sentence))
    return flags


def tools_reason(value: Any, ref: Any) -> str:
    """Why an arm's ``tools`` item differs from the experiment's (one of them may be None: no
    tool), in words."""

    def offered(tools: dict[str, Any]) -> str:
        isolation = (tools.get("sandbox") or {}).get("isolation", "namespaces")
        return f"format {tools.get('format')}, {tools.get('max_calls')} call turn(s), {isolation}"

    if value is None or ref is None:
        who, tools = ("this arm", value) if ref is None else ("the experiment's reference arm", ref)
        return (
            f"only {who} is offered the code tool ({offered(tools)}): the arms differ in what "
            "the policy can do, which is the comparison where a claim is about the tool"
        )
    keys = sorted(k for k in set(value) | set(ref) if value.get(k) != ref.get(k))
    return f"the code tool differs in {', '.join(keys)} (this arm: {offered(value)})"
