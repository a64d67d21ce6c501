"""evaluate_model: greedy decoding over a goldens file, graded by the reward verifiers, pass rate with a
Wilson interval, and the write-once baseline eval/baseline-<model>--<task>.json (task_key: the goldens, the graders
with their code's digest, the decoding).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from mcp_server.dataset import load_rows
from mcp_server.diagnosis.success_rate import baseline_signal_warning
from mcp_server.errors import UserInputError
from mcp_server.evidence import sign, unrecorded, valid
from mcp_server.generation import generate, loading, planned, render_prompt
from mcp_server.evaluation.goldens import refuse_repeated
from mcp_server.evaluation.graders_apart import grade
from mcp_server.evaluation.models import EVAL_TOKENS, EvaluateRequest, EvaluationResult, ItemResult
from mcp_server.evaluation.replay_scores import BLIND_KEY, blind_grades, blind_pairs, same_score, stored_items
from mcp_server.evaluation.tiny_suite import tiny_goldens_rows
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.inspection.pinned_load import load_pinned
from mcp_server.inspection.pins import model_content, model_pin
from mcp_server.inspection.sampling_plan import model_size, sampling_plan
from mcp_server.runs import resolve_run
from mcp_server import smollm2
from mcp_server.model_ref import SMOLLM2, TINY, known_name, load_model, resolve_loadable
from mcp_server.reporting import Report, silent
from mcp_server.rewards import reads
from mcp_server.rewards.spec import RewardSpec
from mcp_server.tiny import TINY_VERSION, write_jsonl
from mcp_server.worker import runs_in_training
from mcp_server.userfiles import open_regular
from mcp_server.workspace import eval_root, open_append_nofollow, runs_root, sha256_file, workspace_root


# ---------------------------------------------------------------- statistics
def wilson_interval(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval: honest at 0% and 100% and for small n, where the normal one is not."""
    if n == 0:
        return 0.0, 1.0
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == n else min(1.0, centre + half)
    return low, high


# ---------------------------------------------------------------- files
def model_key(model: str) -> str:
    """The name a model's baseline is filed under: 'tiny-v<version>' (new tiny weights are a new model: an old
    baseline must not be compared with them), 'smollm2-135m-v<build>' for the converted SmolLM2 (by name or by the
    directory a run's config names: model_ref.known_name, never the cache path), a hub name, or a local path
    relative to the workspace."""
    model = known_name(model)[0]
    if model == TINY:
        return f"tiny-v{TINY_VERSION}"
    if model == SMOLLM2:
        return f"{SMOLLM2}-v{smollm2.BUILD_VERSION}"
    path = Path(model).expanduser()
    if path.exists():
        path = path.resolve()
        try:
            model = str(path.relative_to(workspace_root()))
        except ValueError:
            model = str(path)
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[-120:] or "model"


def task_key(goldens_sha256: str, graders: list, code: str, max_new_tokens: int, seed: int,
             graders_reads: dict | None = None, model_content: str | None = None) -> str:
    """The task's key: a baseline is of a model's content (`model_content`: model_content's digest of its pin) on
    a task, the goldens' bytes, the graders by name, parameters and code (`code`: rewards.reward_code_sha256, taken
    in the keyless worker), the files they read (rewards.reads) and the decoding; any change is another baseline,
    filed beside the first, never over it (issue 49: one baseline per model, graders by name only; issue 48 round
    9: a rubric file switched after the baseline; round 10: other weights at the same path)."""
    specs = [RewardSpec.model_validate(g).model_dump() if not isinstance(g, RewardSpec) else g.model_dump()
             for g in graders]
    read = [{p: {k: v for k, v in pin.items() if k != "by"} for p, pin in graders_reads.items()}] if \
        graders_reads else []
    content = [{"model_content": model_content}] if model_content else []
    task = json.dumps([goldens_sha256, specs, code, max_new_tokens, seed, *read, *content], sort_keys=True,
                      default=str)
    return hashlib.sha256(task.encode()).hexdigest()[:12]


