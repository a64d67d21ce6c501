"""The verdict a person records on the review, and the gate that the training launcher checks.

A verdict vouches for what was reviewed, and verdict.json pins all of it (inspection.pins: the model, the data,
the config, the reward code and the files it reads, train/train.py, the samples and the review). The gate
opens only for a passing verdict with its full record (reviewer, time, a verdict per reviewed sample) whose pins
all still match; otherwise it says which part changed. A verdict needs samples drawn as training will draw them
(samples.meta.json says how they differ from the config) and a config to vouch for.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mcp_server.config import FIELD
from mcp_server.errors import UserInputError
from mcp_server.evidence import samples_meta_read
from mcp_server.inspection.args_file import args_file_problem
from mcp_server.inspection.files import read_run_rewards, run_reward_imports
from mcp_server.inspection.changed import reward_change_detail
from mcp_server.inspection.launched import refuse_if_launched, way_on_for
from mcp_server.recipe.runspec import RunSpec, verdict_json
from mcp_server.inspection.signal_share import review_signal_warning
from mcp_server.inspection.models import GateResult, VerdictRequest, VerdictResult
from mcp_server.inspection.reward_probes import flagged_probes
from mcp_server.inspection.loader_env import TRAINING_PATHS, interpreter_paths, loader_how
from mcp_server.inspection.pins import (PART_NAMES, SAMPLES_STAY_VALID, changes, config_pins, python_how,
                                        run_pins)
from mcp_server.inspection.reward_copy import REWARD_SHAS
from mcp_server.inspection.sample_files import not_sampled, refuse_unsampled
from mcp_server.inspection.trained import REWARD_FILES, keep_reviewed_code, unkept_reward_code
from mcp_server.rewards import reads, reward_code_sha256
from mcp_server.rewards.dotted import RewardImportError
from mcp_server.runs import Run, resolve_run
from mcp_server.userfiles import read_bytes, read_json
from mcp_server.workspace import atomic_write_json, sha256_file

CLI = "llm-finetuning"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MIN_PASS_NOTE_WORDS = 4  # a pass that keeps disagreements says why in a sentence, not "fine"


def printable(text: str) -> str:
    """A name as it may be printed: control characters (terminal escape codes, newlines) as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def pass_problem(agree: int, disagree: int, note: str) -> str | None:
    """Why a pass with these per-sample verdicts is not one (None: it can be). A reader who disagrees with most
    of the scores has failed the reward, whatever the note; fewer disagreements need a note that says why."""
    if disagree and disagree >= agree:
        return (f"a pass that disagrees with {disagree} of the {agree + disagree} scores is a fail: the reward "
                "scores most samples wrongly")
    if disagree and len(note.split()) < MIN_PASS_NOTE_WORDS:
        return (f"a pass with {disagree} disagreement(s) needs a note saying why they are acceptable (a sentence of "
                f"at least {MIN_PASS_NOTE_WORDS} words, not {note.strip()!r})")
    return None


def _read_review(run: Run) -> tuple[dict, str]:
    """review.json and the sha256 of the bytes read (one read: the verdict signs the review it judged)."""
    path = run.review
    if not path.is_file():
        raise UserInputError("run", f"no review in {path.parent}: run inspect_rewards first, then read review.md")
    return read_json(path, "run", dict, with_sha256=True)


def _check_review_current(run: Run, review: dict) -> None:
    """The review a verdict is about must describe today's samples and today's reward code."""
    result, data = review["result"], read_bytes(run.samples, "run")  # one read: both checks judge these bytes
    if hashlib.sha256(data).hexdigest() != result["samples_sha256"]:
        raise UserInputError("run", "samples.jsonl changed since the review: run inspect_rewards again and read the "
                                    "new review.md")
    refuse_unsampled(run, data)  # issue 48 round 12 F2: completions the model never wrote
    if reward_code_sha256(result["rewards"]) != result["reward_code_sha256"]:
        raise UserInputError("run", "the reward code or specs changed since the review: run inspect_rewards again "
                             "and read the new review.md")
    if moved := reads.differences(review.get("reward_reads"), reads.now(review.get("reward_reads"))):
        raise UserInputError("run", "a file the rewards read changed since the review: " + "; ".join(moved)
                             + ": run inspect_rewards again and read the new review.md")
    edited = _sheet_edited(run, review)
    if edited:
        raise UserInputError("run", f"{edited}: run inspect_rewards again and read the new review.md")


