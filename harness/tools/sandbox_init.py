"""The sandbox's first process: builds the program's view of the machine, runs the program, stops it
at its wall-clock limit, and reports how it ended.

Started by :mod:`.sandbox` as ``python -I -S sandbox_init.py PLAN_FD STATUS_FD``, with the standard
library only (nothing of the project is imported: it may run where the project is not visible).
It reads a JSON plan from PLAN_FD and writes JSON lines to STATUS_FD: ``{"init": pid}`` (its pid as
the parent sees it, so the parent can kill it), ``{"child": pid}``, then ``{"status": wait status,
"timed_out": bool, "cpu_seconds": float}`` or ``{"error": sentence}`` if the set-up failed.

Under ``isolation: namespaces`` it runs inside fresh PID, mount, network, IPC and UTS namespaces
(made by util-linux's ``unshare``) as their PID 1, so when it exits the kernel kills every process
left in the namespace, daemons included. Before the program starts it pivots into a new root
filesystem: an empty tmpfs that holds read-only bind mounts of the system directories and the
interpreter's, a fresh /proc, a minimal /dev, and writable tmpfs at /tmp (the working directory is
/tmp/work) and /dev/shm; the host's root is then detached, so nothing else of the machine (homes,
the repository, run directories, the host's /tmp) can be reached by any path.

Under ``isolation: none`` (trusted code) it only runs the program in a session of its own in a
host temporary directory, with the same resource limits and timeout.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38
SYS_MOUNT_SETATTR = 442  # one number on every architecture (the syscall table was unified by then)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
DEVICES = ("null", "zero", "full", "random", "urandom")

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class SetupError(Exception):
    """The sandbox could not be built; the message names the step."""


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clr", "propagation", "userns_fd")]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        raise SetupError(f"{what}: {os.strerror(ctypes.get_errno())}")


def _b(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None):
    _check(
        libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)),
        f"mount {fstype or source} on {target}",
    )


def read_only(path: str, recursive: bool) -> None:
    """Make the mount at ``path`` (and with ``recursive`` every mount below it) read-only, no
    set-uid, no devices. mount_setattr only adds these flags, so it also works on mounts whose
    other flags a user namespace has locked, where a plain remount would have to restate them."""

    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    ret = libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(path.encode()),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(ret, f"make {path} read-only")


def pivot_root(new_root: str, put_old: str) -> None:
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise SetupError(f"pivot_root's system call number on {os.uname().machine} is not known")
    ret = libc.syscall(
        ctypes.c_long(number), ctypes.c_char_p(new_root.encode()), ctypes.c_char_p(put_old.encode())
    )
    _check(ret, f"pivot_root into {new_root}")


def _mountpoint(path: str, like: str) -> None:
    """An empty directory or file at ``path`` to mount ``like`` (a path of the old root) on."""

    if os.path.isdir(like):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()


def expose(path: str) -> None:
    """Bind the host's ``path`` at the same place in the new root, read-only. A top-level symbolic
    link (``/bin -> usr/bin`` on a merged-/usr system) is made again as a link."""

    source = "/oldroot" + path
    if os.path.islink(source) and path.count("/") == 1:
        os.symlink(os.readlink(source), path)
        return
    if not os.path.exists(source):
        return
    _mountpoint(path, source)
    mount(source, path, None, MS_BIND | MS_REC)
    read_only(path, recursive=True)


def hide(path: str) -> None:
    """Cover ``path`` (inside a visible directory) with an empty read-only tmpfs, or a file with
    /dev/null."""

    if not os.path.lexists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")
    else:
        mount("/oldroot/dev/null", path, None, MS_BIND)


def build_root(plan: dict) -> None:
    """Pivot into a new root that holds only what the plan names (see the module docstring)."""

    disk = f"size={plan['disk_bytes']},mode=1777"
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    # /tmp is the one directory every Linux system has to build on; this is the namespace's own
    # mount of it, the host's /tmp is not touched
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    os.mkdir("/tmp/oldroot")
    pivot_root("/tmp", "/tmp/oldroot")
    os.chdir("/")
    os.mkdir("/proc")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir("/dev")
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "size=64k,mode=0755")
    for name in DEVICES:
        _mountpoint(f"/dev/{name}", f"/oldroot/dev/{name}")
        mount(f"/oldroot/dev/{name}", f"/dev/{name}", None, MS_BIND)
    for name, target in [("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")] + [
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ]:
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, disk)
    os.mkdir("/tmp")
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, disk)
    # after /tmp: a visible path under the host's /tmp is bound inside the sandbox's own
    for path in plan["visible"]:
        expose(path)
    for path in plan["hidden"]:
        hide(path)
    _check(libc.umount2(b"/oldroot", MNT_DETACH), "detach the old root")
    os.rmdir("/oldroot")
    read_only("/dev", recursive=False)
    read_only("/", recursive=False)


def drop_privileges(uid: int | None) -> None:
    """No capability can come back (bounding set emptied, then no_new_privs); under a uid of its
    own (``uid``) when the sandbox was started by root, else as the user namespace's root, which
    without capabilities has the invoking user's rights only."""

    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    # the user namespace's root keeps its effective set until exec; clear all three sets now
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "drop capabilities")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")


