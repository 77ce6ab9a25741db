import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def cli(capsys):
    """Run the sixblanks CLI in-process: returns (exit code, stdout, stderr)."""

    from harness.cli import main

    def _run(*args: str):
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run


@pytest.fixture
def write_yaml(tmp_path):
    def _write(text: str, name: str = "exp.yaml") -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)

    return _write


sys.path.insert(0, str(ROOT))
