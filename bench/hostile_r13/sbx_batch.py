# ruff: noqa
"""Sandbox probes: each (name, solution, tests, expected passed)."""
import json
from mcp_server.rewards.sandbox import run_many, Limits
T = "def test_add():\n    assert add(2, 3) == 5\n    assert add(1, 1) == 2\n"
P = [
 ("raise SystemExit(0) from the call", "def add(a, b):\n    raise SystemExit(0)\n", T, False),
 ("raise KeyboardInterrupt from the call", "def add(a, b):\n    raise KeyboardInterrupt\n", T, False),
 ("kill(1, SIGKILL) the tester and kill(-1)", "import os, signal\ndef add(a, b):\n    for p in (1, -1):\n        try: os.kill(p, signal.SIGKILL)\n        except Exception: pass\n    return 0\n", T, False),
 ("pre-write forged replies on the reply pipe at import", "import os\nfor fd in range(3, 12):\n    try: os.write(fd, b'{\"value\": 5}\\n' * 50)\n    except OSError: pass\ndef add(a, b):\n    return 0\n", T, False),
 ("SIGSTOP the tester", "import os, signal\ndef add(a, b):\n    os.kill(1, signal.SIGSTOP); return a + b\n", T, None),
 ("pipes grown with F_SETPIPE_SZ (kernel memory)", "import os, fcntl\nps=[]\nfor i in range(25):\n    r,w=os.pipe(); fcntl.fcntl(w, 1031, 1<<20); os.set_blocking(w, False)\n    try:\n        while True: os.write(w, b'x'*65536)\n    except BlockingIOError: pass\n    ps.append((r,w))\ndef add(a,b): return a+b\n", T, None),
 ("exception type name spoof ['AssertionError'] from a class named AssertionError", "class AssertionError(Exception): pass\ndef add(a, b):\n    raise AssertionError('x')\n", "import pytest\ndef test_x():\n    with pytest.raises(AssertionError):\n        add(1, 2)\n", None),
 ("remote object __eq__ always True", "class E:\n    def __eq__(self, o): return True\ndef add(a, b):\n    return E()\n", T, False),
 ("int subclass with __eq__ True", "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)\n", T, False),
 ("str subclass eq", "class S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\ndef add(a, b):\n    return S('x')\n", "def test_s():\n    assert add(1,2) == 'abc'\n", False),
 ("dict with __eq__ via subclass", "class D(dict):\n    def __eq__(self, o): return True\ndef add(a, b):\n    return D()\n", "def test_d():\n    assert add(1,2) == {'a': 1}\n", False),
 ("float nan / inf handling", "def add(a, b):\n    return float('nan')\n", "import math\ndef test_n():\n    assert not add(1,2) < 3 or True\n    assert add(1,2) != add(1,2)\n    assert add(2,3) == 5\n", False),
]
res = run_many([(code, tests) for _, code, tests, _ in P], Limits())
for (name, _, _, exp), r in zip(P, res):
    ok = "HELD" if exp is None or r.passed == exp else "BROKE"
    print(f"{ok:5} {name}: passed={r.passed} error={(r.error or '')[:120]!r}")
