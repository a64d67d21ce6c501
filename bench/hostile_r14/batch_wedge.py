# ruff: noqa
"""Round 14 (held; an earlier version of this client, select() over a buffered reader, showed a false stall): one JSON-RPC batch (an array) on the server's stdin; then pings. python batch_wedge.py WS [wait_s]"""
import json, os, subprocess, sys, time, select
BUF = [b""]
def _readline(fd, end):
    while b"\n" not in BUF[0]:
        if not select.select([fd], [], [], max(0, end - time.time()))[0]:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b""
        BUF[0] += chunk
    line, BUF[0] = BUF[0].split(b"\n", 1)
    return line + b"\n"

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ws = sys.argv[1]; wait = float(sys.argv[2]) if len(sys.argv) > 2 else 120
p = subprocess.Popen([os.path.join(REPO, ".venv/bin/python"), "-m", "mcp_server"], cwd=ws,
                     env={**os.environ, "LLM_FINETUNING_WORKSPACE": ws, "PYTHONPATH": REPO},
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open("/tmp/r14/batch_wedge.err", "wb"))
def send(o): p.stdin.write((o if isinstance(o, str) else json.dumps(o)).encode() + b"\n"); p.stdin.flush()
def wait_for(i, t):
    end = time.time() + t
    while time.time() < end:
        line = _readline(p.stdout.fileno(), end)
        if line is None: break
        if not line: return "EOF"
        m = json.loads(line); print("  <-", json.dumps(m)[:200], flush=True)
        if m.get("id") == i: return f"answered in {t - (end - time.time()):.1f}s"
    return "no answer"
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "r14", "version": "0"}}})
print("init", wait_for(1, 60))
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "ping"}); print("ping before", wait_for(2, 60))
send(sys.argv[3] if len(sys.argv) > 3 else json.dumps([{"jsonrpc": "2.0", "id": 3, "method": "ping"}]))
send({"jsonrpc": "2.0", "id": 4, "method": "ping"}); print("ping after", wait_for(4, wait))
send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "list_runs", "arguments": {}}}); print("list_runs after", wait_for(5, 30))
print("server alive:", p.poll() is None)
p.kill()
