"""One interface for single-turn verifiable tasks and multi-turn environments.

A task makes deterministic instances from a seed and an environment for each
instance with a Gymnasium-style ``reset(seed)`` / ``step(action)`` on text.
Every reward comes from the task's verifier, and every verifier call goes
through one choke point (:class:`sixblanks.harness.tasks.verify.VerifierGate`) so that it
can be counted, timed out and isolated from exceptions.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..seeds import eval_seeds


class TaskParams(BaseModel):
    """Parameters every task takes: how its text becomes messages (a chat template renders them;
    without one, raw text)."""

    model_config = ConfigDict(extra="forbid")

    file_fields: ClassVar[tuple[str, ...]] = ()
    """Parameters that name a file or directory: a relative one is resolved against the experiment
    file's directory when the file is read, and recorded resolved."""

    system_prompt: str | None = Field(
        None,
        description="A system message before the prompt (with a chat template; without one, this "
        "text and a blank line before the prompt). None: none (the template's own default, if any).",
    )
    observation_role: Literal["user", "tool"] = Field(
        "user",
        description="The chat role of the environment's answers after the prompt: user, or tool "
        "(a tool's output, where the template renders tool messages).",
    )


@dataclass
class Instance:
    """One task instance: what the policy sees first, and what the verifier needs."""

    seed: int
    prompt: str
    data: dict[str, Any] = field(default_factory=dict)
    difficulty: float = 0.0


@dataclass
class StepResult:
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


class Verify(Protocol):
    def __call__(self, instance: Instance, response: str) -> float: ...


@dataclass
class Games:
    """What the evaluated policy's games on a list of instances gave (what a task's
    :meth:`Task.evaluate_apart` gets back from ``play``): per game, in the instances' order, its
    outcome reward and whether it was decided; and what the games cost."""

    rewards: list[float]
    """The outcome reward of each game (its episode's total reward)."""
    decided: list[bool]
    """True where the episode ended in the environment (terminated) and did not fail; False where a
    limit (generation, context) cut it short or it failed."""
    cost: dict[str, float]
    """``generated_tokens``, ``verifier_calls``, ``env_steps`` (counts), ``device_seconds``,
    ``wall_seconds``: counted on the run's evaluation ledger, apart from the training budget."""


class Play(Protocol):
    """``play(label, instances) -> Games``: greedy episodes (temperature 0, one each) of the policy
    being evaluated on ``instances``, reserved and charged to the run's evaluation ledger under
    ``label`` (e.g. ``"selfplay random"``)."""

    def __call__(self, label: str, instances: list[Instance]) -> Games: ...


class Env:
    """Gymnasium-style text environment over one task instance.

    ``reset(seed)`` returns ``(observation, info)``: the first observation is
    the prompt. ``step(action)`` returns a :class:`StepResult`. Rewards must
    come from ``self.verify`` (the counted choke point).
    """

    def __init__(self, task: Task, instance: Instance, verify: Verify):
        self.task, self.instance, self.verify = task, instance, verify
        self.turn = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.turn = 0
        return self.instance.prompt, {}

    def step(self, action: str) -> StepResult:  # single-turn default
        self.turn += 1
        reward = self.verify(self.instance, action)
        return StepResult("", reward, True, False, {})

    def potential(self) -> float | None:
        """Phi of the current state, for potential-based shaping (``data.potential_shaping``);
        None: the task defines no potential."""

        return None

    def snapshot(self) -> Any:
        """The environment's whole state, to :meth:`restore` into another environment of the
        same instance (branching from a turn). None: it cannot; :func:`clone_env` then replays
        the seed and the actions so far."""

        return None

    def restore(self, state: Any) -> None:
        """Take the state :meth:`snapshot` returned. An environment whose ``snapshot()`` returns a
        state must define this; the default ones return None and are replayed instead."""

        raise TypeError(
            f"{type(self).__name__}.snapshot() returned a state but it defines no restore(); "
            "define both, or neither (it is then replayed from its seed and actions)"
        )

    def state_key(self) -> Hashable | None:
        """The environment's state now (before the next action), as a hashable value: episodes in
        the same state have the same key, however they got there (GiGPO's anchor states). None:
        the environment does not say, and the observation history stands for its state."""

        return None


@dataclass
class Clone:
    """An environment brought to another's state: how (``snapshot`` or ``replay``), and what a
    replay cost (environment steps and the verifier calls they made, to be charged)."""

    env: Env
    how: str
    replayed_steps: int = 0


def clone_env(
    task: Task, instance: Instance, verify: Verify, env: Env, actions: list[str]
) -> Clone:
    """A new environment of ``instance`` in the state ``env`` reached after ``actions``: restored
    from its snapshot where it has one, else replayed from the instance's seed, action by action
    (the same seeded randomness, so the same state), and said so in ``how``."""

    new = task.make_env(instance, verify)
    state = env.snapshot()
    if state is not None:
        new.restore(state)
        return Clone(new, "snapshot")
    new.reset(seed=instance.seed)
    for a in actions:
        new.step(a)
    return Clone(new, "replay", len(actions))


