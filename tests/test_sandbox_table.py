"""The sandbox's contract as tables (issue 48), through the core API (run_python / run_many, as
code_execution_reward runs every completion):

1. every limit the sandbox declares (the fields of `Limits`) x where the process that exceeds it stands (the
   solution's module code, at its import; the solution process itself; a forked child it waits for; a forked
   child it never waits for; a grandchild re-parented to the sandbox's init; a child of a parent that tries to
   ignore SIGCHLD, so that nobody would reap or count it): the run is stopped and scores as a failure naming the
   limit, and a completion run beside it in the same batch passes;
2. the escapes of the fourth hostile round (CPU in children nobody waits for, memory in memfd files and SysV
   shared memory, the host's /proc, a busy thread after the last answer) and of the seventeenth (the tester's own
   work on what the solution sends: a huge integer, answers padded to be parsed): each row failed before the fix;
(3. every way a test can end x every test style: tests/test_sandbox_endings.py, against pytest and unittest.)

The limit rows are generated from `Limits` itself: a field without a probe fails `test_every_limit_has_a_probe`.
Rows run in batches (one `run_many` per limit, one for the escapes), each row in a sandbox of
its own (a limit that kills a sandbox ends it, so rows cannot share one honestly)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time

import pytest
from conftest import skip_unless_ci

from mcp_server.rewards import sandbox_cgroup
from mcp_server.rewards.sandbox import Limits, run_many, run_python

pytestmark = [pytest.mark.usefixtures("bwrap"), pytest.mark.slow]  # every test here starts sandboxes

RIGHT = "def add(a, b):\n    return a + b\n"
TEST_ADD = "def test_add():\n    assert add(2, 3) == 5\n"
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def bwrap() -> None:
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")


# ------------------------------------------------------------------ 1. limits x who exceeds them
@dataclasses.dataclass(frozen=True)
class Probe:
    """How to exceed one limit: `offend`, code run in the offending process (it raises, is killed, or never
    ends); the limits of its rows (the rest generous: the machine is shared); what the run's error must say."""

    offend: str
    limits: dict
    error: str


GENEROUS = {"timeout_s": 30.0, "cpu_s": 10.0}
PROBES = {
    "timeout_s": Probe("time.sleep(600)", {"timeout_s": 3.0, "cpu_s": 0.0}, r"timed out after 3s"),
    "memory_mb": Probe(  # each process under its own RLIMIT_AS, three of them over the sandbox's total
        "for _ in range(3):\n    if os.fork() == 0:\n        hold = b'x' * (100 << 20)\n        time.sleep(600)\n"
        "time.sleep(600)",
        {"memory_mb": 256}, r"more than its \d+ MB of memory"),
    "max_processes": Probe("while True:\n    if os.fork() == 0:\n        time.sleep(600)",
                           {"max_processes": 4}, r"Resource temporarily unavailable"),
    "max_output_bytes": Probe("while True:\n    os.write(1, b'x' * 4096)", {"max_output_bytes": 8192},
                              r"output over 8192 bytes"),
    "max_file_mb": Probe("with open('/tmp/big', 'wb') as f:\n    f.write(b'0' * (2 << 20))", {"max_file_mb": 1},
                         r"File too large"),
    "max_open_files": Probe("keep = [os.open('/dev/null', os.O_RDONLY) for _ in range(100)]",
                            {"max_open_files": 32}, r"Too many open files"),
    "cpu_s": Probe("while True:\n    pass", {"cpu_s": 0.3}, r"0\.3 s of CPU time"),
}

# The offending code runs in the process that stands where the row says; what it raises is reported to the
# solution process through a pipe and raised there (the offender saw the limit: a refusal); a process that dies
# reports nothing, and the solution then answers correctly: only the sandbox's own stopping fails such a run.
REPORT = """\
import os, signal, sys, time
def _offend(w):
    try:
{offend}
    except BaseException as exc:
        os.write(w, repr(exc).encode()[:500])
    os._exit(0)
def _child(w, how):
    if how == 'grandchild':
        if os.fork() == 0:  # its parent exits at once: the sandbox's init inherits it
            _offend(w)
        os._exit(0)
    _offend(w)
def add(a, b):
    how = {how!r}
    if how == 'ignored':
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        except OSError:
            pass  # refused (seccomp.py): the child is then one nobody waits for
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(w, how)
    os.close(w)
    said = os.read(r, 4096)  # its one report, or nothing once every holder of the pipe is gone
    if how in ('reaped', 'grandchild'):
        os.waitpid(pid, 0)
    if said:
        raise RuntimeError(said.decode())
    return a + b
"""
# In the solution process itself, what the offence raises fails the call directly.
SELF = """\
import os, signal, sys, time
def add(a, b):
{offend}
    return a + b
"""
# At the solution's module level (its import): the offence runs before `add` exists, as the module's code
# (m11-sandbox-limits-after-module-code: every limit is in force before the first line of the solution runs).
MODULE = """\
import os, signal, sys, time
{offend}
def add(a, b):
    return a + b
"""
WHERE = {
    "the solution's module, at import": "module",
    "the solution process": "self",
    "a forked child, reaped": "reaped",
    "a forked child, never waited for": "alive",
    "a grandchild re-parented to the init": "grandchild",
    "a child of a parent ignoring SIGCHLD": "ignored",
}


def _indent(code: str, n: int) -> str:
    return "\n".join(" " * n + line for line in code.splitlines())


def _probe_code(limit: str, where: str) -> str:
    how = WHERE[where]
    if how == "module":
        return MODULE.format(offend=PROBES[limit].offend)
    if how == "self":
        return SELF.format(offend=_indent(PROBES[limit].offend, 4))
    return REPORT.format(offend=_indent(PROBES[limit].offend, 8), how=how)


def _limits(limit: str) -> Limits:
    return Limits(**{**GENEROUS, "max_output_bytes": 64 * 1024, **PROBES[limit].limits})


LIMIT_ROWS = [(limit, where) for limit in PROBES for where in WHERE]


