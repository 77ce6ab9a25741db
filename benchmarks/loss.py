"""Peak memory and time of per-token log-probs + entropy: chunked path vs naive
log_softmax + gather.

Each measurement runs in a fresh subprocess; "extra peak" is the high-water RSS beyond the
[B, T, V] logits tensor itself (which both paths need). The naive path materializes a second
[B, T, V] tensor (log_softmax) and more for the entropy; the chunked path only [B, chunk, V] slices.

    .venv/bin/python benchmarks/loss.py   # forward at 64 x 1024 x 32k, fwd+bwd at 16 x 1024 x 32k
    .venv/bin/python benchmarks/loss.py --B 64 --T 1024 --V 32000 --backward-B 16
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

GiB = 1024**3


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(method: str, B: int, T: int, V: int, backward: bool) -> None:
    import torch

    from sixblanks.algorithms.logprobs import token_logprobs

    torch.manual_seed(0)
    logits = torch.empty(B, T, V).uniform_(-3, 3)
    targets = torch.randint(0, V, (B, T))
    if backward:
        logits.requires_grad_()
    base = _rss()
    t0 = time.perf_counter()
    if method == "chunked":
        lp, ent = token_logprobs(logits, targets, 1.0, entropy=True, chunk=64)
    else:
        logp = torch.log_softmax(logits.float(), dim=-1)
        lp = logp.gather(-1, targets[..., None]).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1)
    if backward:
        (lp.sum() + ent.sum()).backward()
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": dt, "extra_peak": peak - base, "logits": logits.numel() * 4}))


def measure(method: str, B: int, T: int, V: int, backward: bool) -> dict | None:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", method, str(B), str(T), str(V), str(int(backward))],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return None  # killed for memory, most likely
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, method, B, T, V, bwd = sys.argv
        child(method, int(B), int(T), int(V), bool(int(bwd)))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--V", type=int, default=32000)
    ap.add_argument(
        "--backward-B", type=int, default=16, help="batch for the forward+backward comparison"
    )
    args = ap.parse_args()
    for label, B, backward in (
        ("forward", args.B, False),
        ("forward+backward", args.backward_B, True),
    ):
        size = B * args.T * args.V * 4 / GiB
        print(f"{label}: logits [{B}, {args.T}, {args.V}] float32 = {size:.2f} GiB")
        res = {m: measure(m, B, args.T, args.V, backward) for m in ("chunked", "naive")}
        for m, r in res.items():
            if r is None:
                print(f"  {m:8s}: failed (out of memory?)")
            else:
                print(
                    f"  {m:8s}: {r['seconds']:7.2f} s   "
                    f"extra peak {r['extra_peak'] / GiB:6.2f} GiB "
                    f"({r['extra_peak'] / r['logits']:.2f} x the logits)"
                )
        if all(res.values()):
            c, n = res["chunked"], res["naive"]
            print(
                f"  chunked / naive: time {c['seconds'] / n['seconds']:.2f}x, "
                f"extra memory {c['extra_peak'] / max(n['extra_peak'], 1):.3f}x"
            )


if __name__ == "__main__":
    main()
