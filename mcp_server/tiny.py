"""The embedded default: a tiny Qwen2-architecture model, its tokenizer and a small verifiable task.

Everything here is built offline and deterministically, so tests and the demo never touch a hub. The initial
weights come from integers only (Python's Mersenne Twister, mapped to floats by exact arithmetic), never from
torch's float RNG, whose kernels differ by CPU (AVX512, AVX2, default): the same bits on every machine, pinned
by a hash in tests/test_tiny.py. The model is cached on disk and rebuilt only when missing.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from mcp_server.workspace import atomic_write_text

TINY_VERSION = "2"  # bump whenever the built bytes change: old caches are then never reused
WEIGHT_SEED = 3407
INIT_STD = 0.02  # Qwen2Config.initializer_range
SYSTEM_PROMPT = (
    "Answer the arithmetic question. Think in <reasoning>...</reasoning>, "
    "then give only the number in <answer>...</answer>."
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen-style chat template, short enough to read.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MODEL_ARCH = dict(
    vocab_size=384,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=True,
)


def cache_root() -> Path:
    """Where the tiny model lives: `LLM_FINETUNING_CACHE`, else `~/.cache/llm-finetuning`."""
    return Path(os.environ.get("LLM_FINETUNING_CACHE", Path.home() / ".cache" / "llm-finetuning"))


def tiny_model_dir() -> Path:
    return cache_root() / f"tiny-qwen2-v{TINY_VERSION}"


# ---------------------------------------------------------------- the task
def make_example(a: int, b: int, op: str = "+") -> dict:
    """One arithmetic problem: a prompt-only row for GRPO plus its gold answer and a reference solution."""
    result = a + b if op == "+" else a - b
    question = f"What is {a} {op} {b}?"
    return {
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        "question": question,
        "answer": str(result),
        "solution": f"<reasoning>{a} {op} {b} = {result}</reasoning><answer>{result}</answer>",
    }


def make_task(n: int = 64, seed: int = 0, max_operand: int = 9, ops: str = "+") -> list[dict]:
    """`n` distinct problems drawn deterministically from `seed` (all of them when n exceeds the pool)."""
    pool = [(a, b, op) for op in ops for a in range(max_operand + 1) for b in range(max_operand + 1)]
    random.Random(seed).shuffle(pool)
    return [make_example(a, b, op) for a, b, op in pool[:n]]


def split_task(max_operand: int = 9, ops: str = "+", held_out: float = 0.25, seed: int = 0) -> tuple[list, list]:
    """Train/held-out split of the whole pool, disjoint by problem."""
    rows = make_task(10**9, seed=seed, max_operand=max_operand, ops=ops)
    cut = int(len(rows) * (1 - held_out))
    return rows[:cut], rows[cut:]


def jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_jsonl(rows: list[dict], path: Path) -> Path:
    return atomic_write_text(Path(path), jsonl_text(rows))


# ---------------------------------------------------------------- the model
def _corpus() -> list[str]:
    texts = []
    for row in make_task(10**9, seed=0, max_operand=20, ops="+-"):
        texts.append(
            "<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n" + row["question"]
            + "<|im_end|>\n<|im_start|>assistant\n" + row["solution"] + "<|im_end|>\n"
        )
    return texts


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=MODEL_ARCH["vocab_size"],
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _normal_ish(rng: random.Random, count: int, std: float) -> list[float]:
    """`count` draws of an Irwin-Hall(12) sum (mean 0, standard deviation `std`, within +-6 std), from 16-bit
    integers: integer sums and one IEEE multiplication each, so every platform gives the same bits."""
    scale = std / 65536  # the sum of 12 uniforms on [0, 1) has variance 1; 16-bit ints, centred, over 2**16
    out = []
    for _ in range(count):
        bits = rng.getrandbits(192)  # 12 x 16 bits
        total = sum((bits >> (16 * i)) & 0xFFFF for i in range(12))
        out.append((total - 6 * 65536) * scale)
    return out


def init_weights(model, seed: int = WEIGHT_SEED) -> None:
    """Replace every matrix (embeddings, projections) with platform-independent draws; vectors keep their
    constant init (norms 1, biases 0), which no kernel can change. Parameters in name order."""
    import torch

    rng = random.Random(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if param.dim() >= 2:
                values = _normal_ish(rng, param.numel(), INIT_STD)
                param.copy_(torch.tensor(values, dtype=torch.float64).reshape(param.shape))


def state_sha256(model_dir: Path) -> str:
    """sha256 over the saved weights' names, dtypes, shapes and little-endian bytes, in name order: the
    content, independent of how safetensors lays out its header."""
    import hashlib

    import numpy as np
    from safetensors.numpy import load_file

    digest = hashlib.sha256()
    for name, array in sorted(load_file(str(Path(model_dir) / "model.safetensors")).items()):
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        digest.update(f"{name}|{array.dtype.str}|{list(array.shape)}\n".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def tokenizer_sha256(model_dir: Path) -> str:
    """sha256 of what the tokenizer does (vocabulary, merges, special tokens, chat template), independent of
    how a tokenizers release formats tokenizer.json."""
    import hashlib

    model_dir = Path(model_dir)
    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = config.get("chat_template")
    if template is None and (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    content = {
        "vocab": sorted(spec["model"]["vocab"].items()),
        "merges": [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]],
        "added": sorted((t["id"], t["content"], t["special"]) for t in spec["added_tokens"]),
        "eos": config.get("eos_token"), "pad": config.get("pad_token"), "chat_template": template,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def build_tiny_model(target: Path) -> Path:
    """Build the model and tokenizer into `target` (deterministic: integer-only weight draws, fixed corpus)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = _build_tokenizer()
    config = Qwen2Config(
        **{**MODEL_ARCH, "vocab_size": len(tokenizer)},
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    init_weights(model)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    save_quietly(model, tokenizer, target)
    (target / "tiny-task.json").write_text(json.dumps({"system_prompt": SYSTEM_PROMPT, "version": TINY_VERSION}))
    return target


def save_quietly(model, tokenizer, target: Path) -> None:
    """Save a built model without transformers' "Writing model shards" bar: a first build happens inside a
    command whose error, if any, must stay one line."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def build_once(target: Path, build: Callable[[Path], None], prefix: str, marker: str | None = "config.json") -> Path:
    """`target`, built by `build(directory)` the first time (its `marker` file marks it built; None: the directory
    itself, which only the rename below creates): into a temporary directory beside it (named `prefix`...) that is
    renamed into place, so a half-built model is never seen."""
    if (target / marker if marker else target).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race: its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def ensure_tiny_model() -> Path:
    """Path of the cached tiny model, building it once (into a temp dir renamed into place)."""
    return build_once(tiny_model_dir(), build_tiny_model, ".tiny-")


# vLLM's CPU attention runs heads of 32 dimensions and up (recipe.architecture_rules.VLLM_CPU_HEAD_SIZES), the
# tiny model's are 16 (64 / 4). Its vLLM twin splits the same weights into 2 query heads and 1 key/value head of 32:
# every matrix has the shape and bytes it has in the tiny model, only the attention's head split differs.
TINY_VLLM_HEADS = {"num_attention_heads": 2, "num_key_value_heads": 1}


def build_tiny_vllm_model(target: Path) -> Path:
    """The tiny model's files with TINY_VLLM_HEADS in its config.json."""
    source = ensure_tiny_model()
    shutil.copytree(source, target, dirs_exist_ok=True)
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    (target / "config.json").write_text(json.dumps({**config, **TINY_VLLM_HEADS}, indent=2), encoding="utf-8")
    return target


def ensure_tiny_vllm_model() -> Path:
    """Path of the tiny model's vLLM twin (heads vLLM's CPU attention runs), built once beside it."""
    return build_once(cache_root() / f"tiny-qwen2-v{TINY_VERSION}-vllm", build_tiny_vllm_model, ".tiny-vllm-")