def baseline_path(model: str, task: str | None = None) -> Path:
    """eval/baseline-<model>--<task>.json ("--" never occurs in a model key); without a task, the file name an
    earlier version wrote (one per model), still read."""
    return eval_root() / (f"baseline-{model_key(model)}--{task}.json" if task else f"baseline-{model_key(model)}.json")


def baselines_of(model: str) -> list[Path]:
    """Every baseline of `model` in eval/, for any task (an earlier version's one-per-model file last)."""
    key = model_key(model)
    legacy = eval_root() / f"baseline-{key}.json"
    return sorted(eval_root().glob(f"baseline-{key}--*.json")) + ([legacy] if legacy.is_file() else [])


def baseline_ledger() -> Path:
    """eval/baselines.jsonl: one line per baseline evaluate_model wrote (its file name and sha256), appended once
    the baseline is written. The baseline that counts is one recorded here, by name and hash (issue 48: a
    hand-written second baseline with an earlier written_at made the base model PROMOTE over itself)."""
    return eval_root() / "baselines.jsonl"


def record_baseline(path: Path, text: str) -> None:
    """Its line, signed with the key outside the workspace (evidence.py): a line appended by hand counts for
    nothing. The sha256 signed is of `text`, what the caller wrote to `path`, never the file read back (round 18:
    a baseline replaced between the write and the hash would be vouched for)."""
    line = sign(eval_root(), baseline_ledger().name, {
        "name": path.name, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, create=True)
    try:
        with open_append_nofollow(baseline_ledger()) as handle:  # no link, no hard link out (round 11 D2)
            handle.write((json.dumps(line) + "\n").encode("utf-8"))
    except OSError as exc:  # round 17: a hard-linked ledger was "unexpected TrainingInterpreterError: NotRegularFile"
        path.unlink(missing_ok=True)  # an unrecorded baseline counts for nothing and would block the next one
        raise UserInputError("eval", f"the baseline ledger {exc.strerror or exc}; the baseline {path.name} was not "
                             "recorded, nor kept: replace eval/baselines.jsonl with a file of the workspace's own "
                             "(remove the link), then evaluate again") from None


def baseline_unrecorded(path: Path) -> str | None:
    """Why `path` is not a baseline evaluate_model wrote: not in eval/baselines.jsonl by its name, or there with
    another sha256 (edited or replaced since). None when it is recorded as it is."""
    ledger = baseline_ledger()
    try:
        if ledger.is_symlink():
            raise OSError("a link is not the ledger")
        with open_regular(ledger, encoding="utf-8", errors="replace") as handle:  # a pipe there never ends
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    hashes, unsigned = set(), []
    for number, raw in enumerate(lines, 1):
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict) and entry.get("name") == path.name and isinstance(entry.get("sha256"), str):
            if valid(eval_root(), ledger.name, entry):
                hashes.add(entry["sha256"])
            else:
                unsigned.append(unrecorded(f"eval/{ledger.name}", number))
    if not hashes:
        why = f"; {unsigned[-1]}" if unsigned else ""
        return (f"{path.name} is not a baseline evaluate_model wrote (it is not in {ledger.name}{why}): remove it, "
                "or measure the base model with evaluate_model")
    if sha256_file(path) not in hashes:
        why = f"; {unsigned[-1]}" if unsigned else ""
        return (f"{path.name} is not the baseline evaluate_model wrote (its sha256 differs from {ledger.name}: edited "
                f"or replaced since{why}): restore it, or measure the base model again with evaluate_model")
    return None


