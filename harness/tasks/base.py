"""One interface for single-turn verifiable tasks and multi-turn environments.

A task makes deterministic instances from a seed and an environment for each
instance with a Gymnasium-style ``reset(seed)`` / ``step(action)`` on text.
Every reward comes from the task's verifier, and every verifier call goes
through one choke point (:class:`sixblanks.harness.tasks.verify.VerifierGate`) so that it
can be counted, timed out and isolated from exceptions.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..seeds import HELDOUT_FRACTIONS, SPLIT_OFFSETS, SPLITS, stable_unit

SMALL_SPACE = 20_000
"""A task that lists at most this many problems (``problem_space``) is split by rank: its keys
sorted by their stable hash, the first eighth test, the next validation, the rest train. Exact
fractions, and each split gets at least one problem once the space has three, where an independent
draw per problem could leave a split of 16 problems with none. A larger space is split by each
key's hash value alone (the fractions in expectation), which needs no list."""

COUNT_SPACE = 2_000_000
"""The largest listed space whose split sizes are counted (one hash per problem) when a held-out
set asks for more than an eighth of it could surely hold."""

HELDOUT_WALK = 400_000
"""The most seeds a held-out set walks; and it stops after :data:`HELDOUT_STALL` seeds in a row made
no new problem of its split (the space has no more, or they are too rare to find)."""
HELDOUT_STALL = 20_000


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
        "text and a blank line before the prompt). None: none (the template's own default, if "
        "any).",
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

    # ---- the partition of its problems (train / validation / test) -------------------

    def problem_key(self, instance: Instance) -> Hashable | None:
        """The identity of the problem ``instance`` poses, as a hashable value whose ``repr`` is
        stable across processes (ints, strings, tuples of them): two instances with the same key are
        the same problem however their seeds differ. It decides the problem's split
        (:meth:`in_split`): training never draws a validation or test problem, and a held-out set
        holds each problem once.

        None (the default, for a task that does not say): every seed is its own problem, held out
        by its seed range alone. Every built-in task says."""

        return None

    def problem_space(self) -> Iterable[Hashable] | None:
        """Every problem key the task can make, where it can list them; None: it cannot (or does
        not). A listed space of at most :data:`SMALL_SPACE` problems is split by rank."""

        return None

    def space_size(self) -> int | None:
        """How many distinct problems the task can make (the length of :meth:`problem_space`);
        None: unknown."""

        return None

    def seed_key(self, seed: int) -> Hashable | None:
        """The problem key of the instance of ``seed`` (a task may compute it without building the
        instance's text, as long as it agrees with :meth:`problem_key`)."""

        return self.problem_key(self.make_instance(seed))

    def _ranked(self) -> dict[str, frozenset] | None:
        """The rank split of a small listed space (see :data:`SMALL_SPACE`); None for a larger or
        unlisted one. Computed once per task object."""

        if "_ranked_split" not in self.__dict__:
            size = self.space_size()
            space = self.problem_space() if size is not None and size <= SMALL_SPACE else None
            self.__dict__["_ranked_split"] = None if space is None else rank_split(space)
        return self.__dict__["_ranked_split"]

    def in_split(self, key: Hashable, split: str) -> bool:
        """Whether the problem ``key`` belongs to ``split`` ("train", "validation" or "test")."""

        ranked = self._ranked()
        if ranked is not None and any(key in keys for keys in ranked.values()):
            return key in ranked[split]
        return hashed_split(key) == split

    def trains_on(self, seed: int) -> bool:
        """Whether the instance of ``seed`` poses a training problem (what every training and
        demonstration draw asks, harness/seeds.py)."""

        key = self.seed_key(seed)
        return key is None or self.in_split(key, "train")

    def split_size(self, split: str, n: int) -> int | None:
        """How many distinct problems ``split`` holds, where that is known and could fall short of
        ``n``; None: unknown, or surely ``n`` or more."""

        ranked = self._ranked()
        if ranked is not None:
            return len(ranked[split])
        size = self.space_size()
        if size is None or size * HELDOUT_FRACTIONS.get(split, 1.0) >= 4 * n:
            return None
        space = self.problem_space() if size <= COUNT_SPACE else None
        if space is None:
            return None
        return sum(hashed_split(k) == split for k in space)

    def distinct_available(self, split: str, n: int) -> int:
        """How many distinct problems a held-out set of ``split`` asked for ``n`` holds: ``n``, or
        fewer where the task's space has fewer problems of that split. Computed from the task's
        parameters without making instances, so ``sixblanks validate`` can say it before a run."""

        _check_split(split)
        size = self.split_size(split, n)
        return n if size is None else min(n, size)

    def heldout_notes(self) -> list[str]:
        """What its partition had to give up, said by ``sixblanks validate`` (a dataset's rows
        dropped because their prompt is also a held-out one); [] by default."""

        return []

    def heldout_seeds(self, n: int, split: str = "test") -> list[int]:
        """The seeds of the held-out set of ``split``: its range walked in order, each seed kept
        where it makes a problem of ``split`` not kept before, up to ``n`` (or
        :meth:`distinct_available`, where the space holds fewer). Computed once per (n, split)."""

        _check_split(split)
        cache = self.__dict__.setdefault("_heldout_seeds", {})
        if (n, split) not in cache:
            want, base = self.distinct_available(split, n), SPLIT_OFFSETS[split]
            seen: set[Hashable] = set()
            out: list[int] = []
            stall = 0
            for seed in range(base, base + max(HELDOUT_WALK, 64 * n)):
                if len(out) >= want or stall >= HELDOUT_STALL:
                    break
                key = self.seed_key(seed)
                if key is None:  # no declared problem identity: each seed its own problem
                    out.append(seed)
                elif key not in seen and self.in_split(key, split):
                    seen.add(key)
                    out.append(seed)
                    stall = 0
                else:
                    stall += 1
            cache[(n, split)] = out
        return list(cache[(n, split)])

    def eval_instances(self, n: int, split: str = "test") -> list[Instance]:
        """The deterministic held-out set of ``split`` ("test": what reports score; "validation":
        what the sweep and the ladder select on): distinct problems of that split only (never a
        training problem, never one of the other split), at most ``n``: fewer where the task's
        space holds fewer (:meth:`distinct_available`)."""

        return self.instances(self.heldout_seeds(n, split))

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

    def tool_oracle(self, instance: Instance, observations: list[str]) -> tuple[str, str]:
        """The oracle's next action where a code tool is offered (the ``tools:`` section):
        ``("code", program)`` for a tool turn, or ``("answer", action)`` as :meth:`oracle` writes
        it. Default: the answer, without the tool."""

        return "answer", self.oracle(instance, observations)

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


