"""What a data-parallel run (``model.parallel`` with ``world_size`` above 1) does not do yet,
refused before any run starts, each with the key to change.

Data parallelism covers on-policy rounds (with dynamic sampling, the zero-variance filter, a
prompt pool) trained by the critic-free policy-gradient objective: each rank samples a share of
every round's groups and trains on a share of every minibatch's rows. The rest is refused here
rather than run differently from its single-process form.
"""

from __future__ import annotations

from typing import Any

from .experiment_config import ExperimentConfig


def _arm_problems(name: str, blanks, rollout) -> list[str]:
    d, a = blanks.data, blanks.advantage
    where = f"arms.{name}"
    refused: list[tuple[bool, str]] = [
        (blanks.objective != "pg", f"objective {blanks.objective} (only the policy gradient)"),
        (a.estimator == "gae", "advantage.estimator gae (the critic is not data-parallel yet)"),
        (a.estimator in ("prm", "prime"), f"advantage.estimator {a.estimator} (a second model)"),
        (a.estimator == "remax", "advantage.estimator remax (its greedy baseline)"),
        (d.source != "rollouts", f"data.source {d.source}"),
        (d.concurrent is not None, "data.concurrent (rounds launched ahead)"),
        (bool(d.lag) or d.broadcast_every > 1, "data.lag / data.broadcast_every"),
        (d.staleness is not None, "data.staleness"),
        (d.replay is not None, "data.replay"),
        (d.self_play is not None, "data.self_play"),
        (d.world_model is not None, "data.world_model"),
        (d.branching is not None, "data.branching"),
        (rollout.grad_noise_probe, "rollout.grad_noise_probe"),
    ]
    return [
        f"{where}: {what} is not data-parallel yet; with model.parallel.world_size above 1 "
        "use on-policy rounds and the policy-gradient objective, or set world_size: 1"
        for bad, what in refused
        if bad
    ]


def parallel_problems(cfg: ExperimentConfig) -> list[str]:
    """Every reason the experiment's data-parallel runs cannot start (none without one)."""

    par = cfg.model.parallel
    if par is None or par.world_size <= 1:
        return []
    out: list[str] = []
    if cfg.model.lora is not None:
        out.append("model.lora with model.parallel: adapters are not data-parallel yet")
    if ":" in cfg.model.device:
        out.append(
            f"model.device {cfg.model.device} with model.parallel: each rank takes the GPU of its "
            "local rank; set model.device: cuda"
        )
    if cfg.model.device == "mps":
        out.append("model.device mps with model.parallel: use cpu (gloo) or cuda (NCCL)")
    for name in cfg.arms:
        try:
            blanks = cfg.resolved_blanks(name)
        except (KeyError, ValueError):
            continue
        out += _arm_problems(name, blanks, cfg.rollout_for(name))
    return out


def parallel_notes(cfg: ExperimentConfig) -> list[str]:
    """What a data-parallel run does differently from a single process, said when it starts."""

    par = cfg.model.parallel
    if par is None or par.world_size <= 1:
        return []
    notes: list[Any] = [
        f"model.parallel: {par.backend} over {par.world_size} ranks; each group is sampled with "
        "its own seed (rollout.group_seeds), so a single process with rollout.group_seeds: true "
        "samples the same batches"
    ]
    if cfg.rollout.shared_prefix:
        notes.append(
            "rollout.shared_prefix is off under data parallelism (its forward calls the model's "
            "submodules past the hooks DDP and FSDP2 synchronize through): every row is forwarded "
            "whole"
        )
    return notes


def refuse_in_one_process(cfg: ExperimentConfig, what: str) -> None:
    """``what`` (the ablation ladder, the sweep) trains its runs inside its own process: a
    data-parallel configuration is refused with a clear error before any of its work."""

    par = cfg.model.parallel
    if par is not None and par.world_size > 1:
        from ..errors import ConfigError

        raise ConfigError(
            f"model.parallel.world_size {par.world_size}: {what} trains its runs in one process "
            "each and is not data-parallel yet; set model.parallel.world_size: 1 (or remove "
            "model.parallel) for it, and use `sixblanks run` for data-parallel runs"
        )
