"""Length-penalty wrapper: subtracts a penalty that grows with length past a target from another reward.

The penalty ramps linearly from 0 at `target_tokens` to `max_penalty` at `max_tokens`. A positive
(correct) reward is never pushed below zero: a long right answer must still beat any wrong one,
otherwise the policy learns that being right is not worth the tokens.
"""

from __future__ import annotations

import functools
from typing import Callable

from mcp_server.errors import UserInputError
from mcp_server.rewards.declared import WrappedReward
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.text import completion_texts


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def token_counts(completions: list, columns: dict, tokenizer: str | None) -> list[int]:
    """Tokens per completion: the named tokenizer's count when given, else TRL's `completion_ids`,
    else whitespace-separated words (a rough stand-in)."""
    texts = completion_texts(completions)
    if tokenizer:
        tok = _tokenizer(tokenizer)
        return [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    ids = columns.get("completion_ids")
    if isinstance(ids, (list, tuple)) and len(ids) == len(texts):
        return [len(i) for i in ids]
    return [len(t.split()) for t in texts]


def score_length_penalty(completions: list, columns: dict, reward: Callable = None, target_tokens: int = 256,
                         max_tokens: int = 1024, max_penalty: float = 1.0, tokenizer: str | None = None) -> list[float]:
    base = reward(completions, **columns)
    counts = token_counts(completions, columns, tokenizer)
    scores = []
    for value, n in zip(base, counts, strict=True):
        if value is None:
            scores.append(None)
            continue
        penalty = max_penalty * min(1.0, max(0.0, (n - target_tokens) / (max_tokens - target_tokens)))
        scores.append(max(0.0, value - penalty) if value > 0 else value - penalty)
    return scores


def make_length_penalty(reward: WrappedReward, target_tokens: int = 256, max_tokens: int = 1024,
                        max_penalty: float = 1.0, tokenizer: str | None = None) -> NamedReward:
    """Wraps another reward: its score minus a penalty rising linearly from 0 at target_tokens to max_penalty at
    max_tokens. A positive (correct) score is never pushed below 0. Token counts come from `tokenizer` when given,
    else TRL's completion_ids, else words.

    Role: shape

    Args:
        reward: The reward to wrap, e.g. {'name': 'correctness_reward'}.
        target_tokens: Length with no penalty.
        max_tokens: Length at which the penalty reaches max_penalty.
        max_penalty: Largest penalty subtracted.
        tokenizer: Tokenizer path (the policy model's directory) for exact token counts.

    Example: {"reward": {"name": "correctness_reward"}, "target_tokens": 200, "max_tokens": 512}
    """
    if not callable(reward):
        raise UserInputError("params.reward", "expected a reward spec to wrap, e.g. {'name': 'correctness_reward'}")
    for name, v in (("target_tokens", target_tokens), ("max_tokens", max_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise UserInputError(f"params.{name}", f"expected a whole number of tokens >= 0, got {v!r}")
    if max_tokens <= target_tokens:
        raise UserInputError("params.max_tokens", f"must be larger than target_tokens ({target_tokens}), got "
                                                  f"{max_tokens}")
    if isinstance(max_penalty, bool) or not isinstance(max_penalty, (int, float)) or max_penalty < 0:
        raise UserInputError("params.max_penalty", f"expected a number >= 0, got {max_penalty!r}")
    if tokenizer is not None and not isinstance(tokenizer, str):
        raise UserInputError("params.tokenizer", "expected a tokenizer path (the policy model's directory) or null")
    name = f"length_penalty_{getattr(reward, '__name__', 'reward')}"
    return NamedReward(name, score_length_penalty, reward=reward, target_tokens=target_tokens, max_tokens=max_tokens,
                       max_penalty=float(max_penalty), tokenizer=tokenizer)


def make_soft_overlong_punishment(max_completion_len: int = 512, soft_punish_cache: int = 102) -> Callable:
    """DAPO's soft overlong punishment, TRL's get_soft_overlong_punishment: 0 up to max_completion_len -
    soft_punish_cache tokens, then falling linearly to -1 at max_completion_len. Emission sets L_max to the final
    config's max_completion_length, whatever changed the length last, and L_cache to DAPO's share of it unless the
    spec gives one (the Follows: line).

    Role: shape

    Follows: max_completion_len = max_completion_length, soft_punish_cache = 0.2 x max_completion_length

    Reads: completion_ids

    Args:
        max_completion_len: L_max: the config's max_completion_length.
        soft_punish_cache: L_cache: tokens before L_max where the punishment ramps (DAPO: 4096 of 20480).

    Example: {"max_completion_len": 1024, "soft_punish_cache": 205}
    """
    for name, value in (("max_completion_len", max_completion_len), ("soft_punish_cache", soft_punish_cache)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UserInputError(name, f"must be a non-negative integer of tokens, got {value!r}")
    if soft_punish_cache > max_completion_len:
        raise UserInputError(
            "soft_punish_cache", f"{soft_punish_cache} exceeds max_completion_len {max_completion_len}"
        )
    from trl.rewards import get_soft_overlong_punishment

    return get_soft_overlong_punishment(max_completion_len=max_completion_len, soft_punish_cache=soft_punish_cache)
