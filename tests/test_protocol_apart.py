"""Issue 48, ninth round: what the protocol's own descriptors and ids must withstand. Workspace code (a reward
module) runs out of the process that holds the MCP server's stdio or the CLI's --json result (the worker), so it
cannot forge a reply there (M7, M6b); a request id reused while its request is in flight is refused and not run (M3).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from conftest import call_mcp, checkout_env, run_cli
from support import module_workspace
from test_server_inputs import INVALID_REQUEST, Wire, request
from mcp_server.inspection.models import SampleRequest
from mcp_server.inspection.sampling import sample_completions
from mcp_server.workspace import atomic_write_json, new_run_dir


def _write_rewards(run_dir: Path, specs: list) -> None:
    atomic_write_json(run_dir / "train" / "rewards.json", specs)


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory, tiny_model):
    """A run with 64 real samples (16 chat prompts x 4) of the tiny model on the tiny task."""
    with module_workspace(tmp_path_factory, "ws"):
        run_dir = new_run_dir("chat")
        _write_rewards(run_dir, [{"name": "correctness_reward"}])
        result = sample_completions(
            SampleRequest(run=str(run_dir), model="tiny", dataset="tiny", n=4, num_prompts=16, max_new_tokens=16))
    return run_dir, result


# ---------------------------------------------------------------- workspace code and the protocol's descriptors
FORGER = '''import os, stat
for fd in range(1, 64):  # every pipe this process holds, the MCP server's stdout included if it is one
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"FORGED"}],'
                         b'"isError":false}}\\n' % ID)
    except OSError:
        pass
def forging_reward(completions, **kwargs):
    return [1.0 for _ in completions]
'''


@pytest.mark.slow
def test_a_reward_module_cannot_forge_a_reply_on_the_servers_wire(chat_run):
    """Issue 48, ninth round (M7): a reward module that writes a JSON-RPC reply to every pipe at its import; the
    server imports it out of its own process (the worker), so the client's reply is the real one."""
    workspace = chat_run[0].parent.parent
    run_dir = chat_run[0].with_name(chat_run[0].name + "-forged")
    shutil.copytree(chat_run[0], run_dir)
    for request_id in range(1, 8):  # whichever id the client gives the call, the reply is the server's
        (workspace / f"forger{request_id}.py").write_text(FORGER.replace("ID)", f"{request_id})"))
    _write_rewards(run_dir, [{"name": f"forger{i}.forging_reward"} for i in range(1, 8)])
    results = []

    async def calls(client):
        results.append(await client.call_tool("inspect_rewards", {"run": str(run_dir)}))

    asyncio.run(call_mcp(calls, env=checkout_env({"LLM_FINETUNING_WORKSPACE": str(workspace)})))
    text = results[0].content[0].text
    assert "FORGED" not in text and not results[0].is_error, text[:300]
    assert json.loads(text)["num_samples"] == 64


RESULT_FORGER = '''import os, stat
for fd in range(3, 64):  # the CLI's copy of its stdout (--json) among them, were this the CLI's process
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, b'{"run_dir": "forged"}\\n')
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    except OSError:
        pass
def forging_reward(completions, **kwargs):
    return [1.0 for _ in completions]
'''


@pytest.mark.slow
def test_a_reward_module_cannot_forge_the_clis_json_result(chat_run):
    """Issue 48, ninth round (M6b): a reward module writes a JSON document to every descriptor from 3 up and
    points each at /dev/null. The CLI runs it in a worker: its result is never the forged one; the worker, whose
    answer channel the module replaced, stops at once and the call fails saying so (no 120 s wait)."""
    workspace = chat_run[0].parent.parent
    run_dir = chat_run[0].with_name(chat_run[0].name + "-forged-json")
    shutil.copytree(chat_run[0], run_dir)
    (workspace / "jsonforger.py").write_text(RESULT_FORGER)
    _write_rewards(run_dir, [{"name": "jsonforger.forging_reward"}])
    done = run_cli("inspect-rewards", str(run_dir), "--json", process=True, cwd=workspace, timeout=100,
                   env={"LLM_FINETUNING_WORKSPACE": str(workspace)})
    assert "forged" not in done.stdout, (done.returncode, done.stdout[:300])
    assert done.returncode == 2 and "replaced the worker's answer channel" in done.stderr, done.stderr[-500:]