def _check_split(split: str) -> None:
    if split not in SPLIT_OFFSETS:
        raise ValueError(f"unknown held-out split '{split}' (valid: {', '.join(SPLITS)})")


def hashed_split(key: Hashable) -> str:
    """The split of a problem of a large space: its stable hash against the fractions of
    :data:`~sixblanks.harness.seeds.HELDOUT_FRACTIONS` (test first, then validation)."""

    u, edge = stable_unit(key), 0.0
    for split in ("test", "validation"):
        edge += HELDOUT_FRACTIONS[split]
        if u < edge:
            return split
    return "train"


def rank_split(space: Iterable[Hashable]) -> dict[str, frozenset]:
    """The split of a small listed space by rank of the stable hash: the first
    max(1, round(N/8)) problems test, as many more validation, the rest train. Where that would
    leave no training problem (N < 3) validation shares test's problems; a space of one problem
    cannot hold anything out and is every split's."""

    keys = sorted(set(space), key=lambda k: (stable_unit(k), repr(k)))
    if len(keys) <= 1:
        one = frozenset(keys)
        return {"train": one, "validation": one, "test": one}
    n_test = max(1, round(len(keys) * HELDOUT_FRACTIONS["test"]))
    n_val = max(1, round(len(keys) * HELDOUT_FRACTIONS["validation"]))
    if n_test + n_val >= len(keys):
        n_val = 0
    test = frozenset(keys[:n_test])
    validation = frozenset(keys[n_test : n_test + n_val]) or test
    return {"train": frozenset(keys[n_test + n_val :]), "validation": validation, "test": test}
