"""The code reward cannot be fooled by the code it grades: every reward hack in reward_hacks.py scores 0 and
every honest control scores 1, because the verdict is decided in a tester process the solution cannot reach."""

from __future__ import annotations

import shutil
import struct
import sys

import pytest
from conftest import skip_unless_ci
from reward_hacks import ADD_TESTS, CONTROLS, HACKS

from mcp_server.rewards import build_reward_funcs, sandbox_command
from mcp_server.rewards.sandbox import Limits, run_many, run_python

pytestmark = pytest.mark.slow  # every test here runs code in the sandbox

LIMITS = Limits(timeout_s=10.0)  # generous: the CPU is shared with other suites; no case here comes near it


@pytest.fixture(scope="module")
def results() -> dict:
    """Every hack and control, run once as one parallel batch."""
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")
    cases = {**HACKS, **CONTROLS}
    assert len(cases) == len(HACKS) + len(CONTROLS)
    return dict(zip(cases, run_many(list(cases.values()), LIMITS, workers=4), strict=True))


@pytest.mark.parametrize("name", list(HACKS))
def test_each_reward_hack_scores_zero(results, name):
    result = results[name]
    assert not result.passed, f"{name} passed: {result.output[-1000:]}"
    assert not result.timed_out  # each fails on its merits, not by running out the clock


@pytest.mark.parametrize("name", list(CONTROLS))
def test_each_honest_control_scores_one(results, name):
    result = results[name]
    assert result.passed, f"{name}: {result.error}\n{result.output[-2000:]}"


