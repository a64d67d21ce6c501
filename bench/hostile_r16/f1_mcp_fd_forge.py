# ruff: noqa
# Copied from round 16 (issue 48): f1_key_leak_mcp.sh runs it.
"""Round 16: a reward module imported by emit_grpo_config writes a forged JSON-RPC result for id 99 on every fd it
holds (0-255) and /dev/stdout, /dev/tty...; then the client sends request id 99 (list_runs). Expected: the answer to
99 is the server's own. usage: python mcp_fd_forge.py WS (WS holds fdrew.py, data.jsonl, models/tiny)"""
import json, os, subprocess, sys, time
ws = sys.argv[1]
p = subprocess.Popen([os.environ.get("PY", sys.executable), "-m", "mcp_server"], cwd=ws, env={**os.environ, "LLM_FINETUNING_WORKSPACE": ws, "PYTHONPATH": os.environ.get("REPO", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))},
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(ws, "mcp_fd.err"), "wb"))
def send(m): p.stdin.write((json.dumps(m) + "\n").encode()); p.stdin.flush()
def wait(i):
    while True:
        line = p.stdout.readline()
        if not line: return None
        m = json.loads(line)
        if m.get("id") == i: return m
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "r16", "version": "0"}}}); wait(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "emit_grpo_config", "arguments": {"model": ws + "/models/tiny", "dataset": ws + "/data.jsonl", "gpu": "cpu", "rewards": [{"name": "fdrew.r"}], "run_name": "fd", "overrides": {"max_steps": 2, "max_completion_length": 8, "num_generations": 4, "per_device_train_batch_size": 4}}}})
m = wait(2); print("emit:", json.dumps(m)[:160])
send({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "list_runs", "arguments": {}}})
m = wait(99); txt = json.dumps(m)
print("answer to 99:", "FORGED" if "FORGED" in txt else "the server's own", txt[:160])
print("fds the module wrote to:", open(os.path.join(ws, "fd_hits.txt")).read() if os.path.exists(os.path.join(ws, "fd_hits.txt")) else "(module not imported)")
p.stdin.close(); p.wait(30)
