"""The agent loop: drives single- and multi-turn episodes for a batch of task instances,
G samples each, and records exactly what the policy did (the trajectory contract)."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ..stopping import stop_point
from ..tasks.base import Instance, Task
from ..tasks.verify import VerifierFailure, VerifierGate
from .chat import chat_observation
from .engine import Generation, RolloutEngine, SamplingParams
from .trajectory import TrajectoryBatch


def state_key(observations: list[str]) -> int:
    """Signed 64-bit hash of an observation history (for step-level grouping)."""

    h = hashlib.blake2b("\x1e".join(observations).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little", signed=True) or 1


def env_potential(env) -> float:
    """The environment's potential of its current state (``Env.potential()``; 0 where none)."""

    phi = env.potential() if env is not None and hasattr(env, "potential") else None
    return float(phi) if phi is not None else 0.0


def env_state_key(env, observations: list[str]) -> int:
    """The key of the state an action is taken in: the environment's own ``state_key()`` where it
    defines one (hashed), else the observation history's hash."""

    key = env.state_key() if env is not None and hasattr(env, "state_key") else None
    return state_key(["\x1fstate", repr(key)]) if key is not None else state_key(observations)


@dataclass
class Episode:
    instance: Instance
    group: int
    env: object
    tokens: list[int] = field(default_factory=list)
    mask: list[float] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the version that sampled each token; -1
    segments: list[tuple[str, int, int]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    state_keys: list[int] = field(default_factory=list)
    potentials: list[float] = field(default_factory=list)
    step_labels: list[float] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    snapshots: list = field(default_factory=list)
    truncated: bool = False
    terminated: bool = False
    done: bool = False
    failure: str | None = None

    def add(
        self,
        kind: str,
        ids: list[int],
        logps: list[float] | None = None,
        turn: int = -1,
        version: int = -1,
    ) -> None:
        start = len(self.tokens)
        self.tokens += ids
        is_action = kind == "action"
        self.mask += [1.0 if is_action else 0.0] * len(ids)
        self.logps += logps if logps is not None else [0.0] * len(ids)
        self.turn_ids += [turn if is_action else -1] * len(ids)
        self.versions += [version if is_action else -1] * len(ids)
        self.segments.append((kind, start, len(self.tokens)))


def encode_observation(tokenizer, text: str, first: bool, task: Task | None = None) -> list[int]:
    """The tokens of an observation: the prompt (``first``) or what the environment answered after
    an action. Where the tokenizer has a chat template (``rollout.chat_template``), each is a
    message rendered by it: the prompt a user message after the task's system message (its
    ``system_prompt`` param), with the generation prompt; a later observation a message of the
    task's ``observation_role`` (user or tool), with what closes the assistant's turn before it
    and the generation prompt after it. Otherwise raw text (the prompt after BOS, the system
    prompt and a blank line before it)."""

    params = getattr(task, "params", None)
    system = getattr(params, "system_prompt", None)
    role = getattr(params, "observation_role", "user")
    template = getattr(tokenizer, "chat_template", None)
    tools = json.dumps(getattr(task, "chat_tools", ()))  # a code tool the template declares
    # a group's samples share their prompt: each text is tokenized once (the template is in the
    # key, so a tokenizer given another template encodes afresh)
    return list(_encode(tokenizer, template, text, first, system, role, tools))


@functools.lru_cache(maxsize=8192)
def _encode(
    tokenizer, template, text: str, first: bool, system, role: str, tools: str
) -> tuple[int, ...]:
    if template:
        return tuple(chat_observation(tokenizer, text, first, system, role, json.loads(tools)))
    if first and system:
        text = f"{system}\n\n{text}"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if first and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id, *ids]
    return tuple(ids)


def task_params(params: SamplingParams, task: Task) -> SamplingParams:
    """``params`` with the task's stop string where they name none (none where they ignore EOS:
    fixed-length generation stops at nothing)."""

    if params.ignore_eos:
        return replace(params, stop=())
    stop = tuple(params.stop) or ((task.stop,) if task.stop else ())
    return replace(params, stop=stop)


def start_episode(task: Task, inst: Instance, gate: VerifierGate, tokenizer, group: int) -> Episode:
    """A fresh episode of ``inst`` at its first observation (failed, not raised, where the task's
    reset raises)."""

    ep = Episode(inst, group, None)
    try:
        ep.env = task.make_env(inst, gate)
        obs, _ = ep.env.reset(seed=inst.seed)
    except Exception as exc:  # noqa: BLE001
        ep.failure, ep.done = f"environment reset raised {type(exc).__name__}: {exc}", True
        obs = inst.prompt
    ep.observations.append(obs)
    ep.add("obs", encode_observation(tokenizer, obs, first=True, task=task))
    ep.state_keys.append(env_state_key(ep.env, ep.observations))
    ep.potentials.append(env_potential(ep.env))
    return ep


