"""``gymnasium:<env id>``: a Gymnasium environment with discrete actions as a multi-turn text task
(the toy-text ones run as they are: ``FrozenLake-v1``, ``Taxi-v4``, ``CliffWalking-v1``,
``Blackjack-v1``; a user's registered environment the same way).

Each instance is the environment reset at the instance's seed. What the policy reads is the
environment's text rendering (its ``ansi`` render mode; a highlighted cell, the agent's place, is
shown as ``@``) or, for an environment without one, its observation written out (``14 10 0``);
the first observation follows a line naming the actions. Each turn the policy writes one action, an
index (``2``) or one of the names given (``right``); an action it cannot read is not taken (the
observation says so, reward 0). The environment's own reward is the reward, and each step goes
through the verifier gate, so every environment step is a counted verifier call (timed out,
failed where it raises) under the ledger, as any task's verifier is.

    task: {name: "gymnasium:FrozenLake-v1", params: {kwargs: {is_slippery: false}, max_turns: 12,
           actions: [left, down, right, up]}}
"""

from __future__ import annotations

import dataclasses
import re
import string
from typing import Any, Literal

from pydantic import Field

from .base import Env, Instance, StepResult, Task, TaskParams

INSTALL_HINT = "pip install 'sixblanks[gym]' (or gymnasium)"
_SGR = re.compile(r"\x1b\[([0-9;]*)m")


class GymParams(TaskParams):
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of gymnasium.make (FrozenLake's is_slippery, map_name).",
    )
    max_turns: int = Field(20, ge=1, le=1000, description="Actions an episode may take.")
    observation: Literal["auto", "render", "state", "both"] = Field(
        "auto",
        description="render: the environment's ansi text (colours dropped, a highlighted cell "
        "shown as @); state: its observation written out; both: the text, then a line 'state "
        "...' (for an environment that shows something by colour alone: Taxi's passenger and "
        "destination); auto: render where the environment has an ansi mode.",
    )
    actions: list[str] | None = Field(
        None,
        description="Names of the discrete actions, in order (the policy may write a name or an "
        "index); None: indices only.",
    )
    split: Literal["seed", "observation"] = Field(
        "seed",
        description="What a problem is for the held-out split: seed, every seed its own (held-out "
        "episodes are other seeds of the environment's randomness: FrozenLake's one map); "
        "observation, the first observation's state (Taxi's 300 starts: a held-out start is never "
        "trained on; refused where the environment starts in too few states to hold any out).",
    )


def plain_text(text: str) -> str:
    """An ansi rendering as plain text: every highlighted character (a background colour, where
    toy-text environments mark the agent) becomes ``@``; other colours are dropped."""

    out, lit, pos = [], False, 0
    for m in _SGR.finditer(text):
        chunk = text[pos : m.start()]
        out.append("@" * len(chunk) if lit else chunk)
        for code in (int(c) if c else 0 for c in m.group(1).split(";")):
            if code in (0, 49):
                lit = False
            elif 40 <= code <= 47 or 100 <= code <= 107:
                lit = True
        pos = m.end()
    tail = text[pos:]
    out.append("@" * len(tail) if lit else tail)
    return "".join(out)


def state_text(obs: Any) -> str:
    """An observation written out: numbers separated by spaces (a tuple, an array), else its str."""

    if hasattr(obs, "tolist"):
        obs = obs.tolist()
    if isinstance(obs, (tuple, list)):
        return " ".join(state_text(x) for x in obs)
    if isinstance(obs, bool):
        return str(int(obs))
    return str(obs)


class GymEnv(Env):
    """One episode of the Gymnasium environment; each step is taken inside the verifier gate."""

    task: GymTask

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.turn = 0
        self.env = self.task.make_gym()
        obs, info = self.env.reset(seed=self.instance.seed if seed is None else seed)
        self.state = state_text(obs)
        self.outcome: tuple[str, bool, bool] | None = None
        # the gate passes this episode's own instance to the task's verify, which steps it
        self.handle = dataclasses.replace(self.instance, data={**self.instance.data, "env": self})
        return self.task.prompt(self.task.text(self.env, obs)), dict(info)

    def step(self, action: str) -> StepResult:
        self.turn += 1
        reward = self.verify(self.handle, action)  # the gym step: counted, timed, isolated
        text, terminated, truncated = self.outcome
        return StepResult(text, reward, terminated, truncated, {"turn": self.turn})

    def state_key(self) -> str:
        """The environment's observation now (a toy-text state: its cell, its position): episodes
        that reach it the same way or not share it."""

        return self.state

    def act(self, action: str) -> float:
        """Take ``action`` (the policy's text) in the environment; its reward. An action that does
        not parse is not taken: reward 0, and the observation says what is valid."""

        index = self.task.parse_action(action)
        if index is None:
            self.outcome = (
                f"invalid action; write one of {self.task.valid_actions()}\n",
                False,
                False,
            )
            return 0.0
        obs, reward, terminated, truncated, _ = self.env.step(index)
        self.state = state_text(obs)
        self.outcome = (self.task.text(self.env, obs), bool(terminated), bool(truncated))
        return float(reward)


