"""The documentation site builds with ``mkdocs build --strict`` (every page in the nav, every
relative link and anchor resolving), and its generated parts hold what the code has: the
experiment file's keys (from the JSON Schema) and the layout table (from the modules'
docstrings). A broken generator, a moved page or a dead link fails here."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _text(page: Path) -> str:
    """A built page's text, tags stripped (a code span's ``<code>`` split no key)."""

    return unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # no -q: mkdocs counts warnings for --strict only at the levels it logs
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def test_every_page_builds(site: Path) -> None:
    for page in [
        "index.html",
        "guide/running/index.html",
        "guide/recommend/index.html",
        "reference/commands/index.html",
        "reference/experiment-file/index.html",
        "reference/layout/index.html",
        "algorithms/index.html",
        "results-schema/index.html",
        "benchmarks/index.html",
    ]:
        assert (site / page).is_file(), page
    assert (site / "images" / "report.png").is_file()


def test_experiment_file_reference_is_generated(site: Path) -> None:
    text = _text(site / "reference/experiment-file/index.html")
    assert "<!-- generated" not in text and "is generated from the JSON" not in text
    for key in [
        "budget",
        "budget.launched_tokens",
        "rollout.group_size",
        "rollout.vllm.gpu_memory_utilization",
        "warm_start.steps",
        "eval.split",
        "executor.kind",
        "sweep.trial_budget",
        "ladder.credit_variants",
        "arms.<arm>.preset",
        "arms.<arm>.blanks.weight.eps_high",
        "arms.<arm>.blanks.data.group_size",
    ]:
        assert key in text, key
    # the default experiment is included from experiments.yaml itself
    assert "launched_tokens: 30000" in text
    # a default made by a factory is shown (seeds: [0, 1])
    assert re.search(r"seeds\s*list of integer, at least 1\s*\[0, 1\]", text)


def test_layout_table_is_generated(site: Path) -> None:
    text = _text(site / "reference/layout/index.html")
    assert "<!-- generated" not in text
    for path in [
        "harness/orchestration/runner.py",
        "harness/training/loop.py",
        "algorithms/blanks.py",
        "budgets/ledger.py",
        "reports/stats.py",
        "sixblanks/__init__.py",
    ]:
        assert path in text, path
    # each row carries its module's docstring (its first words, whatever they are today)
    runner = ROOT / "harness/orchestration/runner.py"
    doc = (ast.get_docstring(ast.parse(runner.read_text(encoding="utf-8"))) or "").replace("`", "")
    assert " ".join(doc.split()[:5]) in " ".join(text.split())
    # every module of the five folders has a row
    for top in ("sixblanks", "algorithms", "budgets", "harness", "reports"):
        for module in (ROOT / top).rglob("*.py"):
            if module.name != "__init__.py" or top == "sixblanks":
                assert module.relative_to(ROOT).as_posix() in text, module


def test_readme_keeps_the_two_commands_on_top() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.splitlines()[2:6] == [
        "```sh",
        "make run    # create .venv if missing, install the project, run the default experiment",
        "make test   # same set-up (plus .venv-vllm for the vLLM tests), then the test suite",
        "```",
    ]
    # the README's links into docs/ point at pages that exist
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
