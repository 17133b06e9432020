"""The sandbox worker's confinement: what holds every run in, set up once by the worker.

- the memory, pids and CPU cgroups the sandbox made, and the leaf of them each run joins
  (`RunCgroup`);
- the mounts: the whole tree read-only, the caller's files hidden under empty tmpfs
  mounts (`isolate_filesystem`);
- the seccomp filter the worker puts on itself, which every run inherits
  (`run_syscall_filter`);
- the capabilities a run without a uid of its own gives up (`drop_capabilities`), and the
  uid it takes where it has one (`become`).

Part of the worker (`_zygote.py`), which loads it by path: it imports nothing of microcoder.
"""

import ctypes
import fcntl
import os
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
PR_CAPBSET_DROP, LINUX_CAPABILITY_VERSION_3 = 24, 0x20080522
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

# In the worker's own IPC namespace: no SysV shared memory, message queue or semaphore set
# and no POSIX message queue can be made, so none can outlive a run for the next to find.
IPC_LIMITS = {"/proc/sys/kernel/shmmni": "0", "/proc/sys/kernel/msgmni": "0",
              "/proc/sys/kernel/sem": "250 32000 32 0", "/proc/sys/fs/mqueue/queues_max": "0"}

RUN_CGROUP = "run"  # the leaf, inside the worker's cgroup, that runs join (sandbox.RUN_CGROUP)
# More than this still charged to the cgroup after a run's clean-up and a reclaim means
# something of the run outlived it (page cache it read is reclaimed; its files are gone):
# the worker retires, so the next run starts from zero in a fresh cgroup.
CGROUP_HELD_AFTER_RUN_BYTES = 64 << 20


