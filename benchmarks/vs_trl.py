"""sixblanks against TRL's GRPOTrainer on the identical configuration, side by side in one run.

Both sides train the same tiny policy (identical initial weights) with GRPO on the same prompts:
8 prompts x 8 samples x 32 new tokens per step (EOS and stop strings ignored on both sides, so
every sample is exactly 32 tokens), fp32 on the CPU, KL coefficient 0 (no reference model),
one optimizer step per batch (one epoch, one minibatch: exactly on-policy), torch AdamW at the
same constant learning rate, weight decay 0 and gradient clipping at 1, clipped ratio
epsilon 0.2, group-normalized advantages and the same loss aggregation (per-sequence token mean,
then the mean over sequences: TRL ``loss_type="grpo"``, sixblanks ``grpo``), no gradient
checkpointing (TRL's ``GRPOConfig`` turns it on by default; the figures below from before
2026-12-06 were measured with it on, which cost TRL a second forward in its update). The reward is
the arithmetic task's verifier on both sides. :class:`Setup` holds the batch, its lengths and the
device and precision; ``benchmarks/gpu_check.py`` runs the same two functions on a GPU.

The runs alternate (sixblanks, TRL, sixblanks, ...; ``--reps`` each) in one invocation; each run
takes ``--steps`` steps after one warm-up step, and its time per step is the median of those.
Printed: steps/s of both, their ratio (median over the alternating pairs, with the pairs' spread
and quartiles), and where a sixblanks step goes (generation, the training forward, backward,
optimizer, other forwards, the rest).

Then the floor of each part: its matrix products alone at the step's shapes (and the sampler's
random draws), and, where the ratio is below the 2.0x target, the step that would reach it and
what generation, or the update and the rest, would have to take against their floors.

Measured here (1 thread each, 5 pairs x 6 steps, six invocations on 2026-12-02): 1.58-1.70x
TRL's steps/s; generation 1.5-1.8x faster than TRL's (floor about 0.02 s/step against 0.06 taken:
per-operation cost on a 0.34M-parameter model), the update and the rest about 1.5x (each shared
prompt computed once; docs/benchmarks.md). The overlapped row (lag 1, a second process):
1.4-2.7x, apart from the comparison. 2026-12-03: 1.64x (pairs 1.46-2.07x); the 2.0x target is
not met: it needs a step of 0.153 s against 0.188, with generation at 0.060 s/step (floor
0.017) and the update's forward and backward at 0.088 (floor 0.057). Later that day, with
AdamW's foreach: 1.56x (pairs 1.49-1.58x; TRL 0.216 s/step, sixblanks 0.139).
2026-12-06, another machine (an AVX2 AMD EPYC) and TRL's gradient checkpointing off: 1.37x
(pairs 1.30-1.41x; TRL 0.261 s/step, sixblanks 0.193, its generation 0.074 against a floor of
0.019). 2026-12-07, an Intel CPU with AVX-512: 1.34x (pairs 0.95-1.42x; TRL 0.199 s/step,
sixblanks 0.147; generation 0.050 against a floor of 0.017, the update and the rest 0.096 against
the update's floor of 0.058: 2.0x would need the update and the rest below that floor).

TRL is a benchmark-only dependency in a venv of its own (``make trl`` builds ``.venv-trl``):

    make trl
    .venv-trl/bin/python benchmarks/vs_trl.py [--steps 5] [--reps 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import sys
import time
from typing import Any

import torch

# the shared setup and TRL's side, in modules of their own (gpu_check.py imports Setup from here)
from trl_side import trl_generation, trl_run
from vs_trl_setup import GROUP, NEW_TOKENS, PROMPTS, SETUP, Parts, Setup, policy, synchronize

TARGET = 2.0  # sixblanks' steps/s over TRL's


# ---------------------------------------------------------------------------------------- sixblanks


def run_settings(setup: Setup = SETUP, overlap: bool = False):
    """The RunSettings of the sixblanks side: GRPO, KL 0, the batch and optimizer of ``setup``."""

    from sixblanks.algorithms.presets import resolve
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.training import RunSettings

    cfg = validate_mapping(
        {
            "task": {"name": "arithmetic"},
            "arms": {"a": {"preset": "grpo"}},
            "rollout": {
                "max_new_tokens": setup.new_tokens,
                "prompts_per_step": setup.prompts,
                "group_size": setup.group,
                "ignore_eos": True,
                "group_seeds": setup.group_seeds,
                "shared_prefix": setup.shared_prefix,
            },
            "optimizer": {"lr": setup.lr, "weight_decay": 0.0, "grad_clip": 1.0},
        }
    )
    over: dict[str, Any] = {"regularizer": {"loss_kl_coef": 0.0}}
    if overlap:
        over["data"] = {"concurrent": {"queue": 1}}
    return RunSettings(
        resolve("grpo", over),
        cfg.rollout,
        cfg.optimizer,
        {"optimizer_steps": 1e9},
        0,
        evaluate=False,
        name="grpo",
        parallel=setup.parallel,
    )


def sixblanks_run(
    task,
    model0,
    tok,
    steps: int,
    parts: Parts | None = None,
    overlap: bool = False,
    setup: Setup = SETUP,
    metrics: list[dict[str, Any]] | None = None,
) -> list[float]:
    """Seconds of each step after the first. ``overlap``: a concurrent collector (a process of
    its own) samples batch k+1 while the trainer updates on batch k (lag 1: not the identical
    algorithm, a separate row). ``metrics``: each step's metrics are appended to it."""

    from sixblanks.harness.training import Trainer

    tr = Trainer(run_settings(setup, overlap), task, copy.deepcopy(model0), tok)
    times = []
    try:
        for i in range(steps + 1):
            if parts is not None:
                parts.on = i > 0  # the warm-up step is not counted
            t0 = time.perf_counter()
            m = tr.step()
            synchronize(setup)
            times.append(time.perf_counter() - t0)
            assert m is not None and m["response_length"] == setup.new_tokens, m
            if metrics is not None:
                metrics.append(m)
    finally:
        if parts is not None:
            parts.on = False
        if overlap:
            tr.collector.close(drain=False)
    return times[1:]


