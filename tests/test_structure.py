"""The training package's layout shows the design: a thin loop, and collectors and objectives each
in a file of their own, short enough to read in one sitting."""

from pathlib import Path

TRAINING = Path(__file__).resolve().parents[1] / "harness" / "training"


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_loop_is_thin_and_every_collector_and_objective_is_short():
    assert lines(TRAINING / "loop.py") <= 300
    parts = sorted((TRAINING / "collectors").glob("*.py")) + sorted(
        (TRAINING / "objectives").glob("*.py")
    )
    names = {p.stem for p in parts}
    assert {"onpolicy", "greedy", "pairs", "demonstrations"} <= names
    assert {"policy_gradient", "actor_critic", "sft", "dpo", "accumulate"} <= names
    too_long = {p.name: lines(p) for p in parts if lines(p) > 300}
    assert not too_long, too_long


def test_every_preset_maps_to_a_collector_and_an_objective():
    """Each preset's blanks name their collector and objective through the registries."""

    from sixblanks.algorithms.presets import PRESETS
    from sixblanks.harness.training.collectors import (
        Demonstrations,
        OnPolicyRounds,
        PreferencePairs,
    )
    from sixblanks.harness.training.collectors.branching import BranchingRounds
    from sixblanks.harness.training.collectors.search import SearchRounds
    from sixblanks.harness.training.objectives import (
        DPO,
        SFT,
        ActorCritic,
        PolicyGradient,
        ProcessCredit,
    )

    def expected(b):
        if b.objective == "sft":
            return (SearchRounds if b.data.source == "search" else Demonstrations), SFT
        if b.objective == "dpo":
            return PreferencePairs, DPO
        if b.data.branching is not None:
            return BranchingRounds, PolicyGradient
        if b.advantage.estimator in ("prm", "prime"):
            return OnPolicyRounds, ProcessCredit
        return OnPolicyRounds, ActorCritic if b.advantage.estimator == "gae" else PolicyGradient

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.models import load_pretrained
    from sixblanks.harness.tasks import make_task
    from sixblanks.harness.training import RunSettings, Trainer
    from tests.golden.record import CONFIG, INITIAL_DIR

    cfg = validate_mapping(CONFIG)
    model, tok = load_pretrained(INITIAL_DIR, "cpu", "float32")
    seen = set()
    for name, preset in PRESETS.items():
        s = RunSettings(preset.blanks, cfg.rollout, cfg.optimizer, {"launched_tokens": 10.0}, 0)
        # a trained PRM learns from step labels: a task that gives them
        # (branching: a task of more than one turn)
        multi = preset.blanks.advantage.estimator == "prm" or preset.blanks.data.branching
        task = "chain_arithmetic" if multi else "arithmetic"
        tr = Trainer(s, make_task(task), model, tok, ref_model=model)
        col, obj = expected(preset.blanks)
        assert type(tr.collector) is col and type(tr.objective) is obj, name
        seen.add((col, obj))
        assert (
            (tr.collector.greedy is not None) == (name == "remax")
            if col is OnPolicyRounds
            else True
        )
    assert len(seen) == 7


def test_no_module_imports_another_modules_underscore_names():
    """Ruff's PLC2701 misses relative imports inside one package; this scan covers them too."""

    import ast

    root = TRAINING.parents[1]
    found = []
    for folder in ("harness", "algorithms", "budgets", "reports", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    private = [n for n in private if not n.startswith("__")]
                    if private:
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {private}")
    assert not found, "\n".join(found)


def test_command_help_is_reflowed_into_paragraphs(cli):
    """`sixblanks --help`: a command's docstring with hard line breaks reads as whole sentences in
    the help table (the line "a starting preset, why, the" once ended a row mid-sentence)."""

    import re

    code, stdout, _ = cli("--help")
    assert code == 0
    rows = re.findall(r"│ (\w+)? +(.+?) *│", stdout)
    text = " ".join(t for _, t in rows)
    assert "(a starting preset, why, the main warning, the ladder rung to check first)" in text
    # a row's text is cut only where the table wraps: never a short line mid-sentence
    for (_, t), (nxt, _) in zip(rows, rows[1:]):
        if not nxt and len(t) < 50:
            raise AssertionError(f"a help line broken mid-sentence: {t!r}")


def test_collectors_and_objectives_subclass_the_declared_bases():
    """Every collector (a class with ``collect``) subclasses base.Collector and every objective (a
    class with ``prepare`` and ``update``) base.Objective, so the loop calls their optional methods
    (``update_bound``, ``close``, ``worst_extra``) plainly; the bases' defaults do what a collector
    or objective without them needs."""

    import importlib
    import inspect

    from sixblanks.harness.training.base import Collector, Objective

    loose = []
    for folder in ("collectors", "objectives"):
        for path in sorted((TRAINING / folder).glob("*.py")):
            module = importlib.import_module(f"sixblanks.harness.training.{folder}.{path.stem}")
            for name, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ != module.__name__:
                    continue
                if hasattr(cls, "collect") and not issubclass(cls, Collector):
                    loose.append(f"{path.stem}.{name} is not a Collector")
                if hasattr(cls, "prepare") and hasattr(cls, "update"):
                    if not issubclass(cls, Objective):
                        loose.append(f"{path.stem}.{name} is not an Objective")
    assert not loose, loose
    worst = {"rollouts_launched": 4.0, "launched_tokens": 96.0, "verifier_calls": 4.0}
    assert Collector().update_bound(worst) == (4.0, 96.0)
    assert Collector().close() == {} and Collector().close(drain=False) == {}
    assert Objective().worst_extra(8) == {}
    loop = (TRAINING / "loop.py").read_text()
    assert "getattr(self.collector" not in loop and "getattr(self.objective" not in loop
