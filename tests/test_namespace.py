"""sixblanks installs one namespace, sixblanks.*: PyPI's `algorithms` (a dev dependency, for this
test) imports beside it, and neither shadows the other."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import algorithms, algorithms.sorting
import sixblanks.algorithms, sixblanks.budgets, sixblanks.harness.cli, sixblanks.reports.build
print(algorithms.__file__)
print(sixblanks.algorithms.__file__)
print(hasattr(sixblanks.algorithms, "resolve"), hasattr(algorithms, "resolve"))
"""


def test_pypi_algorithms_and_sixblanks_import_side_by_side(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    pypi, ours = Path(out[0]), Path(out[1])
    assert "site-packages" in pypi.parts and (ROOT / "algorithms") not in pypi.parents
    assert ours == ROOT / "algorithms" / "__init__.py"
    assert out[2] == "True False"


def _project_files():
    """The project's Python files (not the venvs': walking those takes half a minute)."""

    for top in sorted(ROOT.iterdir()):
        if top.name.startswith("."):
            continue
        if top.is_dir():
            yield from (
                p
                for p in top.rglob("*.py")
                if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
            )
        elif top.suffix == ".py":
            yield top


def test_every_project_import_is_namespaced():
    bare = []
    for path in _project_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            words = line.split()
            if len(words) > 1 and words[0] in ("from", "import"):
                if words[1].split(".")[0] in ("harness", "algorithms", "budgets", "reports"):
                    bare.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bare, "imports outside the sixblanks namespace:\n" + "\n".join(bare)


def test_every_subpackage_is_in_the_distribution():
    """An editable install finds subpackages on its own; a wheel holds only the listed ones."""

    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {"sixblanks"} | {
        "sixblanks." + ".".join(init.parent.relative_to(ROOT).parts)
        for root in ("harness", "algorithms", "budgets", "reports")
        for init in (ROOT / root).rglob("__init__.py")
    }
    assert listed == found, f"missing: {sorted(found - listed)}; stale: {sorted(listed - found)}"
