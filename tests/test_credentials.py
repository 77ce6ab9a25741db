"""Credentials never leave the user's configuration: a password in a URI the experiment file holds
(tracking.uri, sweep.storage, executor.address) is used to connect and shown nowhere else, not in
messages, the output directory's files (the stored definition, the results store, MLflow's files,
the runs' files, the report) nor a result's identity."""

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sixblanks.harness.redact import is_redacted, known, redact, without_userinfo

from .conftest import ROOT

SECRET = "S3cretPlanted"


@pytest.mark.parametrize(
    "uri, shown",
    [
        ("http://user:S3cretPlanted@127.0.0.1:9/", "http://user:***@127.0.0.1:9/"),
        ("https://user:S3cretPlanted@mlflow.example.org", "https://user:***@mlflow.example.org"),
        (
            "postgresql+psycopg://optuna:S3cretPlanted@db:5432/optuna?sslmode=require",
            "postgresql+psycopg://optuna:***@db:5432/optuna?sslmode=require",
        ),
        ("ray://admin:S3cretPlanted@head:10001", "ray://admin:***@head:10001"),
        # an unencoded "@" in the password: hidden whole, not up to its first "@"
        ("postgresql://u:S3cret@Planted@db/x", "postgresql://u:***@db/x"),
        # user-info alone is often a token: masked whole
        ("https://S3cretPlanted@github.com/org/repo", "https://***@github.com/org/repo"),
        ("postgresql://alice@db/optuna", "postgresql://***@db/optuna"),
        # nothing to hide
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("HEAD:6379", "HEAD:6379"),
        ("sqlite:////tmp/a@b/mlflow.db", "sqlite:////tmp/a@b/mlflow.db"),
        ("mail me at user@example.org", "mail me at user@example.org"),
    ],
)
def test_redact_masks_the_password_of_every_uri_form(uri, shown):
    assert redact(uri) == shown
    assert redact(shown) == shown  # masking twice changes nothing


def test_redact_masks_every_uri_in_a_message_and_without_userinfo_takes_it_apart():
    text = (
        "API request to http://u:S3cretPlanted@h:1/api/2.0/x failed; "
        "then 'postgresql://p:S3cretPlanted@db/o' refused"
    )
    assert redact(text) == (
        "API request to http://u:***@h:1/api/2.0/x failed; then 'postgresql://p:***@db/o' refused"
    )
    assert without_userinfo("http://u:p%40ss@h:5000/") == ("http://h:5000/", "u", "p%40ss")
    assert without_userinfo("http://h:5000") == ("http://h:5000", None, None)
    assert is_redacted("http://u:***@h") and is_redacted("https://***@h")
    assert not is_redacted("http://u:S3cretPlanted@h") and not is_redacted("http://h")


def _config(**sections) -> dict:
    return {
        "name": "planted",
        "task": {"name": "arithmetic", "eval_size": 8},
        "arms": {"grpo": {"preset": "grpo"}, "dapo": {"preset": "dapo"}},
        "seeds": [0, 1],
        **sections,
    }


def test_the_configuration_connects_with_the_password_and_dumps_it_masked():
    """The field keeps the real value (what the orchestrator connects with); every dump (the
    stored definition, experiment.json) masks it; a dump validated again in this process (a
    sweep's confirmation runs are configured so) connects with the real value again."""

    from sixblanks.harness.config import resolved_dict, validate_mapping

    uri = f"http://user:{SECRET}@127.0.0.1:9/"
    storage = f"postgresql+psycopg://optuna:{SECRET}@127.0.0.1:9/optuna"
    cfg = validate_mapping(_config(tracking={"uri": uri}, sweep={"storage": storage}))
    assert cfg.tracking.uri == uri and cfg.sweep.storage == storage
    dumped = resolved_dict(cfg)
    assert dumped["tracking"]["uri"] == "http://user:***@127.0.0.1:9/"
    assert dumped["sweep"]["storage"] == "postgresql+psycopg://optuna:***@127.0.0.1:9/optuna"
    assert SECRET not in json.dumps(dumped) and SECRET not in json.dumps(cfg.model_dump())
    again = validate_mapping(cfg.model_dump(mode="json", exclude={"task"}))
    assert again.tracking.uri == uri and again.sweep.storage == storage
    # a process that never saw the real value (`sixblanks sync` reading experiment.json) keeps
    # the masked one: it connects with the environment's credentials instead
    assert known("http://other:***@elsewhere:1") == "http://other:***@elsewhere:1"


def test_a_password_is_no_part_of_a_run_id_a_warm_start_key_or_a_definition():
    from sixblanks.harness.config import validate_mapping
    from sixblanks.harness.orchestration.definition import definition, digest
    from sixblanks.harness.orchestration.plan import draft

    def plan(password: str):
        cfg = validate_mapping(
            _config(
                tracking={"uri": f"http://user:{password}@127.0.0.1:9/"},
                sweep={"storage": f"postgresql://optuna:{password}@127.0.0.1:9/optuna"},
            )
        )
        _, key, specs = draft(cfg)
        return key, [s.run_id for s in specs], digest(definition(cfg)), specs

    key_a, ids_a, def_a, specs = plan(SECRET)
    key_b, ids_b, def_b, _ = plan("another-password")
    assert (key_a, ids_a, def_a) == (key_b, ids_b, def_b) and len(ids_a) == 4
    assert SECRET not in json.dumps([s.as_dict() for s in specs])


def test_a_bad_address_is_refused_without_its_password(cli, write_yaml):
    """A Ray address with user-info is no Ray address: the refusal quotes it masked."""

    path = write_yaml(
        json.dumps(_config(executor={"kind": "ray", "address": f"ray://u:{SECRET}@h:1"}))
    )
    code, out, err = cli("validate", path)
    assert code == 2 and "executor.address" in err and "ray://u:***@h:1" in err, err
    assert SECRET not in out + err


