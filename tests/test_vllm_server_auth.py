"""Server mode talks only to the vLLM server its launch started (issue 48, round 19, B07), without vLLM: the
launch's wait (`python -m mcp_server.training.trainer.vllm_auth URL`) refuses a server that cannot prove the
launch's secret, the server's middleware refuses requests without it and signs what it answers, and the server's
weight reload loads only the bytes the trainer wrote. tests/test_vllm_cpu.py runs the whole launch against a
stand-in server that took the port first."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

KEY = "k" * 64


class _Health(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_the_launch_wait_refuses_a_server_that_does_not_prove_the_launchs_key(monkeypatch, capsys):
    from mcp_server.training.trainer import vllm_auth

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)  # answers /health 200, as any server would
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(vllm_auth.KEY_ENV, KEY)
    try:  # what train/launch.sh's wait runs: python -m ...vllm_auth URL
        rc = vllm_auth.main([f"http://127.0.0.1:{server.server_address[1]}"])
    finally:
        server.shutdown()
    assert rc == vllm_auth.IMPOSTOR_EXIT
    assert "not the vLLM server this launch started" in capsys.readouterr().out


def _call(middleware, path: str, headers: dict) -> tuple[int, dict, bytes]:
    """One request through `middleware` (an ASGI app) as uvicorn would make it; (status, headers, body)."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "POST",
             "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(middleware(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start.get("headers", [])}, body


def test_the_servers_middleware_needs_the_key_and_signs_each_answer(monkeypatch):
    from mcp_server.training.trainer.vllm_auth import (KEY_ENV, KEY_HEADER, NONCE_HEADER, PROOF_HEADER,
                                                       LaunchKeyMiddleware, proof)

    async def app(scope, receive, send):  # the server behind it: what vLLM would answer
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"ok": 1}', "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    monkeypatch.setenv(KEY_ENV, KEY)
    middleware = LaunchKeyMiddleware(app)
    # another local process: neither generation nor /collective_rpc (the weight reload) without the key
    for path in ("/v1/completions", "/collective_rpc", "/reset_prefix_cache"):
        status, _, _ = _call(middleware, path, {NONCE_HEADER: "n1"})
        assert status == 401, path
        status, _, _ = _call(middleware, path, {KEY_HEADER: "x" * 64, NONCE_HEADER: "n1"})
        assert status == 401, path
    status, headers, body = _call(middleware, "/v1/completions", {KEY_HEADER: KEY, NONCE_HEADER: "n2"})
    assert status == 200 and body == b'{"ok": 1}' and headers[PROOF_HEADER] == proof(KEY, "n2", body)
    # /health is open (the wait and TRL's check_server ask it first) and signed too
    status, headers, body = _call(middleware, "/health", {NONCE_HEADER: "n3"})
    assert status == 200 and headers[PROOF_HEADER] == proof(KEY, "n3", body)
    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(middleware({"type": "websocket", "path": "/v1/realtime", "headers": []}, None, send))
    assert sent == [{"type": "websocket.close", "code": 1008}]  # a websocket without the key is closed
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(RuntimeError, match=KEY_ENV):  # a server started without the launch's key does not start
        LaunchKeyMiddleware(app)


def test_the_server_loads_only_the_weights_bytes_the_trainer_wrote(tmp_path):
    from mcp_server.training.trainer.vllm_cpu import CpuWeightSync

    written = b"the trainer's weights"
    path = tmp_path / "weights-1.safetensors"
    path.write_bytes(b"planted after the write")  # another process replaced the file before the server read it
    with pytest.raises(ValueError, match="not the one the trainer wrote"):
        CpuWeightSync().llm_finetuning_load_weights(str(path), hashlib.sha256(written).hexdigest())
    link = tmp_path / "weights-2.safetensors"
    link.symlink_to(path)
    with pytest.raises(OSError):  # never through a link
        CpuWeightSync().llm_finetuning_load_weights(str(link), hashlib.sha256(path.read_bytes()).hexdigest())
