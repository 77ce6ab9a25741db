"""The data blank's specs: which samples a step trains on and how often they are reused (sources,
dynamic sampling, epochs and minibatches, lag and staleness, replay, a concurrent collector,
shaping, a world model, branching, search, self-play). Pure data, like :mod:`.specs`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_serializer, model_validator

from .specs import Spec


class OverlongShaping(Spec):
    """DAPO soft overlong punishment: 0 up to L_max - L_cache, then linear to -factor at L_max."""

    enabled: bool = Field(False, description="Add the length penalty to R before the advantage.")
    cache: int = Field(4, gt=0, description="L_cache, in tokens.")
    factor: float = Field(1.0, gt=0, description="Penalty at L_max.")


class ReplaySpec(Spec):
    """A replay buffer of prompt groups (the seventh of the off-policy controls: reuse across
    steps): each step trains on its fresh groups plus ``per_step`` groups drawn from the buffer,
    each group at most ``reuse`` more times; beyond ``capacity`` groups the buffer evicts. Replayed
    tokens are counted apart (``replayed_tokens``), never launched or accepted again."""

    capacity: int = Field(32, ge=1, description="Groups the buffer keeps.")
    reuse: int = Field(1, ge=1, description="Times a group may be replayed after its first use.")
    per_step: int = Field(4, ge=1, description="Groups replayed into each step's batch.")
    eviction: Literal["fifo", "random"] = Field(
        "fifo", description="Which group leaves a full buffer: the oldest, or one at random."
    )


class StalenessBound(Spec):
    """A bound on one part of a sample's staleness, in policy versions, and what happens when it
    would be passed."""

    versions: int = Field(ge=0, description="The most versions this part may reach.")
    on_pass: Literal["drop", "wait"] = Field(
        "drop",
        description="drop: a sample past the bound is discarded when consumed (reason "
        "stale_inflight or stale_queue); wait: it never passes: for the in-flight part the trainer "
        "waits before an update for the samples in flight that it would push past the bound, for "
        "the queue part no sample is launched while the finished and running ones could wait "
        "longer than the bound (admission).",
    )


class ConcurrentSpec(Spec):
    """A concurrent collector: rollouts run beside the trainer in another process
    (or a Ray actor) with an engine of its own, on the weights last broadcast to it, while the
    trainer updates. Up to ``queue`` rounds are launched ahead, each reserved on the budget before
    launch; the trainer consumes them in order as they are ready (``consume: round``), or takes
    each group as soon as it finishes and updates when it has a batch's worth (``consume:
    episode``)."""

    queue: int = Field(
        2, ge=1, description="Rounds launched ahead of the trainer (the bounded queue's size)."
    )
    backend: Literal["process", "ray"] = Field(
        "process", description="process: a child process on this machine; ray: a Ray actor."
    )
    restarts: int = Field(
        3, ge=0, description="Times a dead (or stuck) collector is restarted before the run fails."
    )
    round_timeout: float = Field(
        900.0,
        gt=0,
        description="Seconds the trainer waits for a round without any report from the collector "
        "before it counts the collector as stuck and restarts it.",
    )
    keep_spool: bool = Field(
        False,
        description="Keep every round's trajectories in the run directory's spool (for "
        "inspection); by default a round's file is deleted once a checkpoint has counted it.",
    )
    consume: Literal["round", "episode"] = Field(
        "round",
        description="round: whole rounds, in launch order (a round is ready when its longest "
        "episode ends); episode: every launched group is in flight at once (continuous batching) "
        "and handed to the trainer as soon as it finishes, whichever round it came from; the "
        "trainer updates when prompts_per_step groups are in.",
    )
    partial: Literal["continue", "resume", "regenerate"] = Field(
        "continue",
        description="What new weights do to groups in flight (consume: episode; at their next turn "
        "boundary): continue: they finish on their old weights before the new ones load; resume: "
        "they go on with the new weights, keeping their tokens and log-probs (each token tagged "
        "with its version); regenerate: they are aborted (launched and discarded as 'aborted') and "
        "launched again (a group longer than a step's worth of turns may be aborted at every "
        "update: watch async.aborted_units).",
    )
    inflight: StalenessBound | None = Field(
        None,
        description="A bound on the versions a sample falls behind while it is generated (from "
        "its oldest token's version to the trainer's version when it is seen done); None: none.",
    )
    queued: StalenessBound | None = Field(
        None,
        description="A bound on the versions a finished sample falls behind while it waits to be "
        "consumed; None: none.",
    )

    @model_validator(mode="after")
    def _episode_only(self) -> ConcurrentSpec:
        if self.consume == "episode" and self.backend != "process":
            raise ValueError(
                "data.concurrent.consume 'episode' streams groups from a collector process; "
                "backend 'ray' takes whole rounds (consume: round)"
            )
        named = [
            f"{k}{'' if k != 'partial' else ' ' + repr(self.partial)}"
            for k in ("partial", "inflight", "queued")
            if (getattr(self, k) != "continue" if k == "partial" else getattr(self, k) is not None)
        ]
        if named and self.consume != "episode":
            raise ValueError(
                f"data.concurrent.{', '.join(named)}: needs consume: episode (a round collector "
                "loads weights only between whole rounds, and hands rounds over in launch order)"
            )
        return self


class PotentialShaping(Spec):
    """Potential-based shaping: each turn's reward gains gamma Phi(s') - Phi(s),
    Phi the task's potential of a state (``Env.potential()``), 0 at the end of an episode."""

    enabled: bool = Field(False, description="Add the shaping terms to the turn rewards before A.")
    gamma: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Discount of the shaping terms; None: the learner's (advantage.gamma), which "
        "keeps the optimal policy unchanged.",
    )


