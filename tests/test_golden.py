"""The fence around the training loop: every preset reproduces the numbers recorded before the loop
was split into collectors and objectives (tests/golden/record.py): ledger counters and discards
exactly, per-step losses, metrics and held-out scores to 1e-6, the final weights bit for bit."""

import json
import math

import pytest

from tests.golden.record import BUDGET, CONFIG, EVAL_SIZE, GOLDEN_JSON, INITIAL_DIR, record_result

GOLDEN = json.loads(GOLDEN_JSON.read_text())


def _close(a, b, path):
    if isinstance(a, dict):
        assert set(a) == set(b), f"{path}: keys differ: {sorted(set(a) ^ set(b))}"
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: length {len(a)} != golden {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), f"{path}: {a} != golden {b}"
    else:
        assert a == b, f"{path}: {a!r} != golden {b!r}"


@pytest.fixture(scope="module")
def setup():
    import torch
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.tasks import make_task

    torch.set_num_threads(1)
    return validate_mapping(CONFIG), make_task("arithmetic")


@pytest.mark.parametrize("preset", sorted(GOLDEN["presets"]))
def test_preset_reproduces_the_golden_run(setup, preset):
    from sixblanks.algorithms.presets import PRESETS
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.trainer import RunSettings, Trainer

    cfg, task = setup
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    settings = RunSettings(
        blanks=PRESETS[preset].blanks,
        rollout=cfg.rollout,
        optimizer=cfg.optimizer,
        budget=dict(BUDGET),
        seed=0,
        eval_size=EVAL_SIZE,
        name=preset,
    )
    res = Trainer(settings, task, model, tok).train()
    got = record_result(res, model)
    want = GOLDEN["presets"][preset]
    assert got["counters"] == want["counters"]  # exactly
    assert got["discarded_tokens"] == want["discarded_tokens"]
    assert got["discarded_rollouts"] == want["discarded_rollouts"]
    _close(got, want, preset)
