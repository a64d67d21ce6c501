"""A cgroup per sandbox, where this machine lets the host process make one: the kernel's own count of the memory,
processes and CPU time of everything in the sandbox together (bwrap, the tester, the solution and whatever it
forks, reaped or not, files in its /tmp and /dev/shm, shared memory), with hard limits on each.

Per-process accounting (rlimits, harness_watch.py's sum over /proc) misses what no live process shows: the CPU
time of a child nobody waited for, memory held by a file descriptor or a SysV segment. The seccomp filter
(seccomp.py) refuses the system calls that make those; a cgroup holds them whatever the system call:

- memory: `memory_mb` + 5x `max_file_mb` (/tmp and /dev/shm) + HEADROOM_MB (bwrap and the tester's own
  interpreter), swap none; past it the kernel's OOM killer acts inside the group and the run fails, saying so;
- processes: the sandbox's RLIMIT_NPROC (its processes and threads, the tester's two included) + bwrap;
- CPU: at most CPU_CORES cores at any time (a fork of busy loops shares them), and the host adds up the group's
  CPU time while the run goes on: past `cpu_s` (less the tester's own time) the sandbox is killed.

Where (`tree()`):
- cgroup v2 (one unified hierarchy with the memory and pids controllers): groups are made beside this process's
  own group, in its parent, when that parent is writable (root, or a delegated subtree such as a systemd user
  session's) and has the controllers enabled for its children (v2 lets no group with processes in it hand
  controllers down, so a group is never made under this process's own);
- cgroup v1 (a hierarchy per controller: memory, pids, cpuacct, and cpu when mounted): under this process's own
  group in each, when writable (as root);
- neither (a container with /sys/fs/cgroup read-only, a CI runner's unprivileged user outside any delegated
  subtree): no group; the rlimits, the seccomp filter and harness_watch.py's per-process sums hold alone.
  `tree()` is None and `describe()` says why.

A process enters its group before it runs a line of the sandbox: the sandbox's first process (a shell, then
bwrap) waits at a gate (sandbox_command.launch_argv) until the host has moved it into the group, so bwrap, the
sandbox's init and everything they start are in it from their start, and the cgroup namespace bwrap makes is
rooted at the group (the sandbox reads "/" in /proc/self/cgroup). The group is removed when the run has ended
(after everything in it is gone).
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import time
from dataclasses import dataclass

HEADROOM_MB = 64  # bwrap and the tester's interpreter, besides what the solution may hold
CPU_CORES = 1  # the most cores a sandbox's processes use at once
CPU_PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "pids", "cpuacct")  # needed; "cpu" (the quota) is used when mounted
PREFIX = "llm-finetuning-sandbox"
# A group's name is PREFIX and a random token: the sandbox reads its own in /proc/self/cgroup, and nothing of the
# host may show there (issue 48: the caller's pid did). An empty group of this package older than SWEEP_AFTER_S is
# left over (its sandbox's processes enter it within sandbox.START_S of its making, and it is removed when they are
# gone): swept. MADE: the names this process made, so its own can be told apart (tests: nothing outlives a run).
SWEEP_AFTER_S = 120.0
MADE: set[str] = set()


def new_name(kind: str = "") -> str:
    """A fresh group name: PREFIX, `kind` when given, and 16 random hex digits."""
    return f"{PREFIX}-{kind + '-' if kind else ''}{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Tree:
    """Where this process makes its sandboxes' groups: version 2 (one directory, key "") or 1 (one per controller)."""

    version: int
    bases: tuple[tuple[str, str], ...]  # (controller or "", directory)


