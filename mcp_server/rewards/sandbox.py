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

Without a working bwrap there is no execution: `SandboxUnavailable` says why and how to fix it.
There is no fallback to the host.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

NOBODY = 65534


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here: nothing model-written will run."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock for the whole run, including interpreter start
    memory_mb: int = 512  # address space per process (RLIMIT_AS)
    max_processes: int = 8  # processes + threads inside the sandbox's own user namespace (RLIMIT_NPROC)
    max_output_bytes: int = 64 * 1024  # stdout + stderr; more is a flood and scores 0
    max_file_mb: int = 16  # largest file written (RLIMIT_FSIZE); /tmp is capped at 4x this
    max_open_files: int = 64


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


# The trusted harness, run inside the sandbox by the interpreter (`python -I -c RUNNER`). It reads one
# JSON payload from stdin, lowers its own limits (RLIMIT_NPROC is set here, inside the new user
# namespace, so it counts only this sandbox's processes), runs the solution as module `solution`, then
# the tests with the solution's names in scope (as `from solution import *`), then every `test*`
# function and every `Test*` class's `test*` methods in order (pytest's default collection).
# A pass is reported as a per-run random token on the saved stdout: os._exit(0) or printing "PASS"
# from the solution does not pass.
RUNNER = r"""
import json, os, resource, sys, types
def _harness():
    payload = json.loads(sys.stdin.read())
    token, lim = payload.pop("token"), payload.pop("limits")
    for name, value in (("RLIMIT_NPROC", lim["nproc"]), ("RLIMIT_AS", lim["as"]), ("RLIMIT_CPU", lim["cpu"]),
                        ("RLIMIT_FSIZE", lim["fsize"]), ("RLIMIT_NOFILE", lim["nofile"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    write, fd, callable_, getattr_ = os.write, os.dup(1), callable, getattr
    os.chdir("/tmp")
    solution = types.ModuleType("solution")
    solution.__file__ = "/tmp/solution.py"
    sys.modules["solution"] = solution
    exec(compile(payload["code"], "solution.py", "exec"), solution.__dict__)
    scope = {"__name__": "test_solution", "__file__": "/tmp/test_solution.py"}
    scope.update({k: v for k, v in solution.__dict__.items() if not k.startswith("_")})
    exec(compile(payload["tests"], "test_solution.py", "exec"), scope)
    tests = []
    for name, obj in list(scope.items()):
        if name.startswith("test") and callable_(obj) and not isinstance(obj, type):
            tests.append(obj)
        elif name.startswith("Test") and isinstance(obj, type) and "__init__" not in obj.__dict__:
            instance = obj()
            tests += [getattr_(instance, m) for m in obj.__dict__ if m.startswith("test") and callable_(getattr_(obj, m))]
    for test in tests:
        test()
    sys.stdout.flush()
    write(fd, ("\n" + token + " PASS\n").encode())
_harness()
"""


def _interpreter(python: str | None) -> str:
    """The Python to run inside: `python` if given, else the system /usr/bin/python3 (readable by anyone,
    under the read-only /usr), else this interpreter's base executable."""
    for candidate in (python, "/usr/bin/python3", getattr(sys, "_base_executable", None), sys.executable):
        if candidate and os.path.exists(candidate):
            return os.path.realpath(candidate)
    raise SandboxUnavailable("no Python interpreter found to run inside the sandbox")


def _bwrap_argv(interpreter: str, limits: Limits, info_fd: int) -> list[str]:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed, so model-written code will not be executed "
            "(there is no fallback to the host). Install it: `apt-get install bubblewrap` / "
            "`dnf install bubblewrap` / `pacman -S bubblewrap`."
        )
    argv = [bwrap, "--info-fd", str(info_fd), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # merged-/usr symlinks or real dirs
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    prefix = os.path.dirname(os.path.dirname(interpreter))  # e.g. /opt/python3.12 for /opt/python3.12/bin/python
    if not interpreter.startswith("/usr/"):
        argv += ["--ro-bind", prefix, prefix]
    tmp_bytes = max(1, limits.max_file_mb) * 4 * 1024 * 1024
    argv += [
        "--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--hostname", "sandbox",
        "--remount-ro", "/",
        interpreter, "-I", "-c", RUNNER,
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
        select.select([init_fd], [], [])
    finally:
        os.close(init_fd)


def run_python(code: str, tests: str, limits: Limits = Limits(), python: str | None = None) -> RunResult:
    """Run `code` then `tests` in a fresh sandbox; passed only when every test ran and none failed."""
    token = secrets.token_hex(16)
    payload = json.dumps({
        "code": code, "tests": tests, "token": token,
        "limits": {
            "nproc": limits.max_processes, "as": limits.memory_mb * 1024 * 1024,
            "cpu": max(1, int(limits.timeout_s + 0.999)), "fsize": limits.max_file_mb * 1024 * 1024,
            "nofile": limits.max_open_files,
        },
    }).encode()
    interpreter = _interpreter(python)
    info_r, info_w = os.pipe()  # bwrap writes {"child-pid": N} here: the sandbox's init, to kill on timeout
    try:
        argv = _bwrap_argv(interpreter, limits, info_w)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(info_w,),
            start_new_session=True, cwd="/", env={"PATH": "/usr/bin:/bin"}, **_drop_root(),
        )
    except OSError as exc:  # bwrap not executable for us (or for nobody, when we are root)
        os.close(info_r)
        raise SandboxUnavailable(f"cannot start bubblewrap ({argv[0] if 'argv' in locals() else 'bwrap'}): {exc}") from None
    except BaseException:
        os.close(info_r)
        raise
    finally:
        os.close(info_w)

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
    try:
        while out in watch:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(watch, [], [], min(left, 0.5))
            if info_r in ready:
                piece = os.read(info_r, 4096)
                info += piece
                if not piece:
                    watch.remove(info_r)
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
        if (timed_out or flooded) and init_pid is None and info_r in watch and select.select([info_r], [], [], 0)[0]:
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
    output = b"".join(chunks).decode("utf-8", "replace")
    lines = output.rstrip("\n").splitlines()
    passed = not (timed_out or flooded) and proc.returncode == 0 and bool(lines) and lines[-1] == f"{token} PASS"
    error = None
    if timed_out:
        error = f"timed out after {limits.timeout_s:g}s"
    elif flooded:
        error = f"output over {limits.max_output_bytes} bytes"
    elif not passed:
        error = (lines[-1][:200] if lines else "") or f"exit code {proc.returncode}"
    return RunResult(
        passed=passed, returncode=proc.returncode, output=output.replace(token, "<token>")[-4000:],
        timed_out=timed_out, output_exceeded=flooded, seconds=time.monotonic() - start, error=error,
    )


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


def run_many(jobs: list[tuple[str, str]], limits: Limits = Limits(), workers: int | None = None,
             python: str | None = None) -> list[RunResult]:
    """Run (code, tests) pairs in parallel, one sandbox each; results in input order.

    A sandbox's crash, hang or flood stays its own: it scores as not passed, the others carry on.
    """
    check_sandbox(python)
    workers = workers or min(16, max(2, 2 * (os.cpu_count() or 2)))  # runs mostly wait on process start
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda job: _safe_run(job, limits, python), jobs))


def _safe_run(job: tuple[str, str], limits: Limits, python: str | None) -> RunResult:
    try:
        return run_python(job[0], job[1], limits, python)
    except SandboxUnavailable:
        raise
    except Exception as exc:  # e.g. out of file descriptors: this job fails, the batch goes on
        return RunResult(passed=False, returncode=None, error=f"{type(exc).__name__}: {exc}")
