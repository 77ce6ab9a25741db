"""What isolation this machine gives the code sandbox: util-linux's ``unshare``, the namespaces it
may create (as root, or through a user namespace), the kernel's mount calls. Cheap: one or two
``unshare ... python -c ''`` starts (a few milliseconds each)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

NAMESPACES = ("--fork", "--pid", "--net", "--mount", "--ipc", "--uts", "--kill-child")
"""unshare's options for every sandboxed call: PID, mount, network, IPC and UTS namespaces; the
first process forked as the PID namespace's init, killed if unshare dies."""

USER_NAMESPACE = ("--user", "--map-root-user")
"""Added where the harness is not root: a user namespace in which the invoking user is root, so
that it may create the others (its root has no more rights on the host's files than the user)."""

PIVOT_ROOT_ARCHITECTURES = ("x86_64", "aarch64", "riscv64", "ppc64le", "s390x")
"""Where the sandbox's init knows pivot_root's system call number (Python has no wrapper)."""

MIN_KERNEL = (5, 12)
"""mount_setattr, which makes a whole mount tree read-only in one call, came with Linux 5.12."""


@dataclass(frozen=True)
class Isolation:
    """What :func:`probe` found. ``privileged``: namespaces can be made without a user namespace
    (root with CAP_SYS_ADMIN): each call then runs under a uid of its own. ``user_namespace``:
    they can be made inside one (an unprivileged user). ``problems`` says, one sentence each, what
    stands in the way of ``isolation: namespaces``; empty when nothing does."""

    unshare: str | None
    privileged: bool
    user_namespace: bool
    kernel: str
    architecture: str
    problems: tuple[str, ...] = field(default=())

    @property
    def namespaces(self) -> bool:
        """Whether ``isolation: namespaces`` can run here."""

        return not self.problems

    def unshare_command(self) -> list[str]:
        """unshare with the options a sandboxed call needs on this machine."""

        if self.unshare is None:
            raise RuntimeError("unshare is missing: " + " ".join(self.problems))
        extra = () if self.privileged else USER_NAMESPACE
        return [self.unshare, *NAMESPACES, *extra, "--"]


def _kernel_version(release: str) -> tuple[int, int]:
    parts = release.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def _try(command: list[str]) -> str | None:
    """None if ``command`` succeeds, else what it printed (or why it could not start)."""

    try:
        proc = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, text=True
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip() or f"exit code {proc.returncode}").splitlines()[-1]


def probe() -> Isolation:
    """Find what isolation this machine provides (see :class:`Isolation`)."""

    kernel, arch = platform.release(), platform.machine()
    problems: list[str] = []
    if sys.platform != "linux":
        problems.append(f"the sandbox needs Linux namespaces; this machine runs {sys.platform}")
        return Isolation(None, False, False, kernel, arch, tuple(problems))
    if _kernel_version(kernel) < MIN_KERNEL:
        problems.append(
            f"the kernel is Linux {kernel}; the sandbox needs {MIN_KERNEL[0]}.{MIN_KERNEL[1]} or "
            "later (mount_setattr, to make every visible path read-only)"
        )
    if arch not in PIVOT_ROOT_ARCHITECTURES:
        problems.append(
            f"pivot_root's system call number is not known for {arch} (known: "
            f"{', '.join(PIVOT_ROOT_ARCHITECTURES)})"
        )
    unshare = shutil.which("unshare")
    if unshare is None:
        problems.append("util-linux's unshare is not on PATH (Debian: apt-get install util-linux)")
        return Isolation(None, False, False, kernel, arch, tuple(problems))
    empty = [sys.executable, "-I", "-S", "-c", ""]
    privileged = os.geteuid() == 0 and _try([unshare, *NAMESPACES, "--", *empty]) is None
    user_ns = False
    if not privileged:
        failed = _try([unshare, *NAMESPACES, *USER_NAMESPACE, "--", *empty])
        user_ns = failed is None
        if failed:
            problems.append(
                "this machine does not let the harness create PID, mount and network namespaces "
                f"(`unshare {' '.join(NAMESPACES + USER_NAMESPACE)}` failed: {failed}): run as "
                "root, or allow unprivileged user namespaces (sysctl "
                "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; a container "
                "needs a seccomp profile that permits unshare)"
            )
    if user_ns and os.getuid() == 0:
        # the namespace's root would be the host's: the kernel exempts that user from
        # RLIMIT_NPROC, and a fork bomb would run unchecked
        problems.append(
            "the harness runs as root without the right to create namespaces (CAP_SYS_ADMIN): "
            "through a user namespace the program would be the host's root, whom the kernel "
            "exempts from the process limit; give the harness CAP_SYS_ADMIN or run it as "
            "another user"
        )
    return Isolation(unshare, privileged, user_ns, kernel, arch, tuple(problems))
