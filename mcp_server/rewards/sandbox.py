"""Run model-written Python inside bubblewrap, never on the host.

Each run gets its own sandbox: new user, pid, network, ipc and uts namespaces (no network at all, no
namespace of its own inside: --disable-userns), the system mounted read-only, of the interpreter only its
binary and its installation's lib folders, a private size-capped /tmp, no host home, credentials or
environment variables, every host-wide entry of /proc masked (sandbox_command.masked_proc), device nodes of its
own where the host is root (sandbox_command.private_dev), a cgroup namespace rooted at its own group, a seccomp
filter (seccomp.py: keyrings, ptrace, mounts, namespaces, bpf, memfd, SysV IPC, ignoring SIGCHLD, ... refused;
x86_64 only), rlimits on CPU,
memory, processes, files and open files per process, one CPU budget and one memory cap for all its processes
together (harness_watch.py: a forked child shares them), and where this machine lets the host make one a cgroup
of its own (sandbox_cgroup.py: the kernel's count of its memory, files and shared memory included, its
processes and its CPU time, with hard limits on each, the host holding its CPU time to the budget), an output
cap, and a wall-clock
timeout that kills the whole sandbox: the sandbox's pid-namespace init (its host pid comes from
bwrap's --info-fd; a pidfd on it is taken while bwrap, its only reaper, runs) is SIGKILLed, the kernel
then kills everything left inside, setsid'd or not. bwrap itself is never killed while its init is known:
bwrap exits only after reaping that init, and the init's exit completes only once the kernel has killed
and reaped every process in its namespace. A run returns after that, and after the pidfd says the init
is gone, so nothing outlives the run and no zombie is left behind.

Inside, pid 1 is the harness's tester (harness.py, `--as-pid-1`): it forks the process that runs the
solution and grades it from outside, values crossing as JSON. The verdict comes back on a pipe of its own
that only the tester holds, so nothing the solution prints, returns or does to its process can pass a run.
bwrap's command line, the interpreter inside and how the harness is shipped in: sandbox_command.py.

Without a working bwrap there is no execution: `SandboxUnavailable` says why and how to fix it.
There is no fallback to the host (the sandbox's interpreter runs on the host only to compile the harness).
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from mcp_server.rewards import sandbox_cgroup
from mcp_server.rewards.sandbox_command import SandboxUnavailable, bwrap_argv, interpreter_for, launch_argv
from mcp_server.rewards.seccomp import seccomp_filter_fd

SLOW_S = 1.0  # a run still going after this long is waiting (a hang, a sleep): its slot goes to the next job
WAITING = 2  # sandboxes alive at once, as a multiple of the workers running at once
GROUP_POLL_S = 0.02  # how often the host reads a sandbox's cgroup CPU time while it runs
GROUP_CPU_SLACK_S = 0.25  # past cpu_s: harness_watch.py (inside, every 5 ms) usually stops a busy loop first
START_S = 10.0  # the most a sandbox may take to say who its init is (bwrap's --info-fd) while it waits for its group


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock for the whole run, including interpreter start
    # The whole sandbox's memory: each process's address space (RLIMIT_AS) and the resident memory of all its
    # processes together (harness_watch.py), besides /tmp and /dev/shm (5x max_file_mb, tmpfs); where it has a
    # cgroup, all of it together is capped at memory_mb + 5x max_file_mb + sandbox_cgroup.HEADROOM_MB
    memory_mb: int = 512
    max_processes: int = (
        8  # the solution's processes + threads (RLIMIT_NPROC in the sandbox's user namespace, +1: the tester)
    )
    max_output_bytes: int = 64 * 1024  # stdout + stderr; more is a flood and scores 0
    max_file_mb: int = 16  # largest file written (RLIMIT_FSIZE); /tmp is capped at 4x this
    max_open_files: int = 64
    # CPU seconds the solution's process may use, its imports included (0: up to the timeout). A busy loop is
    # stopped after this, not after the wall-clock timeout, so it holds a core only that long (its children:
    # RLIMIT_CPU at the timeout). Function-level solutions and their tests use a few ms: bench_code_hangs' 56
    # honest completions get the same verdicts at 0.1 s; at 1 s, its 8 busy loops held both cores for 4 of the
    # batch's 4.9 s. Heavier tasks (big inputs, a `python` whose libraries take long to import: pandas ~0.36 s)
    # raise it.
    cpu_s: float = 0.5


@dataclass
class RunResult:
    passed: bool
    returncode: int | None
    output: str = ""
    timed_out: bool = False
    output_exceeded: bool = False
    seconds: float = 0.0
    error: str | None = None  # why it did not pass, in a few words
    extra: dict = field(default_factory=dict)


def _sandbox_init(info: bytes, proc: subprocess.Popen) -> tuple[int | None, int | None]:
    """The host pid of the sandbox's pid-namespace init from bwrap's --info-fd JSON (None until it is complete)
    and a pidfd on it (None without pidfd support, Linux < 5.3). The pidfd is kept only if bwrap still runs
    after it is opened: bwrap is the init's only reaper, so the pid cannot have been recycled by then."""
    try:
        pid = int(json.loads(info.decode()).get("child-pid") or 0) or None
    except ValueError:  # not complete yet
        return None, None
    if pid is None:
        return None, None
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or the init is already gone
        return pid, None
    if proc.poll() is not None:
        os.close(fd)
        return pid, None
    return pid, fd


