"""Issue 25, "The MCP server": parallel and cancelled sample_completions over one real stdio session, and the
JSON-RPC error replies to lines that are no message, over the raw wire; issue 33, "Runs, processes, server" (the
server's share), over the raw wire too: a file that is no config never echoed, a lone surrogate answered with its
request id, and the calls still running when the client closes its input answered with their results, not
"Connection closed".

The samples' content is the tiny model's and not asserted; which call's samples are on disk is known by construction
(each call asks for its own number of prompts and seed, and the calls are ordered by the protocol, not by time).
"""

from __future__ import annotations

import pytest
import json
import os
import subprocess
import sys

import anyio

from conftest import ROOT, call_mcp, checkout_env

pytestmark = pytest.mark.slow  # every test here starts a process or trains (the lanes: conftest.py)


def test_parallel_calls_all_answer_and_a_cancelled_call_never_replaces_a_newer_one(workspace, tiny_model):
    """Three concurrent sample_completions on a fresh server: two failed (ImportError on AutoTokenizer; later,
    "Cannot copy out of meta tensor"). A cancelled call kept running and, 40 s later, overwrote the samples of a
    newer call that had already returned."""
    run_dir = workspace / "runs" / "parallel"
    (run_dir / "train").mkdir(parents=True)
    env = {"LLM_FINETUNING_WORKSPACE": str(workspace)}

    def args(prompts: int, seed: int) -> dict:
        return {"run": str(run_dir), "model": "tiny", "dataset": "tiny", "num_prompts": prompts, "n": 2,
                "max_new_tokens": 4, "seed": seed}

    async def calls(client):
        parallel = [None] * 3

        async def one(i: int):
            parallel[i] = await client.call_tool("sample_completions", args(2 + i, i))

        async with anyio.create_task_group() as group:
            for i in range(3):
                group.start_soon(one, i)

        # A long call, cancelled once it has reported its first progress; then a short, newer call.
        reported, cancel = anyio.Event(), anyio.CancelScope()

        async def on_progress(done, total, message):
            reported.set()

        async def long_call():
            with cancel:
                await client.call_tool("sample_completions", args(40, 99), progress_callback=on_progress)

        async with anyio.create_task_group() as group:
            group.start_soon(long_call)
            await reported.wait()
            cancel.cancel()
        newer = await client.call_tool("sample_completions", args(3, 7))
        return parallel, newer

    parallel, newer = anyio.run(call_mcp, calls, env)
    for result in parallel:
        assert not result.is_error, result.content[0].text
    assert sorted(r.structured_content["num_prompts"] for r in parallel) == [2, 3, 4]
    assert not newer.is_error, newer.content[0].text
    written = [json.loads(line) for line in (run_dir / "inspection" / "samples.jsonl").read_text().splitlines()]
    meta = json.loads((run_dir / "inspection" / "samples.meta.json").read_text())
    assert len(written) == 3 * 2 and newer.structured_content["num_samples"] == 6
    assert meta["generation"]["seed"] == 7, meta["generation"]


def test_lines_that_are_no_message_get_json_rpc_error_replies():
    """No reply came to a request nested 100k deep, one without `method`, or one with `jsonrpc: "1.0"`; the
    client waited forever. Each gets its JSON-RPC error, and the server goes on answering."""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    lines = [
        json.dumps(hello),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": ' + "[" * 100_000 + "]" * 100_000 + "}",
        json.dumps({"jsonrpc": "2.0", "id": 3, "params": {}}),
        json.dumps({"jsonrpc": "1.0", "id": 4, "method": "tools/list"}),
        "[1, 2]",
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
    ]
    # stdin stays open until the last reply has come: at end of input the SDK ends the session, and a request
    # still in flight then goes unanswered, which is not what this test is about.
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, text=True,
                            env=checkout_env({"LLM_FINETUNING_WORKSPACE": os.getcwd()}))
    proc.stdin.write("\n".join(lines) + "\n")
    proc.stdin.flush()
    replies = []
    while not replies or replies[-1].get("id") != 5:
        line = proc.stdout.readline()  # the test's own timeout bounds a server that never answers
        if not line:
            break
        replies.append(json.loads(line))
    _, stderr = proc.communicate(timeout=120)
    assert [r.get("id") for r in replies] == [1, None, 3, 4, None, 5], replies
    codes = [r.get("error", {}).get("code") for r in replies]
    assert codes == [None, -32700, -32600, -32600, -32600, None], replies
    assert "method" in replies[2]["error"]["message"] and '"2.0"' in replies[3]["error"]["message"]
    assert replies[5]["result"]["tools"] and "Traceback" not in stderr


HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


def call(request_id: int, tool: str, arguments: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}})


def test_no_file_content_echoed_surrogates_answered_and_calls_cut_off_by_the_end_of_input_answered(tmp_path):
    """validate_grpo_config(config_path=/etc/shadow) echoed the first token of each line (as unknown fields); a
    lone surrogate in an argument got a parse error without the request id; a call cut off by shutdown (the
    client closing its input, as MCP's stdio shutdown does) was answered "Connection closed" though it completed."""
    shadow = tmp_path / "shadow"
    shadow.write_text("secretuser:$6$salt$hash:19000:0:99999:7:::\nsecretother: x\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("learning_rate: 1e-6\nsecrettoken: [unclosed\n")
    lines = [
        json.dumps(HELLO), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        call(3, "validate_grpo_config", {"config_path": str(shadow)}),
        call(4, "validate_grpo_config", {"config_path": str(broken)}),
        call(5, "validate_grpo_config", {"config_path": str(tmp_path / "x.yaml")}).replace("x.yaml", "\\ud800.yaml"),
        call(2, "validate_grpo_config", {"config": {"learning_rate": 1e-6}}),  # still running at the end of input
    ]
    proc = subprocess.run([sys.executable, "-m", "mcp_server"], input="\n".join(lines) + "\n", capture_output=True,
                          cwd=ROOT, text=True, timeout=600,
                          env=checkout_env({"LLM_FINETUNING_WORKSPACE": str(tmp_path)}))
    replies = {r.get("id"): r for r in map(json.loads, proc.stdout.splitlines())}
    assert sorted(replies, key=str) == [1, 2, 3, 4, 5], proc.stdout
    assert "secret" not in proc.stdout and "Traceback" not in proc.stderr, proc.stdout
    for request_id, said in ((3, "is not a YAML config"), (4, "is not valid YAML")):
        result = replies[request_id]["result"]
        assert result["isError"] and said in result["content"][0]["text"], result
    assert replies[5]["error"]["code"] == -32602 and "surrogate" in replies[5]["error"]["message"], replies[5]
    answer = replies[2].get("result")
    assert answer is not None and not answer.get("isError"), replies[2]
    assert json.loads(answer["content"][0]["text"])["valid"] is False  # no reward: its findings came back
