# ruff: noqa
"""b08 (round 17): the sandbox's CPU budget (cpu_s 0.5 s for all of a sandbox's processes together) left out the
tester (pid 1), which parses what the solution sends. Two forms: (1) one raw line on the solution's answer pipe
holding a 15-million-digit integer (CPython's int() is quadratic: the tester parsed it until the 10 s timeout);
(2) answers each padded with 8 MB of data, a test making 40 calls (each cheap for the solution to send, each
parsed by the tester). The contract: the tester's work on the solution's answers counts in the budget, and no
answer's integer over 10000 digits is parsed. Measures the CPU each sandbox used (bwrap's reaped children,
RUSAGE_CHILDREN) against the budget. HELD when every sandbox failed within 3x its budget and none timed out.
Run from the repo: .venv/bin/python bench/hostile_r17/b08_tester_cpu.py [N] (N sandboxes of each form at once)."""
import os, resource, sys, time
from pathlib import Path

sys.path.insert(0, os.environ.get("REPO") or str(Path(__file__).resolve().parents[2]))
from mcp_server.rewards.sandbox import run_many, Limits

T = "def test_add():\n    assert add(2, 3) == 5\n"
SINK = '''import os, stat, fcntl, time
for fd in map(int, os.listdir('/proc/self/fd')):
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    if fd > 2 and stat.S_ISFIFO(st.st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
        os.write(fd, b'{"names": [["add", ' + b'1' * 15_000_000 + b']]}\\n')
time.sleep(60)
def add(a, b): return a + b
'''
PADDED = '''import json
_dumps, _pad = json.dumps, ', "pad": [' + '1,' * 4_000_000 + '1]}'
def _padded(message, **kwargs):
    text = _dumps(message, **kwargs)
    return text[:-1] + _pad if type(message) is dict and "value" in message else text
json.dumps = _padded
def add(a, b): return a + b
'''
FORTY = "def test_add():\n" + "".join(f"    assert add(2, {i}) == {2 + i}\n" for i in range(40))
HONEST = "def add(a, b): return a + b\n"
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


limits = Limits()
print(f"budget: cpu_s={limits.cpu_s} s per sandbox, timeout_s={limits.timeout_s} s; load {os.getloadavg()[0]:.1f} "
      f"on {os.cpu_count()} CPUs")
held = True
for name, code, tests in (("honest", HONEST, T), ("huge integer", SINK, T), ("padded answers", PADDED, FORTY)):
    c0, t0 = cpu(), time.monotonic()
    res = run_many([(code, tests)] * n, limits, workers=n)
    used = cpu() - c0
    print(f"{name}: {n} sandboxes, passed={[r.passed for r in res]}, wall {time.monotonic() - t0:.1f} s, "
          f"CPU {used:.2f} s in all ({used / n:.2f} s each), errors={[(r.error or '')[:70] for r in res][:2]}")
    if name == "honest":
        held = held and all(r.passed for r in res)
    else:
        held = held and not any(r.passed or r.timed_out for r in res) and used / n <= 3 * limits.cpu_s
print("HELD" if held else "BROKEN")
