"""A result's identity: every input that decides a run (its data file's content, a user verifier
and what it imports from the user's tree, at any depth) is in its run id and the warm-start key, so
that editing one makes the same command train afresh; relative paths are read from the experiment
file's directory; a verifier that cannot be called is refused before anything runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sixblanks.harness.config import load_config, resolved_dict
from sixblanks.harness.errors import ConfigError

ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]


def write_rows(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def user_tree(tmp_path, monkeypatch):
    """A package of the user's, importable here and in the run workers: a verifier whose rule is in
    a helper's helper (verify -> rules -> leaf)."""

    pkg = tmp_path / "idpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "verify.py").write_text(
        "from idpkg.rules import same\n\n"
        "def judge(response, answer, row):\n"
        "    return float(same(response, answer))\n"
    )
    (pkg / "rules.py").write_text(
        "from .leaf import norm\n\ndef same(a, b):\n    return norm(a) == norm(b)\n"
    )
    (pkg / "leaf.py").write_text("def norm(s):\n    return s.strip()\n")
    (pkg / "bad.py").write_text("def judge(response, answer):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    yield pkg
    for name in [m for m in sys.modules if m == "idpkg" or m.startswith("idpkg.")]:
        sys.modules.pop(name)


def experiment(data: str, verifier: str = "idpkg.verify:judge") -> dict:
    return {
        "name": "identity",
        "seeds": [0],
        "tracking": {"mlflow": False},
        "task": {"name": "dataset", "params": {"path": data, "verifier": verifier}, "eval_size": 8},
        "rollout": {"max_new_tokens": 3, "prompts_per_step": 2, "group_size": 2},
        "warm_start": {"steps": 4, "num_demos": 16},
        "budget": {"launched_tokens": 24},
        "arms": {"grpo": {"preset": "grpo"}},
    }


def test_relative_paths_are_read_from_the_experiment_files_directory(tmp_path, monkeypatch):
    """A data file and a file of pairs named relative to the experiment file are found from any
    current directory and recorded resolved; a path written relative to the current directory (the
    old rule) is refused with the path to write instead."""

    sub = tmp_path / "study"
    sub.mkdir()
    write_rows(sub / "data.jsonl", ROWS)
    (sub / "pairs.jsonl").write_text(
        "".join(
            json.dumps({"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": str(i)}) + "\n"
            for i in range(6)
        )
    )
    exp = experiment("data.jsonl", verifier="exact")
    exp["arms"]["dpo"] = {"preset": "dpo", "blanks": {"data": {"pairs": {"file": "pairs.jsonl"}}}}
    (sub / "exp.yaml").write_text(json.dumps(exp))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(sub / "exp.yaml")
    resolved = resolved_dict(cfg)
    assert resolved["tasks"][0]["params"]["path"] == str(sub / "data.jsonl")
    assert resolved["arms"]["dpo"]["blanks"]["data"]["pairs"]["file"] == str(sub / "pairs.jsonl")

    monkeypatch.chdir(tmp_path)  # the old rule: study/data.jsonl from the current directory
    (sub / "old.yaml").write_text(json.dumps(experiment("study/data.jsonl", verifier="exact")))
    with pytest.raises(ConfigError) as err:
        load_config(sub / "old.yaml")
    assert "task.params.path: 'study/data.jsonl' is not in" in str(err.value)
    assert "write 'data.jsonl'" in str(err.value)


def test_a_verifier_with_a_wrong_signature_is_refused_before_anything_runs(
    user_tree, tmp_path, cli, write_yaml
):
    """fn(response, answer) where the runs call fn(response, answer, row): `validate` and
    `sixblanks.run` name the key and the TypeError, and nothing is written."""

    import sixblanks

    data = tmp_path / "data.jsonl"
    write_rows(data, ROWS)
    exp = experiment(str(data), verifier="idpkg.bad:judge")
    code, _, err = cli("validate", write_yaml(json.dumps(exp)))
    assert code == 2
    assert "task.params.verifier: 'idpkg.bad:judge' failed when called as" in err
    assert "TypeError" in err
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as exc:
        sixblanks.run(exp, out)
    assert "task.params.verifier: 'idpkg.bad:judge'" in str(exc.value)
    assert not out.exists()


def test_editing_the_data_or_a_deep_helper_of_the_verifier_trains_afresh(
    user_tree, tmp_path, cli, write_yaml
):
    """The same command three times: as written; after an edit to the verifier's helper's helper
    (the verifier and the first helper untouched); after an edit to one answer of the data file.
    Each edit gives a new run id that is trained (not reported finished), and the data edit a new
    warm start too (its demonstrations are the file's answers)."""

    data = tmp_path / "data.jsonl"
    write_rows(data, ROWS)
    config = write_yaml(json.dumps(experiment(str(data))))
    out = tmp_path / "out"

    def run(*flags: str) -> tuple[str, dict, str]:
        code, _, err = cli("run", config, "--out", str(out), "--no-progress", *flags)
        assert code == 0, err
        (run_id,) = json.loads((out / "experiment.json").read_text())["runs"]
        status = json.loads((out / "runs" / run_id / "status.json").read_text())
        assert status["state"] == "finished"
        spec = json.loads((out / "runs" / run_id / "spec.json").read_text())
        return run_id, spec, " ".join(err.split())

    machine = Path(os.environ["SIXBLANKS_CACHE"]) / "warm_start"
    first, spec1, _ = run("--no-cache")  # the machine's cache neither read nor written
    assert not (machine / spec1["warm_start_key"]).exists()
    assert set(spec1["task_inputs"]["modules"]) == {
        "idpkg",
        "idpkg.verify",
        "idpkg.rules",
        "idpkg.leaf",
    }
    (user_tree / "leaf.py").write_text("def norm(s):\n    return s.strip().lstrip('0') or '0'\n")
    second, spec2, said = run()
    assert second != first
    assert (machine / spec2["warm_start_key"] / "warm_start.json").exists()
    assert f"grpo seed 0: module idpkg.leaf changed since run {first}; run {second}" in said
    changed = {
        m
        for m, h in spec2["task_inputs"]["modules"].items()
        if spec1["task_inputs"]["modules"][m] != h
    }
    assert changed == {"idpkg.leaf"}
    write_rows(data, [{**ROWS[0], "answer": "1"}, *ROWS[1:]])
    third, spec3, said = run()
    assert third not in (first, second)
    assert f"grpo seed 0: data file {data} changed since run {second}; run {third}" in said
    assert spec3["warm_start_key"] != spec2["warm_start_key"]
    assert spec3["task_inputs"]["files"] != spec2["task_inputs"]["files"]
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted([first, second, third])
    # each was trained by its own command: every run directory holds a finished run's ledger
    for rid in (first, second, third):
        ledger = [
            json.loads(x) for x in (out / "runs" / rid / "ledger.jsonl").read_text().splitlines()
        ]
        assert ledger, rid


def test_a_run_whose_inputs_changed_after_planning_is_refused_and_the_audit_sees_them(tmp_path):
    """A data file edited between planning and the run: the run refuses, naming the file. Two arms
    whose runs recorded different versions of it differ in the audit's task item."""

    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.errors import SixblanksError
    from sixblanks.harness.fairness.audit import spec_items
    from sixblanks.harness.orchestration.orchestrator import build_specs
    from sixblanks.harness.orchestration.runner import check_inputs_unchanged

    data = tmp_path / "data.jsonl"
    write_rows(data, ROWS)
    exp = experiment(str(data), verifier="exact")
    exp["arms"]["rloo"] = {"preset": "rloo"}
    cfg = validate_mapping(exp)
    before = {s.arm: s for s in build_specs(cfg, "k", code="c")}
    check_inputs_unchanged(before["grpo"])  # as planned: runs
    write_rows(data, ROWS[:-1])
    with pytest.raises(SixblanksError, match=f"data file {data} changed after the run was planned"):
        check_inputs_unchanged(before["grpo"])
    after = {s.arm: s for s in build_specs(cfg, "k", code="c")}
    assert after["grpo"].run_id != before["grpo"].run_id
    warm = {"policy_hash": "p", "tokenizer": {"t": 1}}
    same = (
        spec_items(before["grpo"], cfg, warm)["task"],
        spec_items(before["rloo"], cfg, warm)["task"],
    )
    mixed = (
        spec_items(before["grpo"], cfg, warm)["task"],
        spec_items(after["rloo"], cfg, warm)["task"],
    )
    assert same[0] == same[1]
    assert mixed[0] != mixed[1] and mixed[0]["inputs"]["files"] != mixed[1]["inputs"]["files"]


def test_a_moved_experiment_keeps_its_run_ids_and_warm_start(tmp_path):
    """The same experiment file and data file in two directories: the specs record each resolved
    path, the run ids and the warm-start key (data by content) are the same; an edit to one copy's
    data changes its ids alone."""

    from sixblanks.harness.orchestration.orchestrator import build_specs
    from sixblanks.harness.orchestration.warmstart import warm_start_key
    from sixblanks.harness.tasks import make_task

    seen = []
    for where in ("a", "b"):
        d = tmp_path / where
        d.mkdir()
        write_rows(d / "data.jsonl", ROWS)
        (d / "exp.yaml").write_text(json.dumps(experiment("data.jsonl", verifier="exact")))
        cfg = load_config(d / "exp.yaml")
        key = warm_start_key(cfg, [make_task(t.name, t.params) for t in cfg.tasks])
        (spec,) = build_specs(cfg, key, code="c")
        assert spec.task_params["path"] == str(d / "data.jsonl")
        seen.append((key, spec.run_id))
    assert seen[0] == seen[1]
    write_rows(tmp_path / "b" / "data.jsonl", ROWS[1:])
    cfg = load_config(tmp_path / "b" / "exp.yaml")
    key = warm_start_key(cfg, [make_task(t.name, t.params) for t in cfg.tasks])
    assert key != seen[0][0] and build_specs(cfg, key, code="c")[0].run_id != seen[0][1]


def test_the_module_walk_imports_nothing_and_follows_what_is_configured(tmp_path, monkeypatch):
    """A verifier whose lazy import would fail (and print) if imported, a helper that does not
    parse, and a verifier wrapped by functools.partial: the walk imports none of them, hashes the
    user's files it finds, and names the configured module whatever the function reports."""

    from sixblanks.harness.config import TaskConfig
    from sixblanks.harness.orchestration.data_files import task_inputs, user_modules

    (tmp_path / "boom.py").write_text("print('imported!')\nraise RuntimeError('imported')\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "lazy.py").write_text(
        "import broken\n\ndef judge(r, a, row):\n    from boom import thing\n    return 1.0\n"
    )
    (tmp_path / "wrapped.py").write_text(
        "import functools, operator\n\njudge = functools.partial(lambda f, r, a, row: 1.0, None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = user_modules(["lazy"])
    assert set(found) == {"lazy", "boom", "broken"} and "boom" not in sys.modules
    data = tmp_path / "d.jsonl"
    write_rows(data, ROWS)
    task = TaskConfig(name="dataset", params={"path": str(data), "verifier": "wrapped:judge"})
    assert set(task_inputs(task)["modules"]) == {"wrapped"}
    for name in ("lazy", "broken", "boom", "wrapped"):
        sys.modules.pop(name, None)


def test_a_data_directory_is_hashed_through_its_links_and_a_script_verifier_is_refused(
    tmp_path, monkeypatch
):
    from sixblanks.harness.config import TaskConfig
    from sixblanks.harness.orchestration.data_files import file_hash, task_problems

    real = tmp_path / "real"
    real.mkdir()
    (real / "x.txt").write_text("1")
    data = tmp_path / "data"
    data.mkdir()
    (data / "linked").symlink_to(real, target_is_directory=True)
    before = file_hash(data)
    # a bytecode cache (a module of the directory imported) is not data
    (real / "__pycache__").mkdir()
    (real / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00")
    assert file_hash(data) == before
    (real / "x.txt").write_text("2")
    assert file_hash(data) != before

    rows = tmp_path / "d.jsonl"
    write_rows(rows, ROWS)
    # a verifier defined in the script that runs the experiment
    monkeypatch.setattr(sys.modules["__main__"], "judge", lambda r, a, row: 1.0, raising=False)
    task = TaskConfig(name="dataset", params={"path": str(rows), "verifier": "__main__:judge"})
    (problem,) = task_problems(task)
    assert problem.startswith("params.verifier: '__main__:judge' is defined in the script")
