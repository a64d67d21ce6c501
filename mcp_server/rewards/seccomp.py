"""The sandbox's seccomp filter: the system calls model-written code has no use for, refused (EPERM), as a
classic BPF program that bwrap loads (`--seccomp FD`). Built here from the numbers, with nothing to install.

Refused: the kernel keyrings (keyctl, add_key, request_key: the keys of the host user every sandbox runs as),
tracing and reading other processes (ptrace, process_vm_*), new namespaces and mounts (unshare, setns, mount,
open_tree, fsopen, ...), kernel modules and kexec, bpf, perf_event_open, userfaultfd, io_uring, the kernel log,
handles to host files (open_by_handle_at) and sysinfo (the host's memory and load, as /proc/meminfo would say).

Refused too, because each escapes the sandbox's memory or CPU accounting where no cgroup holds it
(sandbox_cgroup.py; harness_watch.py adds up resident memory and CPU time per process): memory that no process's
resident set shows, `memfd_create` and `memfd_secret` files and every SysV IPC call (shmget/shmat: segments that
outlive their process; msg*, sem*: queues and semaphore sets), and making children that nobody waits for vanish,
`rt_sigaction(SIGCHLD, ...)` with a new action (SIG_IGN or SA_NOCLDWAIT auto-reaps them, and an auto-reaped
child's CPU time is added to no one). Reading SIGCHLD's action (a NULL new action) is allowed: Python reads every
signal's at start.

Every 32-bit (int 0x80) and x32 system call is refused too, so the filter cannot be walked around by another
calling convention. Only for x86_64, where the numbers below hold; elsewhere there is no filter (the namespaces,
read-only mounts and rlimits still apply) and sandbox.py says so in its docstring.
"""

from __future__ import annotations

import errno
import os
import platform
import signal
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
# x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl)
REFUSED_X86_64 = {
    "sysinfo": 99, "ptrace": 101, "syslog": 103, "pivot_root": 155, "acct": 163, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    # memory outside every process's resident set, and children that vanish with their CPU time (see above)
    "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67,
    "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
    "msgctl": 71,
}
RT_SIGACTION_X86_64 = 13  # refused only for SIGCHLD with a new action (its second argument not NULL)
# classic BPF (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
# struct seccomp_data: nr, arch, instruction_pointer, args[6] (64-bit each, little-endian on x86_64)
NR_OFFSET, ARCH_OFFSET, ARG0_LOW, ARG1_LOW, ARG1_HIGH = 0, 4, 16, 24, 28


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program() -> bytes | None:
    """The filter as bwrap reads it (struct sock_filter[]), None where it is not built (not x86_64)."""
    if platform.machine() != "x86_64":
        return None
    # Each instruction is (code, k, jump-if-true, jump-if-false) with jumps as labels ("allow", "refuse") or 0
    # (the next instruction); they are resolved to BPF's relative offsets below.
    steps: list[tuple[int, int, object, object]] = [
        (LD_W_ABS, ARCH_OFFSET, 0, 0), (JEQ_K, AUDIT_ARCH_X86_64, 0, "refuse"),
        (LD_W_ABS, NR_OFFSET, 0, 0), (JGE_K, X32_SYSCALL_BIT, "refuse", 0),
    ]
    steps += [(JEQ_K, number, "refuse", 0) for number in sorted(REFUSED_X86_64.values())]
    steps += [
        (JEQ_K, RT_SIGACTION_X86_64, 0, "allow"),
        (LD_W_ABS, ARG0_LOW, 0, 0), (JEQ_K, int(signal.SIGCHLD), 0, "allow"),  # the kernel reads an int
        (LD_W_ABS, ARG1_LOW, 0, 0), (JEQ_K, 0, 0, "refuse"),
        (LD_W_ABS, ARG1_HIGH, 0, 0), (JEQ_K, 0, "allow", "refuse"),
    ]
    labels = {"allow": len(steps), "refuse": len(steps) + 1}

    def offset(at: int, target: object) -> int:
        return 0 if target == 0 else labels[target] - at - 1

    program = [_insn(code, k, offset(i, jt), offset(i, jf)) for i, (code, k, jt, jf) in enumerate(steps)]
    program += [_insn(RET_K, SECCOMP_RET_ALLOW), _insn(RET_K, SECCOMP_RET_ERRNO | errno.EPERM)]
    return b"".join(program)


def seccomp_filter_fd() -> int | None:
    """A descriptor bwrap reads the seccomp filter from (seccomp.py), None where there is no filter."""
    program = seccomp_program()
    if program is None:
        return None
    fd = os.memfd_create("sandbox-seccomp", 0)  # not inherited but by pass_fds
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
