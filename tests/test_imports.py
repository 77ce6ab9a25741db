"""The house's import rules, walked over every module's imports (relative and absolute
``sixblanks.*`` ones, at the top or inside a function, under TYPE_CHECKING too): no import circle,
and the arrows point one way (algorithms/ and budgets/ import nothing else of the project, reports/
nothing of harness/, rollouts nothing of training, tasks nothing of the rollout engines, and only
the store opens results.duckdb for writing)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("harness", "algorithms", "budgets", "reports")


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package's __init__)."""

    out = {}
    for top in TOPS:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            package = parts[-1] == "__init__"
            out[".".join(["sixblanks", *(parts[:-1] if package else parts)])] = (path, package)
    return out


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The project modules ``name`` imports, anywhere in its body. ``from pkg import x`` is an
    import of pkg.x where x is a module, else of pkg (its __init__)."""

    path, package = MODULES[name]
    here = name.split(".") if package else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in MODULES else base)
    found = set()
    for t in targets:
        parts = t.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        if parts and ".".join(parts) != name:
            found.add(".".join(parts))
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def _edge_path(comp: list[str]) -> str:
    """The shortest circle through the component's first module, as a chain of imports."""

    start = comp[0]
    paths = {w: [start, w] for w in GRAPH[start] if w in comp}
    queue = list(paths)
    while start not in paths:
        v = queue.pop(0)
        for w in sorted(GRAPH[v]):
            if w in comp and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return " -> ".join(m.removeprefix("sixblanks.") for m in paths[start])


def test_the_walker_sees_relative_lazy_and_absolute_imports():
    """The walker itself: a known lazy relative import, a known absolute one, and a package."""

    assert "sixblanks.harness.config" in GRAPH["sixblanks.harness.cli.describe"]
    assert "sixblanks.algorithms.presets" in GRAPH["sixblanks.harness.config.sections.arms"]
    assert "sixblanks.budgets.counters" in GRAPH["sixblanks.budgets.ledger"]


def test_no_import_circle():
    cycles = _cycles()
    assert not cycles, "import circles:\n" + "\n".join(_edge_path(c) for c in cycles)


def _crossing(src: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m.removeprefix('sixblanks.')} imports {t.removeprefix('sixblanks.')}"
        for m, targets in GRAPH.items()
        if m == src or m.startswith(src + ".")
        for t in targets
        if any(t == f or t.startswith(f + ".") for f in forbidden)
    )


def test_the_arrows_point_one_way():
    s = "sixblanks."
    rules = [
        (s + "algorithms", (s + "harness", s + "budgets", s + "reports")),
        (s + "budgets", (s + "harness", s + "algorithms", s + "reports")),
        (s + "reports", (s + "harness",)),
        (s + "harness.rollout", (s + "harness.training",)),
        (s + "harness.tasks", (s + "harness.rollout", s + "harness.training")),
    ]
    broken = [line for src, forbidden in rules for line in _crossing(src, forbidden)]
    assert not broken, "\n".join(broken)


LAYERS = (
    "cli",
    "recommend",
    "translate",
    "studies",
    "orchestration",
    "fairness",
    "store",
    "training",
    "rollout",
    "tasks",
)
"""harness/'s parts, top to bottom; every other module of its root is the ground floor, below
all."""

UPWARD_ALLOWED = {
    # the experiment file is checked against the task registry (names, parameters, judges) before
    # anything runs: validation, not use
    ("config", "tasks"),
}


def _layer(module: str) -> tuple[str, int] | None:
    parts = module.split(".")
    if parts[1] != "harness" or len(parts) < 3:
        return None
    name = parts[2] if parts[2] in LAYERS else "ground"
    return name, LAYERS.index(name) if name in LAYERS else len(LAYERS)