def run_episodes(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    instances: list[Instance],
    group_size: int,
    params: SamplingParams,
    gate: VerifierGate | None = None,
    *,
    max_context_tokens: int = 512,
    generator: torch.Generator | None = None,
    group_offset: int = 0,
    on_turn: Callable[[int, int], None] | None = None,
    snapshots: bool = False,
) -> TrajectoryBatch:
    """Run ``group_size`` episodes per instance to the end and return them as one batch.

    Each action is generated until the task's stop string (or EOS, or ``params.max_new_tokens``);
    policy tokens get action mask 1 and their sampling log-probs; prompt and observation tokens
    mask 0. A task or verifier that raises or times out marks that sample failed with its reason
    (its action mask is zeroed) and never stops the batch.
    """

    gate = gate or VerifierGate(task)
    params = task_params(params, task)
    episodes = [
        start_episode(task, inst, gate, tokenizer, group_offset + gi)
        for gi, inst in enumerate(instances)
        for _ in range(group_size)
    ]
    play(
        engine, tokenizer, task, episodes, params, max_context_tokens, generator, on_turn, snapshots
    )
    return episodes_to_batch(episodes, tokenizer, engine.policy_version, task.name)


@dataclass
class Branches:
    """Continuations rolled from restored states: the batch, and how the states were reached."""

    batch: TrajectoryBatch
    restored: int = 0
    """Branches started from the environment's snapshot."""
    replayed_steps: int = 0
    """Environment steps replayed (seed + action prefix) where the task cannot snapshot."""


def branch_episodes(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    source: TrajectoryBatch,
    points: list[tuple[int, int]],
    width: int,
    params: SamplingParams,
    gate: VerifierGate,
    *,
    max_context_tokens: int = 512,
    generator: torch.Generator | None = None,
    group_offset: int = 0,
) -> Branches:
    """``width`` continuations of each ``(row, turn)`` of ``source``: the environment is brought to
    the state before that turn (restored from the snapshot ``source`` kept, else replayed from the
    seed and the action prefix, with its steps counted), the prefix (prompt, earlier actions and
    observations) is context (mask 0, an observation segment), and the policy acts from that turn
    to the end. Each point's continuations form one group (``group_offset + point index``); they
    share the environment's state and randomness, and differ by what the policy samples."""

    params = task_params(params, task)
    episodes: list[Episode] = []
    out = Branches(source)
    for p, (i, k) in enumerate(points):
        inst = task.make_instance(int(source.instance_seeds[i]))
        start = [s for kind, s, _ in source.segments[i] if kind == "action"][k]
        snaps = source.snapshots[i] if source.snapshots else []
        for _ in range(width):
            ep = Episode(inst, group_offset + p, None)
            try:  # a task that raises here fails this continuation only, as in play()
                ep.env = task.make_env(inst, gate)
                ep.env.reset(seed=inst.seed)
                if k < len(snaps) and snaps[k] is not None:
                    ep.env.restore(snaps[k])
                    out.restored += 1
                else:
                    for a in source.actions[i][:k]:
                        out.replayed_steps += 1  # counted as taken, even if it raises
                        ep.env.step(a)
            except Exception as exc:  # noqa: BLE001
                ep.failure, ep.done = f"branch restore raised {type(exc).__name__}: {exc}", True
            ep.add("obs", source.tokens[i, :start].tolist())
            ep.observations = list(source.observations[i][: k + 1])
            ep.actions = list(source.actions[i][:k])
            ep.turn_rewards = source.turn_rewards[i, :k].tolist()
            ep.step_labels = source.step_labels[i, :k].tolist()
            ep.levels = source.levels[i, :k].tolist()
            ep.state_keys = source.state_keys[i, : k + 1].tolist()
            ep.potentials = source.potentials[i, : k + 1].tolist()
            episodes.append(ep)
    play(engine, tokenizer, task, episodes, params, max_context_tokens, generator)
    out.batch = episodes_to_batch(episodes, tokenizer, engine.policy_version, task.name)
    return out


