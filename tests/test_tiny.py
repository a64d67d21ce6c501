"""The embedded default: deterministic, offline, tiny, with a chat template and a verifiable task."""

from __future__ import annotations

from mcp_server import tiny
from mcp_server.workspace import sha256_file


def test_tiny_model_is_small_and_chat_ready(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert model.config.model_type == "qwen2"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    text = tokenizer.apply_chat_template(tiny.make_example(3, 4)["prompt"], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and "What is 3 + 4?" in text
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id is not None


def test_build_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    tiny.build_tiny_model(a), tiny.build_tiny_model(b)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert sha256_file(a / name) == sha256_file(b / name)


def test_cache_is_reused(tiny_model):
    stamp = (tiny_model / "model.safetensors").stat().st_mtime_ns
    assert tiny.ensure_tiny_model() == tiny_model
    assert (tiny_model / "model.safetensors").stat().st_mtime_ns == stamp


def test_task_is_verifiable_and_split_disjoint():
    row = tiny.make_example(7, 5)
    assert row["answer"] == "12" and row["solution"].endswith("<answer>12</answer>")
    train, held_out = tiny.split_task()
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}
    assert tiny.make_task(10, seed=1) == tiny.make_task(10, seed=1)