def _kill(proc: subprocess.Popen, init_pid: int | None, init_fd: int | None) -> None:
    """SIGKILL the sandbox's pid-namespace init: the kernel then kills every process inside, and bwrap exits
    once it has reaped the init. bwrap's own process group is killed only when the init is not known (a
    sandbox that never finished starting: --die-with-parent then kills bwrap's child with it)."""
    try:
        if init_fd is not None:
            signal.pidfd_send_signal(init_fd, signal.SIGKILL)
        elif init_pid is not None and proc.poll() is None:
            os.kill(init_pid, signal.SIGKILL)
        elif proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _readable(fd: int, timeout: float | None) -> bool:
    """Is `fd` readable within `timeout` seconds (None: wait)? poll(), which takes any descriptor number."""
    with selectors.DefaultSelector() as one:
        one.register(fd, selectors.EVENT_READ)
        return bool(one.select(timeout))


def _wait_gone(init_fd: int | None) -> None:
    """Return once the sandbox's init has exited, i.e. once the kernel has killed and reaped everything in its
    namespace (a pidfd turns readable when its process has exited). Called after bwrap is gone: whatever is
    left of the sandbox is killed first (a no-op when bwrap reaped the init already)."""
    if init_fd is None:
        return
    try:
        try:
            signal.pidfd_send_signal(init_fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _readable(init_fd, None)
    finally:
        os.close(init_fd)


def run_python(code: str, tests: str, limits: Limits = Limits(), python: str | None = None,
               entry_point: str | None = None, slow: Callable[[], None] | None = None) -> RunResult:
    """Run `code` then `tests` in a fresh sandbox; passed only when a test or an assert ran and none failed
    (tests that run nothing fail, as pytest's "no tests ran"). `entry_point`: the solution's function that
    HumanEval-style tests (`def check(candidate)`, never called) are called with.

    The verdict comes only from the tester process (harness.py) over its own pipe, which the solution
    process never holds: nothing the solution prints, returns or does to its own process can pass a run."""
    payload = _payload(code, tests, entry_point, limits)
    box = _start(interpreter_for(python), limits)
    threading.Thread(target=_feed, args=(box.proc, payload), daemon=True).start()
    try:
        _collect(box, limits.max_output_bytes, slow)
    finally:
        _end(box)
        verdict = _read_verdict(box.verdict_r)  # every writer is gone by now: this reads to the end
    return _result(box, verdict, limits)


def _payload(code: str, tests: str, entry_point: str | None, limits: Limits) -> bytes:
    """What the tester reads from its stdin: the solution, the tests and the limits each process sets."""
    return json.dumps({
        "code": code, "tests": tests, "entry_point": entry_point,
        "limits": {
            # + the tester process and its watch thread (harness_watch.py)
            "nproc": limits.max_processes + 2, "as": limits.memory_mb * 1024 * 1024,
            "cpu": max(1, int(limits.timeout_s + 0.999)), "fsize": limits.max_file_mb * 1024 * 1024,
            "nofile": limits.max_open_files, "cpu_s": min(limits.cpu_s, limits.timeout_s) if limits.cpu_s else 0,
        },
    }).encode()


@dataclass
class _Sandbox:
    """One running sandbox: bwrap, its output so far, who its init is, and how it ended."""

    proc: subprocess.Popen
    info_r: int  # bwrap writes {"child-pid": N} here: the sandbox's init, to kill on timeout
    verdict_r: int  # the tester's verdict, and nothing else
    start: float
    deadline: float
    info: bytes = b""
    info_open: bool = True  # bwrap has not closed its --info-fd yet
    init_pid: int | None = None
    init_fd: int | None = None
    chunks: list[bytes] = field(default_factory=list)
    timed_out: bool = False
    flooded: bool = False
    group: sandbox_cgroup.Group | None = None  # its cgroup, where this machine gives one
    cpu_s: float = 0.0  # the solution's CPU budget (0: none), held against the group's count
    over_cpu: str | None = None  # the group's CPU time went past the budget: why it was killed
    over_memory: str | None = None  # the kernel killed a process of the group for its memory

    def read_info(self) -> None:
        """Read what bwrap says on its --info-fd; learn the init's pid (and a pidfd on it) once it is complete."""
        piece = os.read(self.info_r, 4096)
        self.info += piece
        if not piece:
            self.info_open = False
        if self.init_pid is None:
            self.init_pid, self.init_fd = _sandbox_init(self.info, self.proc)


def _start(interpreter: str, limits: Limits) -> _Sandbox:
    """Start bwrap with the harness as the sandbox's init, in a cgroup of its own where this machine gives one
    (sandbox_cgroup.py); SandboxUnavailable when bwrap cannot be started."""
    info_r, info_w = os.pipe()
    verdict_r, verdict_w = os.pipe()
    group = sandbox_cgroup.make(_group_memory_bytes(limits), limits.max_processes + 3)
    seccomp_fd = seccomp_filter_fd()
    try:
        argv, how = launch_argv(bwrap_argv(interpreter, limits.max_file_mb, info_w, verdict_w, seccomp_fd))
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=tuple(fd for fd in (info_w, verdict_w, seccomp_fd) if fd is not None),
            start_new_session=True, cwd="/", env={"PATH": "/usr/bin:/bin"}, **how,
        )
    except OSError as exc:  # bwrap not executable for us (or for nobody, when we are root)
        for fd in (info_r, verdict_r):
            os.close(fd)
        if group is not None:
            group.close()
        raise SandboxUnavailable(
            f"cannot start bubblewrap ({argv[0] if 'argv' in locals() else 'bwrap'}): {exc}"
        ) from None
    except BaseException:
        for fd in (info_r, verdict_r):
            os.close(fd)
        if group is not None:
            group.close()
        raise
    finally:
        for fd in (info_w, verdict_w, seccomp_fd):
            if fd is not None:
                os.close(fd)
    box = _Sandbox(proc, info_r, verdict_r, start, start + limits.timeout_s, group=group,
                   cpu_s=min(limits.cpu_s, limits.timeout_s) if limits.cpu_s else 0.0)
    try:
        _enter_group(box)
    except BaseException:  # e.g. interrupted: nothing of this sandbox is left running
        box.timed_out = True
        _end(box)
        os.close(box.verdict_r)
        raise
    return box