def test_an_unreachable_tracking_server_is_named_masked_with_what_happened(
    cli, write_yaml, tmp_path
):
    """Nothing listens at 127.0.0.1:9: the refusal says so plainly (not a name lookup failure
    for a numeric host), before anything runs, and prints no password."""

    cfg = _config(tracking={"uri": f"http://user:{SECRET}@127.0.0.1:9/"})
    out = tmp_path / "out"
    code, stdout, stderr = cli("run", write_yaml(json.dumps(cfg)), "--out", str(out))
    assert code == 1
    assert "no MLflow tracking server answers at http://user:***@127.0.0.1:9/" in stderr, stderr
    assert "Connection refused: nothing listens at 127.0.0.1:9" in stderr
    assert "Name or service not known" not in stderr
    assert SECRET not in stdout + stderr
    assert not (out / "warm_start").exists()
    for f in out.rglob("*") if out.exists() else []:
        assert not f.is_file() or SECRET.encode() not in f.read_bytes(), f


class _Tracking(BaseHTTPRequestHandler):
    """A tracking server that answers its health check and fails every API call (HTTP 500), as a
    server overloaded once the runs are sent: MLflow's error may then quote the request's URL. Each
    request's path and Authorization header are recorded."""

    seen: list[tuple[str, str | None]] = []

    def _answer(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        ok = self.path.rstrip("/").endswith("/health")
        body = b"OK" if ok else b"overloaded"
        self.send_response(200 if ok else 500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *args) -> None:  # no request lines on the test's stderr
        pass


@pytest.fixture
def tracking_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Tracking)
    _Tracking.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], _Tracking.seen
    finally:
        server.shutdown()
        server.server_close()


BUDGET = {
    "launched_tokens": 60,
    "accepted_tokens": 100_000,
    "rollouts_launched": 100_000,
    "verifier_calls": 100_000,
    "optimizer_steps": 1_000,
}


@pytest.mark.slow
def test_a_planted_password_appears_nowhere_in_the_output_directory_or_the_messages(
    tmp_path, write_yaml, tracking_server
):
    """`sixblanks run` as a user runs it (its own process, its output piped), with a password in
    tracking.uri (the server answers its health check, then fails every call: MLflow's error may
    quote the URL) and in sweep.storage (stored with the definition): every file under the output
    directory and everything the command printed is free of it, while the password still reached
    the server, as HTTP basic credentials. `sixblanks sync` later reaches the same server with
    the credentials of MLflow's variables. The runs table, piped, keeps every column whole."""

    port, seen = tracking_server
    cfg = {
        "name": "planted",
        "task": {"name": "arithmetic", "eval_size": 8},
        "rollout": {"max_new_tokens": 4, "prompts_per_step": 2, "group_size": 2},
        "warm_start": {"steps": 5, "num_demos": 40},
        "budget": BUDGET,
        "seeds": [0],
        "arms": {"grpo": {"preset": "grpo"}},
        "tracking": {"uri": f"http://user:{SECRET}@127.0.0.1:{port}/"},
        "sweep": {"storage": f"postgresql+psycopg://optuna:{SECRET}@127.0.0.1:9/optuna"},
    }
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sixblanks.harness.cli",
            "run",
            write_yaml(json.dumps(cfg)),
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "MLflow unreachable" in said  # the failed calls were said, masked
    files = [f for f in out.rglob("*") if f.is_file()]
    assert any(f.name == "experiment.json" for f in files) and any(
        f.suffix == ".duckdb" for f in files
    )
    leaks = [str(f) for f in files if SECRET.encode() in f.read_bytes()]
    assert not leaks and SECRET not in said, (leaks, said)
    stored = json.loads((out / "experiment.json").read_text())["config"]
    assert stored["tracking"]["uri"] == f"http://user:***@127.0.0.1:{port}/"
    state = json.loads((out / "mlflow_sync.json").read_text())
    error = state["last_error"]
    assert "overloaded" in error or "500" in error, state  # the server's failure, recorded
    # MLflow's wording varies with its retry path: after its retries it quotes the request's URL
    # (then masked), a first refusal names only the endpoint. The secret is absent either way
    # (checked above on every file); a URL with user-info, when quoted, carries the mask.
    if "@127.0.0.1" in error:
        assert "user:***@127.0.0.1" in error, state
    # the real credentials were sent: to the health check and to MLflow's API calls
    basic = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
    assert ("/health", basic) in seen
    assert any(path.startswith("/api/") and auth == basic for path, auth in seen), seen
    # the runs table, piped, has every budget counter's column whole (nothing cut with "…")
    header = [line for line in proc.stdout.splitlines() if "┃ arm" in line and "final" in line]
    assert len(header) == 1 and all(f" {counter} " in header[0] for counter in BUDGET), header
    assert "…" not in proc.stdout
    # `sixblanks sync` later, in a process that never saw the password: experiment.json's masked
    # address without its user-info, the credentials from MLflow's variables
    seen.clear()
    env = {**os.environ, "MLFLOW_TRACKING_USERNAME": "user", "MLFLOW_TRACKING_PASSWORD": SECRET}
    env.pop("MLFLOW_TRACKING_URI", None)
    sync = subprocess.run(
        [sys.executable, "-m", "sixblanks.harness.cli", "sync", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert sync.returncode == 1 and "MLFLOW_TRACKING_PASSWORD" in sync.stderr, sync.stderr
    assert SECRET not in sync.stdout + sync.stderr
    assert any(path.startswith("/api/") and auth == basic for path, auth in seen), seen
    assert not [str(f) for f in out.rglob("*") if f.is_file() and SECRET.encode() in f.read_bytes()]
