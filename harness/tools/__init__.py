"""Tools a policy calls. One for now: the code tool, whose programs run in a sandbox with no
network, no view of the user's files, resource limits and a timeout (:mod:`.sandbox`; its
configuration and result in :mod:`.limits`, the call's processes in :mod:`.process`, the namespace's
first process in :mod:`.sandbox_init`, the machine's check in :mod:`.machine`). In the agent loop:
the experiment file's ``tools:`` section (:mod:`.config`), calls parsed from a turn and their
results written back (:mod:`.calls`), one turn's calls run and recorded (:mod:`.toolbox`); the task
wrapper that offers it is harness/tasks/tooled.py."""

from .config import ToolsConfig
from .limits import REASONS, SandboxConfig, SandboxResult, audit_flag
from .machine import Isolation, probe
from .sandbox import Sandbox, SandboxUnavailable, run_code
from .toolbox import Toolbox

__all__ = [
    "REASONS",
    "Isolation",
    "Sandbox",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "Toolbox",
    "ToolsConfig",
    "audit_flag",
    "probe",
    "run_code",
]