def _group_memory_bytes(limits: Limits) -> int:
    """The sandbox's cgroup memory limit: its processes, its /tmp and /dev/shm, and bwrap's and the tester's own."""
    return (limits.memory_mb + 5 * limits.max_file_mb + sandbox_cgroup.HEADROOM_MB) * 1024 * 1024


def _enter_group(box: _Sandbox) -> None:
    """Move the sandbox's first process into its group (where it has one) while it waits at the gate
    (sandbox_command.launch_argv), then let it go: bwrap, the init and everything they start descend from it, and
    the cgroup namespace bwrap makes is rooted at the group. Where the move fails (the process already gone) it
    is let go all the same and ends as it would without a group."""
    try:
        if box.group is not None:
            try:
                box.group.add(box.proc.pid)
            except OSError:  # the process already gone: nothing of the sandbox runs
                pass
    finally:
        try:
            box.proc.stdin.write(b"go\n")  # the gate's line, before the harness's payload (_feed)
            box.proc.stdin.flush()
        except OSError:
            pass


def _feed(proc: subprocess.Popen, payload: bytes) -> None:
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _collect(box: _Sandbox, max_output_bytes: int, slow: Callable[[], None] | None) -> None:
    """Read the sandbox's output until it ends, floods (over `max_output_bytes`) or runs past its deadline; call
    `slow` once when it is still going after SLOW_S."""
    out = box.proc.stdout.fileno()
    poller = selectors.DefaultSelector()  # epoll/poll: select() cannot watch descriptors >= 1024
    for fd in (out, box.info_r):
        poller.register(fd, selectors.EVENT_READ)
    size = 0
    budget = box.cpu_s if box.group is not None and box.cpu_s else None
    try:
        while True:
            now = time.monotonic()
            left = box.deadline - now
            if left <= 0:
                box.timed_out = True
                return
            if slow is not None and now - box.start >= SLOW_S:  # a waiting run: its slot goes to the next job
                slow, _ = None, slow()
            if budget is not None and _over_cpu(box, budget):
                return
            wait = min(left, 0.5 if slow is None else SLOW_S / 4, GROUP_POLL_S if budget is not None else 1.0)
            ready = [key.fd for key, _ in poller.select(wait)]
            if box.info_r in ready:
                box.read_info()
                if not box.info_open:
                    poller.unregister(box.info_r)
            if out not in ready:
                continue
            chunk = os.read(out, 65536)
            if not chunk:
                return
            size += len(chunk)
            if size > max_output_bytes:
                box.flooded = True
                return
            box.chunks.append(chunk)
    finally:
        poller.close()


