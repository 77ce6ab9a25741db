"""Search over turns: beam search and best-first tree search. A node is an
episode at some turn; expanding it forks the episode (its environment brought to the same state:
restored from ``snapshot()``, else replayed from the seed and the actions, with the replayed steps
counted) and plays one action in each fork. A partial episode is scored by a guide: ``verifier``
(the return so far plus the environment's potential of its current state, where it defines one)
or a value function of the partial episodes (``value``: see the search collector's tree-trained
value model).

- beam: every turn, each of the ``beam`` kept nodes of an instance is expanded ``expand`` times;
  finished episodes are leaves, and the ``beam`` best unfinished children are kept.
- tree: best-first; each round expands the best frontier node of each instance (unfinished,
  highest guide score, earliest first among ties) ``expand`` times, ``expansions`` rounds at most.

Every node's own tokens (the action it generated, the observation that followed) and environment
steps are counted once (``SearchTree.cost``), whichever leaves share them. ``node_values`` are the
Monte Carlo values of the tree: the mean reward of the finished leaves under each node.

Shapes: ``B`` leaves, ``K`` turns.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..tasks.base import Instance, Task
from ..tasks.verify import VerifierGate
from .agent import Episode, episodes_to_batch, play_round, start_episode, task_params
from .engine import RolloutEngine, SamplingParams
from .trajectory import TrajectoryBatch

Guide = Callable[[list[Episode]], list[float]]
"""Scores of partial episodes (higher: more promising)."""


def verifier_guide(episodes: list[Episode]) -> list[float]:
    """The return so far plus the potential of the current state (0 where the task has none)."""

    return [sum(ep.turn_rewards) + (ep.potentials[-1] if ep.potentials else 0.0) for ep in episodes]


@dataclass(eq=False)
class Node:
    episode: Episode
    path: list[int]
    """Node ids from the root's first child to this node (one per action taken)."""
    born: tuple[int, int]
    """(tokens, actions) the episode had when this node was forked: what it owns comes after."""


@dataclass
class SearchTree:
    """What a search made: its leaves (finished episodes) and its tips (every node never expanded
    further: the leaves and the pruned or unexpanded partial episodes), with what they cost."""

    leaves: list[Node] = field(default_factory=list)
    tips: list[Node] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    restored: int = 0
    replayed_steps: int = 0
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def cost(self) -> dict[str, float]:
        """Tokens generated (``launched_tokens``), observation tokens fed (``prompt_tokens``),
        environment steps (actions played and prefixes replayed) and episodes (``tips``), each
        node's share counted once."""

        gen = obs = steps = 0
        for n in self.nodes:
            t0, a0 = n.born
            for kind, s, e in n.episode.segments:
                if s >= t0:
                    gen += (e - s) if kind == "action" else 0
                    obs += (e - s) if kind == "obs" else 0
            steps += len(n.episode.actions) - a0
        return {
            "launched_tokens": float(gen),
            "prompt_tokens": float(obs),
            "env_steps": float(steps + self.replayed_steps),
            "rollouts_launched": float(len(self.tips)),
        }

    def node_values(self) -> dict[int, float]:
        """Mean reward of the finished, not failed leaves under each node (nodes with none:
        absent)."""

        sums: dict[int, list[float]] = {}
        for leaf in self.leaves:
            if leaf.episode.failure is not None:
                continue
            r = sum(leaf.episode.turn_rewards)
            for nid in leaf.path:
                sums.setdefault(nid, []).append(r)
        return {k: sum(v) / len(v) for k, v in sums.items()}

    def labels(self, nodes: list[Node]) -> torch.Tensor:
        """Tree labels ``[len(nodes), K]``: the Monte Carlo value of the node each action led to
        (NaN where no finished leaf lies under it, and past the episode's actions)."""

        values = self.node_values()
        K = max([1, *(len(n.path) for n in nodes)])
        out = torch.full((len(nodes), K), float("nan"))
        for i, n in enumerate(nodes):
            for k, nid in enumerate(n.path):
                if nid in values:
                    out[i, k] = values[nid]
        return out


def fork(node: Node, task: Task, gate: VerifierGate, tree: SearchTree) -> Node:
    """A copy of ``node`` whose environment is in the same state (a fork that cannot be made is a
    failed episode, never an exception)."""

    src = node.episode
    ep = copy.copy(src)
    for f in dataclasses.fields(Episode):  # every per-token and per-turn list its own copy
        if isinstance(getattr(src, f.name), list):
            setattr(ep, f.name, list(getattr(src, f.name)))
    ep.snapshots = []
    if src.failure is None:
        try:
            ep.env = task.make_env(src.instance, gate)
            ep.env.reset(seed=src.instance.seed)
            try:
                snap = src.env.snapshot()
            except Exception:  # noqa: BLE001 - a task that cannot snapshot is replayed
                snap = None
            if snap is not None:
                ep.env.restore(snap)
                tree.restored += 1
            else:
                for a in src.actions:  # the seed and the actions, each replayed step counted
                    tree.replayed_steps += 1
                    ep.env.step(a)
        except Exception as exc:  # noqa: BLE001
            ep.failure, ep.done = f"search fork raised {type(exc).__name__}: {exc}", True
    return Node(ep, list(node.path), (len(ep.tokens), len(ep.actions)))