@pytest.mark.slow
def test_a_request_id_reused_while_its_request_is_in_flight_is_refused_and_not_run(tmp_path):
    """Issue 48, ninth round (M3): a second request with the id of one still running ran too, and one of the two
    got no answer or "Connection closed". Now the second is refused at once (Invalid Request, id null: a reply
    with the id would pass for the first's answer) naming the id, only the first runs and answers, the same value
    as the other id type is another id, and the id is free again once its request is answered."""
    hung = tmp_path / "hung-python"  # holds a call in flight until the worker's silence limit
    hung.write_text("#!/bin/sh\nexec sleep 100000\n")
    hung.chmod(0o755)
    wire = Wire(env={"LLM_FINETUNING_PYTHON": str(hung), "LLM_FINETUNING_WORKER_SILENCE_S": "3",
                     "LLM_FINETUNING_WORKSPACE": str(tmp_path)})
    call = {"name": "validate_grpo_config", "arguments": {"config": {
        "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "learning_rate": 1e-6,
        "reward_funcs": ["mcp_server.rewards.format_reward"]}, "gpu": "H100", "rehearse": False}}
    try:
        wire.hello()
        wire.send(request(7, "tools/call", call))
        for again in (request(7, "tools/call", call), request(7), request("7")):  # only the string "7" is new
            wire.send(again)
        early = wire.until(lambda r: len(r) >= 3, 2.5)  # before the first call's 3 s: the refusals and "7"
        rest = wire.until(lambda r: any(x.get("id") == 7 for x in r), 60)
        wire.send(request(7))  # answered: the id is free again
        (reused,) = wire.until(lambda r: len(r) == 1, 30)
        late = wire.until(lambda r: False, 1.0)
    finally:
        wire.close()
    refused = [r for r in early if r.get("id") is None]
    assert len(refused) == 2 and {r["error"]["code"] for r in refused} == {INVALID_REQUEST}, early
    assert all("id 7 is already used by a request still in flight" in r["error"]["message"] for r in refused)
    assert [("result" in r, r["id"]) for r in early if r.get("id") is not None] == [(True, "7")], early
    answers = [r for r in early + rest + late if r.get("id") == 7]
    assert len(answers) == 1 and "sent nothing for 3 s" in json.dumps(answers[0]), answers
    assert reused["id"] == 7 and "result" in reused, reused


# ---------------------------------------------------------------- what crosses to and from the worker
def test_a_workers_answer_cannot_name_a_class_outside_the_package(tmp_path, monkeypatch):
    """Issue 48, M7: code a worker ran can write an answer line; one naming a class of a workspace module would have
    the server import that module to decode it (running it beside the protocol). Refused, and nothing is imported."""
    from mcp_server.worker import TrainingInterpreterError, receive

    marker = tmp_path / "imported"
    (tmp_path / "answer_forger.py").write_text(f"open({str(marker)!r}, 'w').write('here')\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # a workspace module; a module of this package not imported here (round 12, W1: mcp_server.__main__ started a
    # second server inside this one); a class of this package that is no result class
    import sys

    assert "mcp_server.__main__" not in sys.modules
    for name in ("answer_forger:Thing", "mcp_server.__main__:x", "mcp_server.errors:UserInputError"):
        for kind in ("model", "object"):
            lines = iter([json.dumps({"id": "c-1", "result": {kind: name, "data": {}}}) + "\n"])
            with pytest.raises(TrainingInterpreterError, match="it is not decoded"):
                receive(lambda: next(lines), "c-1", "mcp_server.inspection.gate:check_inspection_gate",
                        lambda *a: None, "python", lambda: AssertionError("no answer"))
    assert not marker.exists() and "mcp_server.__main__" not in sys.modules


def test_a_launchs_runspec_crosses_to_the_worker_as_data(tmp_path):
    """The launch's inspection gate runs in the worker (issue 48, M7) on the run as the launch read it: its RunSpec,
    target and recorded request included, comes out of the worker's lines equal to what went in."""
    import yaml

    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run
    from mcp_server.worker import _decode, request_message

    run = Run(tmp_path / "runs" / "r")
    run.train.mkdir(parents=True)
    run.config.write_text(yaml.safe_dump({"model_name_or_path": "tiny", "learning_rate": 1e-6, "use_cpu": True,
                                          "reward_funcs": ["m.f"], "datasets": [{"path": "json", "data_files": "d"}]}))
    _write_rewards(run.dir, [{"name": "m.f", "params": {"k": [1, 2]}, "weight": 0.5}])
    spec = RunSpec.of_run(run, vllm_server_gpus=2, nodes=1).launched_with("zero2")
    sent = json.loads(json.dumps(request_message("1", "x:y", (run, spec), {"here": {"loader_env": {}}})))
    assert [_decode(a) for a in sent["args"]] == [run, spec]
    assert _decode(sent["kwargs"]["here"]) == {"loader_env": {}}