def _mountinfo() -> list[tuple[str, str, str, set[str]]]:
    """(root inside the hierarchy, mount point, fs type, super options) of every cgroup mount of this process."""
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                    found.append((fields[3], fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    except OSError:
        pass
    return found


def _own_groups() -> dict[str, str]:
    """This process's group per v1 controller, and its v2 group under the key ""."""
    own = {}
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    for controller in (parts[1].split(",") if parts[1] else [""]):
                        own[controller] = parts[2]
    except OSError:
        pass
    return own


def _inside(mount_root: str, mount_point: str, group: str) -> str | None:
    """The directory of `group` (a path in the hierarchy) under a mount of the hierarchy's `mount_root`."""
    if group == mount_root or group.startswith(mount_root.rstrip("/") + "/"):
        return os.path.join(mount_point, os.path.relpath(group, mount_root)).rstrip("/.") or mount_point
    return None


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _can_make(base: str) -> bool:
    """Can this process make (and remove) a group in `base`?"""
    probe = os.path.join(base, new_name("probe"))
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def _v2(mounts: list, own: dict[str, str]) -> tuple[Tree | None, str]:
    group = own.get("")
    for root, point, fstype, _ in mounts:
        if fstype != "cgroup2" or group is None:
            continue
        mine = _inside(root, point, group)
        if mine is None:
            continue
        try:
            controllers = set(_read(os.path.join(mine, "cgroup.controllers")).split())
        except OSError:
            continue
        if not {"memory", "pids"} <= controllers:
            return None, f"cgroup v2 at {point} lacks the memory or pids controller for this process's group"
        if os.path.realpath(mine) == os.path.realpath(point):
            candidates = [mine]  # the hierarchy's root here: groups under it
        else:
            candidates = [os.path.dirname(mine)]  # beside this process's group
        for base in candidates:
            try:
                enabled = set(_read(os.path.join(base, "cgroup.subtree_control")).split())
            except OSError:
                continue
            if {"memory", "pids"} <= enabled and _can_make(base):
                return Tree(2, (("", base),)), f"cgroup v2: a group per sandbox in {base}"
        return None, (f"cgroup v2: this process cannot make groups beside its own ({group}): not writable here or "
                      "the memory and pids controllers are not enabled for them")
    return None, "no cgroup v2 hierarchy for this process"


def _v1(mounts: list, own: dict[str, str]) -> tuple[Tree | None, str]:
    bases = []
    for controller in (*V1_CONTROLLERS, "cpu"):
        for root, point, fstype, options in mounts:
            if fstype == "cgroup" and controller in options and controller in own:
                mine = _inside(root, point, own[controller])
                if mine is not None and _can_make(mine):
                    bases.append((controller, mine))
                    break
    missing = [c for c in V1_CONTROLLERS if c not in dict(bases)]
    if missing:
        return None, f"cgroup v1: cannot make groups for {', '.join(missing)} (not mounted, or not writable here)"
    return Tree(1, tuple(bases)), "cgroup v1: a group per sandbox under " + ", ".join(b for _, b in bases)


@functools.lru_cache(maxsize=1)
def _detect() -> tuple[Tree | None, str]:
    if os.environ.get("LLM_FINETUNING_SANDBOX_CGROUP", "").strip().lower() in ("0", "no", "off", "false"):
        return None, "turned off by LLM_FINETUNING_SANDBOX_CGROUP=0"
    mounts, own = _mountinfo(), _own_groups()
    tree2, why2 = _v2(mounts, own)
    if tree2 is not None:
        _sweep(tree2)
        return tree2, why2
    tree1, why1 = _v1(mounts, own)
    if tree1 is not None:
        _sweep(tree1)
    return (tree1, why1) if tree1 is not None else (None, f"{why2}; {why1}")


def _sweep(where: Tree) -> None:
    """Remove the empty groups of this package older than SWEEP_AFTER_S: left by a process that was killed before
    its sandbox ended. A group with a process in it cannot be removed, so nothing alive is touched, and a group
    younger than that may still be waiting for its sandbox's processes."""
    now = time.time()
    for _, base in where.bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            path = os.path.join(base, name)
            try:
                old = name.startswith(PREFIX + "-") and now - os.stat(path).st_mtime > SWEEP_AFTER_S
                if old:
                    os.rmdir(path)
            except OSError:
                pass


def tree() -> Tree | None:
    """Where sandboxes get their groups on this machine, None where they cannot (see describe())."""
    return _detect()[0]


def describe() -> str:
    """In words: whether and where sandboxes get a cgroup here, or why not."""
    return _detect()[1]


class Group:
    """One sandbox's cgroup (a directory per v1 controller, or one v2 directory) with its limits set."""

    def __init__(self, where: Tree, memory_bytes: int, pids: int) -> None:
        self.version, self.limit_bytes = where.version, memory_bytes
        name = self.name = new_name()
        self.dirs = {controller: os.path.join(base, name) for controller, base in where.bases}
        made = []
        try:
            for path in self.dirs.values():
                os.mkdir(path)
                made.append(path)
            MADE.add(name)
            if self.version == 2:
                self._set("", "memory.max", memory_bytes)
                self._set("", "memory.swap.max", 0, optional=True)
                self._set("", "pids.max", pids)
                self._set("", "cpu.max", f"{CPU_CORES * CPU_PERIOD_US} {CPU_PERIOD_US}", optional=True)
            else:
                self._set("memory", "memory.limit_in_bytes", memory_bytes)
                self._set("memory", "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                self._set("pids", "pids.max", pids)
                if "cpu" in self.dirs:
                    self._set("cpu", "cpu.cfs_period_us", CPU_PERIOD_US, optional=True)
                    self._set("cpu", "cpu.cfs_quota_us", CPU_CORES * CPU_PERIOD_US, optional=True)
        except BaseException:
            for path in made:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            raise

    def _file(self, controller: str, name: str) -> str:
        return os.path.join(self.dirs["" if self.version == 2 else controller], name)

    def _set(self, controller: str, name: str, value, optional: bool = False) -> None:
        try:
            with open(self._file(controller, name), "w") as handle:
                handle.write(str(value))
        except OSError:
            if not optional:
                raise

    def add(self, pid: int) -> None:
        """Move process `pid` (not its threads' later children only: the whole process) into the group."""
        for path in self.dirs.values():
            with open(os.path.join(path, "cgroup.procs"), "w") as handle:
                handle.write(str(pid))

    def cpu_s(self) -> float:
        """CPU seconds used by everything that was ever in the group."""
        try:
            if self.version == 2:
                for line in _read(self._file("", "cpu.stat")).splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return 0.0
            return int(_read(self._file("cpuacct", "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            return 0.0

    def oom_kills(self) -> int:
        """How many processes the kernel killed in the group for going over its memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in _read(self._file("memory", name)).splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def peak_bytes(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int(_read(self._file("memory", name)))
        except (OSError, ValueError):
            return None

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self._file("pids", "cgroup.procs")).split()]
        except (OSError, ValueError):
            return []

    def close(self) -> None:
        """Kill whatever is still in the group (nothing, once the sandbox's init is gone) and remove it."""
        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        for path in self.dirs.values():
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a process still leaving the group
                    time.sleep(0.01)


def make(memory_bytes: int, pids: int) -> Group | None:
    """A new group for one sandbox, None where this machine gives none (or it could not be made just now)."""
    where = tree()
    if where is None:
        return None
    try:
        return Group(where, memory_bytes, pids)
    except OSError:
        return None


def own_cpu_s(pid: int) -> float | None:
    """The CPU seconds process `pid` used itself, all its threads (not its children); None once it has exited
    (gone, or a zombie)."""
    try:
        fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
