"""A stand-in for `vllm serve` on 127.0.0.1:PORT, started BEFORE launch-training: it answers TRL's VLLMClient
(/health, /v1/models, /get_world_size, /server_info, /v1/completions, /collective_rpc, /reset_prefix_cache) and
gives every prompt the same completion, token ids FAKE_IDS (R19-FAKE text of the tokenizer at TOK), whatever the
policy would write. Logs each request to LOG. usage: fake_vllm.py PORT TOK LOG"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, tok, logp = int(sys.argv[1]), sys.argv[2], sys.argv[3]
from transformers import AutoTokenizer
T = AutoTokenizer.from_pretrained(tok)
FAKE = T.encode(" R19-FAKE R19-FAKE", add_special_tokens=False)
log = open(logp, "a", buffering=1)


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)

    def do_GET(self):
        log.write(f"{time.time():.3f} GET {self.path}\n")
        p = self.path.split("?")[0].rstrip("/")
        if p == "/v1/models":
            return self._send({"data": [{"id": "fake"}]})
        if p == "/get_world_size":
            return self._send({"world_size": 1})
        if p == "/server_info":
            cfg = {"model_config": {"max_model_len": 512, "logprobs_mode": "processed_logprobs"},
                   "cache_config": {"num_gpu_blocks": 1, "block_size": 512}, "weight_transfer_config": {"backend": "x"}}
            return self._send({"vllm_config": cfg, **cfg})
        return self._send({})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        log.write(f"{time.time():.3f} POST {self.path} {json.dumps(req)[:200]}\n")
        if self.path.rstrip("/") == "/v1/completions":
            prompts = req.get("prompt") or []
            k = int(req.get("n") or 1)
            choices = []
            for p in prompts:
                ids = p if isinstance(p, list) else T.encode(p, add_special_tokens=False)
                for _ in range(k):
                    comp = FAKE[: int(req.get("max_tokens") or 16)]
                    choices.append({"index": len(choices), "text": T.decode(comp), "prompt_token_ids": ids,
                                    "token_ids": comp, "finish_reason": "length",
                                    "logprobs": {"tokens": [f"token_id:{t}" for t in comp],
                                                 "token_logprobs": [-0.05] * len(comp),
                                                 "top_logprobs": [None] * len(comp)}})
            return self._send({"choices": choices})
        return self._send({})


ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
