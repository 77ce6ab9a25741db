"""Chat templates in episodes (issue 20, ``rollout.chat_template``): where the tokenizer has a chat
template, the prompt and every observation are user messages rendered by it, so a multi-turn
episode's tokens are the template's rendering of its conversation, action for action."""

from __future__ import annotations

_CHAT_PARTS: dict[tuple[int, str], tuple[str, str, str, str]] = {}


def chat_parts(tokenizer) -> tuple[str, str, str, str]:
    """The template's text (before the prompt; after it, the generation prompt; after an action
    and before the next user text, the turn's close; after that text, the generation prompt),
    found by rendering a conversation of placeholders. A template that does not extend the history
    by appending (one that rewrites earlier turns) is refused."""

    key = (id(tokenizer), tokenizer.chat_template)
    if key in _CHAT_PARTS:
        return _CHAT_PARTS[key]
    P, A, OBS = "\x01prompt\x01", "\x01action\x01", "\x01observation\x01"

    def render(msgs, gen):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)

    user = [{"role": "user", "content": P}]
    s1 = render(user, True)
    s2 = render([*user, {"role": "assistant", "content": A}], False)
    s3 = render(
        [*user, {"role": "assistant", "content": A}, {"role": "user", "content": OBS}], True
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


def chat_observation(tokenizer, text: str, first: bool) -> list[int]:
    """The tokens of the prompt (``first``) or of a later observation, as the template renders them."""

    head, after_prompt, before_obs, after_obs = chat_parts(tokenizer)
    rendered = head + text + after_prompt if first else before_obs + text + after_obs
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]