class WorldModelSpec(Spec):
    """A learned world model: a causal LM copied from the initial policy, trained on the
    real transitions of each step to predict the environment's next observation, the turn's reward
    and the episode's end. Each step's real transitions are its held-out validation before it trains
    on them. After warmup_steps, each step also rolls imagined episodes in it; their steps are
    counted in imagined_env_steps, never in env_steps."""

    imagined_rounds: int = Field(
        1,
        ge=0,
        description="Imagined rounds per step (each prompts_per_step x G episodes in the learned "
        "model), trained on with the step's real round.",
    )
    warmup_steps: int = Field(
        2, ge=0, description="Steps of real rounds only, before the first imagined round."
    )
    train_steps: int = Field(8, ge=1, description="Optimizer steps of the model per step.")
    batch_size: int = Field(16, ge=1, description="Transitions per optimizer step of the model.")
    lr: float = Field(1e-3, gt=0, description="The model's learning rate.")
    buffer: int = Field(
        2048, ge=1, description="The most recent real transitions kept to train the model on."
    )
    max_obs_tokens: int = Field(
        8, ge=1, description="The longest observation the model generates (it stops at a newline)."
    )


class BranchSpec(Spec):
    """Branching counterfactuals: at chosen turns, the environment's state is restored (or the
    seed and action prefix replayed) and M continuations are rolled from it; each branch point's
    continuations form a group, so the group baseline at that turn credits the action by its
    continuation return against its siblings. Every branch token and env step is charged."""

    turns: list[int] = Field(
        [1], min_length=1, description="Turn indices to branch at (0 is the first action)."
    )
    width: int = Field(4, ge=2, description="M: continuations rolled from each branch point.")
    per_group: int = Field(
        1, ge=1, description="Episodes of each task group that branch at each of those turns."
    )


