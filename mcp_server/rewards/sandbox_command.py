"""The command that starts a sandbox (see sandbox.py): bwrap's arguments (namespaces, read-only mounts, a
private capped /tmp, no environment), the Python that runs inside, and the harness it boots as its pid 1, shipped
as bytecode compiled once per interpreter (else as source)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mcp_server.evidence import STATE_ENV, key_path

NOBODY = 65534


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here: nothing model-written will run."""


# The trusted harness (harness.py, stdlib only), run by the sandbox's Python as its pid 1: the tester, which
# forks the solution process and grades it from outside (see that module's docstring). Its helper modules are
# installed first, under their own names, in this order; harness.py itself runs last, as __main__.
HARNESS_MODULES = ("harness_wire", "harness_solution", "harness_watch", "harness_tests", "harness")
HARNESS = [(name, (Path(__file__).parent / f"{name}.py").read_text()) for name in HARNESS_MODULES]
# Compiling the harness's source at every start was a tenth of a run: it is compiled once per interpreter, by
# that interpreter (bytecode is version-specific), and started from its bytecode (optimize=2 drops only the
# docstrings: the harness has no asserts, and the tests it compiles keep theirs).
_COMPILE = ("import binascii, json, marshal, sys, zlib; "
            "sys.stdout.buffer.write(binascii.b2a_base64(zlib.compress(marshal.dumps("
            "[(n, compile(s, n + '.py', 'exec', optimize=2)) for n, s in json.loads(sys.stdin.buffer.read())]"
            ")), newline=False))")
# Installs every module but the last in sys.modules, then runs the last (the tester) as __main__. `{modules}`:
# an expression giving [(name, code object), ...] from sys.argv[2].
_BOOT = ("import binascii, json, marshal, sys, types, zlib\n"
         "*_helpers, (_, _main) = {modules}\n"
         "for _name, _code in _helpers:\n"
         "    _module = sys.modules[_name] = types.ModuleType(_name)\n"
         "    exec(_code, _module.__dict__)\n"
         "exec(_main)\n")
_FROM_BYTECODE = _BOOT.format(modules="marshal.loads(zlib.decompress(binascii.a2b_base64(sys.argv[2])))")
_FROM_SOURCE = _BOOT.format(modules="[(n, compile(s, n + '.py', 'exec')) for n, s in json.loads(sys.argv[2])]")


@functools.lru_cache(maxsize=8)
def _harness_code(interpreter: str) -> str | None:
    """The harness's bytecode for this interpreter (marshal, zlib, base64); None if it could not compile it."""
    try:
        return subprocess.run([interpreter, "-I", "-c", _COMPILE], input=json.dumps(HARNESS).encode(),
                              capture_output=True, timeout=60, check=True,
                              env={"PATH": "/usr/bin:/bin"}).stdout.decode("ascii")
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None


def _harness_args(interpreter: str, verdict_fd: int) -> list[str]:
    """What follows `python -I` to start the harness: from its bytecode, else from its source (slower to start)."""
    code = _harness_code(interpreter)
    if code is None:
        return ["-c", _FROM_SOURCE, str(verdict_fd), json.dumps(HARNESS)]
    return ["-c", _FROM_BYTECODE, str(verdict_fd), code]


def interpreter_for(python: str | None) -> str:
    """The Python to run inside: `python` if given, else the system /usr/bin/python3 (readable by anyone,
    under the read-only /usr), else this interpreter's base executable."""
    for candidate in (python, "/usr/bin/python3", getattr(sys, "_base_executable", None), sys.executable):
        if candidate and os.path.exists(candidate):
            return os.path.realpath(candidate)
    raise SandboxUnavailable("no Python interpreter found to run inside the sandbox")


# Host directories never bound into the sandbox whole, even when an interpreter lies directly in them.
UNBINDABLE = frozenset({"/", "/etc", "/home", "/root", "/var", "/run", "/tmp", "/proc", "/sys", "/dev", "/boot",
                        "/mnt", "/media"})


# Where the interpreter finds its standard library (and the libraries its installation ships), as it says itself.
_WHERE = ("import json, sys, sysconfig; p = sysconfig.get_paths(); "
          "print(json.dumps([sys.base_prefix, p['stdlib'], p['platstdlib']]))")


