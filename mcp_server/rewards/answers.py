"""The final stated answer of free text, for rewards that read a plain-text reply ("reply with the number only").

A real model does not reply with the number only. Sampled from SmolLM2-135M-Instruct at temperature 1 (issue 31):
"1 + 5 = 6 as we start in any context...", "7 + 7 = **8**", "The answer is 17.". Taking the first number scores
the first of these as 1. The answer is the last *statement* of one: "answer is / answer: N", "= N", "is / equals
N", read after markdown emphasis is peeled off; with no statement, the text's only number; otherwise none (a
reply listing several numbers without stating one is a hedge, and scores as no answer).

`read_answer` is the stricter reading the review's "likely mis-scored" list compares a reward of unknown rule
against (never a reward's rule): numbers as digits or English words ("seven", "twenty-one", "one hundred and
five"); the whole reply ("7", "Seven."), else the last statement ("= 7", "equals seven", "is equal to 11") whose
value is not an operand of an expression ("is 1 + 9") nor a hedge ("7 or 8"), a word only at the end of a
clause ("is one of them" states nothing); else the only number that is neither an operand ("2 + 2", "zero plus
two") nor part of a word ("base-10") nor a number of the question; else no answer, or unsure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
_EMPHASIS = re.compile(r"\*\*|__|`|(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)")
# A statement of a value: "answer is 7", "answer: 7", "= 7", "is 7", "equals 7" (the value is a number, or
# after "answer is/:" a word or phrase up to the end of the clause).
_LEAD = r"\banswer\s*(?:is\s*:?|:|=)"
_STATED_NUMBER = re.compile(rf"(?:{_LEAD}|=|\b(?:is|equals|makes|gives)\b)\s*({_NUMBER})(?![\d.,]*\d)", re.I)
_STATED_WORDS = re.compile(rf"{_LEAD}\s*([^\s.,;!?][^.,;!?\n]*)", re.I)
_ANY_NUMBER = re.compile(rf"(?<![\w.]){_NUMBER}(?![\w])")

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))
_BELOW_100 = rf"(?:(?:{'|'.join(_TENS)})(?:[-\s](?:{'|'.join(_UNITS[1:10])}))?|{_UNIT})"
_WORDS = rf"\b(?:(?:{_UNIT})\s+hundred(?:\s+(?:and\s+)?{_BELOW_100})?|{_BELOW_100})\b"
_DIGITS = rf"(?<![\w.])(?<!\w-){_NUMBER}(?!\w)"  # not "base-10", "SmolLM.8", "3rd"
_VALUE = rf"(?:{_DIGITS}|{_WORDS})"
_OPERATOR = r"(?:[-+*/×÷]|\bx\b|\b(?:plus|minus|times|multiplied\s+by|divided\s+by)\b)"
_QUOTE = "[\"'“”‘’]?"
# A statement: its value neither continues an expression ("is 1 + 9") nor hedges ("7 or 8"); a word value
# ends its clause ("is seven.", "equals seven"), so "is one of them" states nothing.
_STATEMENT = re.compile(
    rf"(?:{_LEAD}|=|\b(?:is(?:\s+equal\s+to)?|equals|equal\s+to|makes|gives)\b)\s*{_QUOTE}"
    rf"(?:({_DIGITS})(?![\d.,]*\d)|({_WORDS})(?={_QUOTE}\s*(?:[.,;:!?)\n]|$)))"
    rf"(?!{_QUOTE}\s*(?:{_OPERATOR}|\bor\b|\()\s*{_QUOTE}\(?\s*{_VALUE})", re.I)
_ALONE = re.compile(  # the whole reply: "7", "Seven.", "The answer is 7"
    rf"^\s*(?:(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*:?)?\s*{_QUOTE}({_VALUE}){_QUOTE}\s*[.!]?\s*$", re.I)
_TOKEN = re.compile(rf"({_DIGITS})|({_WORDS})", re.I)
_BEFORE_OPERAND = re.compile(rf"{_OPERATOR}\s*\(?\s*$", re.I)
_AFTER_OPERAND = re.compile(rf"\s*\)?\s*{_OPERATOR}\s*\(?\s*(?:{_VALUE}|$)", re.I)  # "six +" cut off


@dataclass(frozen=True)
class Reading:
    """`read_answer`'s reading: the answer as written (`how` "alone", "stated" or "only number"), or none
    (`how` "none": no number but operands and the question's own, those in `echoed`; "unsure": several)."""
    answer: str | None
    how: str
    echoed: frozenset = frozenset()


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


def read_answer(text: str, question: str = "") -> Reading:
    """The final stated answer by the stricter reading in the module's docstring; `question` names the numbers an
    answer may echo (an echo is no answer: `echoed` lists them, for the caller to weigh against the gold)."""
    body = plain(text)
    alone = _ALONE.match(body)
    if alone:
        return Reading(alone.group(1), "alone")
    stated = [m.group(1) or m.group(2) for m in _STATEMENT.finditer(body)]
    if stated:
        return Reading(stated[-1].strip().rstrip("."), "stated")
    asked = {as_number(m.group(), words=True) for m in _TOKEN.finditer(plain(question))}
    found = [(m, as_number(m.group(), words=True)) for m in _TOKEN.finditer(body)
             if not _BEFORE_OPERAND.search(body[max(0, m.start() - 40):m.start()])
             and not _AFTER_OPERAND.match(body, m.end())]
    said = [(m, v) for m, v in found if v not in asked]
    if not said:
        return Reading(None, "none", frozenset(v for _, v in found) & asked)
    if len({v for _, v in said}) == 1 and said[-1][0].group(1):
        return Reading(said[-1][0].group(1), "only number")  # a lone word is too often not a number ("no one")
    return Reading(None, "unsure")


def word_value(text: str) -> int | None:
    """The value of an English number ("seven", "twenty-one", "one hundred and five"), else None."""
    if not re.fullmatch(_WORDS, str(text).strip(), re.I):
        return None
    value = 0
    for word in re.split(r"[\s-]+", str(text).strip().lower()):
        if word == "hundred":
            value *= 100
        elif word in _TENS:
            value += 10 * (_TENS.index(word) + 2)
        elif word != "and":
            value += _UNITS.index(word)
    return value


def as_number(text: str, words: bool = False) -> Fraction | None:
    """The value of a plain number ("1,234", "-0.5", "3/4"), with `words` also of an English one ("seven"),
    else None."""
    if words and word_value(text) is not None:
        return Fraction(word_value(text))
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


def values_in(text: str) -> set:
    """Every number the text writes, as digits or English words ("7", "seven", "twenty-one")."""
    return {as_number(m.group(), words=True) for m in _TOKEN.finditer(plain(text))} - {None}


_EDGES = "\"'“”‘’.,;:!?()[]"


def _words_of(text: str) -> str:
    return " ".join(plain(text).casefold().split()).strip(_EDGES + " ")


def first_line_answers(text: str, gold) -> bool:
    """The drift suite's `text` grader, for a row whose answer is plain text ("Paris", "cold"): the reply's first
    non-empty line, markdown emphasis peeled, case and whitespace folded, quotes and punctuation at its ends
    dropped, is the answer, or begins or ends with it as whole words ("Paris", "**Paris.**", "Paris, France.",
    "The capital of France is Paris."); an answer only on a later line, or inside a word ("Parisian"), fails."""
    line = next((s for s in str(text).splitlines() if _words_of(s)), "")
    said, answer = _words_of(line), _words_of(str(gold)) if gold is not None else ""
    if not answer or not said:
        return False
    edge = re.escape(answer)
    return re.match(rf"{edge}(?!\w)", said) is not None or re.search(rf"(?<!\w){edge}$", said) is not None
