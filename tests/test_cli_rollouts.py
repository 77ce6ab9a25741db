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


def test_rollouts_command_prints_episodes(cli, write_yaml, tmp_path):
    path = write_yaml("arms: {a: {preset: grpo}}\nwarm_start: {steps: 5, num_demos: 50}\n")
    code, out, err = cli("rollouts", path, "--n", "2", "--group", "2", "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert "contract masks: ok" in out and "contract logprobs: ok" in out
