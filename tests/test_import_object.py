"""import_object (harness/imports.py): the one way a config's "module:name" becomes an object, its
two forms, and errors that say which part failed, with a close name where there is one."""

from pathlib import Path

import pytest

from sixblanks.harness.imports import ImportObjectError, import_object


def test_both_forms_and_nested_names():
    from sixblanks.harness.rollout.trajectory import TrajectoryBatch
    from sixblanks.harness.tasks.base import Task

    assert import_object("sixblanks.harness.tasks.base:Task") is Task
    assert import_object("sixblanks.harness.tasks.base:Task.make_env") is Task.make_env
    # the dotted form (checkpoints name their data classes so): longest module path, then names
    assert import_object("sixblanks.harness.rollout.trajectory.TrajectoryBatch") is TrajectoryBatch
    assert import_object("collections.OrderedDict.fromkeys") is not None
    import os.path

    assert import_object("os.path") is os.path and import_object("os.path:join") is os.path.join


@pytest.mark.parametrize(
    ("path", "problem", "message"),
    [
        ("", "form", "expected 'module:name'"),
        ("a:b:c", "form", "one colon"),
        ("json:", "form", "one colon"),
        ("nodots", "form", "'module:name' or 'module.name'"),
        (
            "sixblanks.harness.tasks.base:Tsk",
            "attribute",
            "module 'sixblanks.harness.tasks.base' has no class 'Tsk'; did you mean 'Task'?",
        ),
        (
            "sixblanks.harness.tasks.base.Tsk",
            "attribute",
            "module 'sixblanks.harness.tasks.base' has no class 'Tsk'; did you mean 'Task'?",
        ),
        (
            "sixblanks.harness.tasks.base:Task.mak_env",
            "attribute",
            "'sixblanks.harness.tasks.base:Task' has no class 'mak_env'; did you mean 'make_env'?",
        ),
        (
            "sixblanks.harness.tasks.selfply:Nim",
            "module",
            "cannot import module 'sixblanks.harness.tasks.selfply': no module named "
            "'sixblanks.harness.tasks.selfply'; did you mean 'selfplay'?",
        ),
        ("jsn:loads", "module", "no module named 'jsn'; did you mean 'json'? (is its folder"),
        ("no_such_module_xyz:f", "module", "no module named 'no_such_module_xyz' (is its"),
    ],
)
def test_errors_name_the_path_and_what_failed(path, problem, message):
    with pytest.raises(ImportObjectError) as info:
        import_object(path, "class")
    assert info.value.problem == problem and info.value.path == path
    assert str(info.value).startswith(f"'{path}': ") and message in str(info.value)


def test_a_module_whose_import_fails_is_not_a_missing_module(tmp_path, monkeypatch):
    """A module that exists but raises (or lacks a dependency) says so, with its error."""

    (tmp_path / "broken_mod_xyz.py").write_text("import missing_dep_xyz\n")
    (tmp_path / "raising_mod_xyz.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportObjectError, match="importing it raised ModuleNotFoundError: No mod"):
        import_object("broken_mod_xyz:f")
    with pytest.raises(ImportObjectError, match="raised RuntimeError: boom at import"):
        import_object("raising_mod_xyz.f")


def test_every_caller_uses_it():
    """The task registry, a judge and a dataset verifier say the same thing (a PRM scorer: its
    test in tests/test_process_credit.py)."""

    from sixblanks.harness.tasks.judge import JudgeError, import_callable
    from sixblanks.harness.tasks.registry import TaskLoadError, make_task

    def dataset_verifier(path):
        shipped = str(Path(__file__).resolve().parents[1] / "examples" / "data" / "math.jsonl")
        make_task("dataset", {"path": shipped, "prompt_field": "question", "verifier": path})

    with pytest.raises(TaskLoadError, match=r"^task 'examples.my_tasks:Revers': .*'Reverse'\?"):
        make_task("examples.my_tasks:Revers")
    with pytest.raises(TaskLoadError, match="is not a subclass"):
        make_task("json:loads")
    with pytest.raises(JudgeError, match=r"task.judge.callable: 'tests.test_judge:exact_judg'"):
        import_callable("tests.test_judge:exact_judg")
    assert import_callable("tests.test_judge.exact_judge").__name__ == "exact_judge"
    with pytest.raises(ValueError, match="verifier 'jsn:loads': cannot import module 'jsn'"):
        dataset_verifier("jsn:loads")
    with pytest.raises(ValueError, match="verifier 'json:__doc__' is not callable"):
        dataset_verifier("json:__doc__")