def play(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    episodes: list[Episode],
    params: SamplingParams,
    max_context_tokens: int = 512,
    generator: torch.Generator | None = None,
    on_turn: Callable[[int, int], None] | None = None,
    snapshots: bool = False,
) -> None:
    """Play ``episodes`` to their end, each from the turn it is at (``len(ep.actions)``): one
    generation call per round over the active episodes, then one environment step each. With
    ``snapshots``, each environment's ``snapshot()`` before each action is kept (branching)."""

    for rnd in range(max(1, task.max_turns)):
        active = [ep for ep in episodes if not ep.done]
        if not active:
            break
        play_round(
            engine, tokenizer, task, active, params, max_context_tokens, generator, snapshots
        )
        if on_turn is not None:
            on_turn(rnd, len(active))


def play_round(
    engine: RolloutEngine,
    tokenizer,
    task: Task,
    active: list[Episode],
    params: SamplingParams,
    max_context_tokens: int = 512,
    generator: torch.Generator | None = None,
    snapshots: bool = False,
) -> None:
    """One action of each of ``active`` (episodes not done): one generation call over them all,
    then one environment step each; an episode that ends is marked ``done``."""

    max_turns = max(1, task.max_turns)
    gens: list[list[Generation]] = engine.generate(
        [ep.tokens for ep in active], params, n=1, generator=generator
    )
    pending = []
    for ep, (gen,) in zip(active, gens):
        turn = len(ep.actions)
        if snapshots:  # a snapshot that raises is replayed instead, when branched
            try:
                ep.snapshots.append(ep.env.snapshot() if ep.env is not None else None)
            except Exception:  # noqa: BLE001
                ep.snapshots.append(None)
        ep.add("action", gen.token_ids, gen.logprobs, turn, engine.policy_version)
        text = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        ep.actions.append(text)
        if gen.truncated:
            ep.truncated = True
        pending.append((ep, gen, turn, text))
    outcomes = env_steps([(ep, text) for ep, _, _, text in pending], params.env_workers)
    for (ep, gen, turn, _), res in zip(pending, outcomes):
        if isinstance(res, str):  # the sample failed: the step's reason
            ep.failure, ep.done = res, True
            continue
        ep.turn_rewards.append(float(res.reward))
        label = (res.info or {}).get("step_correct")  # the environment's step label, if any
        ep.step_labels.append(float(label) if label is not None else float("nan"))
        level = (res.info or {}).get("level")  # hierarchical tasks: 0 plan, 1 execute
        ep.levels.append(int(level) if level is not None else -1)
        ep.terminated = bool(res.terminated)
        # a chat model closes every turn with its end token; after a tool call the episode goes on
        eos = gen.finish_reason == "eos" and not (res.info or {}).get("tool_call")
        if res.terminated or res.truncated or turn == max_turns - 1 or eos:
            ep.truncated = (
                ep.truncated
                or bool(res.truncated)
                or (not res.terminated and turn == max_turns - 1)
            )
            ep.done = True
            continue
        obs_ids = encode_observation(tokenizer, res.observation, first=False, task=task)
        if len(ep.tokens) + len(obs_ids) + params.max_new_tokens > max_context_tokens:
            ep.truncated, ep.done = True, True
            continue
        ep.observations.append(res.observation)
        ep.add("obs", obs_ids)
        ep.state_keys.append(env_state_key(ep.env, ep.observations))
        ep.potentials.append(env_potential(ep.env))


def _env_step(ep: Episode, text: str):
    """The environment's answer to ``text``, or the reason the sample failed (a task or verifier
    that raises fails its sample only)."""

    try:
        return ep.env.step(text)
    except VerifierFailure as exc:
        return exc.reason
    except Exception as exc:  # noqa: BLE001
        return f"environment step raised {type(exc).__name__}: {exc}"


_POOLS: dict[int, cf.ThreadPoolExecutor] = {}


def env_steps(steps: list[tuple[Episode, str]], workers: int = 1) -> list:
    """Each ``(episode, action)``'s environment step, in order: one after another, or on up to
    ``workers`` threads at once (slow environments wait concurrently). Each is a stop point (Ctrl-C:
    harness/stopping.py) before it starts."""

    if workers <= 1 or len(steps) <= 1:
        out = []
        for ep, text in steps:
            stop_point("episodes")  # an environment step may be long (a judge, a sandbox)
            out.append(_env_step(ep, text))
        return out
    stop_point("episodes")
    pool = _POOLS.get(workers)
    if pool is None:
        pool = _POOLS[workers] = cf.ThreadPoolExecutor(workers, thread_name_prefix="env")
    return list(pool.map(lambda a: _env_step(*a), steps))


