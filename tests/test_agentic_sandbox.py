"""A tool that executes model-written code runs it in the plugin's bubblewrap sandbox (mcp_server.agentic.sandboxed
over rewards/sandbox.py): no network, nothing written outside its own /tmp, cut at its timeout, its result capped
at the bytes it declares. Needs bubblewrap; under CI a missing bwrap fails the test."""

from __future__ import annotations

import shutil
import socket
import sys
import uuid
from pathlib import Path

import pytest
from conftest import skip_unless_ci

from mcp_server.agentic.sandboxed import MAX_RESULT_BYTES, execute_python, run_code
from mcp_server.rewards.sandbox import Limits

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)


@pytest.fixture(autouse=True)
def bwrap() -> None:
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")


def test_model_written_code_runs_confined(tmp_path):
    assert execute_python("print(6 * 7)") == "42\n"
    with socket.socket() as server:  # a server on the host's loopback: the sandbox has its own, empty network
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        out = execute_python("import socket\ntry:\n"
                             f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\n"
                             "except OSError as exc:\n    print('no network:', type(exc).__name__)\n")
        assert out.startswith("no network:"), out
        with pytest.raises(TimeoutError):
            server.accept()
    marker = f"escape-{uuid.uuid4().hex}.txt"
    targets = [tmp_path / marker, Path(sys.executable).resolve().parent / marker, Path.cwd() / marker]
    out = execute_python("for path in %r:\n    try:\n        open(path, 'w').write('x')\n        print('wrote', path)\n"
                         "    except OSError as exc:\n        print('denied', type(exc).__name__)\n"
                         % [str(t) for t in targets])
    assert out.count("denied") == len(targets) and "wrote" not in out, out
    assert not any(t.exists() for t in targets)
    assert run_code("import time\ntime.sleep(60)\n", Limits(timeout_s=2.0)) == "[error: timed out after 2s]"
    failed = execute_python("print('before')\nraise ValueError('boom')\n")
    assert failed.startswith("before\n") and failed.endswith("[error: solution: ValueError: boom]"), failed
    flood = execute_python("print('x' * 100000)")
    assert len(flood.encode()) <= MAX_RESULT_BYTES == execute_python.max_result_tokens
