"""Tier 2 of the sandbox: a stage child confines itself with Landlock and seccomp.

Where bubblewrap cannot start (a Docker container with Docker's default security: its seccomp
profile refuses unshare and clone with CLONE_NEW*, and pivot_root), each stage child, after it
has taken its own user id and PR_SET_NO_NEW_PRIVS (`autograder.untrusted.worker`), calls
`confine` before any student code runs:

- Landlock (https://docs.kernel.org/userspace-api/landlock.html, the kernel's
  include/uapi/linux/landlock.h; syscalls 444-446 on every architecture): read and execute the
  folders it is given (system, Python, the worker's own modules), read and write ONE private
  folder (its home and tmp), read and write /dev/null; nothing else, so neither the project, the
  fixtures, the grader's folder nor the results. TCP bind and connect are refused (ABI >= 4), and
  with ABI >= 6 the scoping flags refuse signals and abstract unix sockets towards any process
  outside the child's own Landlock domain.
- seccomp, built with libseccomp (`pyseccomp`, a ctypes binding of the system's libseccomp2):
  ptrace, process_vm_readv/writev, keyctl/add_key/request_key, mount/umount/pivot_root and the new
  mount API, bpf, perf_event_open, unshare/setns, clone with any CLONE_NEW* flag, io_uring (it
  makes sockets without socket()), SysV IPC and POSIX message queues (tier 2's are the machine's;
  tier 1's stages share one IPC namespace), socket() of every family and a datagram socketpair
  are refused (EPERM: Landlock does not mediate connect() to a unix socket by path, so an AF_UNIX
  socket could reach any socket file on the machine; a stream socketpair stays; clone3,
  whose flags seccomp cannot read, answers ENOSYS so that the C library falls back to clone;
  fallocate answers EOPNOTSUPP, so that posix_fallocate writes the blocks instead).

A rank spawner (the child of a stage with a data-parallel check, `autograder.untrusted.ranks`) is
confined with `tcp=True` until its gloo ranks have connected: seccomp then allows every socket
family (gloo's interface lookup opens netlink and datagram sockets) and Landlock TCP bind to port 0
and connect to the kernel's ephemeral ports (ip_local_port_range, one rule per port). Before the
submission loads, each rank and the spawner call `close_network`: a second Landlock layer (no TCP
bind or connect) and a second seccomp filter (no socket() at all), which stack on the first and
cannot be undone. Residual: a rank's student code may use the connections gloo made between the
ranks of its own child, and the ranks' listening sockets stay open; it opens no connection.

`landlock_abi` says which Landlock the kernel offers (0: none); `python confine.py --check`
confines itself as a stage child would and prints what it could do, for
`autograder.trusted.isolation` to decide whether tier 2 holds here.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import sys

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
FS_BITS_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}  # how many access bits each ABI knows
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
CLONE_NEW = (0x00000080, 0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
             0x40000000)  # CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key",
           "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
           "fsconfig", "fsmount", "fspick", "mount_setattr", "bpf", "perf_event_open", "unshare",
           "setns", "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
           "kexec_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
           "shmget", "semget", "msgget",  # SysV IPC: no namespace of its own in tier 2
           # POSIX message queues: tier 2's are the machine's (Landlock refuses opening one, not
           # making one, so which names exist carries bits); tier 1's stages share one namespace
           "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
           "mq_getsetattr")


class NetPort(ctypes.Structure):  # struct landlock_net_port_attr (packed)
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class RulesetAttr(ctypes.Structure):  # struct landlock_ruleset_attr
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):  # struct landlock_path_beneath_attr (packed)
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"landlock syscall {number}: {os.strerror(code)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is absent or disabled."""
    try:
        return _syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(RULESET_VERSION))
    except OSError:
        return 0


def restrict_filesystem(read_only: list[str], private: str, abi: int, tcp: bool = False) -> None:
    """Landlock: read `read_only`, read and write `private` and /dev/null, nothing else; no
    signals or abstract unix sockets out of this domain (ABI >= 6); no TCP (ABI >= 4) or, where
    `tcp` (a rank spawner, before any student code), TCP bind to port 0 only and connect only to
    the kernel's ephemeral ports, as gloo needs."""
    everything = (1 << FS_BITS_BY_ABI.get(abi, 16)) - 1
    ruleset = _ruleset(everything, abi)
    try:
        rules = [(path, READ_ONLY) for path in read_only] + [(private, everything),
                                                              ("/dev/null", FS_READ_FILE | FS_WRITE_FILE)]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a folder this machine does not have
            try:
                if not os.path.isdir(path):
                    access &= FILE_RIGHTS
                rule = PathBeneath(access & everything, fd)
                _syscall(ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0))
            finally:
                os.close(fd)
        if tcp and abi >= 4:
            _allow_ports(ruleset, NET_BIND_TCP, [0])
            _allow_ports(ruleset, NET_CONNECT_TCP, ephemeral_ports())
        _syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _ruleset(fs_access: int, abi: int) -> int:
    """A Landlock ruleset handling `fs_access`, TCP bind and connect (ABI >= 4) and, with ABI >=
    6, scoped: all of it refused until a rule allows it."""
    attr = RulesetAttr(fs_access, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                       SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    return _syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))


