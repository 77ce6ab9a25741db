"""Tools a policy calls: for now one, a sandbox that runs model-written Python with no network, no
view of the user's files, resource limits and a timeout (:mod:`.sandbox`; its configuration and
result in :mod:`.limits`, the call's processes in :mod:`.process`, the namespace's first process
in :mod:`.sandbox_init`, the machine's check in :mod:`.machine`)."""

from .limits import REASONS, SandboxConfig, SandboxResult, audit_flag
from .machine import Isolation, probe
from .sandbox import Sandbox, SandboxUnavailable, run_code

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