def breakdown(task, model0, tok, steps: int) -> tuple[dict[str, float], float]:
    """Seconds per step of each part of a sixblanks step (one instrumented run)."""

    from sixblanks.harness.rollout.engine import HFEngine
    from sixblanks.harness.training.context import RunContext

    parts = Parts()
    undo = [
        (HFEngine, "generate", parts.wrap(HFEngine, "generate", "generation")),
        (
            RunContext,
            "logprobs",
            parts.wrap(
                RunContext,
                "logprobs",
                None,
                lambda a, k: "training forward" if k.get("grad") else "other forwards (no grad)",
            ),
        ),
        (torch.Tensor, "backward", parts.wrap(torch.Tensor, "backward", "backward")),
        (RunContext, "clip_and_step", parts.wrap(RunContext, "clip_and_step", "optimizer step")),
    ]
    try:
        times = sixblanks_run(task, model0, tok, steps, parts)
    finally:
        for owner, name, real in undo:
            setattr(owner, name, real)
    per = {k: v / steps for k, v in parts.seconds.items()}
    total = sum(times) / steps
    per["rest (advantages, ledger, batching, sync)"] = total - sum(per.values())
    return per, total


def floors(model0, tok, reps: int = 20) -> tuple[float, float]:
    """(generation, update) floors in seconds per step: the matrix products each part cannot
    avoid, timed alone at the step's shapes with the policy's own weights (no other op), plus the
    sampler's draws (one uniform a row and token: the generator stream the tokens come from).

    Generation: per new token, each layer's q/k/v, o, gate/up and down products for the batch's
    ``PROMPTS * GROUP`` rows and the output head. The update: the same products of the training
    forward over every token of the batch, and the two of each in the backward pass (the input's
    and the weight's gradients): the work TRL's update does too."""

    import torch.nn.functional as F

    B = PROMPTS * GROUP
    body = model0.model
    prompt = len(tok("6+6=")["input_ids"])
    N = B * (prompt + NEW_TOKENS)  # training tokens per step
    weights = []
    for layer in body.layers:
        a, m = layer.self_attn, layer.mlp
        weights += [
            torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(),
            a.o_proj.weight.detach(),
            torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach(),
            m.down_proj.weight.detach(),
        ]
    weights.append(model0.lm_head.weight.detach())
    xs = {w.shape[1]: torch.randn(B, w.shape[1]) for w in weights}
    big = {w.shape[1]: torch.randn(N, w.shape[1]) for w in weights}
    grads = {w.shape[0]: torch.randn(N, w.shape[0]) for w in weights}
    gen = torch.Generator().manual_seed(0)

    def generation():
        for _ in range(NEW_TOKENS):
            for w in weights:
                F.linear(xs[w.shape[1]], w)
            torch.rand((B, 1), dtype=torch.float64, generator=gen)

    def update():
        for w in weights:
            F.linear(big[w.shape[1]], w)  # forward
            grads[w.shape[0]] @ w  # input gradient
            grads[w.shape[0]].t() @ big[w.shape[1]]  # weight gradient

    out = []
    for part in (generation, update):
        part()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            part()
            times.append(time.perf_counter() - t0)
        out.append(statistics.median(times))
    return out[0], out[1]


