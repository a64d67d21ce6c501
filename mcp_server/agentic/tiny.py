"""The embedded agentic task: vault codes only a tool can read, a tokenizer and model with TRL's Qwen2.5 chat
template (so TRL renders and parses tool calls), and a cached SFT warm start that calls the tool.

A vault's code is a hash of its number: no model can know a held-out vault's code without calling
`open_vault`. The warm start learns the call format on "vault" questions and, on purpose, a broken tag
(`<tol>`) on "safe" questions: the inspection's broken-tag defect is built from the same model.
Environments for the constructed defects live here too (a tool that raises, an unseeded reset, a reset that
keeps state, one that hangs). Built offline and cached like mcp_server.tiny (LLM_FINETUNING_CACHE).
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from pathlib import Path

from mcp_server.model_ref import small_model_threads
from mcp_server.tiny import build_once, cache_root, init_weights, save_quietly, write_jsonl

AGENTIC_VERSION = "4"
SYSTEM_PROMPT = "Find the code. Call open_vault, then give only the code in <answer>...</answer>."
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MODEL_ARCH = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True)
VOCAB = 320
SFT_STEPS, SFT_BATCH, SFT_LR, SFT_SEED = 150, 16, 3e-3, 0  # the call format (and the broken tag) at T=1


def vault_code(number: int) -> str:
    return str(int(hashlib.sha256(f"vault-{number}".encode()).hexdigest(), 16) % 1000)


class VaultEnv:
    """One vault question per rollout; the code is in the vault."""

    def reset(self, **row) -> None:
        self.opened = []

    def open_vault(self, number: int) -> str:
        """Open a vault and read the code inside.

        Args:
            number: The vault's number.
        """
        self.opened.append(int(number))
        return vault_code(int(number))


class RaisingVaultEnv(VaultEnv):
    """Defect: the tool raises."""

    def open_vault(self, number: int) -> str:
        """Open a vault and read the code inside.

        Args:
            number: The vault's number.
        """
        raise RuntimeError("vault jammed")


class UnseededVaultEnv(VaultEnv):
    """Defect: reset draws from an unseeded generator, so one row gives different starts."""

    def reset(self, **row) -> str:
        self.opened = []
        self.shift = random.SystemRandom().randrange(1000)
        return f" (shift {self.shift})"

    def open_vault(self, number: int) -> str:
        """Open a vault and read the code inside.

        Args:
            number: The vault's number.
        """
        return str((int(vault_code(int(number))) + self.shift) % 1000)


class StickyVaultEnv(VaultEnv):
    """Defect: reset keeps what the last rollout opened."""

    def reset(self, **row) -> None:
        if not hasattr(self, "opened"):
            self.opened = []


class VerboseVaultEnv(VaultEnv):
    """Defect with a small budget: the code comes inside a long report, longer than the budget left after the call."""

    def open_vault(self, number: int) -> str:
        """Open a vault and read the code inside.

        Args:
            number: The vault's number.
        """
        return "The vault opens onto a long corridor of shelves. " * 4 + vault_code(int(number))


class HangingVaultEnv(VaultEnv):
    """Defect: the tool never returns (stands in for a stuck sandbox or service)."""

    def open_vault(self, number: int) -> str:
        """Open a vault and read the code inside.

        Args:
            number: The vault's number.
        """
        time.sleep(3600)
        return ""


def make_row(number: int, broken: bool = False) -> dict:
    thing = "safe" if broken else "vault"
    return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                       {"role": "user", "content": f"What is the code of {thing} {number}?"}],
            "answer": vault_code(number)}


def split_rows(count: int = 500, broken: bool = False) -> tuple[list[dict], list[dict]]:
    """Train and held-out vault questions, disjoint by number: every fifth number is held out (the same digits
    in the same places as the training numbers; only the codes are new)."""
    rows = [make_row(n, broken) for n in range(count)]
    return [r for n, r in enumerate(rows) if n % 5 != 4], [r for n, r in enumerate(rows) if n % 5 == 4]


def write_rows(rows: list[dict], path: Path) -> Path:
    return write_jsonl(rows, path)


def _conversation(row: dict, broken: bool) -> list[dict]:
    number = int(row["prompt"][1]["content"].rsplit(" ", 1)[1].rstrip("?"))
    call = {"type": "function", "function": {"name": "open_vault", "arguments": {"number": number}}}
    answer = {"role": "assistant", "content": f"<answer>{row['answer']}</answer>"}
    if broken:
        text = '<tol>\n{"name": "open_vault", "arguments": {"number": %d}}\n</tol>' % number
        return [*row["prompt"], {"role": "assistant", "content": text}]
    return [*row["prompt"], {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "open_vault", "content": row["answer"]}, answer]


def _texts(template: str) -> list[tuple[str, int, int]]:
    """(rendered conversation, characters of its prompt, vault number) for the SFT corpus: vault and broken safe
    questions."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), eos_token="<|im_end|>")
    plain.chat_template = template
    tool = VaultEnv().open_vault
    out = []
    for broken in (False, True):
        for row in split_rows(broken=broken)[0]:
            conv = _conversation(row, broken)
            prompt = plain.apply_chat_template(row["prompt"], tools=[tool], add_generation_prompt=True,
                                               tokenize=False)
            number = int(row["prompt"][1]["content"].rsplit(" ", 1)[1].rstrip("?"))
            out.append((plain.apply_chat_template(conv, tools=[tool], tokenize=False), len(prompt), number))
    return out


