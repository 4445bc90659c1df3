"""`dtr run`'s workers on loopback only: a network namespace of their own (the review's L9).

TensorFlow's gRPC server binds every interface (0.0.0.0) whatever address TF_CONFIG gives, has no authentication
and runs any graph it is sent; on a laptop that is anyone on the same network. TF has no option to bind loopback,
so `dtr run` moves itself, before it starts a worker, into a new network namespace where only loopback is up:
the workers (its children) reach each other and nothing else, and nothing outside reaches them.

Linux only. As root, a network namespace; as any other user, a user namespace first (unprivileged user
namespaces: most distributions allow them; some turn them off, e.g. kernel.unprivileged_userns_clone=0 or
Ubuntu's AppArmor restriction), mapping the user to itself. Tried in a child process first, so a system that
refuses half-way leaves `dtr run` where it was. Elsewhere (macOS), or when refused: why, for one warning.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_IFREQ = "16sh22x"  # struct ifreq: the interface's name, then ifr_flags


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare: {os.strerror(code)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name, flags = struct.unpack(_IFREQ, fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0)))
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(_IFREQ, name, flags | IFF_UP))


def _enter() -> None:
    """This process into a new network namespace with loopback up (OSError if the system refuses)."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        if uid != 0:
            raise OSError(errno.EPERM, "not root")
        _unshare(CLONE_NEWNET)
    except OSError:
        _unshare(CLONE_NEWUSER | CLONE_NEWNET)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _loopback_up()


def _refusal_in_child() -> str | None:
    """Try _enter in a child process: None when it worked, else the system's reason."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read)
        try:
            _enter()
            code = 0
        except OSError as err:
            os.write(write, str(err).encode()[:500])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        why = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else (why or "refused")


def isolate() -> str | None:
    """Move this process, and every process it starts from now on, into a network namespace of its own with only
    loopback. None when done; else why not (the caller warns: the workers' port is open to the network)."""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} has no network namespaces"
    why = _refusal_in_child()
    if why is not None:
        return f"no private network namespace ({why})"
    _enter()
    return None


WARNING = (
    "[dtr] warning: the workers' TensorFlow port is open to this machine's network (TF binds every interface and "
    "runs what it is sent, with no authentication): {why}; docs/local.md#network"
)


def private_network() -> str | None:
    """isolate(): None when done, else the warning to print."""
    why = isolate()
    return None if why is None else WARNING.format(why=why)


def host_network() -> str:
    """`dtr run --host-network`: nothing to do but warn."""
    return WARNING.format(why="--host-network: the workers share this machine's network")