def _allow_ports(ruleset: int, access: int, ports) -> None:
    for port in ports:  # one rule per port: Landlock has no port ranges
        _syscall(ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_NET_PORT),
                 ctypes.byref(NetPort(access, port)), ctypes.c_uint32(0))


def ephemeral_ports() -> range:
    """The ports the kernel gives a socket bound to port 0 (where gloo's ranks listen)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
        low, high = (int(field) for field in handle.read().split())
    return range(low, high + 1)


def close_network() -> None:
    """A second Landlock layer (no TCP bind or connect, ABI >= 4) and a second seccomp filter (no
    socket() at all) over a rank spawner's allowance: what a rank does once gloo has connected
    its mesh, and its spawner once the ranks are forked, before the submission is loaded. Both
    stack on the first layer: nothing the process does later can widen them."""
    import pyseccomp as seccomp

    abi = landlock_abi()
    if abi >= 4:
        ruleset = _ruleset(0, abi)
        try:
            _syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
        finally:
            os.close(ruleset)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    _refuse_sockets(rules, seccomp)
    rules.load()


def _refuse_sockets(rules, seccomp) -> None:
    """No socket() at all, and no datagram socketpair: a unix datagram socket, even one of a
    connected pair, may sendto() or connect() to any socket path (AF_UNIX makes SOCK_RAW a
    datagram socket too); a stream or seqpacket pair can only talk to itself."""
    refuse = seccomp.ERRNO(errno.EPERM)
    rules.add_rule(refuse, "socket")
    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):
        rules.add_rule(refuse, "socketpair", seccomp.Arg(1, seccomp.MASKED_EQ, 0xF, kind))


def install_seccomp(sockets: bool = False) -> None:
    """The syscall filter of the module docstring (libseccomp through `pyseccomp`); socket() of
    every family where `sockets` (tier 1, inside a network namespace of only loopback and a
    mount namespace of its own; a tier-2 rank spawner until `close_network`), else none at all:
    Landlock does not mediate connect() to a unix socket by path, so a tier-2 child that could
    make an AF_UNIX socket could reach any socket file on the machine (socketpair stays)."""
    import pyseccomp as seccomp

    refuse = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED:
        try:
            rules.add_rule(refuse, name)
        except (OSError, ValueError, RuntimeError):
            continue  # a syscall this architecture does not have
    for flag in CLONE_NEW:
        rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    # fallocate reserves gigabytes in microseconds, faster than tier 2's disk watchdog looks;
    # without it (the C library then writes the blocks) disk fills at the speed of writing
    rules.add_rule(seccomp.ERRNO(errno.EOPNOTSUPP), "fallocate")
    if not sockets:
        _refuse_sockets(rules, seccomp)
    rules.load()


def confine(read_only: list[str], private: str, tcp: bool = False) -> None:
    """Landlock, then seccomp (raises OSError where either cannot be had: the child must not
    run). `tcp`: a rank spawner's allowance (Landlock's TCP ports, sockets of every family, for
    gloo's setup: its interface lookup opens netlink and datagram sockets), which it must end with
    `close_network` before any student code runs."""
    import pyseccomp  # noqa: F401  (read before Landlock hides where it lies)

    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available in this kernel")
    restrict_filesystem(read_only, private, abi, tcp)
    install_seccomp(sockets=tcp)


def _raise() -> None:
    raise OSError(ctypes.get_errno(), "refused")


def _check(private: str, forbidden: str) -> dict:
    """Confine this process as a stage child and report what still works (the tier-2 self-test)."""
    seen = {"abi": landlock_abi(), "no_new_privs": _libc.prctl(38, 1, 0, 0, 0) == 0}
    confine([sys.prefix, sys.base_prefix, "/usr", "/lib", "/lib64"], private)
    for name, attempt in (("write_private", lambda: open(os.path.join(private, f"check-{os.getpid()}"), "x").close()),
                          ("read_forbidden", lambda: open(forbidden, "rb").close()),
                          ("inet_socket", lambda: socket.socket(socket.AF_INET).close()),
                          ("unix_socket", lambda: socket.socket(socket.AF_UNIX).close()),
                          ("unshare", lambda: _libc.unshare(0x10000000) == 0 or _raise()),
                          ("fork", lambda: os.waitpid(os.fork() or os._exit(0), 0))):
        try:
            attempt()
            seen[name] = True
        except OSError:
            seen[name] = False
    return seen


if __name__ == "__main__" and sys.argv[1:2] == ["--check"]:
    try:
        print(json.dumps(_check(sys.argv[2], sys.argv[3])))
    except Exception as exc:  # the reason goes back to the grader, which refuses tier 2
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
