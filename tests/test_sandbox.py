"""The code-execution sandbox under attack: every hostile completion scores 0, leaves the host and the
other completions alone, and a missing sandbox means no execution at all."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from conftest import skip_unless_ci

from mcp_server.rewards import build_reward_funcs
from mcp_server.rewards.sandbox import Limits, SandboxUnavailable, check_sandbox, run_many, run_python

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)


@pytest.fixture()
def bwrap() -> None:
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")


# The sandbox tests need bubblewrap itself; without it only the refusal test can run (and must pass);
# under CI a missing bubblewrap fails them.
needs_bwrap = pytest.mark.usefixtures("bwrap")
FAST = Limits(timeout_s=6.0, max_output_bytes=16 * 1024)  # generous: the CPU is shared with other suites
GOOD = ("def add(a, b):\n    return a + b\n", "def test_add():\n    assert add(2, 3) == 5\n")
PROBE_RAN = "assert True\n"  # a probe's own asserts decide; tests that run nothing would fail the run


def run(code: str, tests: str = "", limits: Limits = FAST):
    return run_python(code, tests, limits)


@needs_bwrap
def test_verdicts_follow_the_tests():
    assert run(*GOOD).passed
    assert not run("def add(a, b):\n    return a - b\n", GOOD[1]).passed
    assert not run("def add(a, b) return", GOOD[1]).passed  # syntax error
    # pytest-style classes and plain module-level asserts both count.
    assert run(GOOD[0], "class TestAdd:\n    def test_one(self):\n        assert add(1, 1) == 2\n").passed
    assert not run(GOOD[0], "class TestAdd:\n    def test_one(self):\n        assert add(1, 1) == 3\n").passed
    assert not run(GOOD[0], "assert add(1, 1) == 3").passed
    assert run(GOOD[0], "from solution import add as plus\nassert plus(1, 1) == 2").passed


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos._exit(0)\n",  # exit 0 before the tests run
        "import sys\nsys.exit(0)\n",
        "print('PASS')\nimport os\nos._exit(0)\n",  # a fake success line
        "import os\nos.write(1, b'\\nPASS\\n')\nos._exit(0)\n",
    ],
)
@needs_bwrap
def test_faking_success_does_not_pass(code):
    assert not run(code, GOOD[1]).passed


# ---------------------------------------------------------------- resource attacks
ATTACKS = {
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "thread_bomb": "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()\n",
    "infinite_loop": "while True:\n    pass\n",
    "sleep_forever": "import time\ntime.sleep(3600)\n",
    "output_flood": "while True:\n    print('x' * 10000)\n",
    "stderr_flood": "import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n",
    "memory_hog": "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))\n",
    "disk_fill": "with open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(b'0' * 1024 * 1024)\n",
    "crash": "import ctypes\nctypes.string_at(0)\n",  # segfault
    "recursion": "def f():\n    return f()\nf()\n",
    "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(60)\n",
}


@needs_bwrap
def test_a_batch_of_attacks_leaves_the_good_completions_unharmed():
    """Each attack (with a correct solution appended, so only the attack can fail it) runs between good ones."""
    jobs = [GOOD]
    for code in ATTACKS.values():
        jobs += [(code + "\n" + GOOD[0], GOOD[1]), GOOD]
    results = run_many(jobs, FAST, workers=6)
    attack_result = {name: results[1 + 2 * i] for i, name in enumerate(ATTACKS)}
    assert [name for name, r in attack_result.items() if r.passed] == []  # every attack scores 0 ...
    assert all(r.passed for r in results[::2])  # ... and every good completion beside them still passes
    assert attack_result["output_flood"].output_exceeded and attack_result["stderr_flood"].output_exceeded
    assert attack_result["sleep_forever"].timed_out
    loop = attack_result["infinite_loop"]  # stopped by its CPU budget, or by the clock on a loaded machine
    assert loop.timed_out or "CPU time" in loop.error, loop.error


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace"):
                    found.append(int(pid))
            except OSError:
                pass
    return found


@needs_bwrap
def test_background_processes_die_with_the_sandbox():
    marker = f"marker-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'], "
        "start_new_session=True)\n"
        "import os\nif os.fork() == 0:\n    os.setsid()\n"
        f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'])\n"
        "import time\ntime.sleep(0.5)\n"
    )
    assert run(code, "assert True", Limits(timeout_s=8)).passed  # the solution itself is fine ...
    assert _host_processes_with(marker) == []  # ... but nothing it started outlives the sandbox
    for _ in range(3):  # same, at once, after a timeout kill (a race here once left them in /proc for ~15 ms)
        assert run(code + "time.sleep(60)\n", "", Limits(timeout_s=2)).timed_out
        assert _host_processes_with(marker) == []


# ---------------------------------------------------------------- isolation (each probe passes only when isolated)
@needs_bwrap
def test_no_host_environment_variables(monkeypatch):
    monkeypatch.setenv("LLM_FT_TEST_SECRET", "hunter2")
    probe = (
        "import os\n"
        "assert 'LLM_FT_TEST_SECRET' not in os.environ\n"
        "assert os.environ['HOME'] == '/tmp'\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n"
        "            assert b'hunter2' not in open(f'/proc/{pid}/environ', 'rb').read()\n"
        "        except PermissionError:\n"
        "            pass\n"
    )
    result = run(probe, PROBE_RAN)
    assert result.passed, result.output


@needs_bwrap
def test_no_host_home_credentials_or_files(tmp_path):
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY")
    home = Path.home()
    probe = (
        "import os\n"
        f"for path in [{str(secret)!r}, {str(home / '.ssh')!r}, {str(home)!r}, os.path.expanduser('~/.ssh'), '/root',\n"
        f"             '/home', '/etc/shadow', '/etc/passwd', {str(Path.cwd())!r}]:\n"
        "    assert not os.path.exists(path) or os.listdir(path) == [], path\n"
    )
    result = run(probe, PROBE_RAN)
    assert result.passed, result.output


@needs_bwrap
def test_the_evidence_key_is_out_of_the_sandboxs_sight():
    """The key that signs a run's records (mcp_server/evidence.py) is what a forger lacks: model-written code in the
    sandbox sees neither it nor its folder, where this session keeps it or where it lies by default."""
    from mcp_server.evidence import key_path

    here = key_path()
    assert here.is_file()  # the session's key exists on the host
    default = Path.home() / ".local" / "state" / "llm-finetuning"
    probe = (
        "import os\n"
        f"for path in [{str(here)!r}, {str(here.parent)!r}, {str(default)!r}, {str(default / 'evidence.key')!r}]:\n"
        "    assert not os.path.exists(path) or os.listdir(path) == [], path\n"
    )
    result = run(probe, PROBE_RAN)
    assert result.passed, result.output


def test_a_sandbox_that_would_bind_the_evidence_keys_folder_is_refused(monkeypatch):
    """An interpreter outside /usr has its lib folders bound into the sandbox: the key kept inside one of them would
    be readable by model-written code. The sandbox refuses to start, naming the folder and the variable."""
    from mcp_server.rewards.sandbox_command import _never_the_key

    lib = os.path.realpath(os.path.join(sys.prefix, "lib"))
    monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", os.path.join(lib, "state"))
    with pytest.raises(SandboxUnavailable, match="LLM_FINETUNING_STATE_DIR"):
        _never_the_key(lib)
    monkeypatch.setenv("LLM_FINETUNING_STATE_DIR", os.path.join(lib + "-other", "state"))
    _never_the_key(lib)  # a folder that only starts with the same letters is not inside it


@needs_bwrap
def test_system_is_read_only_and_tmp_is_private(tmp_path):
    host_marker = Path("/tmp") / f"host-{uuid.uuid4().hex}"
    host_marker.write_text("host")
    try:
        probe = (
            "import os\n"
            f"assert not os.path.exists({str(host_marker)!r})\n"  # the host's /tmp is not there
            "for path in ['/usr/evil', '/evil', '/bin/evil', '/etc/evil', '/proc/evil']:\n"
            "    try:\n"
            "        open(path, 'w').write('x')\n"
            "    except OSError:\n"
            "        continue\n"
            "    raise AssertionError('wrote ' + path)\n"
            "open('/tmp/mine', 'w').write('ok')\n"
            "assert open('/tmp/mine').read() == 'ok'\n"
        )
        first, second = run_many([(probe, PROBE_RAN), ("import os\nassert not os.path.exists('/tmp/mine')", PROBE_RAN)],
                                 FAST)
        assert first.passed, first.output
        assert second.passed, second.output  # one sandbox's /tmp is not the next one's
        assert not Path("/usr/evil").exists() and not Path("/evil").exists()
    finally:
        host_marker.unlink()


@needs_bwrap
def test_no_network_not_even_to_the_host():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        probe = (
            "import socket\n"
            "assert [name for _, name in socket.if_nameindex()] == ['lo']\n"
            "for host, port in [('127.0.0.1', %d), ('1.1.1.1', 53), ('10.0.0.1', 80)]:\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=1)\n"
            "    except OSError:\n"
            "        continue\n"
            "    raise AssertionError(f'reached {host}:{port}')\n"
            "try:\n"
            "    socket.getaddrinfo('pypi.org', 443)\n"
            "    raise AssertionError('resolved a name')\n"
            "except socket.gaierror:\n"
            "    pass\n" % port
        )
        result = run(probe, PROBE_RAN)
        assert result.passed, result.output
    finally:
        server.close()


@needs_bwrap
def test_host_processes_are_invisible_and_unkillable():
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # the probe tries to kill it
    try:
        probe = (
            "import os, signal\n"
            f"host_pids = [{host.pid}, {os.getpid()}]\n"
            "visible = [int(p) for p in os.listdir('/proc') if p.isdigit()]\n"
            "assert len(visible) < 5, visible\n"
            "assert not set(host_pids) & set(visible), visible\n"
            "for pid in host_pids:\n"
            "    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n"
            "    except (ProcessLookupError, PermissionError):\n"
            "        pass\n"
        )
        result = run(probe, PROBE_RAN)
        assert result.passed, result.output
        assert host.poll() is None  # the host process it tried to kill is still running
    finally:
        host.kill()
        host.wait()


# ---------------------------------------------------------------- the reward itself
FENCED_GOOD = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n"
FENCED_BAD = "```python\ndef add(a, b):\n    return a * b\n```"


@needs_bwrap
@pytest.mark.parametrize("conversational", [False, True])
def test_code_execution_reward_in_both_formats(conversational):
    texts = [FENCED_GOOD, FENCED_BAD, "def add(a, b): return a + b", ATTACKS["fork_bomb"], ATTACKS["output_flood"]]
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": 6}}])
    tests = ["assert add(2, 3) == 5", ["assert add(2, 3) == 5", "assert add(0, 0) == 0"], GOOD[1], GOOD[1], GOOD[1]]
    assert reward(completions, tests=tests) == [1.0, 0.0, 1.0, 0.0, 0.0]


@needs_bwrap
def test_the_reward_scores_the_last_fenced_python_block():
    """test_rewards.py's table of fenced blocks (FENCED_ROWS, up to two blocks) through the reward itself: 1.0 only
    where the right solution is the block the docs say is scored (the last ```python one; no fence: the text)."""
    from test_rewards import FENCED_ROWS, RIGHT_CODE

    rows = [(text, scored) for text, scored in FENCED_ROWS if text.count("```") <= 4]
    (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": 6}}])
    got = reward([text for text, _ in rows], tests=[GOOD[1]] * len(rows))
    want = [1.0 if scored == RIGHT_CODE or text == RIGHT_CODE else 0.0 for text, scored in rows]
    assert got == want, [text for (text, _), g, w in zip(rows, got, want) if g != w]


@needs_bwrap
def test_code_tag_and_params():
    (reward,) = build_reward_funcs(
        [{"name": "code_execution_reward", "params": {"code_tag": "code", "tests_column": "checks", "timeout_s": 6}}]
    )
    assert reward(["<code>x = 1</code>", "x = 1"], checks=["assert x == 1"] * 2) == [1.0, 0.0]
    from mcp_server.errors import UserInputError

    with pytest.raises(UserInputError) as info:
        build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": 0}}])
    assert info.value.field == "rewards[0].params.timeout_s"
    with pytest.raises(UserInputError, match="no column 'checks'"):
        reward(["x = 1"], tests=["assert x == 1"])


def test_refuses_without_bubblewrap_and_never_runs_on_the_host(tmp_path, monkeypatch):
    marker = tmp_path / "ran-on-host"
    code = f"open({str(marker)!r}, 'w').write('oops')"
    (reward,) = build_reward_funcs(["code_execution_reward"])
    check_sandbox.cache_clear()
    fake_dir = None
    try:
        monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
        with pytest.raises(SandboxUnavailable, match="not installed.*no fallback to the host"):
            reward([code], tests=["pass"])
        # A bwrap that cannot create namespaces (e.g. user namespaces disabled) is refused too.
        fake_dir = Path(tempfile.mkdtemp(prefix="fake-bwrap-"))  # reachable by the unprivileged sandbox user
        fake_dir.chmod(0o755)
        fake = fake_dir / "bwrap"
        fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", str(fake_dir))
        check_sandbox.cache_clear()
        with pytest.raises(SandboxUnavailable, match="user namespaces"):
            reward([code], tests=["pass"])
    finally:
        check_sandbox.cache_clear()
        if fake_dir:
            shutil.rmtree(fake_dir, ignore_errors=True)
    assert not marker.exists()


# ---------------------------------------------------------------- issue 25: the second round of hostile probes
@needs_bwrap
def test_a_stop_iteration_from_the_solution_fails_the_run():
    """It ended the tests' own `map` early: `all(map(f, xs))` saw no item and passed."""
    raises = "def f(*args):\n    raise StopIteration\n"
    for tests in ("assert all(map(f, [1, 2, 3]))\n", "assert not any(map(f, [1, 2]))\n",
                  "import itertools\nassert all(itertools.starmap(f, [(1, 2)]))\n",
                  "def test_all():\n    assert all(map(f, range(5)))\n"):
        result = run(raises, tests)
        assert not result.passed and "StopIteration" in result.error, (tests, result.error)
    # The end of the solution's own iterator is still an end, not an error.
    assert run("def gen(n):\n    yield from range(n)\n", "assert list(gen(3)) == [0, 1, 2]\n").passed


TESTS_THAT_RUN_NOTHING = {
    "testcase_not_named_test": "import unittest\nclass Cases(unittest.TestCase):\n    def test_one(self):\n"
                               "        self.assertEqual(add(1, 1), 3)\n",
    "human_eval_check_never_called": "def check(candidate):\n    assert candidate(1, 1) == 3\n",
    "test_class_with_init": "class TestAdd:\n    def __init__(self):\n        pass\n    def test_one(self):\n"
                            "        assert add(1, 1) == 3\n",
    "no_test_at_all": "x = add(1, 1)\n",
    "empty": "",
}


@needs_bwrap
def test_tests_that_run_nothing_fail_and_human_eval_checks_get_the_entry_point():
    results = run_many([(GOOD[0], tests) for tests in TESTS_THAT_RUN_NOTHING.values()], FAST, workers=4)
    passed = [name for name, r in zip(TESTS_THAT_RUN_NOTHING, results) if r.passed]
    assert passed == []
    # The unittest case is run (as pytest would), whatever its class is called: it fails on its own assert.
    assert "AssertionError" in results[0].error and "3" in results[0].error
    for name in ("test_class_with_init", "no_test_at_all", "empty"):
        assert dict(zip(TESTS_THAT_RUN_NOTHING, results))[name].error.startswith("no tests ran"), name
    # Passing unittest cases (setUp included) and a HumanEval row through the reward, its entry_point column.
    case = ("import unittest\nclass Cases(unittest.TestCase):\n    def setUp(self):\n        self.want = 2\n"
            "    def test_one(self):\n        self.assertEqual(add(1, 1), self.want)\n")
    assert run(GOOD[0], case).passed
    (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": 6}}])
    check = "METADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
    wrong = "def add(a, b):\n    return a * b\n"
    scores = reward([GOOD[0], wrong, GOOD[0], GOOD[0]], tests=[check] * 4, entry_point=["add", "add", "plus", None])
    assert scores == [1.0, 0.0, 0.0, 0.0]  # right; wrong; no function `plus`; no entry point: nothing ran


@needs_bwrap
def test_dev_is_read_only_and_shared_memory_is_capped():
    """/dev/shm was an uncapped tmpfs (256 MiB in 0.6 s, host memory) and /dev writable."""
    probe = (
        "import os\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(32):\n"  # 8 MiB files (under the file-size limit), up to 256 MiB
        "        with open(f'/dev/shm/block{i}', 'wb') as f:\n"
        "            f.write(b'0' * (8 << 20))\n"
        "        written += 8\n"
        "except OSError:\n"
        "    pass\n"
        "assert written <= 16, written\n"
        "for path in ['/dev/evil', '/dev/null.d']:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "    except OSError:\n"
        "        continue\n"
        "    raise AssertionError('wrote ' + path)\n"
        "open('/dev/null', 'w').write('devices still work')\n"
    )
    result = run(probe, PROBE_RAN)
    assert result.passed, result.output + str(result.error)


@needs_bwrap
def test_descriptors_above_1024_in_the_host_do_not_zero_every_score():
    """select() cannot watch a descriptor >= 1024: with 1100 open in the host every score was silently 0."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        skip_unless_ci(f"the hard limit on open files here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1024
        (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": 6}}])
        assert reward([FENCED_GOOD, FENCED_BAD], tests=[GOOD[1]] * 2) == [1.0, 0.0]
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@needs_bwrap
def test_an_interpreter_directly_under_a_top_level_directory_does_not_expose_the_host():
    """python='/srv/python3' made the sandbox `--ro-bind / /`: the whole host readable."""
    if not os.access("/", os.W_OK):
        skip_unless_ci("needs a directory of its own under / (run as root)")
    top = Path(f"/lf-sandbox-{uuid.uuid4().hex[:8]}")
    top.mkdir()
    try:
        python = top / "python3"
        shutil.copy2(os.path.realpath("/usr/bin/python3"), python)
        probe = ("import os\nfor path in ['/etc/passwd', '/root', '/home', '/var', '/srv']:\n"
                 "    assert not os.path.exists(path) or os.listdir(path) == [], path\n")
        result = run_python(probe, PROBE_RAN, FAST, python=str(python))
        assert result.passed, result.output + str(result.error)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@needs_bwrap
def test_a_busy_loop_is_stopped_by_its_cpu_budget_not_the_timeout():
    """Issue 26: eight infinite loops held their slots and cores until the wall clock ran out."""
    result = run("def add(a, b):\n    while True:\n        pass\n", GOOD[1], Limits(timeout_s=60, cpu_s=0.3))
    assert not result.passed and not result.timed_out and "used its 0.3 s of CPU time" in result.error, result.error
    assert run(*GOOD, Limits(timeout_s=60, cpu_s=0.3)).passed  # an honest solution is far below it
    # the default budget, which code_execution_reward uses unless its cpu_s parameter says otherwise
    result = run("while True:\n    pass\n", GOOD[1], Limits(timeout_s=60))
    assert not result.timed_out and "used its 0.5 s of CPU time" in result.error, result.error