class GymTask(Task):
    """A Gymnasium environment as a task (see the module); no oracle (no warm start from it)."""

    Params = GymParams
    multi_turn = True
    env_state_keys = True
    params: GymParams

    def __init__(self, env_id: str, params: dict[str, Any] | TaskParams | None = None):
        super().__init__(params)
        self.env_id = env_id
        self.name = f"gymnasium:{env_id}"  # type: ignore[misc]
        try:  # bad kwargs fail here, at validate
            raw = self._make()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"kwargs: gymnasium.make('{env_id}') refused them: {exc}") from None
        space, modes = raw.action_space, raw.metadata.get("render_modes", [])
        if not hasattr(space, "n"):
            raise ValueError(
                f"{env_id}: its action space {space} is not discrete; only Discrete(n) "
                "environments are supported as text tasks"
            )
        self.n_actions, self.start = int(space.n), int(getattr(space, "start", 0))
        names = self.params.actions
        if names is not None and len(names) != self.n_actions:
            raise ValueError(f"actions: {len(names)} name(s) for {self.n_actions} actions")
        mode = self.params.observation
        if mode in ("render", "both") and "ansi" not in modes:
            raise ValueError(f"observation: {mode} needs an ansi render mode ({env_id}: {modes})")
        self.renders = mode in ("render", "both") or (mode == "auto" and "ansi" in modes)
        self._probe = self.make_gym()  # makes the instances (their first observations)

    @property
    def max_turns(self) -> int:
        return self.params.max_turns

    def _make(self, **extra):
        try:
            import gymnasium
        except ImportError as exc:
            raise ImportError(f"gymnasium is not installed: {INSTALL_HINT}") from exc
        kw = {**self.params.kwargs, **extra}
        return gymnasium.make(self.env_id, disable_env_checker=True, **kw)

    def make_gym(self):
        """A new environment of the task (an episode's own)."""

        return self._make(render_mode="ansi") if self.renders else self._make()

    def text(self, env, obs: Any) -> str:
        body = plain_text(env.render()).strip("\n") if self.renders else state_text(obs)
        if self.params.observation == "both":
            body += f"\nstate {state_text(obs)}"
        return body + "\n"

    def prompt(self, first: str) -> str:
        return f"{self.env_id} actions {self.valid_actions()}\n{first}"

    def valid_actions(self) -> str:
        names = self.params.actions
        idx = range(self.start, self.start + self.n_actions)
        return " ".join(f"{i}={n}" for i, n in zip(idx, names)) if names else f"{idx[0]}-{idx[-1]}"

    def parse_action(self, text: str) -> int | None:
        word = text.strip().lower()
        names = [n.lower() for n in self.params.actions or []]
        if word in names:
            return self.start + names.index(word)
        if re.fullmatch(r"-?\d+", word) and 0 <= int(word) - self.start < self.n_actions:
            return int(word)
        return None

    def make_instance(self, seed: int) -> Instance:
        obs, _ = self._probe.reset(seed=seed)
        return Instance(seed, self.prompt(self.text(self._probe, obs)), {"state": state_text(obs)})

    def problem_key(self, instance: Instance):
        """The first observation's state, written out (``split: observation``: Taxi's start, with
        its passenger and destination), or None: every seed its own problem (``split: seed``)."""

        return instance.data["state"] if self.params.split == "observation" else None

    def preflight(self) -> list[str]:
        """With ``split: observation``, each held-out split holds a start state (the walk of the
        held-out seeds finds one)."""

        if self.params.split != "observation":
            return []
        empty = [s for s in ("test", "validation") if not self.heldout_seeds(1, s)]
        if not empty:
            return []
        return [
            f"params.split: observation, but no start state of {self.env_id} falls in the "
            f"{' and '.join(empty)} split: it starts in too few states to hold one out; use "
            "split: seed"
        ]

    def make_env(self, instance: Instance, verify) -> Env:
        return GymEnv(self, instance, verify)

    def verify(self, instance: Instance, response: str) -> float:
        """The environment's reward for ``response`` as its next action: ``instance`` is the
        episode's own (its environment in ``data["env"]``), so this call takes the step."""

        episode = instance.data.get("env")
        if episode is None:
            raise ValueError(f"{self.name}: a reward is the environment's, for an episode's step")
        return episode.act(response)

    def alphabet(self) -> str:
        return string.printable


class GymUnavailable(LookupError):
    """gymnasium is not installed, or does not know the environment id (the registry raises it as
    a TaskLoadError)."""


def gym_task(env_id: str, params: dict[str, Any] | None) -> GymTask:
    """The task of ``gymnasium:<env_id>``; GymUnavailable where gymnasium is missing or does not
    know the id (with the ids it knows, the close ones first)."""

    try:
        import gymnasium
    except ImportError:
        raise GymUnavailable(
            f"task 'gymnasium:{env_id}': gymnasium is not installed: {INSTALL_HINT}"
        ) from None
    if env_id not in gymnasium.registry:
        from ..errors import unknown_name

        raise GymUnavailable(
            unknown_name("gymnasium environment", env_id, sorted(gymnasium.registry))
        )
    return GymTask(env_id, params)