@pytest.fixture(scope="module")
def limit_results() -> dict:
    """Every limit row, one batch per limit: each row's sandbox beside a right completion's."""
    results = {}
    started = time.monotonic()
    for limit in PROBES:
        jobs = []
        for where in WHERE:
            jobs += [(_probe_code(limit, where), TEST_ADD), (RIGHT, TEST_ADD)]
        out = run_many(jobs, _limits(limit), workers=4)
        for i, where in enumerate(WHERE):
            results[(limit, where)] = (out[2 * i], out[2 * i + 1])
    TIMINGS["limits"] = time.monotonic() - started
    return results


def test_every_limit_has_a_probe():
    """A limit the sandbox declares without a row in the table fails here (add it to PROBES)."""
    declared = {f.name for f in dataclasses.fields(Limits)}
    assert declared == set(PROBES), f"limits without a probe: {declared - set(PROBES)}; probes of no limit: " \
                                    f"{set(PROBES) - declared}"


@pytest.mark.parametrize(("limit", "where"), LIMIT_ROWS, ids=[f"{lim}-{WHERE[w]}" for lim, w in LIMIT_ROWS])
def test_a_limit_exceeded_stops_the_run_and_spares_the_next(limit_results, limit, where):
    probe, right = limit_results[(limit, where)]
    assert not probe.passed, (limit, where, probe.output[-500:])
    assert re.search(PROBES[limit].error, f"{probe.error}\n{probe.output}"), (limit, where, probe.error,
                                                                               probe.output[-800:])
    assert probe.timed_out == (limit == "timeout_s"), (limit, where, probe.error, probe.seconds)
    assert right.passed, (limit, where, right.error, right.output[-500:])


# ------------------------------------------------------------------ 1b. limits x how they are exceeded
# Each limit exceeded in the solution process in two more shapes (issue 48, the mutation lane's sandbox survivors):
# - in many small steps: a flood in small, slow writes, memory a megabyte at a time, one fork, file block or
#   descriptor at a time, CPU in short bursts: a limit counted per step (per read) instead of in total never
#   stops them;
# - exceeded, then exit 0: the solution goes on to answer right and end cleanly, so only the sandbox's own word
#   fails the run (an excess seen but not scored would pass). Where the kernel refuses the excess itself (an
#   rlimit: processes, file size, open files) nothing is exceeded: the solution sees the refusal, and one that
#   handles it and answers right passes (`passes`), its output showing the refusal.
@dataclasses.dataclass(frozen=True)
class Shape:
    offend: str
    limits: dict
    error: str  # what the run's error or output must say
    passes: bool = False


SMALL_STEPS = {
    "timeout_s": Shape("for _ in range(6000):\n    time.sleep(0.001)", {"timeout_s": 3.0, "cpu_s": 0.0},
                       r"timed out after 3s"),
    "memory_mb": Shape("hold = []\nwhile True:\n    hold.append(b'x' * (1 << 20))", {"memory_mb": 256},
                       r"MemoryError|more than its \d+ MB of memory"),
    "max_processes": Shape("while True:\n    if os.fork() == 0:\n        time.sleep(600)\n    time.sleep(0.01)",
                           {"max_processes": 4}, r"Resource temporarily unavailable"),
    "max_output_bytes": Shape("while True:\n    os.write(1, b'x' * 100)\n    time.sleep(0.002)",
                              {"max_output_bytes": 8192}, r"output over 8192 bytes"),
    "max_file_mb": Shape("with open('/tmp/big', 'wb') as f:\n    for _ in range(4096):\n        f.write(b'0' * 1024)"
                         "\n        f.flush()", {"max_file_mb": 1}, r"File too large"),
    "max_open_files": Shape("keep = []\nwhile True:\n    keep.append(os.open('/dev/null', os.O_RDONLY))\n"
                            "    time.sleep(0.001)", {"max_open_files": 32}, r"Too many open files"),
    "cpu_s": Shape("while True:\n    start = time.process_time()\n    while time.process_time() - start < 0.01:\n"
                   "        pass\n    time.sleep(0.002)", {"cpu_s": 0.3}, r"0\.3 s of CPU time"),
}
THEN_EXIT_0 = {
    "timeout_s": Shape("time.sleep(4)", {"timeout_s": 3.0, "cpu_s": 0.0}, r"timed out after 3s"),
    "memory_mb": Shape(  # three children over the total for a while, then gone: the solution answers right
        "pids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n        hold = b'x' * (100 << 20)\n"
        "        time.sleep(2)\n        os._exit(0)\n    pids.append(pid)\nfor pid in pids:\n    os.waitpid(pid, 0)",
        {"memory_mb": 256}, r"more than its \d+ MB of memory"),
    "max_processes": Shape("kids = []\ntry:\n    while True:\n        pid = os.fork()\n        if pid == 0:\n"
                           "            time.sleep(600)\n        kids.append(pid)\nexcept OSError as exc:\n"
                           "    print('refused:', exc)\nfor pid in kids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)",
                           {"max_processes": 4}, r"refused: .*Resource temporarily unavailable", passes=True),
    "max_output_bytes": Shape("os.write(1, b'x' * 10000)", {"max_output_bytes": 8192}, r"output over 8192 bytes"),
    "max_file_mb": Shape("try:\n    with open('/tmp/big', 'wb') as f:\n        f.write(b'0' * (2 << 20))\n"
                         "except OSError as exc:\n    print('refused:', exc)", {"max_file_mb": 1},
                         r"refused: .*File too large", passes=True),
    "max_open_files": Shape("keep = []\ntry:\n    while True:\n        keep.append(os.open('/dev/null', os.O_RDONLY))\n"
                            "except OSError as exc:\n    print('refused:', exc)\nfor fd in keep:\n    os.close(fd)",
                            {"max_open_files": 32}, r"refused: .*Too many open files", passes=True),
    "cpu_s": Shape("start = time.process_time()\nwhile time.process_time() - start < 1.0:\n    pass",
                   {"cpu_s": 0.3}, r"0\.3 s of CPU time"),
}
SHAPES = {"in many small steps": SMALL_STEPS, "exceeded, then exit 0": THEN_EXIT_0}
SHAPE_ROWS = [(limit, shape) for shape in SHAPES for limit in PROBES]


