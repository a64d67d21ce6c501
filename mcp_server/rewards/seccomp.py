"""The sandbox's seccomp filter: the system calls model-written code has no use for, refused (EPERM), as a
classic BPF program that bwrap loads (`--seccomp FD`). Built here from the numbers, with nothing to install.

Refused: the kernel keyrings (keyctl, add_key, request_key: the keys of the host user every sandbox runs as),
tracing and reading other processes (ptrace, process_vm_*), new namespaces and mounts (unshare, setns, mount,
open_tree, fsopen, ...), kernel modules and kexec, bpf, perf_event_open, userfaultfd, io_uring, the kernel log,
handles to host files (open_by_handle_at) and sysinfo (the host's memory and load, as /proc/meminfo would say).
Every 32-bit (int 0x80) and x32 system call is refused too, so the filter cannot be walked around by another
calling convention. Only for x86_64, where the numbers below hold; elsewhere there is no filter (the namespaces,
read-only mounts and rlimits still apply) and sandbox.py says so in its docstring.
"""

from __future__ import annotations

import errno
import platform
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
}
# classic BPF (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
NR_OFFSET, ARCH_OFFSET = 0, 4  # struct seccomp_data


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program() -> bytes | None:
    """The filter as bwrap reads it (struct sock_filter[]), None where it is not built (not x86_64)."""
    if platform.machine() != "x86_64":
        return None
    numbers = sorted(REFUSED_X86_64.values())
    # layout: load arch; arch check; load nr; x32 check; one JEQ per refused number; allow; refuse
    refuse = 4 + len(numbers) + 1  # index of the refusing return
    program = [_insn(LD_W_ABS, ARCH_OFFSET), _insn(JEQ_K, AUDIT_ARCH_X86_64, 0, refuse - 2),
               _insn(LD_W_ABS, NR_OFFSET), _insn(JGE_K, X32_SYSCALL_BIT, refuse - 4, 0)]
    for i, number in enumerate(numbers):
        program.append(_insn(JEQ_K, number, refuse - (4 + i) - 1, 0))
    program += [_insn(RET_K, SECCOMP_RET_ALLOW), _insn(RET_K, SECCOMP_RET_ERRNO | errno.EPERM)]
    return b"".join(program)
