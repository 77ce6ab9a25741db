"""Tools a policy calls: for now one, a sandbox that runs model-written Python with no network, no
view of the user's files, resource limits and a timeout (:mod:`.sandbox`)."""

from .probe import Isolation, probe
from .sandbox import (
    REASONS,
    Sandbox,
    SandboxConfig,
    SandboxResult,
    SandboxUnavailable,
    audit_flag,
    run_code,
)

__all__ = [
    "REASONS",
    "Isolation",
    "Sandbox",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "audit_flag",
    "probe",
    "run_code",
]
