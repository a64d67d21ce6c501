"""Run model-written Python inside bubblewrap, never on the host.

Each run gets its own sandbox: new user, pid, network, ipc and uts namespaces (no network at all),
the system mounted read-only, a private size-capped /tmp, no host home, credentials or environment
variables, rlimits on CPU, memory, processes, files and open files, an output cap, and a wall-clock
timeout that kills the whole sandbox: the sandbox's pid-namespace init (its host pid comes from
bwrap's --info-fd; a pidfd on it is taken while bwrap, its only reaper, runs) is SIGKILLed, the kernel
then kills everything left inside, setsid'd or not. bwrap itself is never killed while its init is known:
bwrap exits only after reaping that init, and the init's exit completes only once the kernel has killed
and reaped every process in its namespace. A run returns after that, and after the pidfd says the init
is gone, so nothing outlives the run and no zombie is left behind.

Inside, pid 1 is the harness's tester (harness.py, `--as-pid-1`): it forks the process that runs the
solution and grades it from outside, values crossing as JSON. The verdict comes back on a pipe of its own
that only the tester holds, so nothing the solution prints, returns or does to its process can pass a run.

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
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

NOBODY = 65534
SLOW_S = 1.0  # a run still going after this long is waiting (a hang, a sleep): its slot goes to the next job
WAITING = 2  # sandboxes alive at once, as a multiple of the workers running at once


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here: nothing model-written will run."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock for the whole run, including interpreter start
    memory_mb: int = 512  # address space per process (RLIMIT_AS)
    max_processes: int = (
        8  # the solution's processes + threads (RLIMIT_NPROC in the sandbox's user namespace, +1: the tester)
    )
    max_output_bytes: int = 64 * 1024  # stdout + stderr; more is a flood and scores 0
    max_file_mb: int = 16  # largest file written (RLIMIT_FSIZE); /tmp is capped at 4x this
    max_open_files: int = 64
    # CPU seconds the solution's process may use (0: up to the timeout). A busy loop is stopped after this, not
    # after the wall-clock timeout, so it holds a core only that long (its children: RLIMIT_CPU at the timeout).
    cpu_s: float = 1.0


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


# The trusted harness (harness.py, stdlib only), run by the sandbox's Python as its pid 1: the tester, which
# forks the solution process and grades it from outside (see that module's docstring).
HARNESS = (Path(__file__).parent / "harness.py").read_text()
# Compiling the harness's source at every start was a tenth of a run: it is compiled once per interpreter, by
# that interpreter (bytecode is version-specific), and started from its bytecode (optimize=2 drops only the
# docstrings: the harness has no asserts, and the tests it compiles keep theirs).
_COMPILE = ("import binascii, marshal, sys, zlib; "
            "sys.stdout.buffer.write(binascii.b2a_base64(zlib.compress(marshal.dumps("
            "compile(sys.stdin.buffer.read(), 'harness.py', 'exec', optimize=2))), newline=False))")
_BOOT = "import binascii, marshal, sys, zlib; exec(marshal.loads(zlib.decompress(binascii.a2b_base64(sys.argv[2]))))"


@functools.lru_cache(maxsize=8)
def _harness_code(interpreter: str) -> str | None:
    """The harness's bytecode for this interpreter (marshal, zlib, base64); None if it could not compile it."""
    try:
        return subprocess.run([interpreter, "-I", "-c", _COMPILE], input=HARNESS.encode(), capture_output=True,
                              timeout=60, check=True, env={"PATH": "/usr/bin:/bin"}).stdout.decode("ascii")
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None


def _harness_args(interpreter: str, verdict_fd: int) -> list[str]:
    """What follows `python -I` to start the harness: from its bytecode, else from its source (slower to start)."""
    code = _harness_code(interpreter)
    return ["-c", HARNESS, str(verdict_fd)] if code is None else ["-c", _BOOT, str(verdict_fd), code]


def _interpreter(python: str | None) -> str:
    """The Python to run inside: `python` if given, else the system /usr/bin/python3 (readable by anyone,
    under the read-only /usr), else this interpreter's base executable."""
    for candidate in (python, "/usr/bin/python3", getattr(sys, "_base_executable", None), sys.executable):
        if candidate and os.path.exists(candidate):
            return os.path.realpath(candidate)
    raise SandboxUnavailable("no Python interpreter found to run inside the sandbox")


# Host directories never bound into the sandbox whole, even when an interpreter lies directly in them.
UNBINDABLE = frozenset({"/", "/etc", "/home", "/root", "/var", "/run", "/tmp", "/proc", "/sys", "/dev", "/boot",
                        "/mnt", "/media"})


def _interpreter_prefix(interpreter: str) -> str:
    """The directory bound read-only for an interpreter outside /usr: its installation prefix
    (/opt/python3.12 for /opt/python3.12/bin/python3), or its own directory when that prefix would be "/"
    (/srv/python3). Never "/" or a host directory of secrets: such an interpreter is refused."""
    prefix = os.path.dirname(os.path.dirname(interpreter))
    if prefix == "/":
        prefix = os.path.dirname(interpreter)
    if prefix in UNBINDABLE:
        raise SandboxUnavailable(
            f"the sandbox's Python {interpreter} lies directly in {prefix}, which would expose that whole host "
            "directory to model-written code: install it under a directory of its own (e.g. /opt/python3/bin)"
        )
    return prefix


