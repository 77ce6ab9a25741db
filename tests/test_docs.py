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


def _nav_pages(nav) -> list[str]:
    """Every page of mkdocs.yml's nav, at any depth."""

    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _nav_pages(v)]
    return [p for item in nav for p in _nav_pages(item)]


def test_the_home_page_and_the_nav_link_every_guide() -> None:
    """Every page under docs/guide/ (and docs/reference/) is linked from the home page's "Where to
    go" and listed in mkdocs.yml's nav: a new guide is found from the first page."""

    import yaml

    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    where = index.split("## Where to go", 1)[1]
    linked = set(re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", where))
    nav = set(_nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))
    pages = sorted(
        p.relative_to(ROOT / "docs").as_posix()
        for folder in ("guide", "reference")
        for p in (ROOT / "docs" / folder).glob("*.md")
    )
    assert len(pages) >= 20
    assert not [p for p in pages if p not in linked], "not linked from docs/index.md"
    assert not [p for p in pages if p not in nav], "not in mkdocs.yml's nav"
    assert not [p for p in linked if not (ROOT / "docs" / p).is_file()]


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


# --------------------------------------------------------------------------- measured times

MEASURED = ROOT / "docs" / "benchmarks.md"
DURATION = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)(?:\s*(?:-|to)\s*(\d+(?:\.\d+)?))?\s*(minutes?|min|s)\b"
    r"(?:\s+(\d+(?:\.\d+)?)\s*s\b)?"
)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
SKIPPED = ("Measured times", "Earlier measurements")
"""Sections whose figures no page quotes as current: the table itself, and the dated history."""


def _interval(m: re.Match) -> tuple[float, float]:
    """A duration in seconds, as (low, high): '195 s', '3 min 14 s', 'about 3 minutes' and
    '1-2 minutes' (a range)."""

    scale = 60.0 if m.group(3).startswith("min") else 1.0
    low = float(m.group(1)) * scale + float(m.group(4) or 0)
    high = float(m.group(2)) * scale if m.group(2) else low
    return round(low, 3), round(high, 3)


def _durations(text: str) -> list[tuple[float, float]]:
    return [_interval(m) for m in DURATION.finditer(text)]


def _measurements() -> dict[str, dict]:
    """The table of docs/benchmarks.md's 'Measured times': {measurement (the code span of its first
    cell): its figure, rounding and date}."""

    section = MEASURED.read_text(encoding="utf-8").split("## Measured times\n", 1)[1]
    section = section.split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = re.match(r"`([^`]+)`", cells[0]).group(1)
        figure, rounded = _durations(cells[1]), _durations(cells[2])
        assert len(figure) == 1 and len(rounded) <= 1, row
        out[name] = {"figure": figure[0], "rounded": rounded[0] if rounded else None}
        out[name]["says"] = cells[1] + (f" ({cells[2]})" if cells[2] else "")
        out[name]["date"] = cells[3] if DATE.fullmatch(cells[3]) else None
        out[name]["quotes"] = {figure[0], *rounded}
    return out


def _sentences(text: str) -> list[str]:
    """The prose of a Markdown page as sentences: code blocks and the skipped sections left out,
    each paragraph, list item, table row and heading on its own, its lines joined."""

    text = re.sub(r"```.*?```", "", text, flags=re.S)
    kept, skip_level = [], 0
    for line in text.splitlines():
        heading = re.match(r"(#+)\s+(.*)", line)
        if heading:
            level = len(heading.group(1))
            if skip_level and level <= skip_level:
                skip_level = 0
            if not skip_level and heading.group(2).startswith(SKIPPED):
                skip_level = level
        if not skip_level:
            kept.append(line)
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:[-*+] |\d+\. |\||#))", "\n".join(kept))
    out = []
    for block in blocks:
        if all(line.startswith("    ") for line in block.splitlines() if line.strip()):
            continue  # an indented code block
        out += re.split(r"(?<=[.!?])\s+(?=[A-Z`*(\[])", " ".join(block.split()))
    return out


