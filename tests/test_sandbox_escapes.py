"""Escapes from the code sandbox (issue 33, "Escapes and injection", the sandbox's share, and its sandbox survivors;
tests/test_sandbox.py holds the sandbox's own rules and the first attacks): forged passes from tests whose body never
ran, a home folder bound whole, limits a forked child escaped, keyrings and the host's /proc, the /tmp
cap. Each through the core API (run_python, as code_execution_reward runs every completion), with known inputs."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from conftest import skip_unless_ci

from mcp_server.rewards.sandbox import Limits, run_python


pytestmark = [pytest.mark.usefixtures("bwrap"), pytest.mark.slow]  # every test here starts the sandbox
FAST = Limits(timeout_s=20.0, max_output_bytes=16 * 1024)  # generous: the CPU is shared with other suites
WRONG = "def add(a, b):\n    return a - b\n"
RIGHT = "def add(a, b):\n    return a + b\n"


@pytest.fixture()
def bwrap() -> None:
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")


NEVER_RUN = {
    "async def": "async def test_add():\n    assert add(2, 3) == 5\n",
    "generator": "def test_add():\n    assert add(2, 3) == 5\n    yield\n",
    "Test class, async method": "class TestAdd:\n    async def test_add(self):\n        assert add(2, 3) == 5\n",
    "TestCase, async method": ("import unittest\nclass T(unittest.TestCase):\n    async def test_add(self):\n"
                               "        self.assertEqual(add(2, 3), 5)\n"),
    "TestCase, generator": ("import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n"
                            "        self.assertEqual(add(2, 3), 5)\n        yield\n"),
}


@pytest.mark.parametrize("form", list(NEVER_RUN))
def test_a_test_whose_body_never_ran_is_no_pass(form):
    """`async def` and generator tests (pytest style, Test classes, TestCase) counted as run without executing
    their body: a wrong solution passed."""
    result = run_python(WRONG, NEVER_RUN[form], FAST)
    assert not result.passed and "did not run its body" in result.error, (form, result.error, result.output)


def test_an_asyncio_test_case_still_runs_its_coroutines():
    tests = ("import unittest\nclass T(unittest.IsolatedAsyncioTestCase):\n    async def test_add(self):\n"
             "        self.assertEqual(add(2, 3), 5)\n")
    assert run_python(RIGHT, tests, FAST).passed
    assert not run_python(WRONG, tests, FAST).passed


def test_an_interpreter_in_a_home_folder_exposes_only_what_it_needs(tmp_path):
    """With python=/home/<user>/bin/python3 the sandbox bound the interpreter's whole parent (the home), and model
    code read ~/.ssh/id_rsa."""
    if not os.access("/", os.W_OK):
        skip_unless_ci("needs a directory of its own under / (run as root): the sandbox's /tmp hides tmp_path")
    home = Path(f"/lf-home-{uuid.uuid4().hex[:8]}") / "u"
    try:
        (home / "bin").mkdir(parents=True)
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_rsa").write_text("SECRET KEY\n")
        os.chmod(home.parent, 0o755)
        os.chmod(home, 0o755)
        (home / ".ssh" / "id_rsa").chmod(0o644)  # readable even by the sandbox's user: only the mounts protect it
        python = home / "bin" / "python3"
        shutil.copy2(os.path.realpath("/usr/bin/python3"), python)
        leak = f"def key():\n    return open({str(home / '.ssh' / 'id_rsa')!r}).read()\n"
        result = run_python(leak, "def test_key():\n    assert key() == 'SECRET KEY\\n'\n", FAST, python=str(python))
        assert not result.passed and "FileNotFoundError" in result.error, (result.error, result.output)
        assert run_python(RIGHT, "def test_add():\n    assert add(2, 3) == 5\n", FAST, python=str(python)).passed
    finally:
        shutil.rmtree(home.parent, ignore_errors=True)


FORK_AND_WAIT = """\
import os
def add(a, b):
    children = []
    for _ in range({n}):
        pid = os.fork()
        if pid == 0:
            {child}
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    return a + b
"""
TEST_ADD = "def test_add():\n    assert add(2, 3) == 5\n"


def test_forked_children_share_one_cpu_budget():
    """A forked child escaped the 0.5 s CPU budget (~10 CPU-seconds each): the budget was the solution process's
    alone. Four children in busy loops while their parent waits (using no CPU of its own)."""
    code = FORK_AND_WAIT.format(n=4, child="while True: pass")
    result = run_python(code, TEST_ADD, Limits(timeout_s=60, cpu_s=0.5))
    assert not result.passed and not result.timed_out, (result.error, result.seconds)
    used = re.search(r"used its 0.5 s of CPU time \(all its processes together: ([\d.]+) s\)", result.error)
    assert used, result.error
    print(f"\nCPU budget 0.5 s: 4 forked busy loops stopped at {used.group(1)} CPU-s in all")


def test_forked_children_share_one_memory_cap():
    """Memory was capped per process only (RLIMIT_AS): ~3 GB per sandbox measured. Six children each holding
    200 MB (under the 512 MB each process may map) are 1.2 GB together: over the sandbox's 512 MB."""
    child = "block = b'x' * (200 << 20); import time; time.sleep(5)"
    result = run_python(FORK_AND_WAIT.format(n=6, child=child), TEST_ADD, Limits(timeout_s=60, cpu_s=10))
    assert not result.passed and not result.timed_out, (result.error, result.seconds)
    used = re.search(r"used more than its 512 MB of memory \(all its processes together: (\d+) MB\)", result.error)
    assert used, result.error
    print(f"\nmemory cap 512 MB: six forked 200 MB holders stopped at {used.group(1)} MB resident in all")
    assert run_python(FORK_AND_WAIT.format(n=2, child="block = b'x' * (100 << 20)"), TEST_ADD,
                      Limits(timeout_s=60, cpu_s=10)).passed  # 200 MB together: within the cap