class SearchSpec(Spec):
    """Search as a data source: best-of-N, beam or tree search per prompt, then
    selection. Every sample the search draws is charged to the totals and to the search counters
    (search_tokens, search_env_steps, search_verifier_calls); samples not selected are discarded as
    'search_selection', so the cost of selection stays in the ledger. Selection biases what trains:
    the kept samples are not draws from the policy (search.selection_bias is logged)."""

    mode: Literal["best_of_n", "beam", "tree"] = Field(
        "best_of_n",
        description="best_of_n: n independent samples per prompt, scored by the verifier; beam: "
        "over turns, each kept node expanded 'expand' times and the 'beam' best unfinished "
        "children kept (by the guide); tree: best-first, each round expanding the best frontier "
        "node 'expand' times, 'expansions' rounds. Beam and tree fork the environment (snapshot, "
        "else replay of seed and actions, counted).",
    )
    n: int = Field(8, ge=1, description="best_of_n: samples per prompt.")
    beam: int = Field(2, ge=1, description="beam: unfinished nodes kept per prompt each turn.")
    expand: int = Field(2, ge=1, description="beam/tree: children of each expanded node.")
    expansions: int = Field(
        8,
        ge=1,
        description="tree: expansion rounds per prompt (one node expanded per round); a prompt "
        "whose search reaches no finished episode contributes nothing.",
    )
    guide: Literal["verifier", "value"] = Field(
        "verifier",
        description="What ranks partial episodes (beam/tree): verifier: the return so far plus the "
        "task's potential of the current state (0 where it has none); value: a value model trained "
        "on the tree's own Monte Carlo node values (the mean reward of the finished leaves under "
        "each node), step after step.",
    )
    value_lr: float = Field(1e-4, gt=0, description="guide value: the value model's learning rate.")
    value_steps: int = Field(
        4, ge=1, description="guide value: optimizer steps on each search's tree labels."
    )
    tree_labels: bool = Field(
        False,
        description="beam/tree: give the selected trajectories the tree's Monte Carlo node values "
        "as step labels (the value of the node each action led to), for a process reward model "
        "(advantage.estimator 'prm') to train on, in place of the environment's step labels.",
    )
    select: Literal["best", "all_passing", "all"] = Field(
        "best",
        description="best: the highest-reward sample of each prompt (the first among ties); "
        "all_passing: every sample at or above min_reward; all: every finished sample (for a "
        "policy gradient that needs the whole group). A token shared by several selected leaves "
        "(a beam or tree prefix) trains once, in the first of them.",
    )
    min_reward: float = Field(
        1.0,
        description="A selected sample must reach this reward (rejection sampling); a prompt whose "
        "samples all fall short contributes nothing. Not used by select 'all'.",
    )
    policy: Literal["current", "initial"] = Field(
        "current",
        description="current: search with the policy being trained (expert iteration: search, "
        "distill, repeat); initial: with the frozen initial policy (distillation of its "
        "best-of-N).",
    )

    @model_validator(mode="after")
    def _per_mode(self) -> SearchSpec:
        if self.mode == "best_of_n" and (self.guide != "verifier" or self.tree_labels):
            raise ValueError(
                "data.search.guide / tree_labels: a guide and tree labels need a tree "
                "(mode 'beam' or 'tree'); best_of_n samples independently"
            )
        return self


class SelfPlaySpec(Spec):
    """Self-play: the policy plays a two-player game task (``nim``) against a pool of
    its past checkpoints, the initial policy first. Each task group's games are against one member
    drawn from the pool; the opponents' generated tokens are charged to ``opponent_tokens`` (never
    trained on). Progress is measured apart, against the task's fixed external opponents."""

    pool_size: int = Field(
        4, ge=1, description="Most past checkpoints kept; the oldest leaves when a new one comes."
    )
    snapshot_every: int = Field(
        1, ge=1, description="Steps between adding the current policy to the pool."
    )
    opponents: Literal["uniform", "latest"] = Field(
        "uniform",
        description="uniform: each group's opponent drawn uniformly from the pool; latest: the "
        "newest checkpoint.",
    )
    opponent_temperature: float | None = Field(
        None,
        ge=0,
        description="Sampling temperature of the checkpoint opponents (0: greedy); None: the "
        "rollout's. Their randomness is seeded by the game's position, so replays agree.",
    )


class PairsSpec(Spec):
    """Where the preference pairs of data.source 'preference_pairs' (objective dpo) come from: a
    file of pairs, or (``file`` None) the best and the worst of G scored rollouts of each instance
    from the initial (reference) policy. A file is JSONL or Parquet, one pair a row: columns
    ``prompt``, ``chosen``, ``rejected`` (complete responses), or with ``prefix`` too (segments: the
    two responses share the prefix and differ after it; the loss covers the segment tokens only).
    Its pairs are served prompts_per_step a step, in a shuffled order drawn from the run's seed
    (a new order each pass over the file)."""

    file: str | None = Field(
        None,
        description="A .jsonl or .parquet file of preference pairs (relative to the current "
        "directory); None: pairs from scored rollouts of the initial policy.",
    )
    eos: bool = Field(
        True,
        description="End each complete response of a file with the tokenizer's EOS token, as a "
        "generation that stopped there (segments never: they need not end the response); false: "
        "the text as written.",
    )
    heldout: int = Field(
        16,
        ge=0,
        description="Pairs held out for the distribution-shift evaluation at each evaluation point "
        "(shift.* metrics): from a file, this many of its pairs, the same for every arm and seed, "
        "never trained on; without a file, the pairs of this many held-out instances (the "
        "evaluation split) rolled G times by the initial policy. 0: no shift evaluation.",
    )


