"""The final stated answer of free text, for rewards that read a plain-text reply ("reply with the number only").

A real model does not reply with the number only. Sampled from SmolLM2-135M-Instruct at temperature 1 (issue 31):
"1 + 5 = 6 as we start in any context...", "7 + 7 = **8**", "The answer is 17.". Taking the first number scores
the first of these as 1. The answer is the last *statement* of one: "answer is / answer: N", "= N", "is / equals
N", read after markdown emphasis is peeled off; with no statement, the text's only number; otherwise none (a
reply listing several numbers without stating one is a hedge, and scores as no answer).
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
_EMPHASIS = re.compile(r"\*\*|__|`|(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)")
# A statement of a value: "answer is 7", "answer: 7", "= 7", "is 7", "equals 7" (the value is a number, or
# after "answer is/:" a word or phrase up to the end of the clause).
_LEAD = r"\banswer\s*(?:is\s*:?|:|=)"
_STATED_NUMBER = re.compile(rf"(?:{_LEAD}|=|\b(?:is|equals|makes|gives)\b)\s*({_NUMBER})(?![\d.,]*\d)", re.I)
_STATED_WORDS = re.compile(rf"{_LEAD}\s*([^\s.,;!?][^.,;!?\n]*)", re.I)
_ANY_NUMBER = re.compile(rf"(?<![\w.]){_NUMBER}(?![\w])")


def plain(text: str) -> str:
    """The text without markdown emphasis (`**8**`, `_8_`, backticks) or LaTeX \\boxed{} / $ wrappers."""
    text = re.sub(r"\\boxed\{([^{}]*)\}", r"\1", str(text))
    return _EMPHASIS.sub("", text).replace("$", "")


def final_answer(text: str) -> str | None:
    """The completion's final stated answer (see the module's docstring), or None."""
    body = plain(text)
    stated = [(m.start(), m.group(1)) for m in _STATED_NUMBER.finditer(body)]
    stated += [(m.start(), m.group(1).strip()) for m in _STATED_WORDS.finditer(body)
               if not _ANY_NUMBER.match(m.group(1).strip())]  # a number there is _STATED_NUMBER's
    if stated:
        return max(stated)[1].rstrip(".")
    numbers = {as_number(n) for n in _ANY_NUMBER.findall(body)}
    if len(numbers) == 1:
        return _ANY_NUMBER.findall(body)[-1]
    return None


def as_number(text: str) -> Fraction | None:
    """The value of a plain number ("1,234", "-0.5", "3/4"), else None."""
    text = str(text).strip().replace(",", "")
    if not re.fullmatch(r"[-+]?\d+(?:\.\d+)?(?:/\d+)?", text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def same_answer(answer: str | None, gold, ignore_case: bool = False) -> bool:
    """The answer is the gold: the same number, else the same text (whitespace collapsed)."""
    if answer is None or gold is None:
        return False
    a, g = as_number(answer), as_number(str(gold))
    if a is not None and g is not None:
        return a == g
    a, g = " ".join(str(answer).split()), " ".join(str(gold).split())
    return a.lower() == g.lower() if ignore_case else a == g
