"""A two-player text game for self-play: ``nim``, single-pile Nim.

A pile of N objects (N drawn per instance from [low, high]); the players take turns removing 1 to
``max_take`` objects; whoever takes the last object wins. The policy always moves first; its
opponent's reply is made inside ``env.step`` by the instance's opponent (``instance.data
["opponent"]``, else the scripted player ``params.opponent``). Perfect play leaves a multiple of
``max_take + 1``, so the first player loses exactly the piles that are such a multiple.

Text: the prompt is the pile, ``"7:"``; the policy answers a number, ``"3"``; the observation
after the opponent's reply is its take and the pile left, ``"1 3:"``. Reward (through the counted
verifier, on the whole transcript of moves): 1 for a win, 0 for a loss. A move that is not a legal
take (unparsable, 0, more than ``max_take`` or more than the pile) loses the game at once, for
either player: an illegal policy move is a loss, an illegal opponent reply (a past checkpoint's
garbage) a win. A game cut short by a limit (generation, context) is undecided: reward 0, and a
draw in the external evaluation's tally.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import Field, model_validator

from .base import Env, Instance, Play, StepResult, Task, TaskParams

_TAKE = re.compile(r"^\s*(\d{1,2})\s*$")
_PILE = re.compile(r"(\d+):\s*$")


def parse_take(text: str, pile: int, max_take: int) -> int | None:
    """The number a move takes when it is legal (1 <= k <= min(max_take, pile)); None otherwise."""

    m = _TAKE.match(text)
    k = int(m.group(1)) if m else 0
    return k if 1 <= k <= min(max_take, pile) else None


def optimal_take(pile: int, max_take: int) -> int:
    """Perfect play: leave a multiple of ``max_take + 1``; from such a (lost) pile, take 1."""

    return pile % (max_take + 1) or 1


def winner(pile: int, max_take: int, moves: list[str]) -> int | None:
    """Who won the game ``moves`` (alternating, the policy first) decide: 0 the policy, 1 its
    opponent; None while undecided. An illegal move loses at once."""

    for i, text in enumerate(moves):
        k = parse_take(text, pile, max_take)
        if k is None:
            return 1 - i % 2
        pile -= k
        if pile == 0:
            return i % 2
    return None


@dataclass(frozen=True)
class Position:
    """What a player sees when it is to move: the pile, the game's rule, and where the game is
    (the instance's seed and the moves made so far, both players) for seeded play."""

    pile: int
    max_take: int
    seed: int
    ply: int


class Opponent(Protocol):
    """A player the environment asks for its replies: ``move(position, rng) -> move text``
    (``rng``: the environment's seeded RNG, in its snapshot)."""

    name: str

    def move(self, position: Position, rng: random.Random) -> str: ...


class RandomPlayer:
    """Scripted: a uniform legal take, drawn from the environment's RNG (seeded by the instance)."""

    name = "random"

    def move(self, position: Position, rng: random.Random) -> str:
        return str(rng.randint(1, min(position.max_take, position.pile)))


class OptimalPlayer:
    """Scripted: perfect play (:func:`optimal_take`)."""

    name = "optimal"

    def move(self, position: Position, rng: random.Random) -> str:
        return str(optimal_take(position.pile, position.max_take))


SCRIPTED: dict[str, Opponent] = {"random": RandomPlayer(), "optimal": OptimalPlayer()}
"""The external opponents, by name: fixed players no policy's training can move."""


def scripted(name: str) -> Opponent:
    if name not in SCRIPTED:
        from ..errors import unknown_name

        raise ValueError(unknown_name("scripted opponent", name, SCRIPTED))
    return SCRIPTED[name]


class NimParams(TaskParams):
    low: int = Field(5, ge=1, description="Smallest starting pile.")
    high: int = Field(12, ge=1, le=99, description="Largest starting pile.")
    max_take: int = Field(3, ge=1, le=9, description="Most objects one move may take.")
    opponent: str = Field(
        "random",
        description="The scripted opponent of a game whose instance names none (training without "
        "data.self_play, and the held-out score): random or optimal.",
    )
    eval_opponents: list[str] = Field(
        ["random", "optimal"],
        min_length=1,
        description="The fixed external opponents every evaluation plays, apart from training "
        "(the same for every arm: the yardstick of progress).",
    )
    eval_games: int | None = Field(
        None, ge=1, description="Games against each external opponent; None: the run's eval size."
    )

    @model_validator(mode="after")
    def _check(self) -> NimParams:
        if self.high < self.low:
            raise ValueError(f"high: must be >= low ({self.low})")
        for where, name in [("opponent", self.opponent)] + [
            (f"eval_opponents[{i}]", n) for i, n in enumerate(self.eval_opponents)
        ]:
            if name not in SCRIPTED:
                from ..errors import unknown_name

                raise ValueError(f"{where}: {unknown_name('scripted opponent', name, SCRIPTED)}")
        if len(set(self.eval_opponents)) < len(self.eval_opponents):
            raise ValueError(f"eval_opponents: each opponent once ({self.eval_opponents})")
        return self


class NimEnv(Env):
    """One game: ``step(move)`` plays the policy's move, then the opponent's reply."""

    task: Nim

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        self.turn, self.pile = 0, self.instance.data["pile"]
        self.moves: list[str] = []
        self.rng = random.Random(self.instance.seed if seed is None else seed)
        return self.instance.prompt, {}

    @property
    def opponent(self) -> Opponent:
        return self.instance.data.get("opponent") or scripted(self.task.params.opponent)

    def _end(self, info: dict[str, Any]) -> StepResult:
        reward = self.verify(self.instance, "\n".join(self.moves))  # the outcome, counted
        return StepResult("", reward, True, False, {"turn": self.turn, **info})

    def step(self, action: str) -> StepResult:
        m = self.task.params.max_take
        self.turn += 1
        self.moves.append(" ".join(action.split()))  # one line per move
        take = parse_take(self.moves[-1], self.pile, m)
        if take is None:
            return self._end({"illegal": "policy"})
        self.pile -= take
        if self.pile == 0:
            return self._end({})
        pos = Position(self.pile, m, self.instance.seed, len(self.moves))
        self.moves.append(" ".join(str(self.opponent.move(pos, self.rng)).split()))
        reply = parse_take(self.moves[-1], self.pile, m)
        if reply is None:
            return self._end({"illegal": "opponent"})
        self.pile -= reply
        if self.pile == 0:
            return self._end({})
        return StepResult(f"{reply} {self.pile}:", 0.0, False, False, {"turn": self.turn})

    def state_key(self) -> int:
        """The pile: the whole state of the game for the player to move."""

        return self.pile

    def snapshot(self) -> dict:
        return {
            "turn": self.turn,
            "pile": self.pile,
            "moves": list(self.moves),
            "rng": self.rng.getstate(),
        }

    def restore(self, state: dict) -> None:
        self.turn, self.pile, self.moves = state["turn"], state["pile"], list(state["moves"])
        self.rng = random.Random()
        self.rng.setstate(state["rng"])


class Nim(Task):
    """Single-pile Nim against an opponent (scripted, or a past checkpoint of the policy)."""

    name = "nim"
    Params = NimParams
    multi_turn = True
    has_oracle = True
    env_state_keys = True
    two_player = True
    """A game: every evaluation also plays the external opponents (:meth:`evaluate_apart`), and
    ``data.self_play`` can train against a pool of past checkpoints."""
    params: NimParams

    @property
    def max_turns(self) -> int:
        """Each of the policy's moves and its reply take at least 2: at most ceil(high / 2)
        moves."""

        return (self.params.high + 1) // 2

    @staticmethod
    def prompt(pile: int) -> str:
        """The text of a position for the player to move (a past checkpoint's prompt too)."""

        return f"{pile}:"

    def make_instance(self, seed: int) -> Instance:
        p = self.params
        pile = random.Random(seed).randint(p.low, p.high)
        return Instance(seed, self.prompt(pile), {"pile": pile}, difficulty=pile)

    def problem_key(self, instance: Instance) -> int:
        """The starting pile (the position the policy moves first from)."""

        return instance.data["pile"]

    def space_size(self) -> int:
        return self.params.high - self.params.low + 1

    def problem_space(self) -> range:
        return range(self.params.low, self.params.high + 1)

    def against(self, instance: Instance, opponent: Opponent) -> Instance:
        """``instance`` played against ``opponent``."""

        return Instance(
            instance.seed,
            instance.prompt,
            {**instance.data, "opponent": opponent},
            instance.difficulty,
        )

    def winnable(self, instance: Instance) -> bool:
        """A perfect first player wins this game whatever the opponent does (the pile is not a
        multiple of ``max_take + 1``): the ceiling of a win rate against the optimal player."""

        return instance.data["pile"] % (self.params.max_take + 1) != 0

    def external_opponents(self) -> dict[str, Opponent]:
        """The fixed opponents every evaluation plays (``eval_opponents``), by name."""

        return {n: scripted(n) for n in self.params.eval_opponents}

    def evaluate_apart(self, play: Play, size: int, split: str) -> dict[str, Any]:
        """Progress is never read from games against the training pool (a policy and its past
        selves can agree on a private protocol): every evaluation plays the fixed external
        opponents. ``{"selfplay": rows}``, one row per opponent of ``eval_opponents``
        (:meth:`play_external`; ``eval_games`` games each, else ``size``)."""

        games = self.params.eval_games or size
        names = self.params.eval_opponents
        return {"selfplay": [self.play_external(play, name, games, split) for name in names]}

    def heldout_games(self, games: int, split: str) -> list[Instance]:
        """The first ``games`` seeds of ``split``'s range whose starting pile is a held-out pile of
        that split. A range of piles holds few held-out ones (8 piles: one test pile), so piles
        repeat here, unlike in :meth:`eval_instances`: against the random opponent each seed is
        another game (its replies are drawn from the seed); against a deterministic one a repeated
        pile replays the same game. Training never starts from any of these piles."""

        from ..seeds import SPLIT_OFFSETS

        base = SPLIT_OFFSETS[split]
        seeds = (s for s in range(base, base + 64 * games + 10_000))
        keep = (s for s in seeds if self.in_split(self.seed_key(s), split))
        return self.instances([s for s, _ in zip(keep, range(games))])

    def play_external(self, play: Play, opponent: str, games: int, split: str) -> dict[str, Any]:
        """``games`` games (``play``: the evaluated policy's, greedy) against the external opponent
        named ``opponent``, on :meth:`heldout_games` of ``split`` (held-out piles only, repeated:
        against a deterministic opponent the games' effective number is the distinct piles').
        A game is won (reward 1),
        lost (decided against the policy: an illegal move included) or drawn (undecided: cut by a
        limit, or failed). Returns the tally, how many of the games perfect play wins
        (``winnable``: the ceiling against the optimal player) and what they cost
        (``Games.cost``)."""

        player = self.external_opponents()[opponent]
        held_out = self.heldout_games(games, split)
        games = len(held_out)
        got = play(f"selfplay {opponent}", [self.against(i, player) for i in held_out])
        won = [r >= 1.0 for r in got.rewards]
        wins = sum(won)
        losses = sum(d and not w for d, w in zip(got.decided, won))
        return {
            "opponent": opponent,
            "split": split,
            "games": games,
            "wins": wins,
            "losses": losses,
            "draws": games - wins - losses,
            "win_rate": wins / games if games else 0.0,
            "winnable": sum(bool(self.winnable(i)) for i in held_out),
            **got.cost,
        }

    def make_env(self, instance: Instance, verify) -> Env:
        return NimEnv(self, instance, verify)

    def verify(self, instance: Instance, response: str) -> float:
        """1.0 when the transcript (one move a line, the policy's first, then alternating) is a
        game the policy won; else 0.0 (lost, or undecided)."""

        moves = response.split("\n")
        return 1.0 if winner(instance.data["pile"], self.params.max_take, moves) == 0 else 0.0

    def oracle(self, instance: Instance, observations: list[str]) -> str:
        pile = int(_PILE.search(observations[-1]).group(1))
        return f"{optimal_take(pile, self.params.max_take)}\n"

    def alphabet(self) -> str:
        return "0123456789: \n"