# --------------------------------------------------------------------------------------------- main


def main() -> None:
    """Prints sixblanks against TRL: alternating runs, instrumented runs, floors, the 2x test."""

    args = parse_args()
    try:
        import trl
    except ImportError:
        sys.exit("benchmarks/vs_trl.py needs TRL: run `make trl`, then .venv-trl/bin/python ...")
    quiet_logs()
    torch.set_num_threads(args.threads)
    task, model0, tok = policy()
    n_params = sum(p.numel() for p in model0.parameters())
    print(
        f"tiny policy ({n_params / 1e6:.2f}M parameters), {PROMPTS} prompts x {GROUP} samples x "
        f"{NEW_TOKENS} tokens, fp32, {args.threads} threads, TRL {trl.__version__}, "
        f"torch {torch.__version__}; {args.reps} alternating runs x {args.steps} steps each"
    )
    ours, theirs, ratio = alternating_runs(task, model0, tok, args.steps, args.reps)
    lagged = statistics.median(sixblanks_run(task, model0, tok, args.steps, overlap=True))
    print(
        f"{'sixblanks overlapped (lag 1)':30s} {lagged:8.3f} {1 / lagged:8.2f}   "
        f"{theirs / lagged:.2f}x TRL: a separate row, not the identical algorithm (a collector "
        "process samples batch k+1 during the update on batch k)"
    )
    s_gen, total, t_gen = step_breakdowns(task, model0, tok, args.steps)
    g_floor, u_floor = floors(model0, tok)
    print(
        f"\nfloors (matrix products alone at the step's shapes, the sampler's random draws; "
        f"{args.threads} thread):\n"
        f"  {'generation':30s} {g_floor:7.3f} s/step (sixblanks {s_gen:.3f}, TRL {t_gen:.3f})\n"
        f"  {'the update (fwd + bwd)':30s} {u_floor:7.3f} s/step (the same work on both sides; "
        "sixblanks computes each shared prompt once, so its share is smaller)"
    )
    if ratio >= TARGET:
        print(f"{TARGET}x: met ({ratio:.2f}x, median of {args.reps} alternating pairs)")
        return
    # TRL's step over the target: the sixblanks step that reaches it, and what each part of the
    # step would have to shed, against its floor (the rest of the step as measured)
    need = theirs / TARGET
    scale = ours / total  # instrumented parts to the uninstrumented step
    gen, update = s_gen * scale, (total - s_gen) * scale
    print(
        f"{TARGET}x: not met ({ratio:.2f}x); it needs sixblanks at {need:.3f} s/step "
        f"({ours - need:.3f} s less):\n"
        f"  generation alone would have to take {gen - (ours - need):.3f} s/step "
        f"(now {gen:.3f}, floor {g_floor:.3f})\n"
        f"  or the update and the rest {update - (ours - need):.3f} s/step "
        f"(now {update:.3f}; the update's floor {u_floor:.3f})"
    )


