"""Issue 33, "Runs, processes, server" (the MCP server's share), over the raw stdio wire of `python -m mcp_server`:
a file that is no config never echoed, a lone surrogate answered with its request id, and the calls still running
when the client closes its input answered with their results, not "Connection closed"."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, checkout_env

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
