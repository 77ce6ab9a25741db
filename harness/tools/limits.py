"""The code sandbox's configuration (its isolation and limits, every default in a field) and the
result of one call; the fairness audit's sentence for a sandbox without isolation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

KiB, MiB = 1024, 1024 * 1024
REASONS = ("ok", "error", "timeout", "killed", "output_limit", "refused")
"""How a call ended: exit code 0; another exit code; past the wall-clock limit; ended by a signal
(a CPU or file-size limit, the kernel); stopped for printing more than the output limit; not run
(the program or its input is over its size limit)."""


class SandboxConfig(BaseModel):
    """The sandbox's isolation and limits. Every limit is per call; memory, CPU time and file size
    are per process (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    isolation: Literal["namespaces", "none"] = Field(
        "namespaces",
        description="namespaces: no network, only system and interpreter directories visible "
        "(read-only), every process killed with the call; none: a plain child process in a "
        "temporary directory, with the limits and timeout only (trusted code; the fairness audit "
        "flags it).",
    )
    timeout_seconds: float = Field(10.0, gt=0, description="Wall-clock limit of one call.")
    cpu_seconds: int = Field(10, ge=1, description="CPU seconds of each process (SIGXCPU).")
    memory_bytes: int = Field(512 * MiB, ge=32 * MiB, description="Address space per process.")
    file_bytes: int = Field(16 * MiB, ge=0, description="Largest file a process may write.")
    disk_bytes: int = Field(
        64 * MiB, ge=MiB, description="Size of the writable /tmp (and of /dev/shm), in memory."
    )
    open_files: int = Field(64, ge=16, description="Open files per process.")
    processes: int = Field(
        32,
        ge=1,
        description="Processes and threads of the call, the program's own included "
        "(isolation: namespaces only: without them the count would be the user's).",
    )
    output_bytes: int = Field(
        16 * KiB, ge=1, description="Bytes kept of stdout and of stderr; more stops the call."
    )
    source_bytes: int = Field(64 * KiB, ge=1, description="Largest program run (else refused).")
    stdin_bytes: int = Field(MiB, ge=0, description="Largest stdin accepted (else refused).")
    python: str | None = Field(
        None, description="Interpreter of the program; default: the harness's own."
    )
    visible: tuple[str, ...] = Field((), description="More host paths to show, read-only.")
    hide: tuple[str, ...] = Field(
        (), description="Paths never shown, even inside a visible directory."
    )
    env: dict[str, str] = Field({}, description="More environment variables of the program.")


@dataclass(frozen=True)
class SandboxResult:
    """One call's outcome. ``stdout``/``stderr``: the first ``output_bytes`` of each, decoded as
    UTF-8 (a cut character becomes U+FFFD); ``truncated``: more was printed. ``exit_code``: when
    the program exited; ``signal``: when a signal ended it. ``wall_seconds``: the whole call, set-up
    included (what an environment execution costs); ``cpu_seconds``: the program's processes'."""

    reason: str
    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    truncated: bool
    wall_seconds: float
    cpu_seconds: float
    isolation: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


def audit_flag(config: SandboxConfig) -> str | None:
    """The fairness audit's sentence for a configuration that runs model code without isolation."""

    if config.isolation == "none":
        return (
            "sandbox: isolation none: model-written code runs without namespaces (network, "
            "files and leftover processes unguarded): trusted code only"
        )
    return None