def _quote_problems(page: str, text: str, table: dict[str, dict]) -> list[str]:
    """Each duration of a sentence belongs to the last measurement the sentence named before it
    (the measurement's code span, e.g. `make run`): it must be that measurement's figure or its
    rounding, and a date in the sentence its date."""

    problems = []
    for sentence in _sentences(text):
        named = [
            (m.start(), m.group(1))
            for m in re.finditer(r"`([^`]+)`", sentence)
            if m.group(1) in table
        ]
        if not named:
            continue
        quoted = set()
        for m in DURATION.finditer(sentence):
            before = [name for pos, name in named if pos < m.start()]
            if not before:
                continue
            name = before[-1]
            quoted.add(name)
            if _interval(m) not in table[name]["quotes"]:
                problems.append(
                    f"{page}: `{name}` quoted as '{m.group(0)}' where the table in "
                    f"docs/benchmarks.md (Measured times) says {table[name]['says']}: "
                    f"{sentence[:120]}"
                )
        for name in sorted(quoted):
            want = table[name]["date"]
            for date in DATE.findall(sentence):
                if want and date != want:
                    problems.append(f"{page}: `{name}` dated {date}, measured on {want}")
    return problems


def test_the_measured_times_table_is_consistent():
    table = _measurements()
    assert {"make run", "make test", "make vllm", "make findings", ".venv"} <= set(table)
    for name, row in table.items():
        if row["rounded"] is not None:  # a rounding of the figure: within half a minute of it
            (lo, hi), (rlo, rhi) = row["figure"], row["rounded"]
            assert abs((lo + hi) / 2 - (rlo + rhi) / 2) <= 30, name
    # the suite is its two halves, measured together
    halves = table["make test-main"]["figure"][0] + table["make test-vllm"]["figure"][0]
    assert table["make test"]["figure"] == (halves, halves)
    assert table["make test"]["date"] == table["make test-main"]["date"]


def test_every_page_quotes_each_measured_time_as_the_table_does():
    """README.md and every page of docs/: a sentence that names a measurement quotes its figure
    (or its rounding) and its date from the one table, so two pages never disagree."""

    table = _measurements()
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    problems, quoted = [], set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        problems += _quote_problems(page.relative_to(ROOT).as_posix(), text, table)
        quoted |= {s for s in _sentences(text) if "`make run`" in s and _durations(s)}
    assert not problems, "\n".join(problems)
    assert len(quoted) >= 4  # README, the home page, the running guide, the benchmarks page


def test_a_page_that_quotes_another_figure_is_caught():
    """The check fails on the disagreements it exists for: another rounding of a measurement, an
    older figure, another date; a duration after another measurement's name is that one's."""

    table = _measurements()
    run = table["make run"]["figure"][0]
    assert _interval(DURATION.search("3 min 14 s")) == (194.0, 194.0)
    assert _interval(DURATION.search("about 4 to 5 minutes")) == (240.0, 300.0)
    page = (
        "`make run` takes about 4 to 5 minutes on a 2-core CPU.\n\n"
        f"`make run` took {run + 45:g} s, measured on 2026-12-03.\n\n"
        f"`make run` takes {run:g} s (`make vllm`, about 3 minutes the first time).\n\n"
        "```sh\nmake run    # `make run` takes 9 minutes\n```\n"
    )
    problems = _quote_problems("page.md", page, table)
    assert len(problems) == 3, problems
    assert "'4 to 5 minutes'" in problems[0] and f"says {run:g} s" in problems[0]
    assert f"'{run + 45:g} s'" in problems[1]
    assert "dated 2026-12-03" in problems[2]


# --------------------------------------------------------------------------- the golden fixture


def test_the_layout_page_states_the_golden_fixtures_scope():
    """docs/reference/layout.md says how many presets the golden fixture pins, of how many, and
    names the others: the numbers and names are the fixture's and the registry's."""

    import json

    from sixblanks.algorithms.presets import PRESETS

    golden = set(json.loads((ROOT / "tests" / "golden" / "presets.json").read_text())["presets"])
    text = " ".join((ROOT / "docs" / "reference" / "layout.md").read_text().split())
    m = re.search(r"holds the numbers of (\d+) of the (\d+) presets", text)
    assert m, "layout.md no longer states the golden fixture's scope"
    assert (int(m.group(1)), int(m.group(2))) == (len(golden), len(PRESETS))
    unpinned = re.search(r"The (\d+) presets it does not pin: ([^.]+)\.", text)
    assert unpinned and int(unpinned.group(1)) == len(PRESETS) - len(golden)
    assert re.findall(r"`([^`]+)`", unpinned.group(2)) == sorted(set(PRESETS) - golden)


# --------------------------------------------------------------------------- tables fit the page

WIDTHS = (1300, 1024)
"""Browser windows the tables must fit without a horizontal scroll: a laptop's, and the narrowest
that still shows the navigation beside the text (below it a phone scrolls a wide table)."""

