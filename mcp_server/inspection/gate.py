"""The verdict a person records on the review, and the gate that the training launcher checks.

A gate is a file with hashes: verdict.json records the sha256 of the reward code (the specs plus the source
of every reward function they resolve to) and of samples.jsonl. The gate opens only for a passing verdict
whose hashes still match the run's train/rewards.json and samples: edit a reward parameter, a weight or a
line of reward code, or re-sample, and the gate closes until someone reads the new review.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.inspection.models import GateResult, VerdictRequest, VerdictResult
from mcp_server.inspection.files import read_run_rewards
from mcp_server.rewards import reward_code_sha256
from mcp_server.runs import Run, resolve_run
from mcp_server.userfiles import read_json
from mcp_server.workspace import atomic_write_json, sha256_file

CLI = "llm-finetuning"


def _read_review(run: Run) -> dict:
    path = run.review
    if not path.is_file():
        raise UserInputError("run", f"no review in {path.parent}: run inspect_rewards first, then read review.md")
    return read_json(path, "run", dict)


def _check_review_current(run: Run, review: dict) -> None:
    """The review a verdict is about must describe today's samples and today's reward code."""
    result = review["result"]
    if sha256_file(run.samples) != result["samples_sha256"]:
        raise UserInputError("run", "samples.jsonl changed since the review: run inspect_rewards again and read the new review.md")
    if reward_code_sha256(result["rewards"]) != result["reward_code_sha256"]:
        raise UserInputError(
            "run", "the reward code or specs changed since the review: run inspect_rewards again and read the new review.md"
        )


def record_inspection_verdict(request: VerdictRequest) -> VerdictResult:
    run = resolve_run(request.run)
    run_dir = run.dir
    review = _read_review(run)
    if not run.samples.is_file():
        raise UserInputError("run", f"{run.samples} is gone: run sample_completions and inspect_rewards again")
    _check_review_current(run, review)
    result = review["result"]
    reviewed = list(review["reviewed_ids"])
    known = set(reviewed)

    given: dict[int, dict] = {}
    for i, sv in enumerate(request.sample_verdicts):
        if sv.id not in known:
            raise UserInputError(
                f"sample_verdicts[{i}].id", f"sample {sv.id} is not in the review; reviewed ids are {_ranges(reviewed)}"
            )
        if sv.id in given:
            raise UserInputError(f"sample_verdicts[{i}].id", f"sample {sv.id} is listed twice")
        given[sv.id] = sv.model_dump()
    if request.agree_with_rest:
        for sid in reviewed:
            given.setdefault(sid, {"id": sid, "agree": True, "note": "agreed with the rest"})
    agree = sum(v["agree"] for v in given.values())
    disagree = len(given) - agree

    if request.verdict == "pass":
        if result["route"] == "sft_first":
            raise UserInputError(
                "verdict",
                "the review found no prompt with a single success, so GRPO cannot learn from these prompts: do SFT "
                "first (or use easier prompts), then sample and inspect again. A pass cannot be recorded.",
            )
        missing = [sid for sid in reviewed if sid not in given]
        if missing:
            raise UserInputError(
                "sample_verdicts",
                f"a pass needs a verdict on every reviewed sample; missing {len(missing)}: {_ranges(missing)}. "
                "List them, or set agree_with_rest (CLI --agree-rest) to agree with every sample not listed.",
            )
        if disagree and not request.note.strip():
            raise UserInputError(
                "note",
                f"a pass with {disagree} disagreement(s) needs a note saying why they are acceptable; "
                "otherwise fix the reward and record 'fail'",
            )

    recorded_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    record = {
        "verdict": request.verdict,
        "reviewer": request.reviewer,
        "recorded_at": recorded_at,
        "note": request.note,
        "reward_code_sha256": result["reward_code_sha256"],
        "samples_sha256": result["samples_sha256"],
        "rewards": result["rewards"],
        "rewards_source": result["rewards_source"],
        "base_success_rate": result["base_success_rate"],
        "route": result["route"],
        "reviewed": len(reviewed),
        "agree": agree,
        "disagree": disagree,
        "sample_verdicts": [given[sid] for sid in sorted(given)],
    }
    path = atomic_write_json(run.verdict, record)
    return VerdictResult(
        run_dir=str(run_dir),
        verdict_path=str(path),
        verdict=request.verdict,
        reviewer=request.reviewer,
        recorded_at=recorded_at,
        agree=agree,
        disagree=disagree,
        reviewed=len(reviewed),
        reward_code_sha256=record["reward_code_sha256"],
        samples_sha256=record["samples_sha256"],
        gate=check_inspection_gate(run_dir),
    )


def _ranges(ids: list[int]) -> str:
    """[0,1,2,5] -> '0-2, 5'."""
    ids = sorted(ids)
    parts, start = [], None
    for i, sid in enumerate(ids):
        if start is None:
            start = sid
        if i + 1 == len(ids) or ids[i + 1] != sid + 1:
            parts.append(str(start) if start == sid else f"{start}-{sid}")
            start = None
    return ", ".join(parts) or "none"


def check_inspection_gate(run: str | Path) -> GateResult:
    """Is this run cleared to train? Open only with a passing verdict on the current rewards and samples.

    The training launcher calls this before it starts anything; a closed gate says why and how to open it.
    An unknown run raises UserInputError('run', ...); every other state is an answer, not an error.
    """
    run = resolve_run(run)
    run_dir = run.dir
    verdict_file = run.verdict

    def closed(reason: str, how: str) -> GateResult:
        return GateResult(
            passed=False, reason=reason, how_to_clear=how, run_dir=str(run_dir),
            verdict_path=str(verdict_file) if verdict_file.is_file() else None,
        )

    inspect_again = (
        f"run inspect_rewards (CLI: {CLI} inspect-rewards {run_dir.name}), have a person read "
        "inspection/review.md, then record_inspection_verdict"
    )
    if not run.rewards.is_file():
        return closed(
            "the run has no train/rewards.json (its reward definition)",
            "emit the run's config with emit_grpo_config (it writes train/rewards.json), then sample, inspect and record a verdict",
        )
    if not run.samples.is_file():
        return closed(
            "no samples: inspection/samples.jsonl does not exist",
            f"run sample_completions (CLI: {CLI} sample-completions {run_dir.name}), then " + inspect_again,
        )
    review_file = run.review
    if not verdict_file.is_file() and review_file.is_file():
        review = read_json(review_file, "run", dict)["result"]
        if review.get("route") == "sft_first" and review.get("samples_sha256") == sha256_file(run.samples):
            return closed(
                "the last review found no prompt with a single success: GRPO cannot learn yet",
                "do SFT first (or use easier prompts or a stronger base model), then sample_completions and " + inspect_again,
            )
    if not verdict_file.is_file():
        return closed("no verdict recorded: nobody has signed off the rewards on sampled outputs", inspect_again)
    verdict = read_json(verdict_file, "run", dict)
    who = f"{verdict.get('reviewer', '?')} at {verdict.get('recorded_at', '?')}"
    if verdict.get("verdict") != "pass":
        return closed(
            f"the verdict is '{verdict.get('verdict')}' ({who})",
            "fix the reward (train/rewards.json or the reward code) where the reader disagreed, then " + inspect_again,
        )
    if verdict.get("route") == "sft_first" or not verdict.get("base_success_rate"):
        return closed(
            "the base model never succeeded on the sampled prompts: GRPO cannot learn yet",
            "do SFT first (or use easier prompts or a stronger base model), then sample_completions and " + inspect_again,
        )
    if sha256_file(run.samples) != verdict.get("samples_sha256"):
        return closed(f"samples.jsonl changed since the verdict ({who})", inspect_again)
    try:
        current = reward_code_sha256(read_run_rewards(run))
    except UserInputError as exc:
        return closed(f"train/rewards.json cannot be built: {exc}", "fix train/rewards.json, then " + inspect_again)
    if current != verdict.get("reward_code_sha256"):
        return closed(
            f"the reward changed since the verdict ({who}): train/rewards.json (name, params, weight) or the "
            "reward code no longer matches what was reviewed",
            inspect_again,
        )
    return GateResult(
        passed=True,
        reason=f"passing verdict by {who} on the current rewards and samples "
        f"({verdict.get('agree', 0)} agree, {verdict.get('disagree', 0)} disagree of {verdict.get('reviewed', 0)})",
        how_to_clear="",
        run_dir=str(run_dir),
        verdict_path=str(verdict_file),
    )
