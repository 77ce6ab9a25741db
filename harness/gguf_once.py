"""Read a GGUF file once per conversion.

transformers converts a GGUF file in three calls of its ``load_gguf_checkpoint``: for the config,
for the tokenizer and for the weights. Each builds a ``gguf.GGUFReader`` of the whole file, whose
metadata (for SmolLM2, a 49,152-token vocabulary and its merges: about 440,000 fields' parts)
is parsed in Python: about 2.3 s a reader. The weights' call then maps every tensor name through
``gguf.get_tensor_name_map(arch, n_blocks)``, building the same table for each of the model's
~400 modules (about 6 ms each). Both are pure functions of their arguments over a file nobody
writes during the conversion, so :func:`gguf_read_once` has each computed once: the same objects
reach transformers, and the conversion is the same tensors, tokens and config.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path

# the patch is module-wide: one conversion at a time holds it (re-entrant: a conversion inside a
# conversion patches over the outer patch and restores it)
_LOCK = threading.RLock()


@contextlib.contextmanager
def gguf_read_once() -> Iterator[dict[str, int]]:
    """Within the block, ``gguf.GGUFReader(path)`` returns one reader per file (read only: the
    file must not change in the block) and ``gguf.get_tensor_name_map`` one table per
    (architecture, block count). Yields the counts ``{"readers": built, "reused": returned
    again}``. Where the ``gguf`` package is missing the block runs unchanged (transformers then
    names what is missing)."""

    counts = {"readers": 0, "reused": 0}
    try:
        import gguf
    except ImportError:
        yield counts
        return
    with _LOCK:
        real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, str], object] = {}

        def reader(path, mode="r"):
            key = (str(Path(path).resolve()), mode)
            if key in readers:
                counts["reused"] += 1
            else:
                readers[key] = real_reader(path, mode)
                counts["readers"] += 1
            return readers[key]

        gguf.GGUFReader = reader
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_map)
        try:
            yield counts
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map