def _sheet_edited(run: Run, review: dict) -> str | None:
    """Whether review.md (the sheet the person reads) or review.jsonl is not what inspect_rewards wrote with this
    review (a sheet edited by hand backs nothing); None when both are."""
    for path, key in ((run.review_md, "review_md_sha256"), (run.review_jsonl, "review_jsonl_sha256")):
        if not path.is_file() or sha256_file(path) != review.get(key):
            return f"{path.name} is not the sheet inspect_rewards wrote with this review"
    return None


class _SampleVerdict(BaseModel):
    id: int
    agree: bool
    note: str = ""


class VerdictRecord(BaseModel):
    """verdict.json as record_inspection_verdict writes it: anything less is not a verdict."""

    model_config = ConfigDict(extra="allow")
    verdict: Literal["pass", "fail"]
    reviewer: str = Field(min_length=1)
    recorded_at: _dt.datetime
    note: str = ""
    pins: dict
    samples_sha256: str = Field(min_length=64, max_length=64)
    review_sha256: str = Field(min_length=64, max_length=64)
    success_rule: str
    route: str
    base_success_rate: float
    reviewed_ids: list[int]
    agree: int
    disagree: int
    sample_verdicts: list[_SampleVerdict]

    @field_validator("reviewer")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("names nobody")
        if _CONTROL.search(value):
            raise ValueError("holds control characters")
        return value

    def problem(self) -> str | None:
        """Why the per-sample record does not add up (None: it does)."""
        if self.verdict == "pass" and pass_problem(self.agree, self.disagree, self.note):
            return pass_problem(self.agree, self.disagree, self.note)
        ids = [v.id for v in self.sample_verdicts]
        if len(ids) != len(set(ids)):
            return "a sample has two verdicts"
        if set(ids) - set(self.reviewed_ids):
            return "it judges samples that were not reviewed"
        if self.verdict == "pass" and set(ids) != set(self.reviewed_ids):
            return f"a pass judges {len(set(ids))} of the {len(self.reviewed_ids)} reviewed samples"
        agree = sum(v.agree for v in self.sample_verdicts)
        if (agree, len(ids) - agree) != (self.agree, self.disagree):
            return "its agree/disagree counts do not match its per-sample verdicts"
        return None


def weights_differ(run: Run, spec: RunSpec | None = None) -> str | None:
    """Whether train/config.yaml's reward_weights (what TRL trains with) are not train/rewards.json's weights (what
    the review scored with); None when they are one (or the config sets none: the trainer takes rewards.json's).
    `spec`: the run as the caller read it, else read here."""
    try:
        config, rewards = ((spec.values, spec.rewards) if spec and spec.rewards is not None
                           else (run.read_config(), read_run_rewards(run)))
    except UserInputError as exc:
        return str(exc)
    configured = config.get(FIELD.reward_weights)
    reviewed = [float(reward.get("weight", 1.0)) for reward in rewards]
    if configured is None or (isinstance(configured, list) and [float(w) if isinstance(w, (int, float)) else w
                                                                 for w in configured] == reviewed):
        return None
    return (f"train/config.yaml's reward_weights {configured} are not train/rewards.json's weights {reviewed}: the "
            "review scored with rewards.json's, TRL would train with the config's; make them one (re-emit, or edit "
            "one to match the other)")