def test_no_keyrings_no_namespaces_and_no_host_memory_or_load():
    """Kernel keyrings were visible across sandboxes, there was no seccomp filter, and the host's /proc/meminfo
    and /proc/loadavg were readable."""
    probe = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def refused(number, *args):
    ctypes.set_errno(0)
    return libc.syscall(number, *args) == -1 and ctypes.get_errno() == 1
def readable(path):
    try:
        return open(path).read() != ''
    except OSError:
        return False
"""
    tests = ("def test_probe():\n"
             "    assert refused(250, 0, -4, 0)\n"  # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_SESSION_KEYRING)
             "    assert refused(248, 0, 0, 0, 0, 0)\n"  # add_key
             "    assert refused(272, 0x10000000)\n"  # unshare(CLONE_NEWUSER)
             "    assert not readable('/proc/meminfo') and not readable('/proc/loadavg')\n"
             "    assert readable('/proc/self/status')\n")  # the sandbox's own processes are still there
    result = run_python(probe, tests, FAST)
    assert result.passed, (result.error, result.output)


def test_tmp_is_capped_at_four_times_the_file_size_limit():
    """The /tmp cap written in GiB instead of MiB (mutation audit) let a solution fill host memory through /tmp."""
    probe = """\
def fill():
    written = 0
    try:
        for i in range(8):  # 0.9 MB files, under the 1 MB file-size limit: 7.2 MB if nothing stops it
            with open(f'/tmp/block{i}', 'wb') as f:
                f.write(b'0' * (900 << 10))
            written += 900 << 10
    except OSError as exc:
        return written, exc.errno
    return written, None
"""
    result = run_python(probe, "import errno\ndef test_fill():\n    assert fill() == (4 * (900 << 10), errno.ENOSPC)\n",
                        Limits(timeout_s=20, max_file_mb=1))
    assert result.passed, (result.error, result.output)
