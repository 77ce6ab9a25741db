"""The experiment file's ``tools:`` section: the code tool offered to the policy (its call format,
how many calls an episode may make, and the sandbox its programs run in)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .limits import SandboxConfig

ANNOUNCE = {
    "tags": "tool: python in <code></code>\n",
    "tool_call": (
        'You can run Python: write <tool_call>{"name": "python", "arguments": {"code": '
        '"..."}}</tool_call> and its output comes back. Answer when you know.\n'
    ),
}
"""What the policy reads before the prompt where the tool is offered, per format (``announce``
left out). Its absence tells a policy that no tool is there: one warm start serves arms with and
without the tool, answering directly where nothing was announced."""


class ToolsConfig(BaseModel):
    """The code tool: a turn that opens a call runs its program in the sandbox and the episode
    goes on with the program's output as the observation; a turn that opens none is the answer."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    format: Literal["tags", "tool_call", "auto"] = Field(
        "tags",
        description="How a call is written: tags (<code>...</code>, for small policies); tool_call "
        '(<tool_call>{"name": "python", "arguments": {"code": ...}}</tool_call>, the chat '
        "templates' form); auto: tool_call where the tokenizer's chat template renders "
        "<tool_call> blocks, else tags.",
    )
    max_calls: int = Field(
        2,
        ge=1,
        le=16,
        description="Tool turns an episode may take (the task's own turns come on top); after "
        "them the next turn is the answer, whatever it holds.",
    )
    calls_per_turn: int = Field(
        1, ge=1, le=16, description="Calls one turn may make; more are refused (too_many)."
    )
    observation_chars: int = Field(
        256, ge=16, description="Characters of a tool turn's results kept in its observation."
    )
    announce: str | None = Field(
        None,
        description="Text before the prompt saying the tool is there; None: the format's default "
        "(tags: 'tool: python in <code></code>').",
    )
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig,
        description="Where the programs run: isolation and limits (docs/guide/sandbox.md).",
    )

    def announcement(self, fmt: str) -> str:
        """The text before the prompt for the resolved format ``fmt``."""

        return self.announce if self.announce is not None else ANNOUNCE[fmt]
