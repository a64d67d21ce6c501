# ruff: noqa
"""Round 14, the server's JSON-RPC inputs over raw stdio: each odd message, then a ping that must be answered.
python raw_rpc.py WS"""
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
ws = sys.argv[1]
p = subprocess.Popen([os.path.join(REPO, ".venv/bin/python"), "-m", "mcp_server"], cwd=ws,
                     env={**os.environ, "LLM_FINETUNING_WORKSPACE": ws, "PYTHONPATH": REPO},
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def send(raw: bytes):
    p.stdin.write(raw + b"\n"); p.stdin.flush()


def read_until(pred, timeout=60):
    end = time.time() + timeout
    got = []
    while time.time() < end:
        line = _readline(p.stdout.fileno(), end)
        if line is None:
            break
        if not line:
            return got, "EOF"
        try:
            m = json.loads(line)
        except ValueError:
            got.append(("nonjson", line[:200])); continue
        got.append(m)
        if pred(m):
            return got, "ok"
    return got, "timeout"


n = [1000]
def alive(label):
    n[0] += 1
    send(json.dumps({"jsonrpc": "2.0", "id": n[0], "method": "ping"}).encode())
    got, how = read_until(lambda m: isinstance(m, dict) and m.get("id") == n[0], 60)
    others = [g for g in got if not (isinstance(g, dict) and g.get("id") == n[0])]
    print(f"{label:60s} ping:{how} other:{json.dumps(others)[:300]}", flush=True)
    return how == "ok"


send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "r14", "version": "0"}}}).encode())
read_until(lambda m: m.get("id") == 1)
send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
alive("baseline")
CASES = [
    ("batch array of requests", json.dumps([{"jsonrpc": "2.0", "id": 2, "method": "ping"}, {"jsonrpc": "2.0", "id": 3, "method": "ping"}])),
    ("deeply nested params (100k [)", '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":' + "[" * 100000 + "]" * 100000 + "}"),
    ("deeply nested arguments (50k {)", '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"list_runs","arguments":{"a":' + '{"a":' * 50000 + "1" + "}" * 50000 + "}}}"),
    ("arguments a list", json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "list_runs", "arguments": [1, 2]}})),
    ("arguments a string", json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "list_runs", "arguments": "x"}})),
    ("name an object", json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": {"a": 1}, "arguments": {}}})),
    ("id huge int 2**200", '{"jsonrpc":"2.0","id":' + str(2 ** 200) + ',"method":"ping"}'),
    ("id 1e400 (inf float)", '{"jsonrpc":"2.0","id":1e400,"method":"ping"}'),
    ("NaN in arguments", '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"training_status","arguments":{"run":"x","log_lines":NaN}}}'),
    ("log_lines 10**30", json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "training_status", "arguments": {"run": "2026-12-06-r", "log_lines": 10 ** 30}}})),
    ("progressToken object", json.dumps({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "list_runs", "arguments": {}, "_meta": {"progressToken": {"x": [1]}}}})),
    ("cancel id 11 while done, requestId huge", json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2 ** 80}})),
    ("logging/setLevel bogus", json.dumps({"jsonrpc": "2.0", "id": 12, "method": "logging/setLevel", "params": {"level": {"x": 1}}})),
    ("skills/get traversal", json.dumps({"jsonrpc": "2.0", "id": 13, "method": "skills/get", "params": {"name": "../../../../etc/passwd"}})),
    ("resources/read file:///etc/passwd", json.dumps({"jsonrpc": "2.0", "id": 14, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}})),
    ("prompts/get unknown", json.dumps({"jsonrpc": "2.0", "id": 15, "method": "prompts/get", "params": {"name": "x" * 100000}})),
    ("invalid utf-8 bytes line", None),
    ("a response with no request", json.dumps({"jsonrpc": "2.0", "id": 77, "result": {"x": 1}})),
    ("an error response with no request", json.dumps({"jsonrpc": "2.0", "id": 78, "error": {"code": 1, "message": "x"}})),
    ("initialize again", json.dumps({"jsonrpc": "2.0", "id": 16, "method": "initialize", "params": {"protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "r14", "version": "0"}}})),
    ("run path 4096 x a", json.dumps({"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": {"name": "training_status", "arguments": {"run": "a/" * 3000}}})),
    ("run with NUL", json.dumps({"jsonrpc": "2.0", "id": 18, "method": "tools/call", "params": {"name": "training_status", "arguments": {"run": "a\u0000b"}}})),
]
for label, raw in CASES:
    if raw is None:
        send(b'{"jsonrpc":"2.0","id":19,"method":"ping","params":{"x":"\xff\xfe"}}')
    else:
        send(raw.encode())
    if not alive(label):
        print("SERVER DEAD OR WEDGED after", label, "rc", p.poll()); break
p.stdin.close()
try:
    p.wait(30)
except Exception:
    p.kill()
print("exit", p.returncode)
