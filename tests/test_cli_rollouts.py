import json


def test_rollouts_command_json_runs_contract_checks(cli, write_yaml, tmp_path):
    path = write_yaml("""
arms: {a: {preset: grpo}}
tasks: [{name: arithmetic}, {name: guess_number, params: {max_turns: 3}}]
warm_start: {steps: 5, num_demos: 50}
rollout: {max_new_tokens: 4}
""")
    code, out, err = cli(
        "rollouts",
        path,
        "--task",
        "guess_number",
        "--n",
        "2",
        "--group",
        "3",
        "--json",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["contract"]["passed"] is True
    assert len(data["episodes"]) == 6
    ep = data["episodes"][0]
    assert len(ep["tokens"]) == len(ep["action_mask"]) == len(ep["logprobs"])
    assert {c["name"] for c in data["contract"]["checks"]} >= {
        "masks",
        "logprobs",
        "ratio",
        "groups",
        "rewards",
    }
    code, out, err = cli("rollouts", path, "--task", "guess_numbr", "--out", str(tmp_path / "o"))
    assert code == 2 and "did you mean 'guess_number'" in err


def test_rollouts_takes_any_registered_task_with_its_defaults(cli, write_yaml, tmp_path):
    """A task the file does not list: its default parameters (guess_number: 5 turns)."""

    path = write_yaml("arms: {a: {preset: grpo}}\nwarm_start: {steps: 5, num_demos: 50}\n")
    code, out, err = cli(
        "rollouts",
        path,
        "--task",
        "guess_number",
        "--n",
        "1",
        "--group",
        "2",
        "--json",
        "--no-warm-start",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["task"] == "guess_number" and data["contract"]["passed"] is True
    assert "".join(data["episodes"][0]["text"][1:11]) == "guess 1-16"  # high: 16, the default
    code, _, err = cli("rollouts", path, "--task", "nimm", "--no-warm-start")
    assert code == 2 and "did you mean 'nim'" in err


def test_rollouts_command_prints_episodes(cli, write_yaml, tmp_path):
    path = write_yaml("arms: {a: {preset: grpo}}\nwarm_start: {steps: 5, num_demos: 50}\n")
    code, out, err = cli("rollouts", path, "--n", "2", "--group", "2", "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert "contract masks: ok" in out and "contract logprobs: ok" in out


def test_rollouts_draws_training_problems_only():
    """`rollouts` shows what training draws: on arithmetic (a quarter of its 200 problems held
    out, seeds 2, 3 and 6 among them) no episode poses a held-out problem, and --seed replays."""

    from sixblanks.harness.cli.experiment_runs import training_seeds
    from sixblanks.harness.tasks import make_task

    task = make_task("arithmetic")
    seeds = training_seeds(task, 64, 3)
    assert len(seeds) == 64 and all(task.trains_on(s) for s in seeds)
    assert seeds == training_seeds(task, 64, 3) != training_seeds(task, 64, 4)
