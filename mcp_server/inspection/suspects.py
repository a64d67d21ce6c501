r"""The review's "Read these first: likely mis-scored" list: samples a reward plausibly scored wrongly.

A person reads this list first, so it flags only disagreements about the answer itself, never a gold value
that merely appears somewhere in the text (in `<reasoning>0 + 9 = 8</reasoning><answer>8</answer>` the 9 is
a restated operand, and 0 is the right score):
- a verifier (correctness_reward, math_reward) scored 0, but a looser parse of the same answer (case,
  trailing punctuation, "The answer is 7", `$7$`, `\\boxed{7}`, 7.0, 1/2 = 0.5) matches the gold;
- a verifier paid, but a stricter parse disagrees: no single answer block, or its text is not the gold
  (as text or as a number; for math_reward only where both are numbers: symbolic equivalence such as
  2\sqrt{2} = \sqrt{8} is math-verify's to judge);
- a format reward paid for malformed output: a missing, repeated, empty or nested block, or a completion cut
  off at the length limit;
- a verifier paid on a completion cut off at the length limit; every reward returned None;
- a reward of unknown rule (a dotted path), against an independent reading of the reply's final stated answer
  (`rewards.answers.read_answer`: digits or English words, "= 7", "equals seven", a bare "7.", never an echoed
  operand such as the 2s of "zero plus two is 2 + 2") and the gold number: scored 0 where that answer is the gold
  (a parser that takes the first number scores "1 + 5 = 6 as we start" as 1); and, when the reward reads the gold
  column (its signature names it, or its code reads it by name), paid where that answer is not the gold or where
  the reply states none (any number in it is an operand, part of a word or the question's own). An unsure
  reading (two candidates, a hedge, a lone number word said in passing, an echo that equals the gold) flags
  nothing. Such a reward is taken to pay > 0 for a right answer and <= 0 for a wrong one: partial credit reads
  as paid.
On a task whose gold is always in the question ("Which number is larger, 15 or 38?") no reading of the reply can
judge a reward: reward_probes.py tries the reward on replies built to be right or wrong instead.
The looser parse peels markdown emphasis (`**8**`) and reads the final stated answer of a block ("1 + 5 = 6").
tests/test_inspection_gate.py measures the list's precision and recall on labelled sample sets (for a
person's own reward: issue 49's walk, its real completions and the task's shapes).
"""

from __future__ import annotations

import inspect
import math
import re
from fractions import Fraction

from mcp_server.inspection.excerpt import excerpt
from mcp_server.inspection.success import is_format_spec, wrapped_spec
from mcp_server.rewards.answers import as_number, final_answer, plain, read_answer, same_answer
from mcp_server.rewards.registry import REGISTRY
from mcp_server.rewards.spec import RewardSpec
from mcp_server.rewards.text import tag_contents

VERIFIERS = {"correctness_reward": "answer", "math_reward": "answer"}  # name -> default tag
_LEAD = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is|:|=)\s*", re.I)
_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?$")


def verifier_of(spec: RewardSpec) -> tuple[str, str | None, str] | None:
    """(name, tag, gold column) when the spec is (or wraps) an answer verifier."""
    target = wrapped_spec(spec) or spec
    if target.name not in VERIFIERS:
        return None
    tag = target.params.get("tag", VERIFIERS[target.name])
    return target.name, tag, str(target.params.get("answer_column", "answer"))