def _bwrap_argv(interpreter: str, limits: Limits, info_fd: int, verdict_fd: int) -> list[str]:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed, so model-written code will not be executed "
            "(there is no fallback to the host). Install it: `apt-get install bubblewrap` / "
            "`dnf install bubblewrap` / `pacman -S bubblewrap`."
        )
    argv = [
        bwrap,
        "--info-fd",
        str(info_fd),
        "--as-pid-1",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # merged-/usr symlinks or real dirs
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    if not interpreter.startswith("/usr/"):
        prefix = _interpreter_prefix(interpreter)
        argv += ["--ro-bind", prefix, prefix]
    tmp_bytes = max(1, limits.max_file_mb) * 4 * 1024 * 1024
    shm_bytes = max(1, limits.max_file_mb) * 1024 * 1024  # POSIX semaphores and small shared buffers only
    argv += [
        # /dev: bwrap's minimal device tree, read-only, with a small /dev/shm (else shared memory is an uncapped
        # tmpfs the solution could fill with host memory).
        "--proc", "/proc", "--dev", "/dev", "--size", str(shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--hostname", "sandbox",
        "--remount-ro", "/",
        interpreter, "-I", *_harness_args(interpreter, verdict_fd),
    ]
    return argv


def _drop_root() -> dict:
    # Root is exempt from RLIMIT_NPROC even inside a user namespace (the kernel checks the host uid),
    # so a fork bomb would be unbounded: when we are root, the sandbox runs as nobody.
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}


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
    payload = json.dumps({
        "code": code, "tests": tests, "entry_point": entry_point,
        "limits": {
            "nproc": limits.max_processes + 1, "as": limits.memory_mb * 1024 * 1024,  # + the tester process
            "cpu": max(1, int(limits.timeout_s + 0.999)), "fsize": limits.max_file_mb * 1024 * 1024,
            "nofile": limits.max_open_files, "cpu_s": min(limits.cpu_s, limits.timeout_s) if limits.cpu_s else 0,
        },
    }).encode()
    interpreter = _interpreter(python)
    info_r, info_w = os.pipe()  # bwrap writes {"child-pid": N} here: the sandbox's init, to kill on timeout
    verdict_r, verdict_w = os.pipe()  # the tester's verdict, and nothing else
    try:
        argv = _bwrap_argv(interpreter, limits, info_w, verdict_w)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(info_w, verdict_w), start_new_session=True, cwd="/", env={"PATH": "/usr/bin:/bin"},
            **_drop_root(),
        )
    except OSError as exc:  # bwrap not executable for us (or for nobody, when we are root)
        os.close(info_r)
        os.close(verdict_r)
        raise SandboxUnavailable(
            f"cannot start bubblewrap ({argv[0] if 'argv' in locals() else 'bwrap'}): {exc}"
        ) from None
    except BaseException:
        os.close(info_r)
        os.close(verdict_r)
        raise
    finally:
        os.close(info_w)
        os.close(verdict_w)

    def feed() -> None:
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    threading.Thread(target=feed, daemon=True).start()
    chunks, size, timed_out, flooded = [], 0, False, False
    info, init_pid, init_fd = b"", None, None
    deadline = start + limits.timeout_s
    out = proc.stdout.fileno()
    watch = [out, info_r]
    poller = selectors.DefaultSelector()  # epoll/poll: select() cannot watch descriptors >= 1024
    for fd in watch:
        poller.register(fd, selectors.EVENT_READ)
    try:
        while out in watch:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                timed_out = True
                break
            if slow is not None and now - start >= SLOW_S:  # a waiting run: its slot goes to the next job
                slow, _ = None, slow()
            ready = [key.fd for key, _ in poller.select(min(left, 0.5 if slow is None else SLOW_S / 4))]
            if info_r in ready:
                piece = os.read(info_r, 4096)
                info += piece
                if not piece:
                    watch.remove(info_r)
                    poller.unregister(info_r)
                if init_pid is None:
                    init_pid, init_fd = _sandbox_init(info, proc)
            if out not in ready:
                continue
            chunk = os.read(out, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > limits.max_output_bytes:
                flooded = True
                break
            chunks.append(chunk)
    finally:
        poller.close()
        if (timed_out or flooded) and init_pid is None and info_r in watch and _readable(info_r, 0):
            info += os.read(info_r, 4096)  # bwrap may have said who the init is since the last look
            init_pid, init_fd = _sandbox_init(info, proc)
        if timed_out or flooded:
            _kill(proc, init_pid, init_fd)
        try:
            # bwrap exits once it has reaped its child, the namespace init, and that init's exit completes only
            # after the kernel has killed and reaped every process in the namespace.
            proc.wait(timeout=max(2.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc, init_pid, init_fd)
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # bwrap itself stuck: kill it, the init is waited on below
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        _wait_gone(init_fd)
        os.close(info_r)
        proc.stdout.close()
        verdict = _read_verdict(verdict_r)  # every writer is gone by now: this reads to the end
    output = b"".join(chunks).decode("utf-8", "replace")
    passed = not (timed_out or flooded) and proc.returncode == 0 and verdict.get("passed") is True
    error = None
    if timed_out:
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
        output_exceeded=flooded, seconds=time.monotonic() - start, error=error,
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
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), WAITING * workers))) as pool:
        return list(pool.map(lambda job: _safe_run(job, limits, python, active), jobs))


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
