"""The table the side-by-side benchmarks print: one row per figure, a column per mode, and the
second mode's ratio to the first where a ratio means something."""

from __future__ import annotations


def print_side_by_side(
    names: tuple[str, str],
    a: dict[str, float],
    b: dict[str, float],
    rows: list[tuple[str, str, str]],
    ratios: tuple[str, ...],
    label_width: int = 30,
    width: int = 14,
) -> None:
    """``rows``: (label, key, format); ``ratios``: the keys whose b / a is printed."""

    print(f"{'':{label_width}}{names[0]:>{width}}{names[1]:>{width}}{'ratio':>9}")
    for label, key, fmt in rows:
        ratio = b[key] / a[key] if a[key] else float("nan")
        print(
            f"{label:{label_width}}{fmt.format(a[key]):>{width}}{fmt.format(b[key]):>{width}}"
            + (f"{ratio:>8.2f}x" if key in ratios else "")
        )