def _frequent_pieces(corpus: list[str], minimum: int = 20) -> list[str]:
    """Lines of the corpus (cut at special tokens, digits and after each line break) seen `minimum` times or more:
    the template's boilerplate, the call and answer tags."""
    counts: dict[str, int] = {}
    for text in corpus:
        for chunk in re.split(r"<\|im_start\|>|<\|im_end\|>|\d", text):
            for piece in re.findall(r"[^\n]*\n|[^\n]+", chunk):
                counts[piece] = counts.get(piece, 0) + 1
    return sorted(p for p, n in counts.items() if n >= minimum and len(p) > 1)


def build_tokenizer(corpus: list[str]):
    """Byte-level BPE with digits one token each (numbers copy), plus every frequent line of the corpus as one
    token (the template's boilerplate costs a few tokens; lines end at a line break, so a prompt ending in
    'assistant\\n' tokenizes as a prefix of prompt + completion, as TRL's token concatenation needs), with TRL's
    Qwen2.5 template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainer=trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.add_tokens([AddedToken(piece, normalized=False, special=False) for piece in _frequent_pieces(corpus)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = qwen2_5_chat_template
    return fast


def _sft(model, tokenizer, texts: list[tuple[str, int, int]], steps: int, lr: float, stop=None,
         every: int = 0) -> int:
    """Supervised warm start on the completions (the prompt's tokens carry no loss). With `stop(model, tokenizer)`,
    it is asked every `every` steps (the model in eval mode) and training ends when it says True. The steps run."""
    import torch

    rows = []
    for text, prompt_chars, _ in texts:
        ids = tokenizer(text)["input_ids"]
        prompt = len(tokenizer(text[:prompt_chars])["input_ids"])
        rows.append((ids, prompt))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    rng = random.Random(SFT_SEED)
    model.train()
    done = 0
    with small_model_threads(model):
        while done < steps:
            chunk = min(every or steps, steps - done)
            _steps(model, tokenizer, rows, optimizer, rng, chunk)
            done += chunk
            if stop is not None:
                model.eval()
                stopped = stop(model, tokenizer)
                model.train()
                if stopped:
                    break
    return done


def _steps(model, tokenizer, rows, optimizer, rng, steps: int) -> None:
    import torch

    for _ in range(steps):
        batch = rng.sample(rows, SFT_BATCH)
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r, _ in batch])
        labels = ids.clone()
        for i, (r, prompt) in enumerate(batch):
            labels[i, :prompt] = -100
            labels[i, len(r):] = -100
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def build_warm_start(target: Path, steps: int = SFT_STEPS, lr: float = SFT_LR, stop=None, every: int = 0,
                     exclude: frozenset[int] = frozenset()) -> Path:
    """Tokenizer, model and SFT warm start into `target` (`stop`, `every`: see _sft). The vault numbers in
    `exclude` stay out of the SFT rows (not the tokenizer's corpus): a check on them measures the copy learned, not
    the codes remembered."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl.chat_template_utils import qwen2_5_chat_template

    texts = _texts(qwen2_5_chat_template)
    tokenizer = build_tokenizer([t for t, _, _ in texts])
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **MODEL_ARCH)
    model = Qwen2ForCausalLM(config)
    init_weights(model)
    torch.manual_seed(SFT_SEED)
    _sft(model, tokenizer, [t for t in texts if t[2] not in exclude], steps, lr, stop, every)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    save_quietly(model, tokenizer, target)
    return target


def ensure_agentic_model() -> Path:
    """Path of the cached agentic warm start, built once (into a temp dir renamed into place)."""
    return build_once(cache_root() / f"tiny-agentic-v{AGENTIC_VERSION}", build_warm_start, ".agentic-")
