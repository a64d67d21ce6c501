"""Server mode: the trainer talks only to the vLLM server its launch started (issue 48, round 19, B07).

The launch script makes a secret (`new-key`) and exports it (KEY_ENV) to the two processes it starts: `vllm serve`
and the trainer. The environment of a process is readable by its own user alone, and the secret is never written to
a file. The server runs with `--middleware` LaunchKeyMiddleware: it refuses every request but /health that does not
carry the secret (so no other local process can generate with it, or call /collective_rpc to load other weights),
and signs every answer: HMAC(secret, the request's nonce + the answer's sha256). The trainer's VLLMClient (its
check_server, replaced by `install_client`) sends the secret only after /health proves the server holds it, then
sends a fresh nonce with every request and refuses any answer without the proof. A process that took the port
before the launch (the real server then fails to bind) cannot answer: the launch's wait (`python -m` this module
PORT) ends the launch, naming it, and so would the trainer.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys

KEY_ENV = "LLM_FINETUNING_VLLM_KEY"
KEY_HEADER = "x-llm-finetuning-key"
NONCE_HEADER = "x-llm-finetuning-nonce"
PROOF_HEADER = "x-llm-finetuning-proof"
AUTH_MODULE = __name__  # what the launch scripts run with `python -m`
MIDDLEWARE = f"{__name__}.LaunchKeyMiddleware"  # as `vllm serve --middleware` names it
OPEN_PATHS = ("/health",)  # answered (and signed) without the secret: the launch's wait and TRL's check_server
IMPOSTOR_EXIT = 3  # the probe's exit code for "a server answers without the launch's proof"


class NotTheLaunchedServer(RuntimeError):
    """An answer that does not prove the launch's secret: another process answers at the server's address."""


def proof(key: str, nonce: str, body: bytes) -> str:
    return hmac.new(key.encode(), nonce.encode() + b"\0" + hashlib.sha256(body).digest(), hashlib.sha256).hexdigest()


def launch_key() -> str:
    key = os.environ.get(KEY_ENV, "")
    if len(key) < 32:
        raise RuntimeError(f"{KEY_ENV} is not set (the launch script makes it): the vLLM server and the trainer "
                           "cannot prove to each other that they are the launch's")
    return key


class LaunchKeyMiddleware:
    """ASGI middleware for `vllm serve --middleware`: the secret required, every answer signed (buffered whole:
    TRL's requests are not streamed)."""

    def __init__(self, app) -> None:
        self.app, self.key = app, launch_key()

    async def __call__(self, scope, receive, send):
        if scope.get("type") not in ("http", "websocket"):  # lifespan
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        if scope["type"] == "websocket":  # no answer to sign: the key or nothing
            if hmac.compare_digest(headers.get(KEY_HEADER, "").encode(), self.key.encode()):
                return await self.app(scope, receive, send)
            return await send({"type": "websocket.close", "code": 1008})
        nonce, start, body = headers.get(NONCE_HEADER, ""), {}, []

        async def signed(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            data = b"".join(body)
            await send({**start, "headers": [*start.get("headers", []),
                                            (PROOF_HEADER.encode(), proof(self.key, nonce, data).encode())]})
            await send({"type": "http.response.body", "body": data})

        if scope.get("path") not in OPEN_PATHS and not hmac.compare_digest(
                headers.get(KEY_HEADER, "").encode(), self.key.encode()):
            await signed({"type": "http.response.start", "status": 401,
                          "headers": [(b"content-type", b"text/plain")]})
            return await signed({"type": "http.response.body", "body": b"not the launch's key"})
        return await self.app(scope, receive, signed)


def check_answer(response, key: str, nonce: str, url: str) -> None:
    """Refuse `response` unless it carries the proof of `key` for `nonce` and its body."""
    if not hmac.compare_digest(response.headers.get(PROOF_HEADER, ""), proof(key, nonce, response.content)):
        raise NotTheLaunchedServer(
            f"the server answering at {url} is not the vLLM server this launch started (its answer does not prove "
            "the launch's key): another process holds that address")


def probe(url: str, key: str, timeout: float = 5.0) -> bool:
    """True when `url`/health answers with the proof; False when nothing answers; NotTheLaunchedServer when
    something answers without it."""
    import requests

    nonce = secrets.token_hex(16)
    try:
        response = requests.get(f"{url}/health", headers={NONCE_HEADER: nonce}, timeout=timeout)
    except requests.exceptions.RequestException:
        return False
    check_answer(response, key, nonce, url)
    return response.status_code == 200


def install_client() -> None:
    """TRL's VLLMClient: its check_server proves the server first (then every request carries the key and a
    nonce, and every answer is checked)."""
    import time

    from trl.generation.vllm_client import VLLMClient

    def check_server(self, total_timeout: float = 0.0, retry_interval: float = 2.0):
        key, start = launch_key(), time.time()
        while not probe(self.base_url, key):
            if time.time() - start >= total_timeout:
                raise ConnectionError(f"the vLLM server can't be reached at {self.base_url} after {total_timeout} s")
            time.sleep(retry_interval)
        self.session.auth = _KeyAuth(key, self.base_url)

    VLLMClient.check_server = check_server


class _KeyAuth:
    """requests auth: the key and a fresh nonce on each request, the answer's proof checked."""

    def __init__(self, key: str, url: str) -> None:
        self.key, self.url = key, url

    def __call__(self, request):
        nonce = secrets.token_hex(16)
        request.headers[KEY_HEADER], request.headers[NONCE_HEADER] = self.key, nonce
        request.register_hook("response", lambda response, *a, **k: check_answer(response, self.key, nonce,
                                                                                   self.url))
        return request


def main(argv: list[str]) -> int:
    """`new-key`: print a fresh secret. `URL`: 0 when the launch's server answers there, 1 when nothing does,
    IMPOSTOR_EXIT (said on stdout) when something else does."""
    if argv == ["new-key"]:
        print(secrets.token_hex(32))
        return 0
    try:
        return 0 if probe(argv[0], launch_key()) else 1
    except NotTheLaunchedServer as exc:
        print(f"refusing the vLLM server: {exc}", flush=True)
        return IMPOSTOR_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
