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


# The content every machine must build, whatever its CPU kernels (AVX512, AVX2, default) or thread count:
# checked under ATEN_CPU_CAPABILITY=default, =avx2 and unset. A change here is a new tiny model: bump
# tiny.TINY_VERSION with it, so that no cache built from the old bytes is reused.
STATE_SHA256 = "cd7e377968e87f29d7267c178514004dc4658e40f8f0f15075b9622875690dbd"
TOKENIZER_SHA256 = "b44e6b2cfe6ac99b31371e28f8568feedaf139d83b4775f58a9a7efd10cdc7ac"


def test_build_is_the_pinned_content(tiny_model):
    assert tiny.state_sha256(tiny_model) == STATE_SHA256
    assert tiny.tokenizer_sha256(tiny_model) == TOKENIZER_SHA256


def test_build_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    tiny.build_tiny_model(a), tiny.build_tiny_model(b)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert sha256_file(a / name) == sha256_file(b / name)
    assert tiny.state_sha256(a) == STATE_SHA256


def test_initial_weights_are_spread_like_the_usual_init(tiny_model):
    """Irwin-Hall draws stand in for normal_(0, 0.02): same mean and spread, bounded at 6 standard deviations."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    matrix = torch.cat([p.flatten() for p in model.parameters() if p.dim() >= 2])
    assert abs(matrix.mean().item()) < 1e-3 and abs(matrix.std().item() - tiny.INIT_STD) < 1e-3
    assert matrix.abs().max().item() <= 6 * tiny.INIT_STD
    norms = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    assert norms and all(bool((p == 1).all()) for p in norms)


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