def test_harness_imports_point_down_its_layers():
    """cli, recommend and translate -> studies -> orchestration -> fairness -> store -> training ->
    rollout -> tasks -> the ground floor (config, errors, layout, ...): no module imports one of a
    layer above it."""

    up = []
    for m, targets in GRAPH.items():
        for t in targets:
            a, b = _layer(m), _layer(t)
            if a and b and b[1] < a[1] and (m.split(".")[2], b[0]) not in UPWARD_ALLOWED:
                up.append(f"{m.removeprefix('sixblanks.')} imports {t.removeprefix('sixblanks.')}")
    assert not up, "imports up the layers:\n" + "\n".join(sorted(up))


def test_only_the_store_opens_results_duckdb_for_writing():
    """Every other duckdb.connect in the project passes read_only=True."""

    writers = []
    for name, (path, _) in MODULES.items():
        for m in re.finditer(r"duckdb\.connect\((.*)\)", path.read_text()):
            if "read_only=True" not in m.group(1) and not name.startswith(
                "sixblanks.harness.store.database"
            ):
                writers.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not writers, "\n".join(writers)


def test_reading_and_checking_an_experiment_file_imports_no_torch():
    """`sixblanks validate` and the first moments of `run` read the file, resolve every arm's
    blanks and check its tasks and data files without torch (about 1.5 s of a fresh interpreter,
    and 2.5 s of `validate`'s 3); `run` then drafts the run ids (the warm start's key) and looks
    for its cached warm start, also without torch, while its workers import it: a fresh
    interpreter does all of it and torch is still not imported."""

    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sixblanks.harness.config import load_config\n"
        "from sixblanks.harness.orchestration.data_files import check_data_files\n"
        f"cfg = load_config({str(ROOT / 'experiments.yaml')!r})\n"
        "[cfg.resolved_blanks(a) for a in cfg.arms]\n"
        "check_data_files(cfg)\n"
        "from sixblanks.harness.orchestration.plan import draft\n"
        "from sixblanks.harness.orchestration.warm_key import cached_warm_start\n"
        "tasks, key, specs = draft(cfg)\n"
        "assert len(specs) == len(cfg.arms) * len(cfg.seeds) and len(key) == 16\n"
        "assert cached_warm_start('/nonexistent') is None\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_every_public_name_of_algorithms_resolves_from_its_module():
    """algorithms/ imports its names where first used: every name of ``__all__`` is in the map and
    resolves to the object its own module defines."""

    import importlib

    import sixblanks.algorithms as algorithms

    assert set(algorithms._WHERE) == set(algorithms.__all__)
    assert len(algorithms.__all__) > 30 and "resolve" in algorithms.__all__
    for name, module in algorithms._WHERE.items():
        own = importlib.import_module(f"sixblanks.algorithms.{module}")
        assert getattr(algorithms, name) is getattr(own, name), name


def test_the_names_for_type_checkers_are_the_names_the_map_resolves():
    """algorithms/__init__.py's ``if TYPE_CHECKING:`` imports (what type checkers and readers see)
    name each public name from the module ``_WHERE`` resolves it from, and no other."""

    import sixblanks.algorithms as algorithms

    tree = ast.parse(Path(algorithms.__file__).read_text())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname is None, ast.unparse(node)
            seen[alias.name] = node.module
    assert seen == algorithms._WHERE


def test_the_modules_after_the_runs_are_imported_meanwhile_and_a_failure_is_left_to_its_user():
    """The command imports what follows its runs (the store, the report) in a background thread
    while they train: after the block they are imported; one that fails is skipped silently (it
    fails again, with its own error, where it is used) and the others still come."""

    import sys

    from sixblanks.harness.orchestration.prefetch import AFTER_RUNS, imported_meanwhile

    wanted = ["colorsys", "sixblanks_no_such_module", "wave"]
    for name in ("colorsys", "wave"):
        sys.modules.pop(name, None)
    with imported_meanwhile(wanted):
        pass
    assert "colorsys" in sys.modules and "wave" in sys.modules
    assert "sixblanks_no_such_module" not in sys.modules
    assert "sixblanks.reports.build" in AFTER_RUNS and "matplotlib.pyplot" in AFTER_RUNS