PROBE = """<!doctype html><html><body><pre id="widths"></pre><script>
const jobs = %s, results = [];
function measure(doc, job) {
  const col = doc.querySelector(".md-content__inner");
  const tables = [...col.querySelectorAll("table")].map((t) => {
    let over = t.scrollWidth - col.clientWidth;
    for (let el = t; el && el !== col; el = el.parentElement) {
      over = Math.max(over, el.scrollWidth - el.clientWidth);  // a box that scrolls sideways
    }
    const head = t.querySelector("tr") ? t.querySelector("tr").innerText : "";
    return {head: head.replace(/\\s+/g, " ").slice(0, 60), over: over};
  });
  return {page: job.page, width: job.width, column: col.clientWidth, tables: tables,
          wrapped: doc.querySelectorAll(".md-typeset__scrollwrap").length,
          words: doc.querySelectorAll("td:first-child code > span").length};
}
function next(i) {
  if (i >= jobs.length) {
    document.getElementById("widths").textContent = JSON.stringify(results);
    return;
  }
  const frame = document.createElement("iframe");
  frame.style.width = jobs[i].width + "px";
  frame.style.height = "900px";
  frame.onload = () => setTimeout(() => {
    results.push(measure(frame.contentDocument, jobs[i]));
    frame.remove();
    next(i + 1);
  }, 100);
  frame.src = jobs[i].page;
  document.body.appendChild(frame);
}
next(0);
</script></body></html>
"""
"""A page of the built site that loads each job's page in a frame of the job's width (the page's
own media queries and scripts apply: Material wraps each table in a box that scrolls sideways)
and writes, for each table, how many pixels it is wider than the content column or than a box
around it: 0 or less where it fits."""


def _table_widths(site: Path, pages: list[str], tmp_path: Path) -> list[dict]:
    import json
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, (
        "headless Chromium is not installed: run `make test` (it apt-installs chromium)"
    )
    jobs = [{"page": page, "width": w} for page in pages for w in WIDTHS]
    probe = site / "table-widths-probe.html"
    probe.write_text(PROBE % json.dumps(jobs), encoding="utf-8")
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--allow-file-access-from-files",  # the probe reads its frames' pages
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,1000",
            "--virtual-time-budget=600000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    m = re.search(r'<pre id="widths">(.*?)</pre>', proc.stdout, flags=re.S)
    assert m and m.group(1), (
        f"the probe wrote nothing:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    results = json.loads(unescape(m.group(1)))
    assert [(r["page"], r["width"]) for r in results] == [(j["page"], j["width"]) for j in jobs]
    return results


def test_every_table_fits_its_page_in_headless_chromium(site: Path, tmp_path: Path) -> None:
    """No table of the built site is wider than its page's content column (none needs a horizontal
    scroll) at the widths above; the python-api page's table did before tables.css and tables.js,
    and still does without them (the check sees what it exists for)."""

    pages = sorted(
        p.relative_to(site).as_posix()
        for p in site.rglob("index.html")
        if "<table" in p.read_text(encoding="utf-8")
    )
    for page in ("guide/python-api/index.html", "reference/commands/index.html"):
        assert page in pages
    assert "results-schema/index.html" in pages
    # the python-api page as it was: without the stylesheet and the script that make it fit
    api = (site / "guide/python-api/index.html").read_text(encoding="utf-8")
    bare = re.sub(r"<link[^>]*tables\.css[^>]*>|<script[^>]*tables\.js[^>]*></script>", "", api)
    assert bare != api
    (site / "guide/python-api/bare.html").write_text(bare, encoding="utf-8")

    results = _table_widths(site, [*pages, "guide/python-api/bare.html"], tmp_path)
    *checked, (bare_wide, bare_narrow) = [results[i : i + 2] for i in range(0, len(results), 2)]
    assert all(b["tables"][0]["over"] > 50 for b in (bare_wide, bare_narrow)), bare_wide
    too_wide = []
    for r in (r for pair in checked for r in pair):
        assert r["column"] > 600 and r["tables"], r  # the page laid out, with its tables
        assert r["wrapped"] == len(r["tables"]), r  # Material's script ran
        too_wide += [
            f"{r['page']} at {r['width']} px: the table '{t['head']}' is {t['over']} px too wide"
            for t in r["tables"]
            if t["over"] > 1
        ]
    assert not too_wide, "\n".join(too_wide)
    commands = next(r for r in results if r["page"] == "reference/commands/index.html")
    assert commands["words"] > 20  # tables.js ran: the usages wrap between their words