class Task:
    """Base class of tasks. Subclasses set ``name``, ``Params`` and implement ``make_instance``."""

    name: ClassVar[str] = "task"
    Params: ClassVar[type[TaskParams]] = TaskParams
    multi_turn: ClassVar[bool] = False
    env_state_keys: ClassVar[bool] = False
    """True where its environment defines ``state_key()`` (else: the observation history's hash)."""
    has_potential: ClassVar[bool] = False
    """True where its environment defines ``potential()`` (potential-based shaping)."""
    has_step_labels: ClassVar[bool] = False
    """True where its environment labels each step (``info["step_correct"]``): an explicit PRM
    can be trained on them."""
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    stop: ClassVar[str] = "\n"
    """Text that ends an action (a turn's answer); generation stops there."""
    verifier_timeout_s: ClassVar[float | None] = 10.0
    """A call of ``verify`` running longer is abandoned and its sample a counted failure."""
    two_player: ClassVar[bool] = False
    """A two-player game (``nim``): it defines ``against(instance, opponent)`` (the instance played
    against another player) and ``prompt(...)`` (a position's text for the player to move), so
    ``data.self_play`` can train against a pool of the policy's past checkpoints."""

    def __init__(self, params: dict[str, Any] | TaskParams | None = None):
        self.params = (
            params if isinstance(params, TaskParams) else self.Params.model_validate(params or {})
        )

    @property
    def max_turns(self) -> int:
        return 1

    # ---- what decides it beyond its parameters ---------------------------------

    def input_files(self) -> list[str]:
        """The data files (or directories) it reads: their content enters the run id, the
        warm-start key and the fairness audit. None by default."""

        return []

    def called_modules(self) -> list[str]:
        """The user's modules it calls into by name (a verifier ``module:function``'s module): their
        source, and what they import from the user's tree, enter the run id. None by default (the
        task's own class and base classes are always included)."""

        return []

    def preflight(self) -> list[str]:
        """Problems found by trying it once before anything runs, each starting with its key below
        the task (``params.verifier: ...``); [] when it can run. None by default."""

        return []

    # ---- instances ------------------------------------------------------------

    def make_instance(self, seed: int) -> Instance:
        raise NotImplementedError

    def instances(self, seeds: list[int]) -> list[Instance]:
        return [self.make_instance(s) for s in seeds]

    def eval_instances(self, n: int, split: str = "test") -> list[Instance]:
        """The deterministic held-out set of ``split`` ("test": what reports score; "validation":
        what the sweep and the ladder select on): seeds disjoint from every training seed and from
        the other split."""

        return self.instances(eval_seeds(n, split))

    # ---- reward ---------------------------------------------------------------

    judge: Any = None
    """The task's judge (a counted ``JudgeGate``, harness/tasks/judge.py) when ``task.judge`` is
    configured; a task whose reward needs one calls ``self.judge(instance, response)`` in verify."""

    def verify(self, instance: Instance, response: str) -> float:
        raise NotImplementedError

    def make_env(self, instance: Instance, verify: Verify) -> Env:
        return Env(self, instance, verify)

    # ---- evaluation apart from the score ------------------------------------------

    def evaluate_apart(self, play: Play, size: int, split: str) -> dict[str, Any]:
        """What every held-out evaluation of a run also measures, apart from its score, as keys to
        merge into the run's evaluation record. ``play`` plays the evaluated policy's games on
        instances this method makes, each call charged to the evaluation ledger (never the training
        budget); ``size`` and ``split``: the run's evaluation size and split.

        Default: ``{}``, nothing. A two-player game returns ``{"selfplay": rows}``, its games
        against fixed external opponents (:meth:`Nim.evaluate_apart
        <sixblanks.harness.tasks.selfplay.Nim.evaluate_apart>`; the store's ``selfplay_evals``)."""

        return {}

    # ---- demonstrations (for SFT), where an oracle exists -------------------------

    has_oracle: ClassVar[bool] = False

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        """The oracle's next action (ending with ``stop``) given the observations so far
        (the first is the prompt). Used to generate SFT demonstrations."""

        raise NotImplementedError(f"task '{self.name}' has no demonstration oracle")

    def corrupt_step(self, instance: Instance, turn: int, action: str, rng) -> str | None:
        """A wrong version of ``action`` (turn ``turn``), for PRIME's intervention probe: here one
        digit changed to another; None where the action has no digit (the probe skips it). A task
        whose steps are not numbers overrides this."""

        spots = [i for i, c in enumerate(action) if c.isdigit()]
        if not spots:
            return None
        at = rng.choice(spots)
        return action[:at] + str((int(action[at]) + rng.randint(1, 9)) % 10) + action[at + 1 :]

    def alphabet(self) -> str:
        """Characters this task's prompts, observations and answers use (for the tiny tokenizer)."""

        return ""
