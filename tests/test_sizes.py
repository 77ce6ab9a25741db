"""Sizes of the project's code: no module over MAX_LINES lines, and no function over MAX_LOGIC lines
of logic nor over MAX_RAW lines in all, so that each module keeps one job and each function can be
read whole.

A function's lines of logic are the lines of its body that are neither blank, nor a comment alone,
nor its docstring; its raw lines are every line from its ``def`` to its last (decorators left out,
its docstring, comments and blank lines in). A nested function's lines count in the function
around it as well as its own. Modules that are only data (a table written out) are exempt by name,
with the reason, and checked to be mostly data; they are exempt from MAX_RAW too. The allow-lists
hold what was over the limit when this test came, each at the size it had then: they must only
shrink (delete an entry once its module or function is split)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("harness", "algorithms", "budgets", "reports", "sixblanks", "benchmarks")
MAX_LINES = 500
MAX_LOGIC = 60
MAX_RAW = 60

DATA_MODULES = {
    "harness/recommend/matrix.py": "the selection matrix written out as data (the questions, the "
    "rows of estimator, objective and data blanks each recommends and when, their notes, the "
    "starter tasks): a table read whole, which splitting would scatter",
}
"""Modules exempt from MAX_LINES and MAX_RAW: data, not code (checked: at least DATA_SHARE of their
lines are top-level assignments)."""
DATA_SHARE = 0.75

# Modules and functions allowed past the caps while they are split (none now); the lists must only
# shrink: an entry may not grow past the size it is listed at, and nothing is added to them.
LONG_MODULES: dict[str, int] = {}
LONG_FUNCTIONS: dict[str, int] = {}


def _modules() -> list[Path]:
    return [
        path
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "__pycache__" not in path.parts
    ]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _logic_lines(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    first = body[0]
    docstring: set[int] = set()
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        docstring = set(range(first.lineno, first.end_lineno + 1))
    count = 0
    for number in range(first.lineno, node.end_lineno + 1):
        text = lines[number - 1].strip()
        if text and not text.startswith("#") and number not in docstring:
            count += 1
    return count


def _raw_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Every line from the ``def`` line (``ast`` starts a function there, after its decorators) to
    the function's last."""

    return node.end_lineno - node.lineno + 1


def _function_nodes(text: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Each function of a module's source by its qualified name (``Class.method``,
    ``outer.inner``)."""

    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + child.name] = child
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(text), "")
    return out


def _functions(path: Path) -> dict[str, int]:
    """Each function's qualified name (``Class.method``, ``outer.inner``) -> its lines of logic."""

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    return {name: _logic_lines(lines, node) for name, node in _function_nodes(text).items()}


def _over_raw(name: str, text: str) -> list[str]:
    """The functions of module ``name`` (its source ``text``) over MAX_RAW raw lines, one line
    each; none for a data module."""

    if name in DATA_MODULES:
        return []
    return [
        f"{name}::{qualname}: {_raw_lines(node)} lines from def to end (at most {MAX_RAW})"
        for qualname, node in _function_nodes(text).items()
        if _raw_lines(node) > MAX_RAW
    ]


def _data_share(path: Path) -> float:
    """The share of the module's lines inside top-level assignments."""

    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    data = sum(
        node.end_lineno - node.lineno + 1
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
    )
    return data / len(text.splitlines())


def test_no_module_is_over_the_line_limit():
    over = []
    for path in _modules():
        name, size = _name(path), len(path.read_text(encoding="utf-8").splitlines())
        limit = LONG_MODULES.get(name, MAX_LINES)
        if size > limit and name not in DATA_MODULES:
            over.append(f"{name}: {size} lines (at most {limit}): split it along a seam")
    assert not over, "\n".join(over)


def test_the_data_modules_are_data():
    for name in DATA_MODULES:
        share = _data_share(ROOT / name)
        assert share >= DATA_SHARE, f"{name}: only {share:.0%} data; split its code out"


def test_no_function_is_over_the_logic_limit():
    over = []
    for path in _modules():
        for qualname, size in _functions(path).items():
            key = f"{_name(path)}::{qualname}"
            limit = LONG_FUNCTIONS.get(key, MAX_LOGIC)
            if size > limit:
                over.append(f"{key}: {size} lines of logic (at most {limit})")
    assert not over, "\n".join(over)


def test_no_function_is_over_the_raw_limit():
    over = []
    for path in _modules():
        over += _over_raw(_name(path), path.read_text(encoding="utf-8"))
    assert not over, "\n".join(over)


def _synthetic(body_lines: int, blank_every: int = 0) -> str:
    """A decorated function of ``body_lines`` body lines after its ``def`` line (every
    ``blank_every``-th of them blank, where given), so ``body_lines + 1`` raw lines."""

    body = [
        "" if blank_every and i % blank_every == blank_every - 1 else f"    x{i} = {i}"
        for i in range(body_lines - 1)
    ]
    return "\n".join(["@decorator", "def f():", *body, "    return 0", ""])


def test_the_raw_counting():
    """Raw lines run from the def line (decorators left out) to the last line, blank lines and
    comments in: 61 raw lines fail though they hold fewer than 60 lines of logic, 60 pass."""

    over = _synthetic(60, blank_every=3)  # def + 60 body lines: 61 raw, 41 of logic
    (f,) = ast.parse(over).body
    assert _raw_lines(f) == 61
    assert _logic_lines(over.splitlines(), f) == 41
    assert _over_raw("pkg/mod.py", over) == ["pkg/mod.py::f: 61 lines from def to end (at most 60)"]
    assert _over_raw("pkg/mod.py", _synthetic(59)) == []  # 60 raw lines, the decorator not counted
    (g,) = ast.parse(_synthetic(59)).body
    assert _raw_lines(g) == 60
    # a nested function's lines count in its outer function's span as well as its own
    nested = "class C:\n    def m(self):\n        def inner():\n            return 1\n\n" + (
        "        y = 1\n" * 56 + "        return inner\n"
    )
    spans = {q: _raw_lines(n) for q, n in _function_nodes(nested).items()}
    assert spans == {"C.m": 61, "C.m.inner": 2}
    assert _over_raw("pkg/mod.py", nested) == [
        "pkg/mod.py::C.m: 61 lines from def to end (at most 60)"
    ]
    assert _over_raw(next(iter(DATA_MODULES)), over) == []  # a data module is exempt


def test_the_counting_itself():
    """A docstring, comments and blank lines are not logic; a nested function's lines count in
    its outer function too."""

    source = (
        "def f():\n"
        '    """Doc\n'
        '    string."""\n'
        "\n"
        "    # a comment\n"
        "    x = 1\n"
        "    def g():\n"
        "        return x\n"
        "    return g\n"
    )
    tree = ast.parse(source)
    (f,) = tree.body
    assert _logic_lines(source.splitlines(), f) == 4