def high_fd(fd):
    """`fd` moved to 10 or above (close-on-exec), clear of the fds 0-4 runs use."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class RunCgroup:
    """The worker's memory (and pids) cgroup, which holds the run's limits, and the leaf
    cgroup inside it (RUN_CGROUP) that each run joins as it starts: the kernel then charges
    all the run holds, its heap and also its memory files and tmpfs files (which its
    address-space limit does not see), against the run's memory limit, and bounds its
    processes by pids.max. The worker stays outside, so the OOM killer there finds only the
    run's processes. The sandbox made the cgroups and passed their directories as fds: they
    name the host's cgroup mounts, which stay writable through them while the worker's own
    copies of every mount are read-only; and they carry the sandbox's lock on each cgroup,
    which this worker holds, by keeping them open, for as long as it lives.

    The limits sit above the run's leaf because a cgroup namespace is rooted at the cgroup
    its maker is in: were a run to make one and mount the cgroup filesystem in it (the
    seccomp filter refuses that, see `run_syscall_filter`), the files it found would be the
    leaf's, whose limits do not lift the ones above them."""

    def __init__(self, config):
        self.version = config["version"]
        named = {name: high_fd(config[f"{name}_fd"]) for name in ("memory", "pids", "cpu", "cpuacct")
                 if config.get(f"{name}_fd") is not None}
        self.directories = list(named.values())  # kept open: they hold the lock
        self.directory = named["memory"]
        limit, swap_limit, events, usage = {
            1: ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control", "memory.usage_in_bytes"),
            2: ("memory.max", None, "memory.events", "memory.current"),
        }[self.version]
        leaf = RUN_CGROUP + "/"
        # A run joins the memory and pids leaves (v2: the one leaf of all controllers); the
        # worker stays out of them, so the OOM killer there finds only the run.
        joined = [named["memory"], *([named["pids"]] if "pids" in named else [])]
        self.join_fds = [self.open(leaf + "cgroup.procs", os.O_WRONLY, directory) for directory in joined]
        # v1: memory, then memory + swap (where swap is accounted), which may not be below it.
        self.limit_fds = [self.open(limit, os.O_RDWR)]
        try:
            if swap_limit:
                self.limit_fds.append(self.open(swap_limit, os.O_WRONLY))
        except FileNotFoundError:  # the kernel does not account swap
            pass
        self.pids_fd = None  # v2: in the memory cgroup's directory; v1: in the pids hierarchy's
        if self.version == 2 or "pids" in named:
            try:
                self.pids_fd = self.open("pids.max", os.O_WRONLY, named.get("pids", self.directory))
            except FileNotFoundError:  # v2 without the pids controller
                pass
        # The CPU time of all the run's processes: v2's cpu.stat (every cgroup has one), which
        # counts the leaf's processes in the worker's cgroup above it. In v1 the cpu and
        # cpuacct hierarchies hold no limit the OOM killer acts on, so the worker itself joins
        # its cgroups there and every run it forks starts inside (a join per run costs ~13 us
        # per hierarchy); cpuacct.usage then counts the worker too, whose own CPU time is
        # taken off (cpu_seconds), and the quota holds the worker and its run together, one
        # of which waits while the other computes.
        self.cpu_fd = None
        self.own_cpu_at_join = None  # v1: the worker's own CPU time when it joined (None: not inside)
        try:
            if self.version == 2:
                self.cpu_fd = self.open("cpu.stat", os.O_RDONLY)
            elif "cpuacct" in named or "cpu" in named:
                for name in ("cpu", "cpuacct"):
                    if name in named:
                        join = self.open("cgroup.procs", os.O_WRONLY, named[name])
                        os.write(join, b"0")
                        os.close(join)
                self.own_cpu_at_join = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
                self.cpu_fd = self.open("cpuacct.usage", os.O_RDONLY, named.get("cpuacct", named.get("cpu")))
        except FileNotFoundError:
            pass
        self.cpu_quota = config.get("cpu_quota_cores")  # cores the runs get in all (None: no quota)
        # v1 counts an OOM kill in the killed process's own cgroup only (the leaf); v2 counts
        # it in every cgroup above too, and the leaf (no controller enabled for it) is charged
        # to ours anyway.
        self.events_fd = self.open((leaf if self.version == 1 else "") + events, os.O_RDONLY)
        self.usage_fd = self.open(usage, os.O_RDONLY)
        self.oom_kills = self.read_oom_kills()

    def open(self, name, flags, directory=None):
        return high_fd(os.open(name, flags | os.O_CLOEXEC, dir_fd=self.directory if directory is None else directory))

    def join(self):
        """In the run's process, before anything else: "0" is the writer itself."""
        for fd in self.join_fds:
            os.write(fd, b"0")

    def set_limits(self, memory_bytes, processes):
        """Before every run: memory.max (v1: memory.limit_in_bytes and
        memory.memsw.limit_in_bytes, so that no swap takes the run's memory files past it) =
        the run's memory limit, and pids.max = its process limit. Written every time, never
        skipped as already set: a run that could change them (one that is root, with
        `isolation="none"`) must not leave the next run its own. A cgroup that refuses
        (removed under us) raises OSError: the run fails and the worker retires."""
        current = os.pread(self.limit_fds[0], 64, 0).strip()
        lowering = current == b"max" or memory_bytes < int(current)
        # v1 keeps memory + swap >= memory at every step: lower memory first, raise it last.
        for fd in self.limit_fds if lowering else self.limit_fds[::-1]:
            os.write(fd, str(memory_bytes).encode())
        if self.pids_fd is not None:
            os.write(self.pids_fd, str(processes).encode())

    def read_oom_kills(self):
        """The cgroup's OOM kill count (the `oom_kill` line of memory.oom_control in v1,
        memory.events in v2)."""
        for line in os.pread(self.events_fd, 4096, 0).split(b"\n"):
            if line.startswith(b"oom_kill "):
                return int(line.split()[1])
        return 0

    def oom_kills_of_run(self):
        """How many of the run's processes the kernel killed at the limit."""
        before, self.oom_kills = self.oom_kills, self.read_oom_kills()
        return self.oom_kills - before

    def held(self):
        return int(os.pread(self.usage_fd, 64, 0))

    def cpu_seconds(self):
        """CPU seconds the worker's runs have used, all their processes, ever (a counter;
        in v1 the cgroup's count less the worker's own)."""
        text = os.pread(self.cpu_fd, 4096, 0)
        if self.version == 1:
            own = time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID) - self.own_cpu_at_join
            return int(text) / 1e9 - own
        for line in text.split(b"\n"):
            if line.startswith(b"usage_usec "):
                return int(line.split()[1]) / 1e6
        raise OSError("cpu.stat has no usage_usec line")

    def released(self):
        """True when no more than CGROUP_HELD_AFTER_RUN_BYTES stay charged once the run is
        gone and its files removed (after reclaiming page cache, should more be)."""
        if self.held() <= CGROUP_HELD_AFTER_RUN_BYTES:
            return True
        if self.version == 1:
            name, value = "memory.force_empty", b"0"
        else:
            name, value = "memory.reclaim", str(self.held()).encode()
        try:
            fd = self.open(name, os.O_WRONLY)
            try:
                os.write(fd, value)
            finally:
                os.close(fd)
        except OSError:  # v2 says EAGAIN when it could not reclaim all it was asked
            pass
        return self.held() <= CGROUP_HELD_AFTER_RUN_BYTES