def start_program(plan: dict, status_fd: int) -> int:
    """Fork the program: stdin from memory, limits, privileges dropped, exec the interpreter."""

    stdin = os.memfd_create("stdin")
    os.write(stdin, plan["stdin"].encode())
    os.lseek(stdin, 0, os.SEEK_SET)
    pid = os.fork()
    if pid:
        os.close(stdin)
        return pid
    try:
        os.dup2(stdin, 0)
        os.close(stdin)
        os.set_inheritable(status_fd, False)  # open until exec, to report a failure to start
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        if plan["isolation"] == "none":
            os.setsid()  # its own process group: the timeout kills the group
        os.chdir(plan["workdir"])
        limits = plan["limits"]
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"] + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory"],) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file"],) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
        if limits["processes"] is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)
        # a core dump would go to the host's core handler, outside the sandbox
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if plan["isolation"] == "namespaces":
            drop_privileges(plan["uid"])
        python = plan["python"]
        os.execve(python, [python, "main.py"], plan["env"])
    except BaseException as exc:  # noqa: BLE001 - any failure is reported, then the child ends
        _report(status_fd, {"error": f"the program could not start: {exc!r}"})
    os._exit(127)


def _report(fd: int, record: dict) -> None:
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    except OSError:
        pass


def kill_all(plan: dict, child: int) -> None:
    """Every process of the program: in a PID namespace, all but this one (kill(-1) there stops at
    the namespace's edge); without one, the program's process group."""

    try:
        if plan["isolation"] == "namespaces":
            os.kill(-1, signal.SIGKILL)
        else:
            os.killpg(child, signal.SIGKILL)
    except OSError:
        pass


def supervise(plan: dict, status_fd: int, wake: int) -> None:
    """Start the program, reap every process that ends, and stop all of it at the timeout or
    when the parent goes away (its end of the status pipe closes)."""

    child = start_program(plan, status_fd)
    _report(status_fd, {"child": child})
    deadline = time.monotonic() + plan["timeout"]
    poller = select.poll()
    poller.register(wake, select.POLLIN)
    poller.register(status_fd, 0)  # POLLERR: the parent closed its end
    status, timed_out = None, False
    while status is None:
        while True:  # reap what ended: the program, and orphans handed to this process
            try:
                pid, st, _ = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == child:
                status = st
        if status is not None:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            kill_all(plan, child)
            status = os.wait4(child, 0)[1]
            break
        for fd, _ in poller.poll(left * 1000):
            if fd == status_fd:
                kill_all(plan, child)
                os._exit(1)
            try:
                os.read(wake, 4096)
            except BlockingIOError:
                pass
    kill_all(plan, child)  # what the program left behind (daemons) dies with it
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    _report(status_fd, {"status": status, "timed_out": timed_out, "cpu_seconds": cpu})


def main() -> None:
    plan_fd, status_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(plan_fd, "rb") as f:
        plan = json.loads(f.read())
    # not dumpable: the program cannot ptrace this process or open its /proc files (under a user
    # namespace they share a uid, and this one keeps its capabilities there)
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "make the init undumpable")
    # the parent kills the sandbox through this pid; /proc is still the host's here
    _report(status_fd, {"init": int(os.readlink("/proc/self"))})
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes poll()
    signal.set_wakeup_fd(wake_w)
    try:
        if plan["isolation"] == "namespaces":
            build_root(plan)
            uid = 0 if plan["uid"] is None else plan["uid"]
            os.makedirs(plan["workdir"], mode=0o700)
            os.chown(plan["workdir"], uid, uid)
        with open(os.path.join(plan["workdir"], "main.py"), "w", encoding="utf-8") as f:
            f.write(plan["source"])
        if plan["isolation"] == "namespaces":
            os.chown(os.path.join(plan["workdir"], "main.py"), uid, uid)
    except (OSError, SetupError) as exc:
        _report(status_fd, {"error": f"setting up the sandbox failed: {exc}"})
        sys.exit(1)
    supervise(plan, status_fd, wake_r)


if __name__ == "__main__":
    main()