class CurriculumSpec(Spec):
    """Difficulty-adaptive sampling over a prompt pool: a prompt whose recent groups all passed or
    all failed is skipped before it is launched, with a probability that grows with the length of
    that streak (GRESO's probabilistic pre-rollout filter, Zheng et al. 2025, with its exploration
    probabilities held fixed). A group's pass rate is the share of its samples with reward >= 1;
    z is the number of the prompt's most recent groups, in a row, whose pass rate was 1 (solved)
    or 0 (unsolved); when drawn, the prompt is skipped with probability 1 - max(p^z, floor), p
    ``explore_solved`` or ``explore_unsolved``. A prompt never tried, or whose latest group was
    mixed, is always launched. Skipped prompts are never launched (no tokens) and are counted by
    the census under the verdict of their streak (all_correct, all_wrong)."""

    kind: Literal["pass_rate"] = Field(
        "pass_rate",
        description="pass_rate: skip prompts by the streak of solved or unsolved groups in their "
        "measured history (the only kind).",
    )
    explore_solved: float = Field(
        0.5,
        ge=0,
        le=1,
        description="p for a streak of solved groups (pass rate 1): after z of them in a row the "
        "prompt is launched with probability max(p^z, floor). 1: never skipped.",
    )
    explore_unsolved: float = Field(
        0.5,
        ge=0,
        le=1,
        description="p for a streak of unsolved groups (pass rate 0), as explore_solved.",
    )
    floor: float = Field(
        0.01,
        gt=0,
        le=1,
        description="The least probability with which a drawn prompt is launched, however long "
        "its streak (GRESO's 0.01): no prompt is shut out for good (data.retire_pass_rate does "
        "that).",
    )


