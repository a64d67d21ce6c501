"""Rubric-as-judge factory: a judge model grades each completion PASS or FAIL against a rubric.

Binary only: graded scales drift and are easy to game, a pass/fail question is not. The judge must not
be of the policy's model family (a model is a lenient judge of its own family's style, and the policy
would learn to please it). The judge is a callable (`judge(text) -> "PASS"/"FAIL"/bool`), a dotted path
to one, or a local model directory; nothing is fetched from a hub.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Callable

from mcp_server.errors import UserInputError
from mcp_server.rewards.dotted import import_dotted
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.text import completion_text, completion_texts

# Ordered: the first keyword found in a model_type or name decides the family.
FAMILIES = [
    ("qwen", "qwen"), ("qwq", "qwen"), ("llama", "llama"), ("mixtral", "mistral"), ("mistral", "mistral"),
    ("ministral", "mistral"), ("gemma", "gemma"), ("phi", "phi"), ("deepseek", "deepseek"), ("olmo", "olmo"),
    ("granite", "granite"), ("falcon", "falcon"), ("smollm", "smollm"), ("gpt-oss", "gpt-oss"),
    ("gpt_oss", "gpt-oss"), ("gpt", "gpt"), ("claude", "claude"), ("command", "cohere"), ("cohere", "cohere"),
    ("internlm", "internlm"), ("glm", "glm"), ("yi-", "yi"), ("baichuan", "baichuan"), ("mamba", "mamba"),
]

JUDGE_PROMPT = (
    "You grade a response against a rubric. Reply with exactly one word: PASS if the response meets "
    "every point of the rubric, FAIL otherwise.\n\nRubric:\n{rubric}\n\n{question}Response:\n{response}\n\nVerdict:"
)


def model_family(name_or_path: str) -> str | None:
    """The family of a model: from a local directory's config.json `model_type`, else from its name."""
    text = str(name_or_path)
    config = os.path.join(text, "config.json")
    if os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as handle:
                text = json.load(handle).get("model_type", "") or text
        except (OSError, json.JSONDecodeError):
            pass
    lowered = text.lower()
    for keyword, family in FAMILIES:
        if keyword in lowered:
            return family
    return None


def parse_verdict(reply) -> bool | None:
    """True for PASS, False for FAIL, None for anything that is not a clear binary verdict."""
    if isinstance(reply, bool):
        return reply
    if isinstance(reply, (int, float)) and reply in (0, 1):
        return bool(reply)
    if isinstance(reply, str):
        found = re.search(r"\b(PASS|FAIL)\b", reply, flags=re.IGNORECASE)
        return found.group(1).upper() == "PASS" if found else None
    return None


@functools.lru_cache(maxsize=2)
def _local_judge(path: str) -> Callable[[str], str]:
    """Greedy generation with a local model directory (never a hub download)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    model.eval()

    def judge(prompt: str) -> str:
        if tokenizer.chat_template:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = prompt
        inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        return tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    return judge


def _ask_local(path: str, prompt: str) -> str:
    return _local_judge(path)(prompt)  # module-level (not a lambda) so the reward stays picklable


def _resolve_judge(judge) -> tuple[Callable[[str], object], str | None, str]:
    """(callable, family read from the model when it is a local directory, description)."""
    if callable(judge):
        return judge, None, getattr(judge, "__name__", repr(judge))
    if isinstance(judge, str) and os.path.isdir(judge):
        if not os.path.isfile(os.path.join(judge, "config.json")):
            raise UserInputError("params.judge", f"'{judge}' is a directory without config.json: not a model directory")
        return functools.partial(_ask_local, os.path.abspath(judge)), model_family(judge), judge
    if isinstance(judge, str) and re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+", judge):
        return import_dotted(judge, "params.judge"), None, judge
    raise UserInputError(
        "params.judge", "expected a local model directory or a dotted path to a callable judge(text) -> "
                        "'PASS'/'FAIL', "
        f"got {judge!r} (hub names are not downloaded: download the judge first and give its directory)",
    )


def score_judge(completions: list, columns: dict, rubric: str = "", judge: Callable = None,
                pass_value: float = 1.0) -> list[float]:
    prompts = columns.get("prompts")
    scores = []
    for i, text in enumerate(completion_texts(completions)):
        question = ""
        if isinstance(prompts, (list, tuple)) and len(prompts) == len(completions):
            question = (
                f"Question:\n{completion_text(prompts[i]) if not isinstance(prompts[i], str) else prompts[i]}\n\n"
            )
        verdict = parse_verdict(judge(JUDGE_PROMPT.format(rubric=rubric, question=question, response=text)))
        scores.append(pass_value if verdict else 0.0)  # FAIL and unclear replies both score 0
    return scores


def make_rubric_judge(rubric: str, judge: str | Callable[[str], object], policy_model: str,
                      judge_family: str | None = None, policy_family: str | None = None,
                      pass_value: float = 1.0) -> NamedReward:
    """`pass_value` (1.0) when a judge model says PASS for the rubric, else 0.0 (binary only: no graded scales).
    Refuses a judge of the policy's model family. The judge is a local model directory or a dotted path to a callable
    judge(text) -> 'PASS'/'FAIL'/bool; nothing is downloaded from a hub.

    Role: task, scores 0 to pass_value

    Reads: prompts

    Args:
        rubric: What a passing response must do.
        judge: Local judge model directory, or dotted path to a callable judge(text) -> 'PASS'/'FAIL'.
        policy_model: The policy being trained (hub name or path): its family must differ from the judge's.
        judge_family: The judge's model family when it cannot be read from a model directory.
        policy_family: The policy's family when its name does not tell it.
        pass_value: Reward for PASS.

    Example: {"rubric": "Cites a source for every claim.", "judge": "/models/Llama-3.1-8B-Instruct",
              "policy_model": "Qwen/Qwen2.5-1.5B-Instruct"}
    """
    if not isinstance(rubric, str) or not rubric.strip():
        raise UserInputError("params.rubric", "expected the rubric text: what a passing response must do")
    if not isinstance(policy_model, str) or not policy_model:
        raise UserInputError("params.policy_model", "name the policy model (hub name or path) so the judge's family "
                                                    "can be checked")
    call, found_family, described = _resolve_judge(judge)
    judge_fam = (judge_family or found_family or "").lower() or None
    policy_fam = (policy_family or model_family(policy_model) or "").lower() or None
    if judge_fam is None:
        raise UserInputError("params.judge_family", f"cannot tell the judge's model family from {described!r}: set "
                                                    "judge_family (e.g. 'llama')")
    if policy_fam is None:
        raise UserInputError("params.policy_family", f"cannot tell the policy's model family from {policy_model!r}: "
                                                     "set policy_family")
    if judge_fam == policy_fam:
        raise UserInputError(
            "params.judge", f"the judge ({described}) is of the policy's model family ('{policy_fam}'): a model grades "
                            "its "
            "own family's outputs leniently and the policy learns to please it. Use a judge of another family.",
        )
    if isinstance(pass_value, bool) or not isinstance(pass_value, (int, float)) or pass_value <= 0:
        raise UserInputError("params.pass_value", f"expected a positive number, got {pass_value!r}")
    return NamedReward("rubric_judge", score_judge, rubric=rubric, judge=call, pass_value=float(pass_value))
