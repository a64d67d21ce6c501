"""Every parameter of a reward that runs the sandbox reaches what it sets, as a table (issue 48, the m13 audit's
survivor 10: the code-execution reward's factory stopped passing `cpu_s` to the sandbox's `Limits`; the value was
still validated, then silently ignored, and an honest solution that needs CPU scored 0).

The rows are generated from the registry's factories (their signatures): a factory with a parameter named as a
field of the sandbox's `Limits` runs the sandbox, and each of its parameters is a row. A row is a probe that needs
one side of the parameter: built through the door a config's rewards.json takes (`build_reward_funcs`), the reward
scores the probe 1.0 with the parameter on one side and 0.0 on the other, everything else the same. For a `Limits`
field the failing side names the limit too: the probe run in the sandbox with the reward's own limits says which
limit stopped it. A parameter without a row fails `test_every_parameter_of_a_sandboxed_reward_has_a_row`.

`workers` is the one parameter no score can show (how many sandboxes run at once): its row checks that it reaches
the reward's call and that a bad value is refused naming it."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import skip_unless_ci

from mcp_server.errors import UserInputError
from mcp_server.rewards.registry import REGISTRY, build_reward_funcs
from mcp_server.rewards.sandbox import Limits, run_python

pytestmark = [pytest.mark.slow]  # the rows start sandboxes

LIMIT_FIELDS = {f.name for f in dataclasses.fields(Limits)}
# (reward, parameter): every parameter of every registry reward whose factory sets a sandbox limit
SANDBOXED = [name for name, reward in REGISTRY.items()
             if LIMIT_FIELDS & set(inspect.signature(reward.factory).parameters)]
ROWS = [(name, param) for name in SANDBOXED for param in inspect.signature(REGISTRY[name].factory).parameters]

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
TEST = "assert add(2, 3) == 5\n"
BASE = {"timeout_s": 30.0, "cpu_s": 5.0}  # generous (the machine is shared), unless the row is about them
INTERPRETER = "<a Python of its own>"  # the python row's value: made by the `interpreter` fixture


@dataclasses.dataclass(frozen=True)
class Probe:
    """A completion and its row's columns, and the parameter's two values: `passes` (the completion scores 1.0)
    and `fails` (0.0); `error`: what the sandbox says stopped it at `fails`, for a limit."""

    completion: str
    passes: object
    fails: object
    columns: dict = dataclasses.field(default_factory=lambda: {"tests": [TEST]})
    error: str | None = None


# A probe needs ~1 s of CPU, 3 s of wall clock, 200 MB, 4 processes, 3000 bytes of output: one side of the
# parameter passes it, the other stops it (the defaults sit on one side: a value the factory drops is caught).
PROBES: dict[tuple[str, str], Probe] = {
    ("code_execution_reward", "tests_column"): Probe(
        RIGHT, "checks", "tests", columns={"tests": ["assert add(2, 3) == 6\n"], "checks": [TEST]}),
    ("code_execution_reward", "code_tag"): Probe(
        f"<code>\n{RIGHT}</code>\nor:\n```python\n{WRONG}```\n", "code", None),
    ("code_execution_reward", "timeout_s"): Probe(
        "import time\ndef add(a, b):\n    time.sleep(3)\n    return a + b\n", 20.0, 1.0,
        error=r"timed out after 1s"),
    ("code_execution_reward", "cpu_s"): Probe(
        "import time\ndef add(a, b):\n    start = time.process_time()\n    while time.process_time() - start < 1.0:\n"
        "        pass\n    return a + b\n", 5.0, 0.3, error=r"used its 0\.3 s of CPU time"),
    ("code_execution_reward", "memory_mb"): Probe(
        "def add(a, b):\n    held = b'x' * (200 << 20)\n    return a + b + 0 * len(held)\n", 512, 128,
        error=r"MemoryError"),
    ("code_execution_reward", "max_processes"): Probe(
        "import os\ndef add(a, b):\n    r, w = os.pipe()\n    children = []\n    for _ in range(3):\n"
        "        pid = os.fork()\n        if pid == 0:\n            os.close(w)\n            os.read(r, 1)\n"
        "            os._exit(0)\n        children.append(pid)\n    os.close(w)\n    for pid in children:\n"
        "        os.waitpid(pid, 0)\n    return a + b\n", 8, 2, error=r"Resource temporarily unavailable"),
    ("code_execution_reward", "max_output_bytes"): Probe(
        "def add(a, b):\n    print('x' * 3000)\n    return a + b\n", 65536, 1024, error=r"output over 1024 bytes"),
    ("code_execution_reward", "python"): Probe(
        "import sys\ndef add(a, b):\n    return a + b if sys.executable == INTERPRETER else None\n",
        INTERPRETER, None),
    ("code_execution_reward", "entry_point_column"): Probe(
        RIGHT, "fn", "entry_point",
        columns={"tests": ["def check(candidate):\n    assert candidate(2, 3) == 5\n"], "fn": ["add"]}),
}
CARRIED = {("code_execution_reward", "workers"): (3, 0)}  # (a value the call gets, a value refused)


@pytest.fixture(scope="module")
def bwrap() -> None:
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.fixture(scope="module")
def interpreter():
    """A copy of the system Python in a directory of its own under / (the sandbox binds an interpreter's own
    path; /tmp is private there and a home is never bound): `python` given, the sandbox runs it, else not."""
    if not os.access("/", os.W_OK):
        skip_unless_ci("needs a directory of its own under / for a second interpreter (run as root)")
    top = Path(f"/lf-reward-python-{uuid.uuid4().hex[:8]}")
    top.mkdir()
    top.chmod(0o755)
    try:
        python = top / "python3"
        shutil.copy2(os.path.realpath("/usr/bin/python3"), python)
        yield str(python)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_every_parameter_of_a_sandboxed_reward_has_a_row():
    """A parameter of a reward that runs the sandbox (its factory sets a `Limits` field) without a probe fails
    here: add its row to PROBES (or, when no score can show it, to CARRIED)."""
    assert SANDBOXED == ["code_execution_reward"], SANDBOXED
    assert set(ROWS) == set(PROBES) | set(CARRIED), (f"without a row: {sorted(set(ROWS) - set(PROBES) - set(CARRIED))}"
                                                     f"; rows of no parameter: {sorted(set(PROBES) - set(ROWS))}")
    limits = {row for row in ROWS if row[1] in LIMIT_FIELDS}
    assert not [row for row in limits if row not in PROBES or not PROBES[row].error], "a limit's row names no error"


def _reward(name: str, param: str, value):
    (reward,) = build_reward_funcs([{"name": name, "params": {**BASE, param: value}, "weight": 1.0}])
    return reward


@pytest.mark.usefixtures("bwrap")
@pytest.mark.parametrize(("name", "param"), [row for row in ROWS if row in PROBES],
                         ids=[param for _, param in ROWS if (_, param) in PROBES])
def test_a_sandboxed_rewards_parameter_sets_what_it_names(name, param, request):
    probe = PROBES[(name, param)]
    python = request.getfixturevalue("interpreter") if probe.passes == INTERPRETER else None
    completion = probe.completion.replace("INTERPRETER", repr(python)) if python else probe.completion
    passes = python if probe.passes == INTERPRETER else probe.passes
    rewards = {side: _reward(name, param, value) for side, value in (("passes", passes), ("fails", probe.fails))}
    scores = {side: reward([completion], **probe.columns) for side, reward in rewards.items()}
    assert scores == {"passes": [1.0], "fails": [0.0]}, (param, passes, probe.fails, scores)
    if probe.error:  # at `fails`, the reward's own limits stop the probe in the sandbox, naming the limit
        limits = rewards["fails"].params["limits"]
        result = run_python(completion, probe.columns["tests"][0], limits)
        assert not result.passed and re.search(probe.error, f"{result.error}\n{result.output}"), (
            param, limits, result.error, result.output[-500:])


@pytest.mark.parametrize(("name", "param"), list(CARRIED), ids=[param for _, param in CARRIED])
def test_a_parameter_no_score_shows_reaches_the_call_and_a_bad_value_is_refused(name, param):
    good, bad = CARRIED[(name, param)]
    assert _reward(name, param, good).params[param] == good
    with pytest.raises(UserInputError) as refused:
        _reward(name, param, bad)
    assert refused.value.field == f"rewards[0].params.{param}", refused.value.field
