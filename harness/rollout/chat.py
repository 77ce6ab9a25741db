"""Chat templates in episodes (``rollout.chat_template``): where the tokenizer has a chat
template, the prompt is a user message (after the task's system message, if it has one) and every
later observation a user or tool message (the task's ``observation_role``), rendered by it, so a
multi-turn episode's tokens are the template's rendering of its conversation, action for action."""

from __future__ import annotations

import json

_CHAT_PARTS: dict[tuple, tuple[str, str, str, str]] = {}


def chat_parts(
    tokenizer, system: str | None = None, role: str = "user", tools: list | tuple = ()
) -> tuple[str, str, str, str]:
    """The template's text (before the prompt; after it, the generation prompt; after an action
    and before the next user text, the turn's close; after that text, the generation prompt),
    found by rendering a conversation of placeholders; ``tools``: the tools (JSON-schema function
    specs) the template declares, rendered through its ``tools=`` argument. A template that does
    not extend the history by appending (one that rewrites earlier turns) is refused."""

    key = (id(tokenizer), tokenizer.chat_template, system, role, json.dumps(list(tools)))
    if key in _CHAT_PARTS:
        return _CHAT_PARTS[key]
    P, A, OBS = "\x01prompt\x01", "\x01action\x01", "\x01observation\x01"

    def render(msgs, gen):
        extra = {"tools": list(tools)} if tools else {}
        return tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=gen, **extra
        )

    lead = [{"role": "system", "content": system}] if system else []
    user = [*lead, {"role": "user", "content": P}]
    s1 = render(user, True)
    s2 = render([*user, {"role": "assistant", "content": A}], False)
    s3 = render([*user, {"role": "assistant", "content": A}, {"role": role, "content": OBS}], True)
    if system and system not in s1:
        raise ValueError("the tokenizer's chat template drops the system message (system_prompt)")
    if s3.startswith(s2) and OBS not in s3[len(s2) :]:
        raise ValueError(
            f"the tokenizer's chat template does not render '{role}' messages "
            "(observation_role); use observation_role: user, or a template file that does"
        )
    if not (
        s1.count(P) == 1 and s2.startswith(s1 + A) and s3.startswith(s2) and OBS in s3[len(s2) :]
    ):
        raise ValueError(
            "the tokenizer's chat template does not extend a conversation by appending to it (it "
            "rewrites earlier turns), so multi-turn episodes cannot keep their tokens; use "
            "rollout.chat_template: none, or a template file that appends"
        )
    head, after_prompt = s1.split(P)
    close = s2[len(s1) + len(A) :]
    before_obs, after_obs = s3[len(s2) :].split(OBS)
    _CHAT_PARTS[key] = (head, after_prompt, close + before_obs, after_obs)
    return _CHAT_PARTS[key]


def chat_observation(
    tokenizer,
    text: str,
    first: bool,
    system: str | None = None,
    role: str = "user",
    tools: list | tuple = (),
) -> list[int]:
    """The tokens of the prompt (``first``, after the ``system`` message if any, and the ``tools``
    the template declares) or of a later observation (a ``role`` message), as the template renders
    them."""

    head, after_prompt, before_obs, after_obs = chat_parts(tokenizer, system, role, tools)
    rendered = head + text + after_prompt if first else before_obs + text + after_obs
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]