def _check_samples_back_a_pass(run: Run) -> tuple:
    """A pass needs samples drawn as training draws them, from today's config. Returns samples.meta.json as read
    (evidence.samples_meta_read): the record checked here is the one the verdict pins."""
    differ = weights_differ(run)
    if differ:
        raise UserInputError("run", differ)
    meta_read = samples_meta_read(run)
    meta, _, why = meta_read
    if meta is None:
        raise UserInputError("run", f"nothing signed says how the samples were drawn: {why}, then inspect_rewards")
    differs = meta.get("differs_from_config")
    if differs is None or "config_pins" not in meta:
        raise UserInputError("run", f"{run.samples_meta} does not say how the samples compare with the run's config "
                             "(written by an older version?): sample again with sample_completions")
    if differs:
        raise UserInputError(
            "run", "these samples cannot back a verdict: they differ from what training would sample ("
            + "; ".join(differs) + "). Run sample_completions on the run without model/data/sampling overrides "
            "(or change train/config.yaml to what you mean to train), then inspect_rewards again",
        )
    if run.script.is_file() and not isinstance(meta.get("trained"), dict):
        raise UserInputError("run", f"{run.samples_meta} does not say what train/train.py's loader read for these "
                             "samples (written by an older version, or edited): sample again with sample_completions")
    moved = changes(meta.get("config_pins") or {}, config_pins(run))
    if moved:
        raise UserInputError("run", "train/config.yaml changed since the samples were drawn: " + "; ".join(moved)
                             + ". Sample again with sample_completions, then inspect_rewards")
    return meta_read


def record_inspection_verdict(request: VerdictRequest) -> VerdictResult:
    _check_reviewer(request.reviewer)
    run = resolve_run(request.run)
    refuse_if_launched(run)
    review, review_sha256 = _read_review(run)
    if not run.samples.is_file():
        raise UserInputError("run", f"{run.samples} is gone: run sample_completions and inspect_rewards again")
    _check_review_current(run, review)
    result = review["result"]
    reviewed = list(review["reviewed_ids"])
    given = _sample_verdicts(request, reviewed)
    agree = sum(v["agree"] for v in given.values())
    disagree = len(given) - agree
    if request.verdict == "pass":
        _check_pass(request, result["route"], reviewed, given)
        pins = run_pins(run, result["reward_code_sha256"], meta_read=_check_samples_back_a_pass(run))
    else:  # a failing verdict opens nothing: record what can be pinned
        try:
            pins = run_pins(run, result["reward_code_sha256"])
        except UserInputError:
            pins = {"reward_code": result["reward_code_sha256"]}
    record = {**_verdict_record(request, run, result, reviewed, given, pins), "review_sha256": review_sha256}
    # where the trainer's packages may come from (trainer.verified_script.foreign_libraries, issue 48)
    record[TRAINING_PATHS] = interpreter_paths(pins.get("training_python"))
    # what the trainer imports (inspection.trained), and the list of it the trainer checks before it imports
    record[REWARD_SHAS] = {}  # each file by the bytes copied, never read back (the trainer names it)
    record[REWARD_FILES] = keep_reviewed_code(run, result["rewards"], record[REWARD_SHAS])
    path = atomic_write_json(run.inside(run.verdict), record)
    return VerdictResult(
        run_dir=str(run.dir), verdict_path=str(path), verdict=request.verdict, reviewer=request.reviewer,
        recorded_at=record["recorded_at"], agree=agree, disagree=disagree, reviewed=len(reviewed),
        reward_code_sha256=record["reward_code_sha256"], samples_sha256=record["samples_sha256"],
        passed_over=flagged_probes(result) if request.verdict == "pass" else [], gate=check_inspection_gate(run),
        warnings=[w for w in [review_signal_warning(result)] if w and request.verdict == "pass"],
    )


def _check_reviewer(reviewer: str) -> None:
    if not reviewer.strip():
        raise UserInputError("reviewer", "names nobody: give the name or handle of the person who read the review")
    if _CONTROL.search(reviewer):
        raise UserInputError("reviewer", f"holds control characters ({printable(reviewer)!r}): give a plain "
                                         "name or handle")