def test_the_issues_two_hacks_through_the_reward():
    """The observations of issue 12, as completions through the TRL reward function: the frame-token hack and
    an always-equal object score 0 beside a right and a wrong answer."""
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")
    (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": 10}}])
    fence = "```python\n{}```"
    completions = [
        fence.format(HACKS["frame_token_print_exit"][0]),
        fence.format(HACKS["always_equal_object"][0]),
        fence.format("def add(a, b):\n    return a + b\n"),
        fence.format("def add(a, b):\n    return a * b\n"),
    ]
    assert reward(completions, tests=[ADD_TESTS] * 4) == [0.0, 0.0, 1.0, 0.0]


def test_failures_say_why():
    """The run's error names the failing test and line, or what the solution did; tests can only hand the
    solution data, and say so."""
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")
    wrong = run_python("def add(a, b):\n    return a - b\n", ADD_TESTS, LIMITS)
    assert wrong.error == "test_add (test line 2): AssertionError"
    assert "assert add(2, 3) == 5" in wrong.output  # the traceback shows the test's own line
    exits = run_python("import os\nos._exit(0)\n", ADD_TESTS, LIMITS).error
    assert exits == "solution: the solution process exited or closed its pipe before the tests ran"
    raised = run_python("def add(a, b):\n    raise KeyError(a)\n", ADD_TESTS, LIMITS)
    assert raised.error == "test_add (test line 2): KeyError: '2'"
    callback = run_python("def apply(f, x):\n    return f(x)\n", "assert apply(lambda v: v + 1, 1) == 2\n", LIMITS)
    assert not callback.passed and "cannot pass a function to the solution: only data" in callback.error


def test_the_harness_also_starts_from_source(monkeypatch):
    """Where the sandbox's interpreter could not compile the harness ahead, it starts from source, alike."""
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")
    monkeypatch.setattr(sandbox_command, "_harness_code", lambda interpreter: None)
    assert run_python(*CONTROLS["class_with_state"], LIMITS).passed
    assert not run_python(*HACKS["always_equal_object"], LIMITS).passed


DATA_TYPES = (type(None), bool, int, float, str, bytes, bytearray, list, tuple, dict, set, frozenset, complex)


def _only_data(value, depth=0) -> bool:
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value) in DATA_TYPES and all(_only_data(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return type(value) is dict and all(_only_data(k) and _only_data(v) for k, v in value.items())
    return type(value) in DATA_TYPES or type(value).__name__ in ("Fraction", "Decimal", "Handle")


def test_what_the_tester_decodes_is_only_data():
    """The tester's trust boundary: whatever JSON the solution process sends, decoding gives plain data (or a
    handle) or an error, never an object with behaviour of the solution's making; and data round-trips."""
    import json
    import random

    from mcp_server.rewards import harness

    class Handle:
        pass

    rng = random.Random(12)
    tags = ["tuple", "set", "frozenset", "dict", "bytes", "bytearray", "float", "complex", "fraction", "decimal",
            "ref", "eval", "", None, 3]
    leaves = [None, True, 0, -7, 2 ** 70, 1.5, "", "nan", "ab", "0g", [], {}]

    def garbage(depth=0):
        if depth > 4 or rng.random() < 0.3:
            return rng.choice(leaves)
        if rng.random() < 0.5:
            return [garbage(depth + 1) for _ in range(rng.randrange(3))]
        node = {"$": rng.choice(tags), "v": garbage(depth + 1)}
        if rng.random() < 0.2:
            node["v"] = [[garbage(depth + 1), garbage(depth + 1)] for _ in range(2)]
        return node

    decoded = refused = 0
    for _ in range(3000):
        node = json.loads(json.dumps(garbage()))
        try:
            value = harness.decode(node, lambda n: Handle())
        except Exception:  # noqa: BLE001 - refusing is fine: the tester then fails the run
            refused += 1
            continue
        decoded += 1
        assert _only_data(value), (node, value)
    assert decoded > 300 and refused > 300  # both sides of the boundary were exercised

    sample = [None, True, 3, -0.5, float("inf"), "ü", b"\x00", bytearray(b"x"), (1, [2]), {(1, 2): {3}},
              frozenset({"a"}), 1 + 2j, [[[]]], {"$": "tuple"}]
    node = json.loads(json.dumps(harness.encode(sample, lambda v: 1 / 0), allow_nan=False))
    assert harness.decode(node, lambda n: 1 / 0) == sample


# Every float the wire must carry as itself (m8: -inf was refused as 'not data'): each non-finite value, both zeros,
# the largest and smallest of each sign, the edges of float's exact integers, and a plain one.
BOUNDARY_FLOATS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "0.0": 0.0, "-0.0": -0.0,
                   "max": sys.float_info.max, "-max": -sys.float_info.max, "min normal": sys.float_info.min,
                   "min subnormal": 5e-324, "-min subnormal": -5e-324, "2**53": 2.0 ** 53, "2**53+2": 2.0 ** 53 + 2,
                   "1.5": 1.5}
# Where a float stands in what crosses: alone and in each container (a dict key too, a complex part).
FLOAT_PLACES = {"alone": lambda f: f, "list": lambda f: [f], "tuple": lambda f: (f,), "set": lambda f: {f},
                "frozenset": lambda f: frozenset({f}), "dict key": lambda f: {f: 1}, "dict value": lambda f: {1: f},
                "complex real": lambda f: complex(f, 1.0), "complex imag": lambda f: complex(1.0, f),
                "a float subclass": lambda f: type("Meters", (float,), {})(f)}


def _bits(value):
    """The value with every float replaced by its exact bits: nan equals itself, -0.0 differs from 0.0."""
    if type(value) is float:
        return ("float", struct.pack("<d", value))
    if type(value) is complex:
        return ("complex", _bits(value.real), _bits(value.imag))
    if type(value) is dict:
        return ("dict", sorted((repr(_bits(k)), repr(_bits(v))) for k, v in value.items()))
    if type(value) in (list, tuple, set, frozenset):
        items = [_bits(v) for v in value]
        return (type(value).__name__, sorted(map(repr, items)) if type(value) in (set, frozenset) else items)
    return (type(value).__name__, value)


@pytest.mark.parametrize("place", list(FLOAT_PLACES))
@pytest.mark.parametrize("name", list(BOUNDARY_FLOATS))
def test_every_boundary_float_crosses_the_wire_as_itself(name, place):
    """harness_wire.encode then decode (the solution's answer as the tester reads it, through strict JSON) gives
    back the same float, bit for bit, wherever it stands; a float subclass crosses as a float."""
    import json

    from mcp_server.rewards import harness

    value = FLOAT_PLACES[place](BOUNDARY_FLOATS[name])
    plain = value if place != "a float subclass" else float(value)
    node = json.loads(json.dumps(harness.encode(value, lambda v: 1 / 0), allow_nan=False))
    back = harness.decode(node, lambda n: 1 / 0)
    assert _bits(back) == _bits(plain), (name, place, node, back)