def _over_cpu(box: _Sandbox, budget: float) -> bool:
    """Has the sandbox used more CPU than its budget, all its processes together as its cgroup counts them (less
    bwrap's and the tester's own: the budget is the solution's)? Then it is to be killed, saying why."""
    used = box.group.cpu_s()
    if used <= budget + GROUP_CPU_SLACK_S or box.init_pid is None:
        return False
    tester = sandbox_cgroup.own_cpu_s(box.init_pid)
    if tester is None:  # the tester has ended (its last look, harness_watch.py, judged the rest): so is the run
        return False
    used -= tester + (sandbox_cgroup.own_cpu_s(box.proc.pid) or 0.0)
    if used <= budget + GROUP_CPU_SLACK_S:
        return False
    box.over_cpu = (f"the solution used its {budget:g} s of CPU time (all its processes together, as the kernel "
                    f"counts them: {used:.2f} s)")
    return True


def _end(box: _Sandbox) -> None:
    """Kill the sandbox if it timed out or flooded; return once bwrap and everything inside it are gone."""
    proc = box.proc
    killing = box.timed_out or box.flooded or box.over_cpu is not None
    if killing and box.init_pid is None and box.info_open and _readable(box.info_r, 0):
        box.read_info()  # bwrap may have said who the init is since the last look
    if killing:
        _kill(proc, box.init_pid, box.init_fd)
    try:
        # bwrap exits once it has reaped its child, the namespace init, and that init's exit completes only
        # after the kernel has killed and reaped every process in the namespace.
        proc.wait(timeout=max(2.0, box.deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        box.timed_out = True
        _kill(proc, box.init_pid, box.init_fd)
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # bwrap itself stuck: kill it, the init is waited on below
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _wait_gone(box.init_fd)
    os.close(box.info_r)
    proc.stdout.close()
    if box.group is not None:
        if box.group.oom_kills():
            box.over_memory = (f"the sandbox used more than its {box.group.limit_bytes >> 20} MB of memory (all its "
                               "processes and files together, as the kernel counts them)")
        box.group.close()


def _result(box: _Sandbox, verdict: dict, limits: Limits) -> RunResult:
    """The run's result: passed only when it ended in time, within its output cap, and the tester said so."""
    proc, timed_out, flooded = box.proc, box.timed_out, box.flooded
    output = b"".join(box.chunks).decode("utf-8", "replace")
    over = box.over_cpu or box.over_memory
    passed = not (timed_out or flooded or over) and proc.returncode == 0 and verdict.get("passed") is True
    error = None
    if over:
        error = over
    elif timed_out:
        error = f"timed out after {limits.timeout_s:g}s"
    elif flooded:
        error = f"output over {limits.max_output_bytes} bytes"
    elif not passed:
        lines = output.rstrip("\n").splitlines()
        error = (
            str(verdict.get("error") or "")[:300]
            or (lines[-1][:200] if lines else "")
            or f"exit code {proc.returncode}"
        )
    return RunResult(
        passed=passed, returncode=proc.returncode, output=output[-4000:], timed_out=timed_out,
        output_exceeded=flooded, seconds=time.monotonic() - box.start, error=error,
        extra={"tests": verdict.get("tests")} if "tests" in verdict else {},
    )


def _read_verdict(fd: int) -> dict:
    """The tester's verdict object ({} when it wrote none: killed, or never started)."""
    data = b""
    os.set_blocking(fd, False)  # a writer that somehow survived must not hang the reward
    try:
        while len(data) < 65536 and (piece := os.read(fd, 65536)):
            data += piece
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    try:
        verdict = json.loads(data.decode())
    except ValueError:
        return {}
    return verdict if isinstance(verdict, dict) else {}


@functools.lru_cache(maxsize=8)
def check_sandbox(python: str | None = None) -> str:
    """Prove the sandbox works here (a trivial run must pass); returns the bwrap version line.

    Raises SandboxUnavailable with bwrap's own error and the usual fix when it does not.
    """
    result = run_python("x = 1", "assert x == 1", Limits(timeout_s=20), python)
    if not result.passed:
        hint = ""
        if "uid map" in result.output or "Operation not permitted" in result.output or "namespace" in result.output:
            hint = (
                " Unprivileged user namespaces look disabled: allow them (Ubuntu 24.04+: "
                "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for bwrap; "
                "elsewhere `sysctl kernel.unprivileged_userns_clone=1`), or run where they are allowed."
            )
        raise SandboxUnavailable(
            f"bubblewrap cannot run code here, so model-written code will not be executed (no host fallback): "
            f"{result.error}: {result.output.strip()[:500]}.{hint}"
        )
    version = subprocess.run([shutil.which("bwrap"), "--version"], capture_output=True, text=True).stdout.strip()
    return version or "bwrap"


def run_many(jobs: list[tuple], limits: Limits = Limits(), workers: int | None = None,
             python: str | None = None) -> list[RunResult]:
    """Run (code, tests) or (code, tests, entry_point) jobs in parallel, one sandbox each; results in input order.

    A sandbox's crash, hang or flood stays its own: it scores as not passed, the others carry on.
    """
    check_sandbox(python)
    workers = workers or min(16, max(2, 4 * (os.cpu_count() or 2)))  # runs mostly wait on process start
    # `workers` runs at a time, and a run still going after SLOW_S (a hang, or a sleep) gives its slot to the next
    # job while it waits out its own limits: a hang costs its own slot, not the batch. At most WAITING x workers
    # sandboxes exist at once.
    active = threading.BoundedSemaphore(workers)
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), WAITING * workers, batch_room(limits)))) as pool:
        return list(pool.map(lambda job: _safe_run(job, limits, python, active), jobs))


def batch_room(limits: Limits) -> int:
    """How many sandboxes may be alive at once so that a batch holds at most half the memory this machine has
    available: each may hold memory_mb in its processes and 5x max_file_mb in /tmp and /dev/shm."""
    try:
        with open("/proc/meminfo") as handle:
            available_kb = next(int(line.split()[1]) for line in handle if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 1 << 30  # not Linux-like: the per-sandbox caps alone
    per_sandbox_kb = (limits.memory_mb + 5 * limits.max_file_mb) * 1024
    return max(1, available_kb // 2 // per_sandbox_kb)


def _safe_run(job: tuple, limits: Limits, python: str | None, active: threading.BoundedSemaphore) -> RunResult:
    held = [active.acquire()]

    def release() -> None:  # once: when the run turns out slow, or when it ends (same thread)
        if held:
            held.pop()
            active.release()

    try:
        return run_python(job[0], job[1], limits, python, job[2] if len(job) > 2 else None, slow=release)
    except SandboxUnavailable:
        raise
    except Exception as exc:  # e.g. out of file descriptors: this job fails, the batch goes on
        return RunResult(passed=False, returncode=None, error=f"{type(exc).__name__}: {exc}")
    finally:
        release()