def _sample_verdicts(request: VerdictRequest, reviewed: list[int]) -> dict[int, dict]:
    """The person's verdict on each reviewed sample, by id (with agree_with_rest: agreeing with every one not
    listed). A sample that was not reviewed, or listed twice, is refused."""
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
    return given


def _check_pass(request: VerdictRequest, route: str, reviewed: list[int], given: dict[int, dict]) -> None:
    """A pass needs a route GRPO can learn from, a verdict on every reviewed sample, and agreement with most."""
    if route == "sft_first":
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
    agree = sum(v["agree"] for v in given.values())
    disagree = len(given) - agree
    problem = pass_problem(agree, disagree, request.note)
    if problem:
        raise UserInputError("note" if disagree < agree else "verdict",
                             f"{problem}; otherwise fix the reward and record 'fail'")


def _verdict_record(request: VerdictRequest, run: Run, result: dict, reviewed: list[int], given: dict[int, dict],
                    pins: dict) -> dict:
    """verdict.json: the verdict, who and when, what it pins, and the review it signs (VerdictRecord reads it)."""
    agree = sum(v["agree"] for v in given.values())
    return {
        "verdict": request.verdict, "reviewer": request.reviewer,
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "note": request.note, "pins": pins,
        "reward_code_sha256": result["reward_code_sha256"], "samples_sha256": result["samples_sha256"],
        "success_rule": result["success_rule"],  # review_sha256: the review's bytes as read (the caller's)
        "rewards": result["rewards"], "rewards_source": result["rewards_source"],
        "base_success_rate": result["base_success_rate"],
        "base_success_interval": result.get("base_success_interval"),
        "rate_prompts": result.get("rate_prompts"),
        "route": result["route"],
        "reviewed_ids": reviewed,
        "reviewed": len(reviewed),
        "agree": agree,
        "disagree": len(given) - agree,
        "sample_verdicts": [given[sid] for sid in sorted(given)],
    }


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


def _read_or_none(path: Path) -> dict | None:
    """A JSON object file the gate judges: None when it is not one (the gate then stays closed, saying so)."""
    try:
        return read_json(path, "run", dict)
    except UserInputError:
        return None


def _differs_from_review(verdict: VerdictRecord, review: dict) -> str | None:
    """What a verdict says about the review that the review itself does not (a verdict written by hand with the
    right hashes but its own route, base rate or sample ids); None when they agree."""
    result = review.get("result") if isinstance(review.get("result"), dict) else {}
    expected = {
        "route": result.get("route"), "base_success_rate": result.get("base_success_rate"),
        "success_rule": result.get("success_rule"), "samples_sha256": result.get("samples_sha256"),
        "reviewed_ids": review.get("reviewed_ids"),
    }
    for key, value in expected.items():
        if getattr(verdict, key) != value:
            return f"its {key} is {_brief(getattr(verdict, key))} but the review's is {_brief(value)}"
    if verdict.pins.get("reward_code") != result.get("reward_code_sha256"):
        return "its reward-code hash is not the reviewed reward's"
    return None