def become(uid):
    """Drop to the run uid: no supplementary groups, that gid and uid."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)

def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    check(LIBC.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def is_under(path, parent):
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class MountAttributes(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def make_read_only_recursively(path):
    """mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY) (Linux 5.12+): every mount under `path`
    read-only in this mount namespace. False where the kernel cannot."""
    attributes = MountAttributes(MOUNT_ATTR_RDONLY, 0, 0, 0)
    return LIBC.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE,
                        ctypes.byref(attributes), ctypes.sizeof(attributes)) == 0


def isolate_filesystem(hidden, site_paths):
    """Make the whole tree read-only (no world-writable corner such as /run/lock is left to
    write to), cover each hidden directory with an empty tmpfs (writable only where it is
    /tmp, /var/tmp or /dev/shm), then bind the Python installation back (read-only) where
    it lay under one of them, so imports keep working."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    read_only = make_read_only_recursively("/")
    keep = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *site_paths)}
    keep = sorted(p for p in keep if os.path.isdir(p))
    keep = [p for p in keep if not any(p != q and is_under(p, q) for q in keep)]
    hidden = sorted({os.path.realpath(h) for h in hidden if os.path.isdir(h) and os.path.realpath(h) != "/"})
    # A directory inside the Python installation (a dataset a package ships) is covered
    # after the installation is bound back, or the binding would show it again.
    inside_kept = [h for h in hidden if any(is_under(h, p) for p in keep)]
    hidden = [h for h in hidden if h not in inside_kept and not any(h != g and is_under(h, g) for g in hidden)]
    kept_fds = {p: os.open(p, os.O_PATH) for p in keep if any(is_under(p, h) for h in hidden)}
    for directory in hidden:
        shared = directory in ("/tmp", "/var/tmp", "/dev/shm")  # runs may write there; it is memory
        options = "mode=1777,size=512m" if shared else "mode=755,size=4m"
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path, fd in kept_fds.items():
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        os.close(fd)
    for directory in hidden:  # written only to bind the installation back: read-only from here
        if directory not in ("/tmp", "/var/tmp", "/dev/shm"):
            mount(None, directory, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for directory in inside_kept:
        if not any(is_under(p, directory) for p in keep):  # never the installation itself, nor above it
            mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=755,size=4k")
    return read_only

class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


# System calls runs may not make, by architecture (audit arch, then numbers):
# - the kernel keyring calls (add_key, request_key, keyctl): keys are not namespaced and
#   outlive a run, so a run could leave them for later ones to read;
# - unshare and setns, and clone with a CLONE_NEW* flag: in a user namespace of its own a
#   run would hold every capability again, and with it could mount a cgroup filesystem of
#   its own and write its cgroup's limits where those files are its uid's (runs that keep
#   the caller's uid); clone3, whose flags lie in memory a filter cannot read, says ENOSYS,
#   on which glibc falls back to clone;
# - mount, umount2, pivot_root and the new mount API (open_tree, move_mount, fsopen,
#   fsconfig, fsmount, fspick, mount_setattr, open_tree_attr): refused even where a
#   namespace slipped past the above;
# - socket for AF_UNIX, and socketpair for datagram sockets: the network namespace holds
#   only abstract sockets, and a socket file on a host path the run can see (a cluster
#   agent's, dbus's, journald's; read-only mounts do not stop a connect) would take its
#   connection. A datagram socket sends to any address however it was made; a stream or
#   seqpacket pair (multiprocessing, asyncio) is connected for good, so it stays;
# - io_uring_setup, io_uring_enter and io_uring_register: a ring's requests (its own socket
#   and connect among them) are made by the kernel, past this filter;
# - flock, and fcntl's F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW and F_SETLEASE: a lock
#   or lease on a host file the run can read would block a host process that takes it, for
#   as long as the run lives. Refused (EPERM), not answered 0 with nothing held: a program
#   locking its own files (sqlite3 on a file) fails, saying so, rather than lose the
#   exclusion it asked for in silence. F_GETLK and F_OFD_GETLK stay.
RUN_REFUSED_SYSCALLS = {
    "x86_64": (0xC000003E, {
        "keyring": (248, 249, 250), "namespaces": (272, 308),
        "mounts": (165, 166, 155, 428, 429, 430, 431, 432, 433, 442, 467),
        "io_uring": (425, 426, 427), "flock": 73,
        "clone": 56, "clone3": 435, "socket": 41, "socketpair": 53, "fcntl": 72}),
    "aarch64": (0xC00000B7, {
        "keyring": (217, 218, 219), "namespaces": (97, 268),
        "mounts": (40, 39, 41, 428, 429, 430, 431, 432, 433, 442, 467),
        "io_uring": (425, 426, 427), "flock": 32,
        "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199, "fcntl": 25}),
}
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
# CLONE_NEWNET (CLONE_NEWTIME, 0x80, is part of clone's exit signal, and only clone3 and
# unshare take it).
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX, SOCK_DGRAM, SOCK_TYPE_MASK = 1, 2, 0xF  # socket(2): the type's low bits, below its flags
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE = 6, 7, 37, 38, 1024
ENOSYS, EPERM = 38, 1


def run_syscall_filter():
    """A seccomp program refusing with EPERM the calls of RUN_REFUSED_SYSCALLS (clone,
    socket, socketpair and fcntl only with the arguments said there; and, on x86_64, every
    x32 and 32-bit entry point, under whose numbers they would slip through), clone3 with
    ENOSYS; None on other architectures. Installed on the worker, so every run,
    and every process a run makes, has it."""
    import platform

    if platform.machine() not in RUN_REFUSED_SYSCALLS:
        return None
    arch, calls = RUN_REFUSED_SYSCALLS[platform.machine()]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
    mask = 0x54  # BPF_ALU|BPF_AND|K
    allow, errno = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | the errno
    # offsets in seccomp_data; of an argument, the low half (the kernel reads these as ints)
    nr, arch_offset, first_argument, second_argument = 0, 4, 16, 24
    refused = [*calls["keyring"], *calls["namespaces"], *calls["mounts"], *calls["io_uring"], calls["flock"]]
    program = [  # jump targets by name, resolved below
        (load, 0, 0, arch_offset),
        (jeq, 1, 0, arch),
        (ret, 0, 0, errno | EPERM),  # another architecture's entry point
        (load, 0, 0, nr),
        (jge, "refuse", 0, 0x40000000),  # x32
        *[(jeq, "refuse", 0, number) for number in refused],
        (jeq, "no such call", 0, calls["clone3"]),
        (jeq, "clone", 0, calls["clone"]),
        (jeq, "socket", 0, calls["socket"]),
        (jeq, "socketpair", 0, calls["socketpair"]),
        (jeq, "fcntl", "allow", calls["fcntl"]),
        "clone", (load, 0, 0, first_argument),  # the flags
        (jset, "refuse", "allow", CLONE_NEW_FLAGS),
        "socket", (load, 0, 0, first_argument),  # the family
        (jeq, "refuse", "allow", AF_UNIX),
        "socketpair", (load, 0, 0, second_argument),  # the type
        (mask, 0, 0, SOCK_TYPE_MASK),
        (jeq, "refuse", "allow", SOCK_DGRAM),
        "fcntl", (load, 0, 0, second_argument),  # the command
        *[(jeq, "refuse", 0, command) for command in (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE)],
        "allow", (ret, 0, 0, allow),
        "refuse", (ret, 0, 0, errno | EPERM),
        "no such call", (ret, 0, 0, errno | ENOSYS),
    ]
    labels, instructions = {}, []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(instructions)
        else:
            instructions.append(item)
    resolved = []
    for index, (code, if_true, if_false, value) in enumerate(instructions):
        jump = lambda target: target if isinstance(target, int) else labels[target] - index - 1  # noqa: E731
        resolved.append(SockFilter(code, jump(if_true), jump(if_false), value))
    filters = (SockFilter * len(resolved))(*resolved)
    return SockFprog(len(resolved), filters), filters  # keep the array alive beside the pointer


class CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapabilityData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capabilities_to_drop():
    """Every capability this kernel knows, for a worker whose runs get no uid of their own
    (read before /proc turns read-only)."""
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        return tuple(range(int(handle.read()) + 1))


def drop_capabilities(capabilities):
    """Without a uid of its own (a user namespace where the run is its root), a run keeps
    the namespace's capabilities and could unmount the tmpfs that hides the caller's
    files. Empty the bounding set of `capabilities` (no exec can bring them back) and every set."""
    for capability in capabilities:
        LIBC.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    header = CapabilityHeader(LINUX_CAPABILITY_VERSION_3, 0)
    check(LIBC.capset(ctypes.byref(header), ctypes.byref((CapabilityData * 2)())), "capset")