def read_baseline(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserInputError(str(path), f"cannot read the baseline: {exc}") from None


def write_once(path: Path, text: str) -> bool:
    """Create `path` with `text` unless it exists; never overwrites. A hard link from a finished temporary file
    is atomic and fails when the name is taken, so two racing evaluations cannot both write. Read-only after. The
    temporary file is a fresh name (mkstemp: O_EXCL, O_NOFOLLOW), made read-only before it is linked: never a
    file or link put at a name guessed beforehand (round 18)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            os.fchmod(handle.fileno(), 0o444)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def inside_a_run(model_path: str) -> bool:
    path = Path(model_path)
    if not path.exists():
        return False
    try:
        path.resolve().relative_to(runs_root().resolve())
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------- goldens
def resolve_goldens(goldens: str) -> Path:
    """A goldens file path; 'tiny' writes the embedded task's held-out split to eval/goldens-tiny.jsonl once."""
    if goldens == TINY:
        path = eval_root() / "goldens-tiny.jsonl"
        if not path.is_file():
            write_jsonl(tiny_goldens_rows(), path)
        return path
    path = Path(goldens).expanduser()
    if not path.is_file():
        raise UserInputError("goldens", f"no such file: {path}; give a .jsonl/.json/.csv/.parquet file or 'tiny'")
    return path.resolve()


def load_goldens(path: Path, field: str = "goldens") -> list[dict]:
    try:
        rows = load_rows(str(path))
    except UserInputError as exc:
        raise UserInputError(field, str(exc).removeprefix("dataset: ")) from None
    if not rows:
        raise UserInputError(field, f"{path} holds no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "prompt" not in row:
            raise UserInputError(field, f"{path} row {i} has no `prompt` column (text or chat messages)")
    if field == "goldens":  # the evidence of a promotion (goldens.py); the drift suite only guards against a drop
        refuse_repeated(rows, path, field)
    return rows


# ---------------------------------------------------------------- grading
def item_passed(scores: dict) -> bool:
    """An item passes when it has grades and every grader scores it above 0 (one grader's 0 fails it)."""
    return bool(scores) and all(v > 0 for v in scores.values())


def evaluate_rows(
    model_ref, rows: list[dict], graders: list, max_new_tokens: int, batch_size: int = 64,
    seed: int = 3407, temperature: float = 0.0, loaded=None, report: Report = silent, read=None, code=None,
) -> list[ItemResult]:
    """Decode and grade `rows` (the graders in the keyless worker: graders_apart.grade); `loaded` = (model,
    tokenizer) to reuse an already loaded model; `read`, `code`: grade's."""
    if loaded is None:
        with loading(report, str(model_ref)):
            loaded = load_model(model_ref)
    model, tokenizer = loaded
    texts = [render_prompt(tokenizer, r["prompt"]) for r in rows]
    completions = generate(
        model, tokenizer, texts, max_new_tokens, batch_size=batch_size, temperature=temperature, seed=seed,
        report=report,
    )
    scores = grade(rows, completions, graders, read, code)
    return [
        ItemResult(
            index=i, prompt=text, answer=None if r.get("answer") is None else str(r.get("answer")),
            completion=c, scores=s, passed=item_passed(s),
        )
        for i, (r, text, c, s) in enumerate(zip(rows, texts, completions, scores))
    ]


def unpaid_warnings(items: list[ItemResult], described: list[dict], defaults: bool, who: str = "") -> list[str]:
    """Loud lines for a grader that paid nothing on any item because no reply holds what it reads (issue 49: the
    README's baseline, graded by the default correctness_reward, wrote a read-only 0/30 on a task whose replies
    never carry an <answer> tag, and said nothing): a built-in grader's tags (correctness_reward's `tag`,
    format_reward's `tags`) that no reply contains; any grader at 0 everywhere when the graders are the defaults
    (none given). [] when every grader paid something somewhere. `described`: the graders' names and tags, as the
    keyless worker read them (graders_apart.code_here)."""
    if not items:
        return []
    replies = [i.completion for i in items]
    lines = []
    for grader in described:
        name, tags = grader["name"], grader["tags"]
        if any(i.scores.get(name, 0.0) > 0 for i in items):
            continue
        missing = [f"<{t}>" for t in tags if not any(f"<{t}>" in r for r in replies)]
        if missing:
            why = f"no reply holds {', '.join(missing)}, the tag it reads"
        elif defaults:
            why = "it is the default grader and no reply earned anything from it"
        else:
            continue
        lines.append(f"{who}{name} paid nothing on all {len(items)} goldens: {why}, so this pass rate measures "
                     "that grader's format, not your task. Pass --graders (MCP: graders) with your task's reward, the "
                     "reward specs you train with, e.g. --graders '[{\"name\": \"my_rewards.score\"}]'")
    return lines


def undivided_warnings(items: list[ItemResult], who: str = "") -> list[str]:
    """A grader that passed (scored above 0) every item of a baseline, or failed every one: it told no reply apart
    (issue 49's sixth walk: a baseline at 100% from a grader that passed "The word \"apple\" is a capital letter."
    for APPLE, with no word). A grader at 0 everywhere for a reason unpaid_warnings names is left to it."""
    if len(items) < 2:
        return []
    lines = []
    for name in dict.fromkeys(n for i in items for n in i.scores):
        paid = sum(i.scores.get(name, 0.0) > 0 for i in items)
        if paid in (0, len(items)):
            also = "the base model already right everywhere" if paid else "the base model unable to do the task yet"
            lines.append(f"{who}{name} {'passed' if paid else 'failed'} all {len(items)} goldens of this baseline: "
                         f"a grader that tells no reply apart is likely wrong (else {also} leaves GRPO nothing to "
                         "learn from); read what it pays on sampled replies (inspect-rewards, MCP: inspect_rewards) "
                         "before trusting this pass rate")
    return lines


def default_graders(graders: list) -> bool:
    """Whether `graders` are evaluate_model's defaults (none given)."""
    from mcp_server.evaluation.models import DEFAULT_GRADERS

    dump = [RewardSpec.model_validate(g).model_dump() if not isinstance(g, RewardSpec) else g.model_dump()
            for g in graders]
    return dump == [g.model_dump() for g in DEFAULT_GRADERS]


def summarise(items: list[ItemResult]) -> tuple[int, float, float, float]:
    passed = sum(i.passed for i in items)
    low, high = wilson_interval(passed, len(items))
    return passed, passed / len(items), low, high


# ---------------------------------------------------------------- the tool
@runs_in_training  # needs torch / TRL / transformers: the training interpreter's worker
def evaluate_model(request: EvaluateRequest, loaded=None, report: Report = silent) -> EvaluationResult:
    eval_root()  # eval/ a link leading outside the workspace: refused before anything is decoded or written
    budget, source = eval_budget(request)
    request = request.model_copy(update={"max_new_tokens": budget})
    model_ref = resolve_loadable(request.model)
    files = not request.limit and (request.baseline == "write" or request.baseline == "auto" and not inside_a_run(
        str(model_ref)))  # a baseline may be filed: its model's content pinned (hashed) only then
    pin = baseline_model_pin(model_ref) if files else None
    goldens_path = resolve_goldens(request.goldens)
    rows = load_goldens(goldens_path)
    if request.limit:
        rows = rows[: request.limit]
    start = time.time()
    plan = eval_plan(model_ref, len(rows), budget, request.batch_size)
    report(0, len(rows), f"evaluating {request.model} on {len(rows)} goldens, max_new_tokens {budget} ({source}); "
                         f"plan: {plan['text']}")
    report = planned(report, plan)  # its decode step: the figure of the lines while a call waits for token 1
    read, code = reads.Reads(), {}  # the files the graders open: part of a baseline's identity (rewards.reads)
    if loaded is None and pin is not None:  # what is measured is the content the baseline records (round 18, b05)
        with loading(report, request.model):
            loaded = load_pinned(model_ref, pin, what="measured or filed")
    items = evaluate_rows(
        model_ref, rows, request.graders, request.max_new_tokens, request.batch_size, request.seed,
        loaded=loaded, report=report, read=read, code=code,
    )
    passed, rate, low, high = summarise(items)
    result = EvaluationResult(
        model=request.model, model_path=str(model_ref), goldens=str(goldens_path),
        goldens_sha256=sha256_file(goldens_path), graders=request.graders, max_new_tokens=request.max_new_tokens,
        max_new_tokens_from=source, plan=plan,
        seed=request.seed, n=len(items), passed=passed, pass_rate=rate, ci_low=low, ci_high=high,
        seconds=round(time.time() - start, 2), items=items,
        warnings=unpaid_warnings(items, code["graders"], default_graders(request.graders)),
    )
    # a base model GRPO would start from (a checkpoint's rate is no start), its rate of the task: a grader that paid
    # nothing for want of what it reads (unpaid_warnings, said above) measures its format, not the model
    if not inside_a_run(result.model_path) and not result.warnings:
        result.warnings += [w for w in [baseline_signal_warning(passed, len(items), *_group(request))] if w]
    if pin is not None and model_content(pin) is None:  # a hub model this evaluation downloaded: pinned now
        pin = baseline_model_pin(model_ref)
    blind = _blind(rows, result, request.graders, read) if files else None  # before the reads are kept
    _file_baseline(request, result, read.pins(), pin, code, blind)
    return result


def _blind(rows: list[dict], result: EvaluationResult, graders: list, read: reads.Reads) -> dict:
    """A baseline's blind probes, scored now by its graders (replay_scores.blind_pairs; the texts are not kept)."""
    pairs = blind_pairs(result.model_dump(mode="json"), [i.completion for i in result.items])
    return {"count": len(pairs), "scores": blind_grades(grade, rows, pairs, graders, read)}


def _group(request: EvaluateRequest) -> tuple[int, str]:
    """(the GRPO group size, where it came from): the run's num_generations, else TRL's default."""
    config = resolve_run(request.run).read_config() if request.run else None
    size = GRPOView.given(config or {}).num_generations
    return (int(size), "the run's num_generations") if size else \
        (int(GRPOView({}).num_generations or 8), "TRL's default num_generations")


def baseline_model_pin(model_ref) -> dict:
    """The model's pin as the inspection verdict takes it (inspection.pins.model_pin: a folder by its files, a hub
    model by its cached snapshot's), recorded in its baseline: a baseline is of the content it measured, and
    promote_checkpoint compares it with the run's reviewed base (issue 48, round 10 F3)."""
    return model_pin(str(model_ref))


def eval_budget(request: EvaluateRequest) -> tuple[int, str]:
    """(the completion limit, where it came from): the request's, else the run's max_completion_length (what
    promote_checkpoint measures a baseline with: a baseline at another budget than the run trains with is not
    comparable), else EVAL_TOKENS."""
    if request.max_new_tokens is not None:
        return request.max_new_tokens, "given"
    if request.run is None:
        return EVAL_TOKENS, "the default; --run RUN (MCP: run) takes a run's max_completion_length"
    run = resolve_run(request.run)
    config = run.read_config()
    if not config:
        raise UserInputError("run", f"{run.name} has no train/config.yaml: emit its config first, or give "
                             "max_new_tokens")
    value = GRPOView.given(config).max_completion_length
    return int(value or EVAL_TOKENS), f"{run.name}'s max_completion_length" + ("" if value else " unset: the default")


def eval_plan(model_ref, goldens: int, budget: int, batch_size: int = 64, base=None) -> dict:
    """sample_completions' plan for greedy decoding of `goldens` rows, before the model decodes (evaluate_model's,
    and each of promote_checkpoint's evaluations: issue 49, minutes of "starting" with no figure); a checkpoint
    has its base model's size (`base`, or the one its adapter names: model_size)."""
    import torch

    return sampling_plan(goldens, 1, budget, batch_size, "transformers", torch.cuda.is_available(),
                         torch.get_num_threads(), *model_size(model_ref, base), goldens=True)


def _written_note(request: EvaluateRequest, result: EvaluationResult, path: Path, pin: dict | None) -> str:
    """The note of a baseline just written: the first of this model, or which earlier one it stands beside and what
    differs (issue 49's sixth walk: "first evaluation of this base model on this task" when one with other graders
    existed; promote_checkpoint compares with the baseline of the run's task)."""
    earlier = [p for p in baselines_of(result.model_path if request.model != "tiny" else "tiny") if p != path]
    if not earlier:
        return "first evaluation of this base model on this task: baseline written"
    latest = max(earlier, key=lambda p: p.stat().st_mtime)
    try:
        before = json.loads(latest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = {}
    now = {**result.model_dump(mode="json"), "model_pin": pin}
    differs = [what for key, what in (("goldens_sha256", "goldens"), ("graders", "graders"),
                                      ("max_new_tokens", "max_new_tokens"), ("seed", "seed"),
                                      ("model_pin", "model files"))
               if before.get(key) != now.get(key)] or ["the graders' code or the files they read"]
    return (f"baseline written, beside the earlier {latest.name} of this base model (kept, never replaced): this "
            f"one's {', '.join(differs)} differ; promote_checkpoint compares a run with the baseline of its own task")


def _file_baseline(request: EvaluateRequest, result: EvaluationResult, graders_reads: dict,
                   pin: dict | None, code: dict, blind: dict | None = None) -> None:
    """Write eval/baseline-<model>--<task>.json on the first evaluation of a base model's content (`pin`); never
    overwrite it. `code`: the graders' code as the keyless worker hashed it (graders_apart.code_here)."""
    graders_code = code["sha256"]
    task = task_key(result.goldens_sha256, request.graders, graders_code, request.max_new_tokens, request.seed,
                    graders_reads, model_content(pin))
    model = result.model_path if request.model != "tiny" else "tiny"
    path = baseline_path(model, task)
    files = request.baseline == "write" or request.baseline == "auto" and not inside_a_run(result.model_path)
    rescored = path if files and not request.limit and path.is_file() and _rescored(path, result.items) else None
    if rescored:  # the task's baseline is of another rule than the graders score by now: this one files beside it
        scores = json.dumps([i.scores for i in result.items], sort_keys=True).encode()
        path = baseline_path(model, f"{task}-{hashlib.sha256(scores).hexdigest()[:8]}")  # named by its scores
    existing = path.is_file()
    if request.baseline == "never":
        result.baseline_note = "baseline not requested"
    elif request.limit:
        result.baseline_note = "a partial evaluation (limit) never becomes a baseline"
    elif request.baseline == "auto" and inside_a_run(result.model_path):
        result.baseline_note = "the model lives in a run directory: a checkpoint, not a base model"
    elif existing:
        result.baseline_note = "a baseline of this model on these goldens, graders and decoding already exists; it " \
                               "is never overwritten"
    else:  # a baseline: a grader that tells none of its replies apart is named in it (unpaid ones are already)
        result.warnings += [w for w in undivided_warnings(result.items) if not any(
            u.startswith(w.split(" ", 1)[0] + " paid nothing") for u in result.warnings)]
        record = {"kind": "baseline", "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "task": task, "graders_code_sha256": graders_code, "graders_reads": graders_reads,
                  "graders_files": code["files"], "model_pin": pin, BLIND_KEY: blind}  # by file: round 15
        record.update(result.model_dump(mode="json", exclude={"baseline_path", "baseline_written", "baseline_note"}))
        text = json.dumps(record, indent=2) + "\n"
        result.baseline_written = write_once(path, text)
        if result.baseline_written:
            record_baseline(path, text)
        note = f"baseline written beside {rescored.name}, whose replies these graders score otherwise now (what " \
            "they read beyond the pinned files changed since, or it keeps no replies): promote_checkpoint judges " \
            "against the baseline whose replies its graders score as stored" if rescored else None
        result.baseline_note = (note or _written_note(request, result, path, pin)) if result.baseline_written else (
            "another evaluation wrote this baseline first; it is never overwritten"
        )
    if path.is_file():
        result.baseline_path = str(path)


def _rescored(path: Path, items: list[ItemResult]) -> bool:
    """Whether the task's baseline at `path` is of another rule than `items` were graded by: it keeps no replies, or
    one of its replies that is one of `items`' is scored otherwise (replay_scores.same_score)."""
    try:
        stored = stored_items(read_baseline(path), len(items))
    except UserInputError:  # unreadable: it stays, never overwritten, and decides nothing (promote refuses it)
        return False
    if stored is None or not isinstance(read_baseline(path).get(BLIND_KEY), dict):  # none to replay: another rule
        return True
    return any(s["completion"] == i.completion and (set(s["scores"]) != set(i.scores) or not all(
        same_score(s["scores"][k], v) for k, v in i.scores.items())) for s, i in zip(stored, items))