def answer_blocks(text: str, tag: str | None, verifier: str = "math_reward") -> list[str]:
    """The answer as the verifier reads it: the `<tag>` bodies, or with tag None the \\boxed{} contents
    (math_reward) or the final stated answer (correctness_reward)."""
    if tag:
        return [b.strip() for b in tag_contents(text, tag)]
    if verifier == "correctness_reward":
        answer = final_answer(text)
        return [] if answer is None else [answer]
    return [b.strip() for b in re.findall(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}", text)]


def _number(text: str) -> Fraction | None:
    text = text.replace(" ", "")
    frac = re.fullmatch(r"\\d?frac\{([^{}]+)\}\{([^{}]+)\}", text) or re.fullmatch(r"([-+]?[\d.]+)/([\d.]+)", text)
    if frac:
        top, bottom = _number(frac.group(1)), _number(frac.group(2))
        return top / bottom if top is not None and bottom else None
    if text and _NUMBER.fullmatch(text) and any(c.isdigit() for c in text):
        try:
            return Fraction(text.replace(",", ""))
        except (ValueError, ZeroDivisionError):
            return None
    return None


def _strip(text: str) -> str:
    text = " ".join(plain(text).split())
    for _ in range(3):  # peel wrappers: $...$, \boxed{...}, "The answer is ...", trailing punctuation
        text = _LEAD.sub("", text).strip().rstrip(".,;!").strip()
        text = re.sub(r"^\$+(.*?)\$+$", r"\1", text).strip()
        text = re.sub(r"^\\boxed\{(.*)\}$", r"\1", text).strip()
    return text


def strict_match(answer: str, gold: str) -> bool:
    """The answer is the gold: the same text (whitespace collapsed) or the same number."""
    a, g = " ".join(answer.split()), " ".join(str(gold).split())
    if a == g:
        return True
    na, ng = _number(a), _number(g)
    return na is not None and na == ng


def loose_match(answer: str, gold: str) -> bool:
    """The answer says the gold once wrappers, case and trailing punctuation are peeled off."""
    a, g = _strip(answer), _strip(str(gold))
    if not a or not g:
        return False
    if a.lower() == g.lower():
        return True
    na, ng = _number(a), _number(g)
    if na is not None:
        return na == ng
    stated = final_answer(answer)  # "1 + 5 = 6": the block's final stated number
    return stated is not None and as_number(stated) is not None and same_answer(stated, g)


def format_problems(text: str, tags: list[str], truncated: bool) -> list[str]:
    """Why a completion is not well-formed: a tag block missing or repeated, empty, nested in another, or the
    completion cut off (text around the blocks is the format reward's own `strict` choice, so not judged)."""
    problems = []
    bodies = []
    for tag in tags:
        found = tag_contents(text, tag)
        if len(found) != 1:
            problems.append(f"{len(found)} <{tag}> blocks")
            continue
        bodies.append(found[0])
        if not found[0].strip():
            problems.append(f"an empty <{tag}> block")
    if any(re.search(rf"</?{re.escape(t)}>", b) for b in bodies for t in tags):
        problems.append("a block nested in another")
    if truncated:
        problems.append("cut off at the length limit")
    return problems


def suspect_reasons(text: str, columns: dict, specs: list[RewardSpec], names: list[str], scores: list[float],
                    truncated: bool, total: float, question: str = "",
                    gold_columns: list[str | None] | None = None) -> list[tuple[int, str]]:
    """(weight, reason) pairs for one sample; higher weight = read first. `scores[r]` is reward r's score;
    `gold_columns[r]` the column reward r reads as the gold (`gold_column`), None where unknown; `question` the
    prompt's text (numbers an answer may echo)."""
    reasons = []
    for r, (spec, name, score) in enumerate(zip(specs, names, scores)):
        if math.isnan(score):
            continue
        verifier = verifier_of(spec)
        if verifier is not None and columns.get(verifier[2]) is not None:
            _, tag, column = verifier
            gold = str(columns[column]).strip()
            blocks = answer_blocks(text, tag, verifier[0])
            where = (f"the <{tag}> block" if tag else "the final stated answer" if verifier[0] == "correctness_reward"
                     else "the \\boxed{} answer")
            if score <= 0 and len(blocks) == 1 and (strict_match(blocks[0], gold) or loose_match(blocks[0], gold)):
                how = "as a number" if strict_match(blocks[0], gold) else "once its wording is peeled off"
                reasons.append((3, f"{name} scored {score:g} but {where} {excerpt(blocks[0], 90)!r} matches the gold "
                                   f"'{gold}' {how}"))
            if score > 0:
                if len(blocks) != 1:
                    reasons.append((3, f"{name} scored {score:g} with {len(blocks)} answers in {where}s"))
                elif not strict_match(blocks[0], gold) and not loose_match(blocks[0], gold) and (
                        verifier[0] != "math_reward" or _number(_strip(blocks[0])) is not None
                        and _number(_strip(gold)) is not None):  # symbolic equivalence is math-verify's to judge
                    reasons.append((3, f"{name} scored {score:g} but {where} says {excerpt(blocks[0], 90)!r}, "
                                       f"not the gold '{gold}'"))
                if truncated:
                    reasons.append((2, f"{name} scored {score:g} on a completion cut off at the length limit"))
        if verifier is None and name not in REGISTRY:
            reasons += _unknown_rule_reasons(text, question, columns, name, score,
                                             gold_columns[r] if gold_columns else None)
        if is_format_spec(spec) and score > 0:
            tags = list(spec.params.get("tags") or ["reasoning", "answer"])
            problems = format_problems(text, tags, truncated)
            if problems:
                reasons.append((2, f"{name} paid {score:g} for malformed output: {', '.join(problems)}"))
    if math.isnan(total):
        reasons.append((2, "every reward returned None: training would get no signal from it"))
    return reasons


def gold_column(func, columns) -> str | None:
    """The data column a reward of unknown rule compares against: the one column its signature names (TRL passes
    each column by name), else the one column its code reads by name (`kwargs["answer"]`); None if not one."""
    try:
        named = [p for p in inspect.signature(func).parameters if p in columns]
    except (TypeError, ValueError):
        return None
    if named:
        return named[0] if len(named) == 1 else None
    target = inspect.unwrap(func)
    code = getattr(target, "__code__", None) or getattr(getattr(target, "__call__", None), "__code__", None)
    strings, todo = set(), [code] if code else []
    while todo:  # the function's code and the comprehensions and helpers nested in it
        code = todo.pop()
        strings |= {c for c in code.co_consts if isinstance(c, str)}
        todo += [c for c in code.co_consts if inspect.iscode(c)]
    read = [c for c in columns if c in strings]
    return read[0] if len(read) == 1 else None


def _unknown_rule_reasons(text: str, question: str, columns: dict, name: str, score: float,
                          column: str | None) -> list[tuple[int, str]]:
    """A reward of unknown rule against `read_answer`'s reading and the gold number (the module's docstring): the
    0-where-right direction on the `answer` column whatever the reward reads; the paid directions only for a
    reward that reads the gold column."""
    gold = columns.get(column or "answer")
    value = None if gold is None else as_number(str(gold), words=True)
    if value is None:
        return []
    gold_text = str(gold).strip()
    reading = read_answer(text, question)
    if reading.answer is not None:
        right = as_number(reading.answer, words=True) == value
        if right and score <= 0:
            return [(2, f"{name} scored {score:g} but the completion's final stated answer {reading.answer!r} is the "
                        f"gold '{gold_text}' (a reward that takes the first number, or needs a format, scores it 0)")]
        if not right and score > 0 and column:
            return [(2, f"{name} paid {score:g} but the completion's final stated answer {reading.answer!r} is not "
                        f"the gold '{gold_text}'")]
    elif reading.how == "none" and score > 0 and column and value not in reading.echoed:
        return [(1, f"{name} paid {score:g} but the completion states no answer (any number in it is an operand, "
                    "part of a word or the question's own)")]
    return []
