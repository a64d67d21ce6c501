"""The graders run where the evidence key cannot be read: every call into a grader's code that evaluate_model and
promote_checkpoint make (its import, its scoring, the hash of its source, the files it runs) goes to the keyless
worker (worker_keyless), as data, one round trip per batch of completions. The process that signs the baseline
line, the drift scores and promotion.json keeps only what comes back: each item's scores, the files the graders
read (rewards.reads pins), their code's hash and file pins, and each grader's name and the tags it reads
(evaluate.unpaid_warnings). A grader is the user's (or a model's) Python: in the keyed worker, one that read the key
at import could sign a promotion reading PROMOTE or a baseline with a made-up score (issue 48, docs/development.md
"Evidence"); in the keyless worker it finds /dev/null where the key was, and the record it signs is refused.

This process's side: `grade` (one batch) and `graded` (several in one round trip: the grader replay's), and
`graders_code`; each sends the user folders on this process's sys.path with the call, so the worker imports a
grader from where this process would have (a core API caller's sys.path; the worker's own is put back after the
call). The worker's side: `grade_here`, `code_here`; `score_rows` is the scoring itself. Graders that are registry
rewards running this package's code alone (`library_only`: no judge function or model) score in place, no worker
started: the drift suite's (drift.DRIFT_GRADERS) and evaluate_model's defaults.
"""

from __future__ import annotations

import contextlib

from mcp_server.reporting import silent
from mcp_server.rewards import build_reward_funcs, reads, reward_code_sha256
from mcp_server.rewards.dotted import looked_in, on_path
from mcp_server.rewards.registry import REGISTRY, reward_code_file_pins
from mcp_server.rewards.sources import MOVED
from mcp_server.rewards.spec import RewardSpec
from mcp_server.worker import keyless
from mcp_server.worker_targets import GRADE, GRADERS_CODE


def score_rows(rows: list[dict], completions: list[str], graders: list,
               read: reads.Reads | None = None) -> list[dict[str, float]]:
    """Each grader's score per item, called the way TRL calls a reward (completions + every data set column);
    `read`: where to record the files the graders open (rewards.reads). In the keyless worker (grade_here), or in
    place for graders that run no user code."""
    with reads.recording(read) if read is not None else contextlib.nullcontext():
        funcs = build_reward_funcs(graders)
        conversational = [not isinstance(r["prompt"], str) for r in rows]
        wrapped = [[{"role": "assistant", "content": c}] if conv else c for c, conv in zip(completions,
                                                                                          conversational)]
        columns = {key: [r.get(key) for r in rows] for key in {k for r in rows for k in r} if key != "completion"}
        columns["prompts"] = columns.pop("prompt")
        scores: list[dict[str, float]] = [{} for _ in rows]
        for func in funcs:
            with reads.calling(func.__name__):
                values = func(completions=wrapped, **columns)
            for item, value in zip(scores, values, strict=True):
                item[func.__name__] = float(value) if value is not None else 0.0
    return scores


def _tags(func) -> list[str]:
    """The tags a grader reads (a built-in's `tag` / `tags` parameter), for unpaid_warnings."""
    params = getattr(func, "params", None) or {}
    tags = [params["tag"]] if isinstance(params.get("tag"), str) else list(params.get("tags") or [])
    return [str(t) for t in tags]


def code_here(graders: list, path: list[str] = ()) -> dict:
    """The worker's side of graders_code: {sha256, files, graders: [{name, tags}]}."""
    with on_path(list(path)):
        return _code(graders)


def _code(graders: list) -> dict:
    return {"sha256": reward_code_sha256(graders), "files": reward_code_file_pins(graders),
            "graders": [{"name": f.__name__, "tags": _tags(f)} for f in build_reward_funcs(graders)],
            "moved": list(MOVED.values())}  # files whose bytes that ran here are not what they hold (sources.MOVED)


def grade_here(batches: list[dict], path: list[str] = ()) -> list[dict]:
    """The worker's side: each batch {rows, completions, graders, reads, code} scored in order (score_rows); per
    batch {scores, reads (when asked: the pins), code (when asked: code_here, after the scoring)}."""
    with on_path(list(path)):
        return [_graded(batch) for batch in batches]


def _graded(batch: dict) -> dict:
    read = reads.Reads() if batch.get("reads") else None
    result: dict = {"scores": score_rows(batch["rows"], batch["completions"], batch["graders"], read)}
    if read is not None:
        result["reads"] = read.pins()
    if batch.get("code"):
        result["code"] = _code(batch["graders"])
    return result


def _plain(graders: list) -> list:
    return [g.model_dump() if isinstance(g, RewardSpec) else g for g in graders]


# The registry rewards that reach code beyond this package: a judge function or model (rubric_judge's `judge`).
REACHING = frozenset({"rubric_judge"})


def library_only(graders: list) -> bool:
    """Whether every grader is a registry reward that runs this package's code alone (none of REACHING; a wrapped
    reward likewise): those score in place, as the drift suite's do; any other goes to the keyless worker."""
    for grader in graders:
        try:
            spec = grader if isinstance(grader, RewardSpec) else RewardSpec.model_validate(
                {"name": grader} if isinstance(grader, str) else grader)
        except ValueError:
            return False  # refused where it is built, in the worker, as before
        reward = REGISTRY.get(spec.name.strip())
        if reward is None or spec.name.strip() in REACHING or not library_only(
                [spec.params[p] for p in reward.wrapped if p in spec.params]):
            return False
    return True


def _grade(asked: list[dict], graders: list) -> list[dict]:
    """grade_here in place for library graders, else in the keyless worker (the caller's folders with it)."""
    return grade_here(asked) if library_only(graders) else keyless(GRADE, asked, looked_in(), report=silent)


def graded(batches: list[tuple[list[dict], list[str], list]]) -> list[list[dict[str, float]]]:
    """Several batches (rows, completions, graders) scored in one round trip to the keyless worker, in order."""
    asked = [{"rows": rows, "completions": list(completions), "graders": _plain(graders)}
             for rows, completions, graders in batches]
    return [result["scores"] for result in _grade(asked, [g for _, _, graders in batches for g in graders])]


def grade(rows: list[dict], completions: list[str], graders: list, read: reads.Reads | None = None,
          code: dict | None = None) -> list[dict[str, float]]:
    """score_rows in the keyless worker; `read` gets the files the graders opened, `code` (a dict) their code's
    hash, file pins and names and tags (code_here), taken after the scoring, in the same call."""
    (result,) = _grade([{"rows": rows, "completions": list(completions), "graders": _plain(graders),
                         "reads": read is not None, "code": code is not None}], graders)
    if read is not None:
        read.absorb(result["reads"])
    if code is not None:
        code.update(result["code"])
    return result["scores"]


def graders_code(graders: list) -> dict:
    """code_here in the keyless worker: the graders' code hash (rewards.reward_code_sha256), file pins, names."""
    if library_only(graders):
        return code_here(_plain(graders))
    return keyless(GRADERS_CODE, _plain(graders), looked_in(), report=silent)
