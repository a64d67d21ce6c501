# ruff: noqa
"""Round 17, b07 (from the blind round's /tmp/r17/b07.py, run against this checkout): one sparse file (no disk used)
at a run's run.json, train/request.json or train/config.yaml; list_runs over MCP (raw stdio). Prints the server's
peak memory (VmHWM) and the answer; BROKEN when the server's peak is over 1 GiB, it died, or the answer does not
name the file, else HELD. usage: python b07_sparse_run_files.py [SIZE_GB] [WS]"""
import json, os, select, shutil, subprocess, sys, time
REPO = os.environ.get("REPO") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = os.environ.get("PY") or os.path.join(REPO, ".venv", "bin", "python")
size = sys.argv[1] if len(sys.argv) > 1 else "2"; WS = sys.argv[2] if len(sys.argv) > 2 else "/tmp/r17b/ws_b07"
broken = False
for name in ("run.json", "train/request.json", "train/config.yaml"):
    shutil.rmtree(WS, ignore_errors=True); os.makedirs(WS + "/runs/x/train")
    open(WS + "/runs/x/train/config.yaml", "w").close()
    subprocess.run(["truncate", "-s", size + "G", f"{WS}/runs/x/{name}"], check=True)
    p = subprocess.Popen([PY, "-m", "mcp_server"], cwd=WS, env={**os.environ, "LLM_FINETUNING_WORKSPACE": WS,
                         "PYTHONPATH": REPO}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    buf = [b""]
    def wait_id(i, timeout):
        end = time.time() + timeout
        while time.time() < end:
            while b"\n" not in buf[0]:
                if not select.select([p.stdout], [], [], max(0, end - time.time()))[0]: return None
                c = os.read(p.stdout.fileno(), 1 << 20)
                if not c: return "EOF"
                buf[0] += c
            l, buf[0] = buf[0].split(b"\n", 1)
            m = json.loads(l)
            if m.get("id") == i: return m
        return None
    def send(m): p.stdin.write(json.dumps(m).encode() + b"\n"); p.stdin.flush()
    def hwm():
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("VmHWM"): return int(line.split()[1]) >> 10
    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
          "capabilities": {}, "clientInfo": {"name": "b07", "version": "1"}}})
    wait_id(0, 120); send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    t = time.time(); send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_runs", "arguments": {}}})
    r = wait_id(1, 600); took = time.time() - t
    peak = hwm() if p.poll() is None else None
    text = json.dumps(r) if isinstance(r, dict) else str(r)
    named = name in text and "bytes a file read whole may hold" in text
    print(f"{name} sparse {size} GiB: list_runs answered in {took:.1f} s, server peak {peak} MiB, alive "
          f"{p.poll() is None}, file named: {named}")
    p.stdin.close(); p.wait(timeout=60)
    broken |= r in (None, "EOF") or peak is None or peak > 1024 or not named
print("BROKEN" if broken else "HELD")