@functools.lru_cache(maxsize=8)
def interpreter_binds(interpreter: str) -> tuple[str, ...]:
    """The host paths bound read-only for an interpreter outside /usr: the binary itself and its installation's
    lib folders (prefix/lib, prefix/lib64: the standard library, its site-packages, the shared libraries it
    ships), never the folder it lies in: for /home/u/bin/python3 that would be the whole home (~/.ssh with it).
    An installation whose lib folder is a host directory of secrets, or "/", is refused."""
    try:
        prefix, *stdlib = json.loads(subprocess.run(
            [interpreter, "-I", "-c", _WHERE], capture_output=True, timeout=60, check=True,
            env={"PATH": "/usr/bin:/bin"}).stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SandboxUnavailable(f"the sandbox's Python {interpreter} does not run here ({exc})") from None
    binds = [interpreter]
    if not _under_usr(prefix):
        libs = [os.path.join(prefix, lib) for lib in ("lib", "lib64")]
        binds += [os.path.realpath(lib) for lib in libs if os.path.isdir(lib)]
    binds += [os.path.realpath(d) for d in stdlib if os.path.isdir(d) and not _under_usr(os.path.realpath(d))
              and not any(os.path.realpath(d).startswith(b + os.sep) for b in binds[1:])]
    for path in binds[1:]:
        if path in UNBINDABLE or os.path.dirname(path) == "/":  # a host directory, or a whole top-level one
            raise SandboxUnavailable(
                f"the sandbox's Python {interpreter} keeps its libraries in {path}, which would expose that host "
                "directory to model-written code: install it under a directory of its own (e.g. /opt/python3)")
    return tuple(dict.fromkeys(binds))


def _never_the_key(path: str) -> None:
    """The evidence key (mcp_server/evidence.py) signs a run's records: a bind that holds its folder would hand it
    to model-written code, which could then forge them. Refused."""
    folder = os.path.realpath(key_path().parent)
    if folder == path or folder.startswith(path.rstrip(os.sep) + os.sep):
        raise SandboxUnavailable(f"the sandbox would bind {path}, which holds the evidence key's folder {folder}: "
                                 f"set {STATE_ENV} to a folder outside the interpreter's installation")


def _under_usr(path: str) -> bool:
    return path == "/usr" or path.startswith("/usr/")


# /proc shows every pid namespace the host's own state besides the namespace's processes: memory, load, pressure,
# disks, interrupts, kernel symbols, other users' keys. Of its top level only these stay visible (the sandbox's
# processes and the mount and network views of its own namespaces, the CPU model and the kernel's version); every
# other entry is masked: a file bound over with an empty one, a folder with an empty read-only tmpfs. Under
# /proc/sys, which stays (the kernel's settings: page size, limits), the host-wide counters are masked too.
PROC_KEPT = frozenset({"self", "thread-self", "mounts", "net", "sys", "cpuinfo", "version", "filesystems", "sysvipc"})
# /proc/sys: open files and inodes (fs), the boot id (kernel/random), settings the kernel sizes from the host's
# memory at boot (vm: min_free_kbytes, the reserves; kernel/threads-max; net/netfilter/nf_conntrack_max), and
# host-wide counts (kernel/pty: its ptys in use; hung tasks seen; the taint flags; the perf sample rate the kernel
# lowers under load).
PROC_SYS_MASKED = ("/proc/sys/fs", "/proc/sys/kernel/random", "/proc/sys/vm", "/proc/sys/kernel/pty",
                   "/proc/sys/kernel/threads-max", "/proc/sys/kernel/hung_task_detect_count",
                   "/proc/sys/kernel/tainted", "/proc/sys/kernel/perf_event_max_sample_rate",
                   "/proc/sys/net/netfilter/nf_conntrack_max")
MASKED_PROC = ("/proc/meminfo", "/proc/loadavg", "/proc/stat", "/proc/vmstat", "/proc/swaps", "/proc/uptime")


@functools.lru_cache(maxsize=1)
def masked_proc() -> tuple[tuple[str, bool], ...]:
    """(path, is a folder) of every /proc entry the sandbox gets masked: the host's top-level entries (its
    /proc lists the same ones a new pid namespace's does) but PROC_KEPT and the process folders, and
    PROC_SYS_MASKED (those this kernel has)."""
    try:
        names = sorted(os.listdir("/proc"))
    except OSError:
        names = [os.path.basename(p) for p in MASKED_PROC]
    found = []
    for name in names:
        path = f"/proc/{name}"
        if name.isdigit() or name in PROC_KEPT or os.path.islink(path):
            continue
        if os.path.isdir(path):
            found.append((path, True))
        elif os.path.exists(path):
            found.append((path, False))
    return tuple(found) + tuple((p, os.path.isdir(p)) for p in PROC_SYS_MASKED if os.path.exists(p))


def _mask_proc_args() -> list[str]:
    args = []
    for path, folder in masked_proc():
        args += ["--tmpfs", path, "--remount-ro", path] if folder else ["--ro-bind", "/dev/null", path]
    return args


@functools.lru_cache(maxsize=4)
def _bwrap_has(bwrap: str, flag: str) -> bool:
    """Whether this bwrap knows `flag` (--disable-userns came with 0.8)."""
    try:
        return flag in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False


def _runs_as() -> tuple[int, int]:
    """The uid and gid bwrap runs as (drop_root: nobody when this process is root)."""
    return (NOBODY, NOBODY) if os.geteuid() == 0 else (os.getuid(), os.getgid())


@functools.lru_cache(maxsize=2)
def _time_namespace(uid: int, gid: int) -> tuple[str | None, str]:
    """(the `unshare` to start bwrap through, how) where a time namespace can be made here as the user bwrap runs
    as, and bwrap still makes its own namespaces inside it, else (None, why not). The namespace is made with a
    user namespace of its own (an unprivileged user may make one only so) that maps that user to itself, so bwrap
    inside it is as unprivileged as before."""
    unshare, bwrap = shutil.which("unshare"), shutil.which("bwrap")
    if unshare is None or bwrap is None:
        return None, "no `unshare` (util-linux) or `bwrap` on PATH"
    nested = ["--unshare-user", "--disable-userns"] if _bwrap_has(bwrap, "--disable-userns") else ["--unshare-user"]
    try:
        probe = subprocess.run(
            [unshare, "--user", f"--map-user={uid}", f"--map-group={gid}", "--time", "--boottime", "-1",
             "--monotonic", "-1", bwrap, "--unshare-all", *nested, "--ro-bind", "/", "/", "true"],
            capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"},
            **({"user": uid, "group": gid, "extra_groups": []} if os.geteuid() == 0 else {}))
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"`unshare --user --time` cannot run here ({exc})"
    if probe.returncode != 0:
        why = probe.stderr.strip()[-200:] or f"exit {probe.returncode}"
        return None, f"`unshare --user --time` around bwrap is refused here ({why}): the host's clocks are used"
    return unshare, "a time namespace per sandbox: its boot and monotonic clocks start near 0"


def time_namespace() -> str:
    """In words: whether sandboxes get a time namespace here (their uptime, and their processes' start times in
    /proc/<pid>/stat, are their own, not the host's), or why not."""
    return _time_namespace(*_runs_as())[1]


def _time_prefix() -> list[str]:
    """What bwrap's command line starts with so that the sandbox runs in a time namespace of its own whose boot and
    monotonic clocks read (about) 0 at its start: the host's uptime is not the sandbox's (issue 48); [] where this
    machine cannot (time_namespace() says why). `unshare` makes the namespaces and execs bwrap (the same pid)."""
    uid, gid = _runs_as()
    unshare = _time_namespace(uid, gid)[0]
    if unshare is None:
        return []
    boot, mono = (int(time.clock_gettime(c)) for c in (time.CLOCK_BOOTTIME, time.CLOCK_MONOTONIC))
    return [unshare, "--user", f"--map-user={uid}", f"--map-group={gid}", "--time", "--boottime", str(-boot),
            "--monotonic", str(-mono)]


# The sandbox's device nodes (bwrap's --dev binds /dev/null, zero, full, random, urandom and tty from the host's
# /dev, and the /proc masks bind /dev/null): a bind mount shows its source's superblock in /proc/self/mountinfo,
# and the host's devtmpfs says `size=` half the host's memory. Where this process is root, each sandbox is started
# in a mount namespace of its own whose /dev is a tmpfs of just these nodes (made anew): the same devices,
# nothing of the host's size. The gate (every start): the shell reads a line from its stdin, the host's first
# (the host moves it into the sandbox's cgroup before it writes it: sandbox.py; a shell's `read` takes one byte at
# a time from a pipe, so what follows is the harness's), and bwrap then makes the sandbox's cgroup namespace,
# rooted at the group it is in: /proc/self/cgroup reads "/" (issue 48, S3).
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_GATE = 'read -r _; exec "$@"'
# From the host's /dev (the shell's working folder, under the new mount), `cp -R` makes each node anew (mknod),
# its mode kept, its times now (the host's nodes date from its boot: its uptime, to whoever stats /dev/null).
_PRIVATE_DEV = (f"cd /dev && mount -t tmpfs -o mode=755,size=4k,nr_inodes=16 sandbox-dev /dev && "
                f"cp -R --preserve=mode {' '.join(DEV_NODES)} /dev/ || exit 125; {_GATE}")


def _private_dev_argv() -> list[str] | None:
    """The command a sandbox's start goes through (as root) to get a /dev of its own, ending in the drop to nobody;
    None where it cannot."""
    tools = [shutil.which(t) for t in ("unshare", "setpriv", "mount", "cp")]
    if os.geteuid() != 0 or None in tools or not os.path.exists("/bin/sh"):
        return None
    return [tools[0], "--mount", "--propagation", "private", "/bin/sh", "-c", _PRIVATE_DEV, "sh",
            tools[1], f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


@functools.lru_cache(maxsize=1)
def _private_dev() -> tuple[tuple[str, ...] | None, str]:
    """(the start's command prefix, how) where sandboxes get a /dev of their own here, else (None, why not)."""
    prefix = _private_dev_argv()
    if prefix is None:
        return None, ("the sandbox's device nodes are the host's (bound from its devtmpfs, whose size= shows in "
                      "/proc/self/mountinfo): making its own needs root (CAP_MKNOD in the host's user namespace) "
                      "and util-linux's unshare, setpriv and mount")
    try:
        probe = subprocess.run(  # as nobody: the nodes open (a device cgroup may refuse them), and are its own
            [*prefix, "/bin/sh", "-c", "echo > /dev/null && head -c1 /dev/urandom > /dev/null && "
             "grep -q sandbox-dev /proc/self/mountinfo"], input="go\n", capture_output=True, text=True, timeout=30,
            env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"a private /dev cannot be made here ({exc}): the sandbox's device nodes are the host's"
    if probe.returncode != 0:
        why = probe.stderr.strip()[-200:] or f"exit {probe.returncode}"
        return None, f"a private /dev is refused here ({why}): the sandbox's device nodes are the host's"
    return tuple(prefix), "a /dev per sandbox (a small tmpfs of its own device nodes, in a mount namespace of its own)"


def private_dev() -> str:
    """In words: whether sandboxes get device nodes of their own here (nothing of the host's devtmpfs shows in
    their mount table), or why not."""
    return _private_dev()[1]


def launch_argv(argv: list[str]) -> tuple[list[str], dict]:
    """The command that starts bwrap's `argv` (and the Popen keyword arguments it needs): it waits for a line on
    its stdin first, in a mount namespace with a private /dev where this machine allows one (then the drop to
    nobody is setpriv's, after the nodes are made)."""
    prefix = _private_dev()[0]
    if prefix is not None:
        return [*prefix, *argv], {}
    return ["/bin/sh", "-c", _GATE, "sh", *argv], drop_root()


def bwrap_argv(interpreter: str, max_file_mb: int, info_fd: int, verdict_fd: int,
               seccomp_fd: int | None = None) -> list[str]:
    """bwrap's command line: a fresh sandbox (/tmp capped at 4x `max_file_mb`) whose init is the harness's tester,
    run by `interpreter`, with bwrap's --info-fd on `info_fd`, the verdict pipe on `verdict_fd` and the seccomp
    filter (seccomp.py) read from `seccomp_fd`. launch_argv() wraps it."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable(
            "bubblewrap (`bwrap`) is not installed, so model-written code will not be executed "
            "(there is no fallback to the host). Install it: `apt-get install bubblewrap` / "
            "`dnf install bubblewrap` / `pacman -S bubblewrap`."
        )
    argv = [
        *_time_prefix(),
        bwrap,
        "--info-fd",
        str(info_fd),
        "--as-pid-1",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *(["--unshare-user", "--disable-userns"] if _bwrap_has(bwrap, "--disable-userns") else []),  # none inside
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # merged-/usr symlinks or real dirs
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    if not _under_usr(interpreter):
        for path in interpreter_binds(interpreter):
            _never_the_key(path)
            argv += ["--ro-bind", path, path]
    tmp_bytes = max(1, max_file_mb) * 4 * 1024 * 1024
    shm_bytes = max(1, max_file_mb) * 1024 * 1024  # POSIX semaphores and small shared buffers only
    argv += [
        # /dev: bwrap's minimal device tree, read-only, with a small /dev/shm (else shared memory is an uncapped
        # tmpfs the solution could fill with host memory).
        "--proc", "/proc", *_mask_proc_args(),
        "--dev", "/dev", "--size", str(shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--hostname", "sandbox",
        "--remount-ro", "/",
        interpreter, "-I", *_harness_args(interpreter, verdict_fd),
    ]
    return argv


def drop_root() -> dict:
    # Root is exempt from RLIMIT_NPROC even inside a user namespace (the kernel checks the host uid),
    # so a fork bomb would be unbounded: when we are root, the sandbox runs as nobody.
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