def _rows(lists, width: int, fill, dtype) -> torch.Tensor:
    """``[len(lists), width]``: each list padded with ``fill`` (one tensor built, not one per
    row)."""

    padded = [list(x) + [fill] * (width - len(x)) for x in lists]
    return torch.tensor(padded, dtype=dtype).reshape(len(lists), width)


def _token_versions(
    episodes: list[Episode], turn_ids: torch.Tensor, version: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each action token's policy version ``[B, T]`` (-1 off the actions: a branch's copied prefix
    is context; ``version`` where recorded without one) and each row's policy version ``[B]``: its
    oldest, ``version`` where it sampled nothing. ``turn_ids``: ``[B, T]``, -1 off the actions."""

    versions = _rows([ep.versions for ep in episodes], turn_ids.shape[1], -1, torch.long)
    versions = torch.where(versions < 0, int(version), versions)  # recorded without one
    versions = torch.where(turn_ids >= 0, versions, torch.full_like(versions, -1))
    oldest = torch.where(turn_ids >= 0, versions, torch.full_like(versions, 2**62)).amin(1)
    policy_version = torch.where(
        (turn_ids >= 0).any(1), oldest, torch.full_like(oldest, int(version))
    )
    return versions, policy_version


def episodes_to_batch(
    episodes: list[Episode], tokenizer, version: int, task_name: str
) -> TrajectoryBatch:
    """The episodes as one batch of B rows: token rows ``[B, T]`` padded to the longest episode,
    per-turn rows ``[B, K]`` to the most turns (potentials ``[B, K + 1]``); ``version`` is the
    engine's policy version, for tokens recorded without one and rows that sampled nothing."""

    T = max((len(ep.tokens) for ep in episodes), default=1)  # no episodes: an empty batch
    K = max([1, *(max(len(ep.turn_rewards), len(ep.state_keys)) for ep in episodes)])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokens = _rows([ep.tokens for ep in episodes], T, pad, torch.long)
    attn = _rows([[1] * len(ep.tokens) for ep in episodes], T, 0, torch.long)
    ok = [ep.failure is None for ep in episodes]
    mask = _rows([ep.mask if good else [] for ep, good in zip(episodes, ok)], T, 0.0, torch.float32)
    logps = _rows([ep.logps for ep in episodes], T, 0.0, torch.float32)
    turn_ids = _rows([ep.turn_ids for ep in episodes], T, -1, torch.long)
    versions, policy_version = _token_versions(episodes, turn_ids, version)
    turn_rewards = _rows([ep.turn_rewards for ep in episodes], K, 0.0, torch.float32)
    keys = _rows([ep.state_keys for ep in episodes], K, 0, torch.long)
    # Phi of the state before each action taken; 0 from the end of the episode on (terminal or
    # cut: either way the shaping then adds the constant -Phi(s_0), whatever the policy did)
    potentials = _rows(
        [ep.potentials[: len(ep.actions)] for ep in episodes], K + 1, 0.0, torch.float64
    )
    labels = _rows([ep.step_labels for ep in episodes], K, float("nan"), torch.float32)
    levels = _rows([ep.levels for ep in episodes], K, -1, torch.long)
    return TrajectoryBatch(
        tokens=tokens,
        attention_mask=attn,
        action_mask=mask,
        behavior_logprobs=logps,
        turn_ids=turn_ids,
        turn_rewards=turn_rewards,
        reward=turn_rewards.sum(-1),
        group_ids=torch.tensor([ep.group for ep in episodes], dtype=torch.long),
        policy_version=policy_version,
        truncated=torch.tensor([ep.truncated for ep in episodes], dtype=torch.bool),
        state_keys=keys,
        potentials=potentials,
        step_labels=labels,
        levels=levels,
        n_turns=torch.tensor([len(ep.actions) for ep in episodes], dtype=torch.long),
        failed=torch.tensor([ep.failure is not None for ep in episodes], dtype=torch.bool),
        instance_seeds=torch.tensor([ep.instance.seed for ep in episodes], dtype=torch.long),
        terminated=torch.tensor([ep.terminated for ep in episodes], dtype=torch.bool),
        token_versions=versions,
        observations=[ep.observations for ep in episodes],
        actions=[ep.actions for ep in episodes],
        segments=[ep.segments for ep in episodes],
        snapshots=[ep.snapshots for ep in episodes],
        failure_reasons=[ep.failure for ep in episodes],
        tool_log=[list(getattr(ep.env, "tool_log", None) or ()) for ep in episodes],
        task_name=task_name,
    )