class DataSpec(Spec):
    """(i): which samples, how many per prompt, how often reused."""

    source: Literal["rollouts", "demonstrations", "preference_pairs", "search"] = Field(
        "rollouts",
        description="rollouts: online; demonstrations: SFT; preference_pairs: DPO pairs "
        "(data.pairs: from a file, else from scored rollouts of the initial policy); search: the "
        "trajectories a search selects (data.search), distilled by SFT (objective sft) or trained "
        "by the policy gradient (objective pg: the samples carry the behaviour log-probs of the "
        "distribution actually sampled; the selection biases them).",
    )
    group_size: int | None = Field(
        None, ge=1, description="G samples per prompt; None: the rollout section's group_size."
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose rewards are all equal and resample."
    )
    zero_variance_filter: bool = Field(
        False,
        description="ScaleRL: drop the groups whose rewards are all equal from the step's batch "
        "without resampling (the step trains on fewer groups; census and ledger reason "
        "'zero_variance_filter').",
    )
    prompt_pool: int | None = Field(
        None,
        ge=1,
        description="Train on a fixed pool of N prompts (task instances drawn once from the run's "
        "seed), visited in shuffled passes, instead of a fresh instance each time; None: a fresh "
        "procedurally generated instance for every prompt.",
    )
    retire_pass_rate: float | None = Field(
        None,
        gt=0,
        le=1,
        description="ScaleRL's no-positive-resampling: a prompt whose pass rate over all its "
        "samples so far (reward >= 1 counts as a pass) reaches this value is never sampled again "
        "(the current group still trains); needs data.prompt_pool, where prompts recur. None: "
        "off.",
    )
    max_sampling_rounds: int = Field(
        10, ge=1, description="Cap on generation rounds per step with dynamic sampling."
    )
    on_round_cap: Literal["error", "train_short"] = Field(
        "train_short",
        description="At the cap: error (verl recipe) or train on the short batch (recorded).",
    )
    epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    minibatches: int = Field(1, ge=1, description="Optimizer steps per epoch.")
    overlong_shaping: OverlongShaping = Field(
        OverlongShaping(), description="DAPO length penalty added to R before A."
    )
    potential_shaping: PotentialShaping = Field(
        PotentialShaping(), description="gamma Phi(s') - Phi(s) added to each turn's reward."
    )
    search: SearchSpec = Field(
        SearchSpec(), description="The search of data.source 'search' (best-of-N and selection)."
    )
    pairs: PairsSpec = Field(
        PairsSpec(),
        description="The preference pairs of data.source 'preference_pairs': a file, or scored "
        "rollouts of the initial policy; the pairs held out for the distribution-shift evaluation.",
    )
    branching: BranchSpec | None = Field(
        None,
        description="Branching counterfactuals: M continuations from restored states at chosen "
        "turns, each branch point a group of its own; None: off.",
    )
    world_model: WorldModelSpec | None = Field(
        None,
        description="A learned model of a multi-turn task's environment, trained on real "
        "transitions, that adds imagined episodes to each step (imagined_env_steps); None: off.",
    )
    accuracy_filter: tuple[float, float] | None = Field(
        None,
        description="PRIME's accuracy filter [low, high]: with dynamic sampling, a group whose "
        "mean reward lies outside the band is dropped (census verdict 'accuracy') and resampled; "
        "None: off.",
    )
    staleness: int | None = Field(
        None,
        ge=0,
        description="Bounded staleness: drop samples more than K policy versions behind the "
        "trainer (discard reason 'staleness'); None: no bound.",
    )
    broadcast_every: int = Field(
        1,
        ge=1,
        description="The behaviour policy receives new weights every n policy versions (a version: "
        "the weights after a step's update), so samples come from the last broadcast; 1: every "
        "step.",
    )
    replay: ReplaySpec | None = Field(
        None, description="A replay buffer of past groups (off-policy reuse); None: single use."
    )
    lag: int = Field(
        0,
        ge=0,
        description="Deterministic lag: sample each batch with the policy of k versions earlier (a "
        "ring of weight snapshots, reproducible from the seed); 0: synchronous.",
    )
    concurrent: ConcurrentSpec | None = Field(
        None,
        description="Asynchronous training: a concurrent collector (its own process and engine) "
        "samples ahead of the trainer; None: rollouts run in the trainer's process.",
    )
    self_play: SelfPlaySpec | None = Field(
        None,
        description="Self-play on a two-player game task: the opponents are a pool of past "
        "checkpoints of the policy; None: the task's own (scripted) opponent.",
    )
    curriculum: CurriculumSpec | None = Field(
        None,
        description="Difficulty-adaptive sampling over data.prompt_pool: prompts whose recent "
        "groups all passed or all failed are skipped before launch with a probability that grows "
        "with the streak (data.curriculum.kind 'pass_rate'); None: every drawn prompt is "
        "launched.",
    )

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler, info):
        # the curriculum only where set: a default data blank dumps (run spec and run id,
        # definition, the golden fixture) as it did before the key existed; a dump with the
        # context {"every_field": True} (flatten: explain, diffs) keeps it, as None
        out = handler(self)
        if self.curriculum is None and not (info.context or {}).get("every_field"):
            out.pop("curriculum", None)
        return out

    @model_validator(mode="after")
    def _pairs_file(self) -> DataSpec:
        if self.pairs.file is not None and self.source != "preference_pairs":
            raise ValueError(
                "data.pairs.file: a file of preference pairs is read by data.source "
                f"'preference_pairs' (objective dpo), not '{self.source}'"
            )
        if self.pairs.file is not None and not self.pairs.file.strip():
            raise ValueError("data.pairs.file: an empty path (None: pairs from scored rollouts)")
        return self

    @model_validator(mode="after")
    def _self_play(self) -> DataSpec:
        if self.self_play is not None and (
            self.source != "rollouts" or self.branching is not None or self.concurrent is not None
        ):
            raise ValueError(
                "data.self_play: games against the pool are online rollouts in the trainer's "
                "process (data.source 'rollouts'), not with data.branching or data.concurrent"
            )
        return self