def _brief(value) -> str:
    text = printable(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


def check_inspection_gate(run: Run | str | Path, spec: RunSpec | None = None, here: dict | None = None) -> GateResult:
    """Is this run cleared to train? Open only with a passing verdict on the current rewards and samples.

    The launcher calls this (in a worker) before it starts anything (`spec`: the run as the launch read it, so
    the gate judges the files every other gate judged; `here`: the launching process's pins.process_pins). An
    args file beside train.py closes it first (inspection.args_file), as the launch and resume gates refuse it.
    A closed gate says why and how to open it; an unknown run raises UserInputError('run', ...).
    """
    run = run if isinstance(run, Run) else resolve_run(run)
    args_file = args_file_problem(run)  # the trainer's parser reads it over config.yaml: closed, whatever else holds
    held = spec.verdict if spec is not None else None  # the launch's one read of verdict.json: judged, not re-read
    early = _closed(run, *args_file) if args_file else _before_a_verdict(run, held is not None)
    if early is not None:
        return early
    verdict = _read_verdict_record(run, held)
    return verdict if isinstance(verdict, GateResult) else _verdict_holds(run, verdict, spec, here)


def _closed(run: Run, reason: str, how: str) -> GateResult:
    return GateResult(
        passed=False, reason=reason, how_to_clear=way_on_for(run, how), run_dir=str(run.dir),
        verdict_path=str(run.verdict) if run.verdict.is_file() else None,
    )


def _inspect_again(run: Run) -> str:
    return (f"run inspect_rewards (CLI: {CLI} inspect-rewards {run.name}), have a person read "
            "inspection/review.md, then record_inspection_verdict")


def _before_a_verdict(run: Run, held: bool = False) -> GateResult | None:
    """The closed gate of a run not yet as far as a verdict (no rewards, no samples, a review that routes to
    SFT first, no verdict); None when there is a verdict file to judge."""
    if not run.rewards.is_file():
        return _closed(
            run, "the run has no train/rewards.json (its reward definition)",
            "emit the run's config with emit_grpo_config (it writes train/rewards.json), then sample, inspect and "
            "record a verdict",
        )
    if not run.samples.is_file():
        return _closed(
            run, "no samples: inspection/samples.jsonl does not exist",
            f"run sample_completions (CLI: {CLI} sample-completions {run.name}), then " + _inspect_again(run),
        )
    if held or run.verdict.is_file():
        return None
    if run.review.is_file():
        review = (_read_or_none(run.review) or {}).get("result") or {}
        if review.get("route") == "sft_first" and review.get("samples_sha256") == sha256_file(run.samples):
            return _closed(
                run, "the last review found no prompt with a single success: GRPO cannot learn yet",
                "do SFT first (or use easier prompts or a stronger base model), then sample_completions and "
                + _inspect_again(run),
            )
    return _closed(run, "no verdict recorded: nobody has signed off the rewards on sampled outputs",
                   _inspect_again(run))


def _read_verdict_record(run: Run, held: str | None = None) -> VerdictRecord | GateResult:
    """verdict.json as a complete, consistent record; else the closed gate saying why it is not a verdict.
    `held`: its text as the launch read it (RunSpec.verdict), judged instead of reading the file again."""
    verdict_file = run.verdict
    raw = _read_or_none(verdict_file) if held is None else verdict_json(held)
    if raw is None:
        return _closed(run, f"{verdict_file} cannot be read as a JSON object: it is not a verdict",
                       _inspect_again(run))
    try:
        verdict = VerdictRecord.model_validate(raw)
    except ValidationError as exc:
        missing = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})
        return _closed(
            run, f"{verdict_file} is not a verdict: its record is incomplete or malformed ({', '.join(missing)}); a "
            "verdict names its reviewer, its time and a verdict on every reviewed sample",
            _inspect_again(run),
        )
    if verdict.problem():
        return _closed(run, f"{verdict_file} is not a verdict: {verdict.problem()}", _inspect_again(run))
    return verdict


