import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# Property tests draw the same examples on every run (derandomized, no example database carried
# between runs): `make test` passes or fails the same way on any machine. `make test-properties`
# runs them under the "random" profile: fresh draws, many more of them (a slow suite, outside CI;
# a failure prints the example to add with @example).
settings.register_profile(
    "pinned", derandomize=True, database=None, max_examples=200, deadline=None, print_blob=True
)
settings.register_profile(
    "random", derandomize=False, database=None, max_examples=5000, deadline=None, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pinned"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# two xdist workers on two cores, each busy: a process of the suite (a command, a run worker) that
# took two torch threads would wait on its second thread at every parallel operation while the
# other worker holds the core (a sweep test took 197 s for 26 s alone beside one busy process, 73 s
# with one thread); inherited by every process the tests start, and honoured by the runs' threads
os.environ.setdefault("OMP_NUM_THREADS", "1")
# a kept worker server is asked for by the tests that test it alone (its keeper outlives a test)
os.environ.pop("SIXBLANKS_KEEP_WARM", None)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one torch thread each, or two in-process training tests side by
    # side oversubscribe the cores and take several times as long (the golden tests set 1 anyway)
    import torch

    torch.set_num_threads(1)

# the chaos suite's totals, printed at the end (tests/chaos/); no process started by a test
# outlives it (checked after each test, and for the whole run at its end)
from .chaos_summary import (  # noqa: E402, F401
    chaos,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)
from .strays import RUN, no_stray_processes, pytest_sessionfinish  # noqa: E402, F401

# the GGUF conversion cache (harness/models.py): one per test run, shared by the xdist workers
# (they inherit the variable), so the suite converts SmolLM2 once, from the file, as a fresh
# machine would; the controlling process removes it at exit
os.environ["SIXBLANKS_CACHE"] = str(Path(tempfile.gettempdir()) / f"sixblanks-test-cache-{RUN}")
if not os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(shutil.rmtree, os.environ["SIXBLANKS_CACHE"], True)


def pytest_collection_modifyitems(config, items):
    """vLLM tests run where vLLM imports (.venv-vllm), the slow ones first. With
    SIXBLANKS_REQUIRE_VLLM=1 (as `make test` sets for that venv) a missing vLLM is an error, never a
    silent skip.

    The vLLM half is a dozen tests, four of them runs of 20-50 s: handed out longest first (and
    one at a time, `--maxschedchunk 1`), its two workers finish together, rather than one running
    a long test after the other ran out of work. Not the main half: there, two heavy tests side by
    side (each several processes) slowed each other by more than the order saved (1145 s of test
    time against 1021, measured)."""

    import importlib.util

    # stable: the other tests keep their order
    items.sort(key=lambda it: not (it.get_closest_marker("vllm") and it.get_closest_marker("slow")))
    wanted = [it for it in items if it.get_closest_marker("vllm")]
    if not wanted or importlib.util.find_spec("vllm") is not None:
        return
    if os.environ.get("SIXBLANKS_REQUIRE_VLLM") == "1":
        raise pytest.UsageError(
            f"SIXBLANKS_REQUIRE_VLLM=1 but vllm does not import in {sys.executable}: "
            "run `make vllm`"
        )
    skip = pytest.mark.skip(reason="vLLM not installed here; `make test` runs these in .venv-vllm")
    for it in wanted:
        it.add_marker(skip)


@pytest.fixture
def cli(capsys):
    """Run the sixblanks CLI in-process: returns (exit code, stdout, stderr)."""

    from sixblanks.harness.cli import main

    def _run(*args: str):
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run


@pytest.fixture
def write_yaml(tmp_path):
    def _write(text: str, name: str = "exp.yaml") -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)

    return _write


sys.path.insert(0, str(ROOT))


def warm_policy(tmp_path_factory, task: str, params: dict, rollout: dict, warm: dict):
    """(config, task, model, tokenizer): a policy warm-started (SFT on oracle demonstrations) on
    ``task`` with ``params``; ``rollout`` and ``warm`` are the config's sections."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.warmstart import warm_start
    from sixblanks.harness.tasks import make_task

    cfg = validate_mapping(
        {
            "task": {"name": task, "params": params},
            "arms": {"a": {"preset": "grpo"}},
            "rollout": rollout,
            "warm_start": warm,
        }
    )
    the_task = make_task(task, params)
    model, tok, _ = warm_start(cfg, [the_task], tmp_path_factory.mktemp("warm"))
    return cfg, the_task, model, tok


@pytest.fixture(scope="session")
def guess_warm(tmp_path_factory):
    """A policy warm-started on guess_number 1-8, 4 guesses."""

    return warm_policy(
        tmp_path_factory,
        "guess_number",
        {"low": 1, "high": 8, "max_turns": 4},
        {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 8},
        {"steps": 30, "num_demos": 500},
    )


def tiny_llama(kv_heads: int, seed: int = 0, **kw):
    """A 2-layer Llama of random weights (``seed``), in eval mode: 4 query heads over ``kv_heads``
    key/value heads, a vocabulary of 50; ``kw``: more of its LlamaConfig."""

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=50,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        **kw,
    )
    return LlamaForCausalLM(cfg).eval()


def record_batches(trainer) -> list:
    """Wrap ``trainer``'s collector so that every batch it hands the loop (None where a step had
    none) is kept, in order, in the returned list."""

    batches, collect = [], trainer.collector.collect

    def recording():
        got = collect()
        batches.append(got.batch)
        return got

    trainer.collector.collect = recording
    return batches


@pytest.fixture
def run_experiment(cli, write_yaml, tmp_path):
    """``run_experiment(cfg)``: `sixblanks run` on the experiment ``cfg`` (a dict; one seed and no
    MLflow unless it says otherwise) into a fresh directory, which it returns; a failed run fails
    the test with the command's error output."""

    import json

    def _run(cfg: dict, *args: str):
        out = tmp_path / "experiment-out"
        full = {"seeds": [0], "tracking": {"mlflow": False}, **cfg}
        code, _, err = cli("run", write_yaml(json.dumps(full)), "--out", str(out), *args)
        assert code == 0, err
        return out

    return _run


def query(out, sql: str) -> list[tuple]:
    """Rows of ``sql`` on the results store of the experiment directory ``out`` (read only)."""

    from sixblanks.harness.store.database import connect

    con = connect(out, read_only=True)
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


class Saved:
    """A trainer's state through the run checkpoint format (harness/checkpoint.py: safetensors, a
    weights-only state, a checksummed manifest), as a killed run's resume reads it back."""

    def __init__(self):
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="sixblanks-ckpt-")) / "checkpoint"

    def save(self, tr) -> None:
        from sixblanks.harness import checkpoint

        checkpoint.save(tr.state_dict(), self.dir, tr.step_idx)

    def load(self) -> dict:
        import shutil

        from sixblanks.harness import checkpoint

        try:
            return checkpoint.load(self.dir)
        finally:
            shutil.rmtree(self.dir.parent, ignore_errors=True)


def screenshot(page: Path, tmp_path: Path, window: str = "1300,2600"):
    """``[H, W, 3]`` ints: ``page`` rendered by headless Chromium. `make test` installs Chromium
    (Makefile, SYSDEPS_STAMP): missing, this fails rather than skips."""

    import subprocess

    import numpy as np
    from PIL import Image

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, (
        "headless Chromium is not installed: run `make test` (it apt-installs chromium)"
    )
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={window}",
            f"--screenshot={shot}",
            Path(page).resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return np.asarray(Image.open(shot).convert("RGB")).astype(int)
