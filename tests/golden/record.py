"""Records the golden fixture: every preset's per-step metrics, evaluations and ledger on a tiny
budget from a fixed initial policy, and the warm start's SFT losses.

Recorded with the trainer as it stood before the training loop was split into collectors and
objectives (commit 9deaf3b; its warm start logged every SFT loss through a spy on its own SFT loop,
where the current one reports them in ``info["losses"]``). ``tests/test_golden.py`` checks that the
current code reproduces it (ledger counters exactly; scores and losses to 1e-6). Re-recorded once,
for diagnostics only: the trainable-group fraction is measured by the collector on every launched
group before dynamic sampling filters any (all arms, critic ones included; the census gains
``groups_varied``), and the ratio/clip diagnostics are plain means over action tokens (``ratio_min``
added, ``ratio_max`` the maximum over the whole update); ledgers, evaluations, losses and final
weights were unchanged (the warm start's block was kept as recorded); and once more when the
overlong penalty was logged (``overlong_penalty_mean``/``_frac`` added to DAPO's steps, nothing
else); the discard reason ``dis`` (SAO) and the counter ``replayed_tokens`` (replay buffers) were
added to every preset as 0 by hand, as was the discard reason ``unconsumed`` (concurrent
collectors), and the search counters ``search_tokens``, ``search_env_steps``,
``search_verifier_calls`` with the discard reason ``search_selection``, and the counters
``imagined_env_steps`` (world models) and ``opponent_tokens`` (self-play), and the discard reason
``restart``. Re-recorded when the training forward began to compute each shared prompt once
(``rollout.shared_prefix``): before re-recording, the code with ``shared_prefix: false`` reproduced
the old fixture bit for bit; with it on, ledgers, discards and evaluations are unchanged, losses,
gradient norms and KLs moved by at most 1e-4 relative (float32 rounding of the split forward), and
two rounding-sensitive indicators moved (PPO's ``value_clip_frac``, which compares equal values, and
the ``mismatch.*`` sampler-trainer gaps); and when the static-cache decoder changed its arithmetic
(rotary pairs as complex products, attention by ``baddbmm`` over the whole cache): only the
``mismatch.*`` gaps moved (1e-6 to 4e-6), every sampled token and every other number stayed bit for
bit; and when the sampler became inversion of the cumulative distribution (one uniform a row instead
of an exponential a token): a new random stream, so every sampled token and every number after it
changed (the sampler's frequencies are tested against its probabilities in tests/test_rollout.py);
and once more when the shared-prefix forward applied the head to the rows' hidden states in one
block: ledgers, discards and evaluations unchanged, the logged numbers moved by float32 rounding
grown through 19 steps of training (KLs up to a few percent late in a run). Extended (2026-12-02)
with four new per-step diagnostics only (entropy_token_mean, response_length_correct / _incorrect,
trainable_group_frac_kept): every value recorded before was checked unchanged to 1e-6 and kept as it
was. Extended (2026-12-03) the same way with the discard reason ``zero_variance_filter`` (0
everywhere), the census field ``prompts_retired`` (0) and six mismatch diagnostics
(``mismatch.ratio_abs_dev``, ``mismatch.ratio_p1/_p50/_p99``, ``mismatch.ess``,
``mismatch.seq_ess``), DAPO's ``overlong_penalty_correct_frac``, and every preset's
``ratio.seq_logratio_std`` and ``ratio.outlier_seq_frac``. Re-recorded (2026-12-05) when training,
warm-start demonstrations and the held-out sets began to partition the task's problems rather than
its seeds (no training draw makes a held-out problem; the 16 held-out instances are distinct
problems): a change of data, so every number moved (docs/benchmarks.md compares old and new). The
counter ``tool_calls`` (the code tool's programs) was added to every preset and step as 0 by hand
(``tool_seconds`` is a time counter, left out with the others). Recorded again (2026-12-06) on
another machine (an AVX2 AMD EPYC, where the fixture's last bits no longer held) with
``--keep-initial``: the same stored initial policy, no change of code. ``machine`` and
``initial_hash`` were added. ``benchmarks/golden_compare.py`` against the earlier recording: the
first steps' losses and gradient norms within 2.4e-6 relative, every ledger counter, discard and
evaluation the same, and ppo's sampled batches the same up to step 12. A machine with another key
compares with ``tests/test_golden.py``'s rule for other machines. Recorded again (2026-12-06, the
same machine, ``--keep-initial``) for a deliberate change of arithmetic: the training forward
computes the tokens after the shared prompts without their padding, the decoder drops rows that
ended, and AdamW is fused. ``benchmarks/golden_compare.py git:13dd881``: first steps within 1.6e-6
relative, every ledger counter, discard, evaluation and sampled batch the same, no final score
moved.
Re-record only for a deliberate, explained change of the numbers:

    .venv/bin/python tests/golden/record.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

GOLDEN_JSON = HERE / "presets.json"
INITIAL_DIR = HERE / "initial"
CONFIG = {
    "arms": {"a": {"preset": "grpo"}},
    "task": {"name": "arithmetic"},
    "warm_start": {"steps": 150},
    "rollout": {"max_new_tokens": 6, "prompts_per_step": 4, "group_size": 4},
}
BUDGET = {"launched_tokens": 800.0}
EVAL_SIZE = 16


def numbers(d: dict) -> dict:
    """The numeric, reproducible entries of a metrics record (no measured times, no memory: the
    ``memory.*`` metrics were added after the fixture was recorded and peak RSS is measured)."""

    return {
        k: float(v)
        for k, v in d.items()
        if isinstance(v, (int, float))
        and "seconds" not in k
        and not k.startswith("memory.")
        and math.isfinite(float(v))
    }


def machine_key() -> dict:
    """What float32 rounding depends on besides the code: torch's version, the vector instructions
    its kernels dispatch to, and the processor (MKL picks its code path by vendor and model). Two
    machines with the same key give the same bits; another key gives other roundings of the same
    arithmetic (on an AVX2 AMD EPYC against the first recording's machine: first-step losses and
    gradient norms within 1e-5 relative, every counter and sampled token the same)."""

    import platform

    import torch

    cpu = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "model name") and key not in cpu:
                cpu[key] = value.strip()
    except OSError:
        cpu["processor"] = platform.processor()
    return {
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": " / ".join(
            cpu.get(k, "") for k in ("vendor_id", "cpu family", "model", "model name")
        )
        if "vendor_id" in cpu
        else cpu.get("processor", platform.machine()),
    }


def record_result(res, model) -> dict:
    from sixblanks.harness.models import state_hash

    led = res.ledger
    return {
        "steps": [numbers(m) for m in res.steps],
        "evals": [
            {"step": e["step"], "score": e["score"], "n": e["n"], "per_instance": e["per_instance"]}
            for e in res.evals
        ],
        "census": [numbers(c) for c in res.census],
        "counters": {k: v for k, v in led.counters.items() if "seconds" not in k},
        "discarded_tokens": dict(led.discarded_by_reason),
        "discarded_rollouts": dict(led.discarded_rollouts_by_reason),
        "ended_because": res.ended_because,
        "eval_cost": dict(res.eval_cost),
        "policy_hash": state_hash(model),
    }


def golden_trainer(preset: str, cfg=None, task=None):
    """The trainer of ``preset``'s golden run, from the stored initial policy."""

    from sixblanks.algorithms.presets import PRESETS
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer

    cfg = cfg or validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    settings = RunSettings(
        blanks=PRESETS[preset].blanks,
        # every forward as when recorded (the reference's KL logged); tests/test_trainer.py shows
        # that skipping the unused ones gives the same gradients
        rollout=cfg.rollout.model_copy(update={"skip_unused_forwards": False}),
        optimizer=cfg.optimizer,
        budget=dict(BUDGET),
        seed=0,
        eval_size=EVAL_SIZE,
        name=preset,
    )
    return Trainer(settings, task or make_task("arithmetic"), model, tok)