@pytest.fixture(scope="module")
def shape_results() -> dict:
    """Every shape row, one batch per limit: each row's sandbox beside a right completion's."""
    results, started = {}, time.monotonic()
    for limit in PROBES:
        jobs = []
        for shape in SHAPES.values():
            jobs += [(SELF.format(offend=_indent(shape[limit].offend, 4)), TEST_ADD), (RIGHT, TEST_ADD)]
        limits = {**GENEROUS, "max_output_bytes": 64 * 1024, **SMALL_STEPS[limit].limits}
        out = run_many(jobs, Limits(**limits), workers=4)
        for i, shape in enumerate(SHAPES):
            results[(limit, shape)] = (out[2 * i], out[2 * i + 1])
    TIMINGS["shapes"] = time.monotonic() - started
    return results


def test_every_limit_has_every_shape():
    """A limit without a row of each shape fails here (add it to SMALL_STEPS and THEN_EXIT_0)."""
    declared = {f.name for f in dataclasses.fields(Limits)}
    for name, shape in SHAPES.items():
        assert set(shape) == declared, (name, declared ^ set(shape))
    assert all(SMALL_STEPS[k].limits == THEN_EXIT_0[k].limits for k in declared)  # one batch's limits


@pytest.mark.parametrize(("limit", "shape"), SHAPE_ROWS, ids=[f"{lim}-{s}" for lim, s in SHAPE_ROWS])
def test_a_limit_exceeded_in_any_shape_is_scored_and_spares_the_next(shape_results, limit, shape):
    probe, right = shape_results[(limit, shape)]
    want = SHAPES[shape][limit]
    said = f"{probe.error}\n{probe.output}"
    assert probe.passed == want.passes, (limit, shape, probe.error, probe.output[-500:])
    assert re.search(want.error, said), (limit, shape, probe.error, probe.output[-800:])
    assert probe.timed_out == (limit == "timeout_s"), (limit, shape, probe.error, probe.seconds)
    assert right.passed, (limit, shape, right.error, right.output[-500:])


# ------------------------------------------------------------------ 2. the fourth round's escapes
CHURN = """\
import os, signal, time
def add(a, b):
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # every child is reaped by the kernel, its CPU counted nowhere
    end = time.monotonic() + 20
    while time.monotonic() < end:
        r, w = os.pipe()
        if os.fork() == 0:
            start = time.process_time()
            while time.process_time() - start < 0.15:  # each under the budget, all together many times it
                pass
            os._exit(0)
        os.close(w)
        os.read(r, 1)  # until the child is gone
        os.close(r)
    return a + b
"""
MEMFD = """\
import os
def add(a, b):
    block, keep = b'x' * (15 << 20), []
    for _ in range(50):  # 750 MB in files of 15 MB, each under the 16 MB file-size limit
        fd = os.memfd_create('hold')
        os.write(fd, block)
        keep.append(fd)
    return a + b
"""
SYSV = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def add(a, b):
    for _ in range(3):  # 900 MB of segments that outlive every process
        sid = libc.shmget(0, 300 << 20, 0o1600)
        if sid < 0:
            raise OSError(ctypes.get_errno(), 'shmget')
        at = libc.shmat(sid, None, 0)
        ctypes.memset(at, 1, 300 << 20)
        libc.shmdt(ctypes.c_void_p(at))
    return a + b
"""
HOST_PROC = """\
import os
def host_state():
    seen = []
    for name in sorted(os.listdir('/proc')):
        path = '/proc/' + name
        if name.isdigit() or name in ('self', 'thread-self', 'mounts', 'net', 'sys', 'sysvipc', 'cpuinfo',
                                      'version', 'filesystems'):
            continue
        try:
            if os.path.isdir(path):
                if os.listdir(path):
                    seen.append(name + '/')
            elif open(path, 'rb').read(1):
                seen.append(name)
        except OSError:
            pass
    for path in ('/proc/sys/fs/file-nr', '/proc/sys/kernel/random/boot_id'):
        try:
            if open(path, 'rb').read(1):
                seen.append(path)
        except OSError:
            pass
    return seen
"""
BUSY_THREAD = """\
import threading
def _burn():
    while True:
        pass
def add(a, b):
    threading.Thread(target=_burn, daemon=True).start()
    return a + b
"""
BUSY_DETACHED = """\
import os
def add(a, b):
    if os.fork() == 0:
        if os.fork() == 0:
            while True:
                pass
        os._exit(0)
    os.wait()
    return a + b
