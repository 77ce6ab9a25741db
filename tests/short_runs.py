"""Short training runs from the golden fixture's initial policy, for the tests of single features:
the policy, config and task loaded once per module, and a run of a preset with blank overrides
under a small launched-token budget."""

from __future__ import annotations

import copy

from sixblanks.algorithms.presets import resolve
from sixblanks.harness.training import RunSettings, Trainer
from tests.golden.record import CONFIG, INITIAL_DIR


def golden_initial():
    """(config, task, initial policy, tokenizer) of the golden fixture."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task

    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    return validate_mapping(CONFIG), make_task("arithmetic"), model, tok


def short_run(initial, preset: str, budget: float = 1200.0, rollout=None, optimizer=None, **over):
    """(trainer, result) of ``preset`` with blank overrides ``over`` (and rollout and optimizer
    updates) from a copy of the initial policy, seed 0, no start evaluation."""

    cfg, task, model0, tok = initial
    s = RunSettings(
        blanks=resolve(preset, over),
        rollout=cfg.rollout.model_copy(update=rollout or {}),
        optimizer=cfg.optimizer.model_copy(update=optimizer or {}),
        budget={"launched_tokens": budget},
        seed=0,
        eval_size=8,
        name=preset,
    )
    trainer = Trainer(s, task, copy.deepcopy(model0), tok)
    return trainer, trainer.train(evaluate_start=False)