def search(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    instances: list[Instance],
    params: SamplingParams,
    gate: VerifierGate,
    *,
    mode: str,
    expand: int,
    beam: int = 1,
    expansions: int = 1,
    guide: Guide = verifier_guide,
    max_context_tokens: int = 512,
    generator: torch.Generator | None = None,
) -> SearchTree:
    """Beam (``mode='beam'``) or best-first tree (``'tree'``) search from each instance's first
    observation; see the module docstring."""

    if mode not in ("beam", "tree"):
        raise ValueError(f"search mode '{mode}': expected 'beam' or 'tree'")
    params = task_params(params, task)
    tree = SearchTree()
    roots = []
    for g, inst in enumerate(instances):
        ep = start_episode(task, inst, gate, tokenizer, g)
        roots.append(Node(ep, [], (0, 0)))
    tree.nodes += roots
    frontier: list[list[Node]] = [[r] for r in roots]  # per instance
    rounds = max(1, task.max_turns) if mode == "beam" else expansions
    for _ in range(rounds):
        chosen = _chosen(frontier, tree, mode, guide)
        if not any(chosen):
            break
        children = _expanded(chosen, frontier, tree, task, gate, mode, expand)
        active = [k.episode for kids in children for k in kids if not k.episode.done]
        if active:
            play_round(engine, tokenizer, task, active, params, max_context_tokens, generator)
        _keep(children, frontier, tree, mode, guide, beam)
    for nodes in frontier:  # unexpanded partial episodes left when the search stopped
        tree.tips += [n for n in nodes if n not in tree.tips and n.path]
    return tree


def _chosen(
    frontier: list[list[Node]], tree: SearchTree, mode: str, guide: Guide
) -> list[list[Node]]:
    """Per instance, the frontier nodes to expand this round: every unfinished one (beam), or the
    best by ``guide`` (tree; the earliest among ties). Finished frontier nodes not yet counted (a
    root that failed at reset) become leaves."""

    chosen: list[list[Node]] = []
    for nodes in frontier:
        live = [n for n in nodes if not n.episode.done]
        for n in nodes:  # a root that failed at reset is a (failed) leaf
            if n.episode.done and n not in tree.tips:
                tree.tips.append(n)
                tree.leaves.append(n)
        if mode == "tree" and live:
            scores = guide([n.episode for n in live])
            best = max(range(len(live)), key=lambda i: (scores[i], -i))
            live = [live[best]]
        chosen.append(live)
    return chosen


def _expanded(
    chosen: list[list[Node]],
    frontier: list[list[Node]],
    tree: SearchTree,
    task: Task,
    gate: VerifierGate,
    mode: str,
    expand: int,
) -> list[list[Node]]:
    """Per instance, ``expand`` forks of each chosen node, each given its node id; in a tree
    search the chosen nodes leave the frontier."""

    children: list[list[Node]] = []
    for g, parents in enumerate(chosen):
        kids = [fork(p, task, gate, tree) for p in parents for _ in range(expand)]
        for k in kids:
            k.path.append(next(tree.ids))
        tree.nodes += kids
        children.append(kids)
        if mode == "tree":
            frontier[g] = [n for n in frontier[g] if n not in parents]
    return children


def _keep(
    children: list[list[Node]],
    frontier: list[list[Node]],
    tree: SearchTree,
    mode: str,
    guide: Guide,
    beam: int,
) -> None:
    """After the children played their action: the finished ones become leaves; the unfinished
    ones join the frontier (tree), or the ``beam`` best by ``guide`` replace it and the rest are
    pruned tips (beam)."""

    for g, kids in enumerate(children):
        for k in kids:
            if k.episode.done:
                tree.leaves.append(k)
                tree.tips.append(k)
        open_kids = [k for k in kids if not k.episode.done]
        if mode == "beam":
            if open_kids:
                scores = guide([k.episode for k in open_kids])
                order = sorted(range(len(open_kids)), key=lambda i: (-scores[i], i))
                keep = [open_kids[i] for i in order[:beam]]
                tree.tips += [open_kids[i] for i in order[beam:]]
                frontier[g] = keep
            else:
                frontier[g] = []
        else:
            frontier[g] = frontier[g] + open_kids


def leaves_batch(
    tree: SearchTree, nodes: list[Node], tokenizer, version: int, task_name: str
) -> TrajectoryBatch:
    """``nodes`` (leaves or tips) as a batch; group ids are the instances' indices."""

    return episodes_to_batch([n.episode for n in nodes], tokenizer, version, task_name)