def _verdict_holds(run: Run, verdict: VerdictRecord, spec: RunSpec | None = None,
                   here: dict | None = None) -> GateResult:
    """The gate for a well-formed verdict: open when it passes and the review, the samples and everything it
    pins are still what it signed."""
    who = f"{printable(verdict.reviewer)} at {verdict.recorded_at.isoformat()}"
    inspect_again = _inspect_again(run)
    if verdict.verdict != "pass":
        return _closed(
            run, f"the verdict is '{verdict.verdict}' ({who})",
            "fix the reward (train/rewards.json or the reward code) where the reader disagreed, then " + inspect_again,
        )
    if verdict.route == "sft_first" or not verdict.base_success_rate:
        return _closed(
            run, "the base model never succeeded on the sampled prompts: GRPO cannot learn yet",
            "do SFT first (or use easier prompts or a stronger base model), then sample_completions and "
            + inspect_again,
        )
    if sha256_file(run.samples) != verdict.samples_sha256:
        return _closed(run, f"samples.jsonl changed since the verdict ({who})", inspect_again)
    if forged := not_sampled(run):
        return _closed(run, forged, "run sample_completions, then " + inspect_again)
    review_file = run.review
    if not review_file.is_file() or sha256_file(review_file) != verdict.review_sha256:
        now = (_read_or_none(review_file) or {}).get("result") or {}
        rule = now.get("success_rule")
        what = ("review.json is gone" if not review_file.is_file() else
                f"the success rule changed ('{verdict.success_rule}' -> '{rule}')" if rule != verdict.success_rule
                else "review.json changed")
        return _closed(run, f"the review is not the one the verdict signed ({who}): {what}", inspect_again)
    mismatch = _differs_from_review(verdict, _read_or_none(review_file) or {}) or _sheet_edited(
        run, _read_or_none(review_file) or {}) or weights_differ(run, spec)
    if mismatch:
        return _closed(run, f"{run.verdict} is not a verdict on this review ({who}): {mismatch}", inspect_again)
    try:
        run_reward_imports(run)
        rewards = spec.rewards if spec and spec.rewards is not None else read_run_rewards(run)
        current = run_pins(run, reward_code_sha256(rewards), spec.values if spec else None, here,
                           read=spec.sidecar_sha256 if spec else None)
    except RewardImportError as exc:  # where this process looks, not what was reviewed: the review still holds
        return _closed(run, f"the reward code cannot be imported here: {exc}", exc.fix + "; the review stands")
    except UserInputError as exc:
        return _closed(run, f"what the verdict vouches for cannot be read now: {exc}", "fix it, then " + inspect_again)
    moved_keys = [k for k in dict.fromkeys([*verdict.pins, *current]) if verdict.pins.get(k) != current.get(k)]
    moved = changes(verdict.pins, current, reward_change_detail(run, verdict, rewards) if "reward_code" in moved_keys
                    else None)
    if moved:
        shell = {"training_python": lambda: python_how(verdict.pins.get("training_python")), "loader_env": loader_how}
        resample = [PART_NAMES.get(k, k) for k in moved_keys if k not in SAMPLES_STAY_VALID | {*shell}]
        how = ("put back what changed, or re-inspect only (the samples stay valid: a reward change rescores them "
               "and changes nothing about how they were drawn): " + inspect_again) if not resample else (
            f"put back what changed, or re-sample ({'; '.join(resample)} changed what is sampled, so the samples "
            f"no longer back a verdict): run sample_completions (CLI: {CLI} sample-completions {run.name}) again, "
            "then " + inspect_again)
        how = shell[moved_keys[0]]() if len(moved_keys) == 1 and moved_keys[0] in shell else how
        return GateResult(
            passed=False, reason=f"changed since the verdict ({who}): " + "; ".join(moved),
            how_to_clear=way_on_for(run, how), run_dir=str(run.dir), verdict_path=str(run.verdict), changed=moved,
        )
    unkept = unkept_reward_code(run, rewards)
    if unkept:
        return _closed(run, f"{run.reward_code.relative_to(run.dir)} does not hold the reviewed reward code the "
                       f"trainer imports ({', '.join(unkept)})", "record the verdict again: it copies them there")
    return GateResult(passed=True, how_to_clear="", run_dir=str(run.dir), verdict_path=str(run.verdict),
                      reason=f"passing verdict by {who} on the current model, data, sampling settings, rewards, "
                      f"train.py and samples ({verdict.agree} agree, {verdict.disagree} disagree of "
                      f"{len(verdict.reviewed_ids)})")