"""
# The tests wait (in the tester, using no CPU) until the solution's processes have used twice the budget or
# are gone: a sandbox that no longer counts them after the last answer passes.
AFTER_LAST_ANSWER = """\
import os, time
def _others():
    cpu, alive = 0.0, False
    for p in os.listdir('/proc'):
        if p.isdigit() and p != '1':
            try:
                f = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()
            except OSError:
                continue
            cpu += (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
            alive = alive or f[0] != 'Z'
    return cpu, alive
def test_add():
    assert add(2, 3) == 5
    end = time.monotonic() + 25
    while time.monotonic() < end:
        cpu, alive = _others()
        if cpu > 1.0 or not alive:
            break
        time.sleep(0.02)
"""
# Round 17 (b08): the tester's own work on what the solution sends, outside the budget. A raw line on the answer
# pipe, before any request, holding one huge integer (CPython parses it in time that grows with the square of its
# digits: the tester parsed it until the timeout), or a fraction of one; answers each padded with 8 MB of data the
# tester parses, the test's 40 calls each answered right.
RAW_ANSWER = """\
import os, stat, fcntl, time
for fd in map(int, os.listdir('/proc/self/fd')):
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    if fd > 2 and stat.S_ISFIFO(st.st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
        os.write(fd, b'{{"names": [["add", {number}]]}}\\n')
time.sleep(60)
def add(a, b):
    return a + b
"""
PADDED = """\
import json
_dumps, _pad = json.dumps, ', "pad": [' + '1,' * 4_000_000 + '1]}'
def _padded(message, **kwargs):  # the solution process's own json.dumps: its answers, cheap for it to pad
    text = _dumps(message, **kwargs)
    return text[:-1] + _pad if type(message) is dict and "value" in message else text
json.dumps = _padded
def add(a, b):
    return a + b
"""
FORTY_CALLS = "def test_add():\n" + "".join(f"    assert add(2, {i}) == {2 + i}\n" for i in range(40))
ESCAPES = {
    "CPU in children reaped by the kernel (SIGCHLD ignored)": (CHURN, TEST_ADD, {"cpu_s": 0.5}),
    "memory in memfd files": (MEMFD, TEST_ADD, {}),
    "memory in SysV shared memory": (SYSV, TEST_ADD, {}),
    "a busy thread after the last answer": (BUSY_THREAD, AFTER_LAST_ANSWER, {"cpu_s": 0.5}),
    "a busy re-parented grandchild after the last answer": (BUSY_DETACHED, AFTER_LAST_ANSWER, {"cpu_s": 0.5}),
    "a 15-million-digit integer the tester parses": (RAW_ANSWER.format(number="1" * 15_000_000), TEST_ADD,
                                                     {"cpu_s": 0.5}),
    "a fraction of a 3-million-digit numerator": (RAW_ANSWER.format(
        number='{"$": "fraction", "v": [' + "1" * 3_000_000 + ", 1]}"), TEST_ADD, {"cpu_s": 0.5}),
    "answers padded with 8 MB the tester parses, 40 calls": (PADDED, FORTY_CALLS, {"cpu_s": 0.5}),
}
# what the failure of a row must say, where the row's own defence names it
ESCAPE_ERRORS = {"a 15-million-digit integer the tester parses": "sent an integer of over 10000 digits",
                 "a fraction of a 3-million-digit numerator": "sent an integer of over 10000 digits",
                 "answers padded with 8 MB the tester parses, 40 calls": "used its 0.5 s of CPU time"}


LAYERS = ("as this machine gives", "no cgroup")  # the second: the seccomp filter and the tester's sums alone


@pytest.fixture(scope="module")
def escape_results() -> dict:
    started = time.monotonic()
    results = {}
    for layer in LAYERS:
        with pytest.MonkeyPatch.context() as patch:
            if layer == "no cgroup":
                patch.setenv("LLM_FINETUNING_SANDBOX_CGROUP", "0")
            sandbox_cgroup._detect.cache_clear()
            for name, (code, tests, limits) in ESCAPES.items():  # rows differ in limits: a batch of two each
                results[(name, layer)] = run_many([(code, tests), (RIGHT, TEST_ADD)], Limits(**{**GENEROUS, **limits}),
                                                  workers=2)
        sandbox_cgroup._detect.cache_clear()
    TIMINGS["escapes"] = time.monotonic() - started
    return results


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("escape", list(ESCAPES))
def test_an_escape_of_the_fourth_round_is_stopped(escape_results, escape, layer):
    probe, right = escape_results[(escape, layer)]
    assert not probe.passed, (escape, probe.seconds, probe.output[-500:])
    assert not probe.timed_out, (escape, probe.error, probe.seconds)
    assert ESCAPE_ERRORS.get(escape, "") in (probe.error or ""), (escape, probe.error)
    assert right.passed, (escape, right.error)


def test_the_cpu_budget_is_the_solutions_not_the_testers():
    """The whole-sandbox CPU count (the cgroup's, where there is one) includes the tester, which runs the tests:
    tests that compute for a while in the tester, around a solution that uses next to nothing, still pass."""
    tests = ("import time\ndef test_add():\n    assert add(2, 3) == 5\n    start = time.process_time()\n"
             "    while time.process_time() - start < 1.0:\n        pass\n    assert add(3, 4) == 7\n")
    result = run_python(RIGHT, tests, Limits(**{**GENEROUS, "cpu_s": 0.3}))
    assert result.passed, (result.error, result.output[-500:])


def test_the_host_proc_shows_nothing_of_the_host():
    """Host /proc/zoneinfo, /proc/pressure/*, /proc/diskstats (and the rest of /proc's host-wide entries) were
    readable from inside."""
    result = run_python(HOST_PROC, "def test_host():\n    assert host_state() == []\n", Limits(**GENEROUS))
    assert result.passed, (result.error, result.output[-1500:])


HOST_STATE = """\
import os, re, time
def seen():
    stat = open('/proc/self/stat').read().rsplit(')', 1)[1].split()
    try:
        uptime = open('/proc/uptime').read()
    except OSError:
        uptime = ''
    tmpfs = [(m.split()[1], re.findall(r'size=(\\d+)k', m)) for m in open('/proc/self/mounts').read().splitlines()
             if m.split()[2] == 'tmpfs']
    return {'started_s': int(stat[19]) / os.sysconf('SC_CLK_TCK'), 'boot_s': time.clock_gettime(time.CLOCK_BOOTTIME),
            'monotonic_s': time.monotonic(), 'uptime': uptime, 'cgroup': open('/proc/self/cgroup').read(),
            'tmpfs': tmpfs}
"""


def test_the_sandbox_sees_no_host_uptime_pid_or_memory_size():
    """S6 (issue 48): model-written code read the host's uptime (/proc/uptime; its own start time, field 22 of
    /proc/self/stat, is counted from the host's boot), the caller's pid (in its cgroup's name, /proc/self/cgroup)
    and the host's memory (a tmpfs's default size is half of it). Now: a time namespace whose clocks start near 0
    where this machine allows one (sandbox_command.time_namespace() says why not, elsewhere), a group named by a
    random token, and every tmpfs the sandbox mounts either sized by its limits or showing no size. The device
    nodes: tests/test_sandbox_host_state.py (S3)."""
    from mcp_server.rewards.sandbox_command import _runs_as, _time_namespace, time_namespace

    clocks = _time_namespace(*_runs_as())[0] is not None
    print(f"\nsandbox clocks: {time_namespace()}")
    limits = Limits(**GENEROUS)
    tests = (f"def test_host():\n    s = seen()\n"
             f"    assert not s['uptime'].strip(), s['uptime']\n"
             f"    assert {not clocks} or max(s['started_s'], s['boot_s'], s['monotonic_s']) < 120, s\n"
             f"    assert '-{os.getpid()}-' not in s['cgroup'] and '{os.getpid()}' not in s['cgroup'], s['cgroup']\n"
             f"    for where, sizes in s['tmpfs']:\n"
             f"        assert all(int(k) <= {4 * limits.max_file_mb * 1024} for k in sizes), (where, sizes)\n")
    result = run_python(HOST_STATE, tests, limits)
    assert result.passed, (result.error, result.output[-1500:])
    with open("/proc/uptime") as host:
        assert not clocks or float(host.read().split()[0]) > 120 or pytest.skip("the host booted under 2 minutes ago")


def test_nothing_of_a_sandbox_outlives_its_run():
    """After a run that left a busy grandchild and a sleeping one behind, no process of it is left, and its
    cgroup (where this machine gives one) is removed."""
    code = ("import os, time\ndef add(a, b):\n    for body in ('while True: pass', 'time.sleep(600)'):\n"
            "        if os.fork() == 0:\n            if os.fork() == 0:\n                os.setsid()\n"
            "                exec(body)\n            os._exit(0)\n        os.wait()\n    return a + b\n")
    before = _groups()
    result = run_python(code, TEST_ADD, Limits(**GENEROUS))
    assert result.passed, (result.error, result.output[-500:])
    assert _groups() == before


def _groups() -> list[str]:
    where = sandbox_cgroup.tree()
    if where is None:
        return []
    return sorted(name for _, base in where.bases for name in os.listdir(base) if name in sandbox_cgroup.MADE)


def test_every_process_of_a_sandbox_is_in_its_group():
    """Where this machine gives sandboxes a cgroup, every process in the sandbox's pid namespace (its init, the
    solution process, a child it forks) is in the run's own group in every controller the group uses, as the host
    reads the group while they run: the sandbox's first process is moved in before bwrap starts (the gate,
    sandbox_command.launch_argv), so nothing the sandbox runs escapes the kernel's count. Inside, each reads "/"
    in /proc/self/cgroup (S3: the cgroup namespace is rooted at the group; it named the group's parent's child).
    Elsewhere, which layer holds is said."""
    import threading

    where = sandbox_cgroup.tree()
    print(f"\nsandbox cgroups: {sandbox_cgroup.describe()}")
    if where is None:
        assert sandbox_cgroup.describe()
        return
    code = ("import os, time\ndef groups():\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
            "        os.write(w, open('/proc/self/cgroup', 'rb').read())\n        time.sleep(2)\n        os._exit(0)\n"
            "    time.sleep(2)\n    os.wait()\n"
            "    return open('/proc/self/cgroup').read(), os.read(r, 65536).decode()\n")
    tests = ("def test_groups():\n    for text in groups():\n"
             "        assert text and all(line.endswith(':/') for line in text.splitlines()), text\n")
    before, seen = set(sandbox_cgroup.MADE), {}
    run = threading.Thread(target=lambda: seen.setdefault("result", run_python(code, tests, Limits(**GENEROUS))))
    run.start()
    give_up = time.monotonic() + 20
    while run.is_alive() and time.monotonic() < give_up and "members" not in seen:
        for name in sandbox_cgroup.MADE - before:
            members = {c: _procs(os.path.join(base, name)) for c, base in where.bases}
            inside = _in_pid_namespace_of(set().union(*members.values()))
            if len(inside) >= 3:  # the init, the solution process and its child
                seen["members"], seen["inside"] = members, inside
        time.sleep(0.05)
    run.join()
    assert seen["result"].passed, (seen["result"].error, seen["result"].output[-1500:])
    assert "members" in seen, "the sandbox's processes were never all seen in its group"
    for controller, pids in seen["members"].items():
        assert seen["inside"] <= pids, (controller, seen["inside"] - pids)


def _procs(folder: str) -> set[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs")) as handle:
            return {int(p) for p in handle.read().split()}
    except OSError:
        return set()


def _in_pid_namespace_of(pids: set[int]) -> set[int]:
    """Every host process in the pid namespace(s) of `pids` other than this process's own."""
    def ns(pid) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            return None
    own = ns("self")
    spaces = {ns(p) for p in pids} - {own, None}
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and ns(p) in spaces}


def test_table_sizes_and_time(limit_results, shape_results, escape_results):
    """Not a check of the product: prints how big the tables are and how long their batches took."""
    print(f"\nsandbox table: {len(LIMIT_ROWS)} limit rows ({len(PROBES)} limits x {len(WHERE)} places), "
          f"{len(SHAPE_ROWS)} shape rows ({len(PROBES)} limits x {len(SHAPES)} shapes), "
          f"{len(ESCAPES) * len(LAYERS)} escape rows ({len(ESCAPES)} x {len(LAYERS)} layers); seconds: "
          + ", ".join(f"{k} {v:.1f}" for k, v in TIMINGS.items()))


# ------------------------------------------------------------------ 4. the m3 audit's rows (issue 48)
def test_the_solution_runs_as_nobody_when_the_server_is_root():
    """Root is exempt from RLIMIT_NPROC: a server running as root runs model-written code as nobody (65534), a
    server that is not root as itself (the uid bwrap's user namespace maps)."""
    want = 65534 if os.geteuid() == 0 else os.getuid()
    code = "import os\ndef ids():\n    return [os.getuid(), os.geteuid(), os.getgid(), os.getegid()]\n"
    tests = ("def test_ids():\n    seen = ids()\n"
             f"    assert seen[0] == seen[1] == {want} and seen[2] == seen[3], seen\n")
    if os.geteuid() == 0:
        tests += "    assert seen[2] == 65534, seen\n"
    result = run_python(code, tests, Limits(**GENEROUS))
    assert result.passed, (result.error, result.output[-800:])


FORGED_CONTAINS = """\
import sys
_side = sys.modules["harness_solution"]  # the solution process's own half of the harness: the solution's to break
_answer = _side.answer
def _forged(msg, objects):
    reply = _answer(msg, objects)
    if msg.get("op") == "contains":
        reply["value"] = "yes"  # true as a value, never True
    return reply
_side.answer = _forged
class Bag:
    def __contains__(self, item):
        return False
def make():
    return Bag()
"""


def test_a_forged_contains_answer_passes_no_membership_test():
    """A solution that rewrites its side of the harness so that every `x in obj` is answered with a true value
    that is not True ("yes"): `assert 3 in make()` fails, as `3 in Bag()` does; the honest answer scores as
    itself (the same code unforged, with a __contains__ that says True, passes)."""
    forged = run_python(FORGED_CONTAINS, "def test_in():\n    assert 3 in make()\n", Limits(**GENEROUS))
    assert not forged.passed, (forged.error, forged.output[-800:])
    honest = run_python(FORGED_CONTAINS.replace("_side.answer = _forged\n", "").replace("return False", "return True"),
                        "def test_in():\n    assert 3 in make()\n    assert (4 in make()) is True\n",
                        Limits(**GENEROUS))
    assert honest.passed, (honest.error, honest.output[-800:])


# ------------------------------------------------------------------ 4. the output cap at its edges
# stdout and stderr together, as the sandbox's one pipe carries them: exactly max_output_bytes is within the cap,
# one byte more is a flood (m4-sandbox-flood-at-cap). Each row prints its bytes, then its test passes: only the
# cap decides.
def _prints(stdout: int, stderr: int = 0, tail: str = "") -> str:
    return ("import sys\n"
            f"sys.stdout.write('o' * {stdout})\nsys.stdout.flush()\n"
            f"sys.stderr.write('e' * {stderr})\nsys.stderr.flush()\n"
            f"sys.stdout.write({tail!r})\nsys.stdout.flush()\n" + RIGHT)


CAP = Limits().max_output_bytes
OUTPUT_ROWS = {  # name -> (code, limits, floods)
    "exactly the default cap (64 KiB)": (_prints(CAP), Limits(), False),
    "the default cap and one byte": (_prints(CAP + 1), Limits(), True),
    "exactly a small cap": (_prints(10), Limits(max_output_bytes=10), False),
    "a small cap and one byte": (_prints(11), Limits(max_output_bytes=10), True),
    "the cap split over stdout and stderr": (_prints(CAP // 2, CAP // 2), Limits(), False),
    "the cap and one byte split over stdout and stderr": (_prints(CAP // 2, CAP // 2 + 1), Limits(), True),
    "the cap and one byte, all on stderr": (_prints(0, CAP + 1), Limits(), True),
    "nothing printed, a cap of 0": (RIGHT, Limits(max_output_bytes=0), False),
    "one byte, a cap of 0": (_prints(1), Limits(max_output_bytes=0), True),
}


@pytest.fixture(scope="module")
def output_results() -> dict:
    return {name: run_python(code, TEST_ADD, limits) for name, (code, limits, _) in OUTPUT_ROWS.items()}


@pytest.mark.parametrize("row", list(OUTPUT_ROWS))
def test_output_up_to_the_cap_passes_and_one_byte_more_is_a_flood(output_results, row):
    result, (_, limits, floods) = output_results[row], OUTPUT_ROWS[row]
    assert result.output_exceeded == floods, (row, result.error)
    assert result.passed == (not floods), (row, result.error)
    if floods:
        assert result.error == f"output over {limits.max_output_bytes} bytes", (row, result.error)
    else:
        assert result.error is None


def test_the_output_kept_is_its_last_4000_characters():
    """RunResult.output is the end of what was printed (where a failed test's traceback is), never the start."""
    result = run_python(_prints(5000, tail="THE END\n"), "def test_add():\n    assert add(2, 3) == 6\n")
    assert not result.passed and len(result.output) == 4000, result.output[-200:]
    assert result.output.startswith("o") and "THE END" in result.output and "assert add(2, 3) == 6" in result.output


def test_run_many_keeps_the_input_order_whatever_ends_first():
    """Results in input order: a slow passing job first, fast failing ones after it (they end first)."""
    slow = "import time\ntime.sleep(0.8)\n" + RIGHT
    wrong = "def add(a, b):\n    return a - b\n"
    jobs = [(slow, TEST_ADD), (wrong, TEST_ADD), (RIGHT, TEST_ADD), (wrong, TEST_ADD),
            ("def plus(a, b):\n    return a + b\n", "def check(candidate):\n    assert candidate(2, 3) == 5\n", "plus")]
    assert [r.passed for r in run_many(jobs, Limits(), workers=4)] == [True, False, True, False, True]


# ------------------------------------------------------------------ 5. what the tester collects and sees
# How the tester builds the tests' world from the solution and what it collects, as pytest would: each row is
# (solution, tests, entry point) -> (passes, what the error holds, tests counted). A row that passes where it
# must fail is a wrong solution scored right; the reverse, a right one scored 0.
PASSING = "def test_add():\n    assert add(2, 3) == 5\n"
WORLD_ROWS = {
    "a Test class with __init__ is not collected (pytest skips it)": (
        RIGHT, "class TestSkipped:\n    def __init__(self, x):\n        pass\n    def test_no(self):\n"
               "        assert False\n" + PASSING, None, (True, None, 1)),
    "a Test class's test methods are collected": (
        RIGHT, "class TestAdd:\n    def test_one(self):\n        assert add(1, 1) == 2\n"
               "    def test_two(self):\n        assert add(1, 2) == 3\n    def helper(self):\n        assert False\n",
        None, (True, None, 2)),
    "a lowercase test class is not called": (
        RIGHT, "class testhelper:\n    def __init__(self):\n        raise AssertionError('called')\n" + PASSING, None,
        (True, None, 1)),
    "a function not named test* is not called": (
        RIGHT, "def helper():\n    assert False\n" + PASSING, None, (True, None, 1)),
    "a skipped test is not counted": (
        RIGHT, "import unittest\ndef test_skip():\n    raise unittest.SkipTest('later')\n" + PASSING, None,
        (True, None, 1)),
    "the solution's private names are not the tests'": (
        "_secret = 5\n" + RIGHT, "def test_secret():\n    assert _secret == 5\n", None,
        (False, "NameError", 0)),
    "a stdlib name the solution shadows stays the real module": (
        "json = None\n" + RIGHT, "def test_json():\n    assert json.dumps(add(2, 3)) == '5'\n", None,
        (True, None, 1)),
    "a builtin the solution shadows stays the builtin": (
        "def len(x):\n    return 3\n" + RIGHT, "def test_len():\n    assert len([1]) == 1\n", None, (True, None, 1)),
    "import solution holds its public names": (
        RIGHT, "import solution\ndef test_module():\n    assert solution.add(2, 3) == 5\n", None, (True, None, 1)),
    "a check(candidate) without an entry point runs nothing": (
        RIGHT, "def check(candidate):\n    assert candidate(2, 3) == 5\n", None,
        (False, "and no entry point was given to call their check(candidate) with", 0)),
    "a check(candidate) with an entry point the solution lacks": (
        RIGHT, "def check(candidate):\n    assert candidate(2, 3) == 5\n", "plus",
        (False, "the solution defines no 'plus'", 0)),
    "a check(candidate) that fails on the entry point": (
        "def add(a, b):\n    return a * b\n", "def check(candidate):\n    assert candidate(2, 3) == 5\n", "add",
        (False, "check(candidate)", 0)),
    "a check(candidate) beside a test function is not called": (
        RIGHT, "def check(candidate):\n    assert False\n" + PASSING, "add", (True, None, 1)),
    "the failing test is named with the line that failed (in a helper it calls)": (
        RIGHT, PASSING + "def three(x):\n    assert x == 3\ndef test_wrong():\n    three(add(1, 1))\n", None,
        (False, "test_wrong (test line 4): AssertionError", 1)),
}


@pytest.fixture(scope="module")
def world_results() -> dict:
    jobs = [(code, tests, entry) for code, tests, entry, _ in WORLD_ROWS.values()]
    return dict(zip(WORLD_ROWS, run_many(jobs, Limits(), workers=4)))


@pytest.mark.parametrize("row", list(WORLD_ROWS))
def test_what_the_tester_collects_and_sees(world_results, row):
    result = world_results[row]
    passes, error, count = WORLD_ROWS[row][3]
    assert result.passed == passes, (row, result.error, result.output[-500:])
    assert error is None or error in (result.error or ""), (row, result.error)
    if passes:
        assert result.extra.get("tests") == count, (row, result.extra)


# ------------------------------------------------------------------ 6. the world a solution runs in
# What bwrap's command line makes of the sandbox, as the solution sees it (max_file_mb=2): its folder and host name,
# an environment of four variables (the host's never), /tmp capped at 4x max_file_mb and /dev/shm at 1x, the root
# and /dev read-only.
WORLD = """import os, socket
def seen():
    out = {"cwd": os.getcwd(), "host": socket.gethostname(), "env": sorted(os.environ)}
    for path in ("/tmp", "/dev/shm"):
        s = os.statvfs(path)
        out[path] = s.f_blocks * s.f_frsize
    for path in ("/planted", "/dev/planted", "/usr/planted"):
        try:
            open(path, "w").close()
            out[path] = "written"
        except OSError:
            out[path] = "refused"
    return out
"""


def test_the_world_a_solution_runs_in(monkeypatch):
    monkeypatch.setenv("LLM_FT_HOST_SECRET", "hunter2")
    tests = ("def test_world():\n    got = seen()\n"
             "    assert got['cwd'] == '/tmp' and got['host'] == 'sandbox', got\n"
             "    assert got['env'] == ['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE'], got\n"
             "    assert got['/tmp'] == 8 << 20 and got['/dev/shm'] == 2 << 20, got\n"
             "    assert got['/planted'] == got['/dev/planted'] == got['/usr/planted'] == 'refused', got\n")
    result = run_python(WORLD, tests, Limits(max_file_mb=2))
    assert result.passed, (result.error, result.output[-800:])


# ------------------------------------------------------------------ 7. the limits each process of the sandbox sets
# The rlimits the solution's own process runs under, read there (the tests call it across the process boundary):
# each is the Limits field it comes from, in its unit; RLIMIT_CPU is the timeout rounded up (never below it), and
# RLIMIT_NPROC leaves room for the tester and its watch thread.
RLIMITS = """import resource
def rlimits():
    return {n: resource.getrlimit(getattr(resource, n))[0]
            for n in ("RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_CORE")}
"""


@pytest.mark.parametrize(("timeout_s", "cpu"), [(2.5, 3), (3.0, 3), (4.01, 5)])
def test_each_limit_is_set_in_its_unit_on_the_solutions_process(timeout_s, cpu):
    limits = Limits(timeout_s=timeout_s, memory_mb=300, max_processes=5, max_file_mb=3, max_open_files=40)
    expected = {"RLIMIT_NOFILE": 40, "RLIMIT_FSIZE": 3 << 20, "RLIMIT_AS": 300 << 20, "RLIMIT_CPU": cpu,
                "RLIMIT_NPROC": 7, "RLIMIT_CORE": 0}
    result = run_python(RLIMITS, f"def test_limits():\n    assert rlimits() == {expected!r}, rlimits()\n", limits)
    assert result.passed, (result.error, result.output[-600:])


# ------------------------------------------------------------------ the m5 audit (issue 48): a solution posing as tests
def test_a_solutions_own_test_function_is_never_collected_as_a_test():
    """A wrong solution that defines test_* functions, with HumanEval-style tests (def check(candidate), an entry
    point): its functions are not the tests, check(candidate) runs and the solution fails
    (m5-harness-solution-tests-collected)."""
    code = "def add(a, b):\n    return a - b\ndef test_add():\n    pass\ndef test_more():\n    assert True\n"
    tests = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    result = run_python(code, tests, Limits(**GENEROUS), entry_point="add")
    assert not result.passed, (result.error, result.output[-500:])
    right = run_python(RIGHT + "def test_add():\n    pass\n", tests, Limits(**GENEROUS), entry_point="add")
    assert right.passed, (right.error, right.output[-500:])


def test_a_stop_written_by_the_solution_as_a_calls_reply_fails_the_run():
    """A wrong solution that writes {"stop": true} on its own reply pipe while answering a call: the tester never
    reads it as the end of an iteration (a StopIteration would end `all(map(f, cases))` at the first case and pass
    it) -- the run fails (m5-harness-stop-reply-to-call)."""
    code = ("import fcntl, os\n"
            "def is_even(n):\n"
            "    for fd in range(3, 256):\n"
            "        try:\n"
            "            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:\n"
            "                os.write(fd, b'{\"stop\": true}\\n')\n"
            "        except OSError:\n"
            "            pass\n"
            "    return False\n")
    tests = "def test_even():\n    assert all(map(is_even, [2, 4, 6]))\n"
    result = run_python(code, tests, Limits(**GENEROUS))
    assert not result.passed, (result.error, result.output[-500:])


# ------------------------------------------------------------------ the m9 audit (issue 48): tables of boundaries
# Every limit exceeded after the solution raised every rlimit it can name (resource.RLIMIT_*) by each way
# setrlimit offers: its soft limit up to the hard one, its hard limit up, both: the sandbox's rlimits are hard ones
# (soft == hard), so each raise is a no-op or refused, and the excess is stopped as the limit's own row is.
RAISES = {"soft up": "(_hard, _hard)", "hard up": "(_soft, resource.RLIM_INFINITY)",
          "both up": "(resource.RLIM_INFINITY, resource.RLIM_INFINITY)"}
RAISE = """\
import resource
for _name in [n for n in dir(resource) if n.startswith('RLIMIT_')]:
    _soft, _hard = resource.getrlimit(getattr(resource, _name))
    try:
        resource.setrlimit(getattr(resource, _name), {new})
    except (ValueError, OSError) as exc:
        print('refused:', _name, exc)
"""
RAISE_ROWS = [(limit, way) for limit in PROBES for way in RAISES]


@pytest.fixture(scope="module")
def raise_results() -> dict:
    """Every raise row, one batch per limit: each way's sandbox, then a right completion's."""
    results = {}
    for limit in PROBES:
        jobs = [(SELF.format(offend=_indent(RAISE.format(new=new) + PROBES[limit].offend, 4)), TEST_ADD)
                for new in RAISES.values()]
        out = run_many([*jobs, (RIGHT, TEST_ADD)], _limits(limit), workers=4)
        results.update({(limit, way): (out[i], out[-1]) for i, way in enumerate(RAISES)})
    return results


@pytest.mark.parametrize(("limit", "way"), RAISE_ROWS, ids=[f"{lim}-{w}" for lim, w in RAISE_ROWS])
def test_a_limit_the_solution_raised_with_setrlimit_is_still_its_limit(raise_results, limit, way):
    """m9-harness-rlimit-soft-only: with the rlimits set as soft limits under the host's hard ones, model-written
    code raised its own and opened descriptors, wrote files, started processes past the sandbox's limits."""
    probe, right = raise_results[(limit, way)]
    assert not probe.passed, (limit, way, probe.output[-800:])
    assert re.search(PROBES[limit].error, f"{probe.error}\n{probe.output}"), (limit, way, probe.error,
                                                                               probe.output[-800:])
    assert right.passed, (limit, way, right.error, right.output[-500:])


# Every mutable argument type the harness copies back (harness_wire.MUTABLE) x each in-place change a solution can
# make to it: the tests' own object holds the change after the call, whatever was added, removed or replaced.
IN_PLACE = {
    "list": ("[1, 2, 3]", {"added to": "x.append(9)", "removed from": "x.remove(2)", "cleared": "x.clear()",
                           "reordered": "x.reverse()", "an item replaced": "x[0] = 7"}),
    "dict": ("{'a': 1, 'b': 2}", {"added to": "x['z'] = 9", "removed from": "x.pop('a')", "cleared": "x.clear()",
                                  "reordered": "x['a'] = x.pop('a')", "an item replaced": "x['a'] = 7"}),
    "set": ("{1, 2, 3}", {"added to": "x.add(9)", "removed from": "x.discard(2)", "cleared": "x.clear()",
                          "reordered": "x.symmetric_difference_update({1, 4})",
                          "an item replaced": "x.remove(1); x.add(7)"}),
    "bytearray": ("bytearray(b'abc')", {"added to": "x.append(100)", "removed from": "del x[1]",
                                        "cleared": "x.clear()", "reordered": "x.reverse()",
                                        "an item replaced": "x[0] = 122"}),
}
IN_PLACE_ROWS = [(kind, change) for kind, (_, changes) in IN_PLACE.items() for change in changes]


def _in_place_job(kind: str, change: str) -> tuple[str, str]:
    """A solution making the change to its argument, and a test holding what the change leaves (done here)."""
    start, changes = IN_PLACE[kind]
    scope = {}
    exec(f"x = {start}\n{changes[change]}", scope)  # noqa: S102 - the table's own constructed code
    code = f"def change(x):\n    {changes[change]}\n"
    tests = (f"def test_change():\n    x = {start}\n    assert change(x) is None\n"
             f"    assert x == {scope['x']!r} and type(x) is {kind}, x\n")
    return code, tests


def test_every_mutable_argument_type_has_rows():
    from mcp_server.rewards.harness_wire import MUTABLE

    assert set(IN_PLACE) == {t.__name__ for t in MUTABLE}, (set(IN_PLACE), MUTABLE)


@pytest.fixture(scope="module")
def in_place_results() -> dict:
    out = run_many([_in_place_job(*row) for row in IN_PLACE_ROWS], Limits(**GENEROUS), workers=4)
    return dict(zip(IN_PLACE_ROWS, out))


@pytest.mark.parametrize(("kind", "change"), IN_PLACE_ROWS, ids=[f"{k}-{c}" for k, c in IN_PLACE_ROWS])
def test_an_argument_changed_in_place_reaches_the_tests_as_changed(in_place_results, kind, change):
    """m9-harness-dict-arg-not-cleared: a right solution removing entries from the dict or set it was given left them
    in the tests' copy, and scored 0."""
    result = in_place_results[(kind, change)]
    assert result.passed, (kind, change, result.error, result.output[-600:])


# The sandbox lost after the batch's check (check_sandbox passed once, cached): each way bwrap stops being there.
LOST = {"removed from PATH": lambda folder: None,
        "a file on PATH that is not executable": lambda folder: (folder / "bwrap").write_text("#!/bin/sh\n")}


@pytest.mark.parametrize("how", list(LOST))
def test_a_sandbox_lost_mid_batch_stops_the_batch(tmp_path, monkeypatch, how):
    """m9-sandbox-unavailable-swallowed: a sandbox that can no longer start after the batch's check scored every
    completion 0 ('SandboxUnavailable: ...' as each one's error), training on a reward that pays nothing, instead
    of saying that model-written code cannot run here."""
    from mcp_server.rewards.sandbox import SandboxUnavailable, check_sandbox

    check_sandbox.cache_clear()
    try:
        check_sandbox(None)  # the batch's check (as run_many calls it: its cache key), passed here
        LOST[how](tmp_path)
        monkeypatch.setenv("PATH", str(tmp_path))
        with pytest.raises(SandboxUnavailable, match="not installed"):
            run_many([(RIGHT, TEST_ADD)] * 3, Limits(**GENEROUS), workers=2)
    finally:
        check_sandbox.cache_clear()