def same_machine(golden: dict) -> bool:
    """Whether this machine rounds as the one that recorded ``golden`` (its ``machine`` key)."""

    return golden.get("machine") == machine_key()


def reference_result(preset: str, cfg=None, task=None) -> dict:
    """The run of ``preset`` to compare with bit for bit: the recording where this machine made it,
    else the same run made here now (a recording's last bits belong to its machine)."""

    golden = json.loads(GOLDEN_JSON.read_text())
    if same_machine(golden):
        return golden["presets"][preset]
    trainer = golden_trainer(preset, cfg, task)
    return record_result(trainer.train(), trainer.model)


def main(argv: list[str] | None = None) -> None:
    """Record the fixture. ``--keep-initial``: on another machine, the same runs from the stored
    initial policy (its files left as they are) and this machine's warm start, so that the new
    recording differs from the old one by this machine's rounding alone
    (``benchmarks/golden_compare.py`` prints how far)."""

    import argparse

    import torch

    from sixblanks.algorithms.presets import PRESETS
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained, save_policy, state_hash
    from sixblanks.harness.orchestration.warmstart import warm_start
    from sixblanks.harness.tasks import make_task

    parser = argparse.ArgumentParser(description="Record the golden fixture.")
    parser.add_argument(
        "--keep-initial",
        action="store_true",
        help="record on another machine: keep the stored initial policy's files",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cfg = validate_mapping(CONFIG)
    task = make_task("arithmetic")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model, tok, info = warm_start(cfg, [task], tmp)
    if not args.keep_initial:
        save_policy(model, tok, INITIAL_DIR)
    out = {"config": CONFIG, "budget": BUDGET, "eval_size": EVAL_SIZE, "machine": machine_key()}
    out["initial_hash"] = state_hash(load_pretrained(INITIAL_DIR, "cpu", "float32")[0])
    out["warm_start"] = {"losses": info["losses"], "policy_hash": info["policy_hash"]}
    out["presets"] = {}
    # the presets recorded before (later presets, e.g. branching ones, need other tasks)
    names = (
        sorted(json.loads(GOLDEN_JSON.read_text())["presets"]) if GOLDEN_JSON.exists() else PRESETS
    )
    for name in sorted(names):
        trainer = golden_trainer(name, cfg, task)
        res = trainer.train()
        out["presets"][name] = record_result(res, trainer.model)
        print(name, len(res.steps), "steps", res.evals[-1]["score"], flush=True)
    GOLDEN_JSON.write_text(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
