"""Issue 25, "The MCP server": parallel and cancelled sample_completions over one real stdio session, and the
JSON-RPC error replies to lines that are no message, over the raw wire.

The samples' content is the tiny model's and not asserted; which call's samples are on disk is known by construction
(each call asks for its own number of prompts and seed, and the calls are ordered by the protocol, not by time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import anyio

from conftest import ROOT, call_mcp, checkout_env


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
