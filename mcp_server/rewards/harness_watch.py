"""The whole sandbox's CPU time and memory, watched from its pid 1 (harness.py's tester).

The rlimits each process sets (harness_wire.set_limits) are per process: a forked child gets a CPU clock and an
address space of its own, so eight children could each burn the timeout's CPU and hold the per-process memory.
The tester is the init of the sandbox's pid namespace, so /proc lists every process of the sandbox and nothing
else: a thread of the tester adds up, every few milliseconds, the CPU time of all of them (live ones, the
children they reaped, and those the tester reaped) and their resident memory, and the tester's own CPU time spent
reading, parsing and decoding the solution's answers (work the solution makes it do: round 17's 15-million-digit
integer kept it parsing until the timeout; the tests' own work in the tester is not counted). Over the budget, it
kills every process of the sandbox but itself (kill(-1) from a namespace's init) and says why; the run fails.

The sums are complete because every process that ends is either waited for (its time then counts in its
parent's, or in the tester's RUSAGE_CHILDREN) or stays a zombie /proc still lists: the seccomp filter refuses a
new SIGCHLD action, so no child is reaped by the kernel unseen, and memory outside every resident set (memfd,
SysV shared memory) is refused there too. Where the sandbox has a cgroup (sandbox_cgroup.py), the kernel's
count backs these sums with hard limits.

A poll, not a hard cap: between two looks the processes can go on for one interval (POLL_S), which is why each
process keeps its own rlimits as well. Stdlib only: sandbox.py ships it into the sandbox as `harness_watch`.
"""

from __future__ import annotations

import os
import resource
import signal
import threading

POLL_S = 0.005
CPU_SLACK_S = 0.1  # the solution process's own budget (its ITIMER_PROF) ends a lone busy loop first, and says so


class Watch:
    def __init__(self, cpu_s: float, memory_bytes: int, on_exceeded, tester_cpu_s=None) -> None:
        self.cpu_s, self.memory_bytes, self.on_exceeded = cpu_s, memory_bytes, on_exceeded
        self.tester_cpu_s = tester_cpu_s  # the tester's CPU seconds on the solution's answers (harness.Channel)
        self.exceeded: str | None = None
        self.peak_bytes, self.peak_cpu_s = 0, 0.0
        self.tick, self.page = os.sysconf("SC_CLK_TCK"), resource.getpagesize()
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def usage(self) -> tuple[float, int]:
        """(CPU seconds, resident bytes) of every process of the sandbox but the tester, and the CPU seconds the
        tester spent reading the solution's answers."""
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu, rss = reaped.ru_utime + reaped.ru_stime + (self.tester_cpu_s() if self.tester_cpu_s else 0.0), 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or name == "1":
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone between the listing and the read
            cpu += sum(int(f) for f in fields[11:15]) / self.tick  # utime, stime, cutime, cstime
            rss += int(fields[21]) * self.page
        return cpu, rss

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            if self.check():
                return

    def check(self) -> bool:
        """One look: over the budget (then every process of the sandbox but the tester is killed, and why is
        kept in `exceeded`)? Also called once more after the tests, for what the last interval used."""
        if self.exceeded:
            return True
        cpu, rss = self.usage()
        self.peak_bytes, self.peak_cpu_s = max(self.peak_bytes, rss), max(self.peak_cpu_s, cpu)
        if self.cpu_s and cpu > self.cpu_s + CPU_SLACK_S:
            why = f"used its {self.cpu_s:g} s of CPU time (all its processes together: {cpu:.2f} s)"
        elif rss > self.memory_bytes:
            why = (f"used more than its {self.memory_bytes >> 20} MB of memory (all its processes together: "
                   f"{rss >> 20} MB)")
        else:
            return False
        self.exceeded = f"the solution {why}"
        self.on_exceeded(self.exceeded)
        try:
            os.kill(-1, signal.SIGKILL)  # from the namespace's init: every process of the sandbox but itself
        except OSError:
            pass
        return True
