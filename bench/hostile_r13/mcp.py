# ruff: noqa
"""Minimal MCP stdio client: python mcp.py WS 'tool {json}' 'tool {json}' ... ; prints each result's text (first 1500 chars)."""
import json, os, subprocess, sys
ws = sys.argv[1]
env = {**os.environ, "LLM_FINETUNING_WORKSPACE": ws}
p = subprocess.Popen([sys.executable, "-m", "mcp_server"], cwd=ws, env=env, stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
n = 0
def rpc(method, params=None, notify=False):
    global n
    msg = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
    if not notify:
        n += 1; msg["id"] = n
    p.stdin.write(json.dumps(msg) + "\n"); p.stdin.flush()
    if notify: return None
    while True:
        line = p.stdout.readline()
        if not line: return {"eof": True}
        r = json.loads(line)
        if r.get("id") == n: return r
rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "r13", "version": "0"}})
rpc("notifications/initialized", notify=True)
for spec in sys.argv[2:]:
    if spec.startswith("!"):
        os.system(spec[1:]); continue
    name, _, args = spec.partition(" ")
    r = rpc("tools/call", {"name": name, "arguments": json.loads(args or "{}")})
    res = r.get("result") or r
    text = "".join(c.get("text", "") for c in res.get("content", [])) if isinstance(res, dict) and "content" in res else json.dumps(res)
    print(f"== {name}: isError={res.get('isError') if isinstance(res, dict) else None}\n{text[:1500]}")
p.stdin.close(); p.wait(timeout=60)