def parse_args() -> argparse.Namespace:
    """The command line's options: timed steps per run, alternating runs, torch threads."""

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="Timed steps per run (after one warm-up).")
    ap.add_argument("--reps", type=int, default=5, help="Alternating runs of each side.")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (both sides).")
    return ap.parse_args()


def quiet_logs() -> None:
    """Silences the warnings and the transformers and TRL logs below errors."""

    import logging
    import warnings

    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)


def alternating_runs(
    task, model0, tok, steps: int, reps: int, setup: Setup = SETUP
) -> tuple[float, float, float]:
    """(sixblanks s/step, TRL s/step, ratio): medians of alternating runs, pairs printed."""

    # one uncounted run of each side first (the process's first run pays one-off start-up costs)
    sixblanks_run(task, model0, tok, 1, setup=setup)
    with contextlib.redirect_stdout(sys.stderr):
        trl_run(task, model0, tok, 1, setup=setup)
    ours, theirs, ratios = [], [], []
    for r in range(reps):
        a = statistics.median(sixblanks_run(task, model0, tok, steps, setup=setup))
        with contextlib.redirect_stdout(sys.stderr):
            b = statistics.median(trl_run(task, model0, tok, steps, setup=setup))
        ours.append(a)
        theirs.append(b)
        ratios.append(b / a)
        print(f"  run {r + 1}: sixblanks {a:.3f} s/step, TRL {b:.3f} s/step, ratio {b / a:.2f}x")
    ours_step, trl_step = statistics.median(ours), statistics.median(theirs)
    print(f"\n{'':30s} {'s/step':>8s} {'steps/s':>8s}")
    print(f"{'TRL GRPOTrainer':30s} {trl_step:8.3f} {1 / trl_step:8.2f}")
    print(f"{'sixblanks (synchronous)':30s} {ours_step:8.3f} {1 / ours_step:8.2f}")
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(
        f"sixblanks / TRL steps/s: {statistics.median(ratios):.2f}x (median of {reps} pairs; "
        f"spread {min(ratios):.2f}-{max(ratios):.2f}x, quartiles {q[0]:.2f}-{q[2]:.2f}x)"
    )
    return ours_step, trl_step, statistics.median(ratios)


def step_breakdowns(task, model0, tok, steps: int) -> tuple[float, float, float]:
    """(sixblanks generation, sixblanks step, TRL generation) s/step, instrumented runs."""

    per, total = breakdown(task, model0, tok, steps)
    print(f"\nwhere a sixblanks step goes ({total:.3f} s/step, instrumented run):")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {k:45s} {v:7.3f} s {100 * v / total:5.1f}%")
    with contextlib.redirect_stdout(sys.stderr):
        t_gen, t_all = trl_generation(task, model0, tok, steps)
    s_gen = per["generation"]
    print(f"\n{'':32s} {'sixblanks':>10s} {'TRL':>8s}   (s/step, instrumented runs)")
    print(f"{'generation':32s} {s_gen:10.3f} {t_gen:8.3f}   ({t_gen / s_gen:.2f}x)")
    print(f"{'the update and the rest':32s} {total - s_gen:10.3f} {t_all - t_gen:8.3f}")
    # the same forward, backward and optimizer work on both sides: what generation alone can buy
    print(
        f"ceiling of the steps/s ratio with sixblanks' generation free: "
        f"{t_all / (total - s_gen):.2f}x (TRL's step over sixblanks' step without generation)"
    )
    return s_gen, total, t_gen


if __name__ == "__main__":
    main()
