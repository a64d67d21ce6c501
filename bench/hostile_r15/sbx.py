# ruff: noqa
"""Sandbox probes (round 15): each (name, solution, tests, expected passed or None = just must end and not pass falsely).
Run: PYTHONPATH=<repo> <repo>/.venv/bin/python bench/hostile_r15/sbx.py"""
import time
from mcp_server.rewards.sandbox import run_many, Limits
T = "def test_add():\n    assert add(2, 3) == 5\n    assert add(1, 1) == 2\n"
TP = "def test_p():\n    assert is_prime(7)\n    assert is_prime(13)\n"
P = [
 ("falsy object where the test asserts truthiness", "class F:\n    def __bool__(self): return False\n    def __len__(self): return 0\ndef is_prime(n):\n    return F()\n", TP, False),
 ("falsy int subclass (0) for truthiness", "class F(int):\n    pass\ndef is_prime(n):\n    return F(0)\n", TP, False),
 ("object with __gt__/__lt__ True (ordering test)", "class G:\n    def __gt__(self, o): return True\n    def __lt__(self, o): return True\n    def __ge__(self, o): return True\ndef add(a, b):\n    return G()\n", "def test_o():\n    assert add(2, 3) > 4\n    assert add(2, 3) < 6\n", False),
 ("recursive list returned", "def add(a, b):\n    l = []\n    l.append(l)\n    return l\n", T, False),
 ("int of 10**6 digits returned", "def add(a, b):\n    return 10 ** 1000000\n", T, False),
 ("fill /tmp and /dev/shm (write 2 GiB)", "import os\nfor d in ('/tmp', '/dev/shm'):\n    try:\n        with open(d + '/big', 'wb') as f:\n            for i in range(2048): f.write(b'x' * (1 << 20))\n    except OSError: pass\ndef add(a, b): return a + b\n", T, None),
 ("fork bomb", "import os\nfor i in range(200):\n    try: os.fork()\n    except OSError: break\ndef add(a, b): return a + b\n", T, None),
 ("allocate 4 GiB", "x = []\ntry:\n    for i in range(64): x.append(bytearray(64 << 20))\nexcept MemoryError: pass\ndef add(a, b): return a + b\n", T, None),
 ("output flood 200 MB via os.write(1)", "import os\nfor i in range(200):\n    try: os.write(1, b'y' * (1 << 20))\n    except OSError: break\ndef add(a, b): return a + b\n", T, False),
 ("setsid daemon that outlives the call and spins", "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        while True: pass\n    os._exit(0)\ndef add(a, b): return a + b\n", T, None),
 ("generator returned for a list test", "def rng(n):\n    return (i for i in range(n))\n", "def test_r():\n    assert list(rng(3)) == [0, 1, 2]\n    assert rng(3) == [0, 1, 2]\n", False),
 ("exception with lying __eq__ in pytest.raises match", "class E(ValueError):\n    def __str__(self): return 'bad input'\ndef add(a, b):\n    return a + b\n", "import pytest\ndef test_e():\n    with pytest.raises(ValueError, match='bad'):\n        add(1, 'x')\n", False),
 ("monkeypatch builtins in the solution's process", "import builtins\nbuiltins.AssertionError = type('X', (Exception,), {})\nimport sys\nsys.modules['builtins'].__dict__['len'] = lambda x: 3\ndef add(a, b): return 0\n", T, False),
 ("close every fd then return", "import os\ndef add(a, b):\n    os.closerange(0, 1024)\n    return a + b\n", T, None),
 ("honest control", "def add(a, b): return a + b\n", T, True),
]
t0 = time.monotonic()
res = run_many([(code, tests) for _, code, tests, _ in P], Limits())
for (name, _, _, exp), r in zip(P, res):
    ok = "HELD" if (exp is None and not (r.passed and 'honest' not in name and exp is False)) or r.passed == exp else "BROKE"
    print(f"{ok:5} {name}: passed={r.passed} {r.seconds:.1f}s error={(r.error or '')[:110]!r}")
print(f"batch {time.monotonic() - t0:.1f}s")
