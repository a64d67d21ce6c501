"""inspect_rewards: score the stored samples with the run's rewards and write the sheet a person reads.

Rewards are called exactly as TRL's GRPOTrainer calls them (prompts, completions, completion_ids and every
data set column as keyword lists; None -> NaN; the total is the weighted nansum), so the scores on the
sheet are the scores training would give.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import statistics
from collections import Counter
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server import evidence
from mcp_server.inspection import blind_probes, difficulty, row_probes
from mcp_server.inspection.signal_share import review_signal_warning
from mcp_server.inspection.models import (
    MIN_REVIEW_SAMPLES,
    RATE_PROMPTS,
    InspectRequest,
    InspectResult,
    RewardDistribution,
    SuspectSample,
)
from mcp_server.evidence import signed_samples_meta
from mcp_server.inspection.files import read_run_rewards, read_samples, refuse_foreign_review_files
from mcp_server.inspection.launched import refuse_review_if_launched
from mcp_server.inspection.review_sheet import render_review
from mcp_server.inspection.sample_files import refuse_unsampled
from mcp_server.inspection.reward_probes import probe_rewards
from mcp_server.inspection.success import check_threshold, is_format_spec, is_success, is_task_spec, success_rule_text
from mcp_server.inspection.suspects import gold_column, suspect_reasons
from mcp_server.reporting import Report, silent
from mcp_server.rewards import build_reward_funcs, reads, reward_code_sha256
from mcp_server.rewards.spec import RewardSpec
from mcp_server.runs import Run, resolve_run
from mcp_server.worker import runs_in_training
from mcp_server.workspace import json_text, written_digest

HIST_BINS = 12
READS_KEY = "reward_reads"  # review.json: path -> pin of each file the rewards read (rewards.reads)
Z95 = 1.959964


def completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def _select_groups(samples: list[dict], limit: int) -> list[dict]:
    """Whole prompt groups, in order, up to `limit` samples (a group's variance needs all of it)."""
    chosen, groups = [], {}
    for s in samples:
        groups.setdefault(s["prompt_index"], []).append(s)
    for group in groups.values():
        if chosen and len(chosen) + len(group) > limit:
            break
        chosen.extend(group)
    return chosen


def _score(funcs, specs, samples: list[dict], report: Report = silent) -> list[list[float]]:
    """scores[r][i]: reward r on sample i, NaN where the reward returned None."""
    columns: dict[str, list] = {}
    # As TRL: every column but the prompt/completion ones, repeated per completion.
    reserved = {
        "prompt",
        "completion",
        "completion_ids",
        "prompts",
        "completions",
        "trainer_state",
        "log_extra",
        "log_metric",
    }
    keys = [k for k in dict.fromkeys(k for s in samples for k in s.get("columns", {})) if k not in reserved]
    for key in keys:
        columns[key] = [s.get("columns", {}).get(key) for s in samples]
    kwargs = dict(
        prompts=[s["prompt"] for s in samples],
        completions=[s["completion"] for s in samples],
        completion_ids=[s.get("completion_ids") or [] for s in samples],
        **columns,
    )
    # What TRL also passes: no trainer state before training; logging hooks that go nowhere.
    kwargs.update(trainer_state=None, log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None)
    scores = []
    for i, (func, spec) in enumerate(zip(funcs, specs)):
        name = getattr(func, "__name__", spec.name)
        try:
            with reads.calling(name):  # the files it opens are recorded (rewards.reads)
                out = func(**kwargs)
                if inspect.isawaitable(out):  # TRL accepts async reward functions too
                    out = asyncio.run(out)
        except UserInputError as exc:
            raise UserInputError(f"rewards[{i}].{exc.field}", str(exc).split(": ", 1)[-1]) from None
        except Exception as exc:  # a reward that crashes on real samples would crash training too
            raise UserInputError(f"rewards[{i}]", f"{name} raised {type(exc).__name__} on the samples: {exc}") from None
        out = list(out) if out is not None else []
        if len(out) != len(samples):
            raise UserInputError(f"rewards[{i}]", f"{name} returned {len(out)} scores for {len(samples)} completions")
        scores.append([math.nan if v is None else float(v) for v in out])
        report(i + 1, len(funcs), f"scored {len(samples)} samples with {name} ({i + 1}/{len(funcs)} rewards)")
    return scores


def _score_one(func, spec: RewardSpec, samples: list[dict]) -> list[float]:
    """One reward's scores on `samples`, called as TRL calls it (reward_probes' replies built to be right or wrong)."""
    return _score([func], [spec], samples)[0]


def _distribution(name: str, weight: float, values: list[float], groups: list[list[int]]) -> RewardDistribution:
    real = [v for v in values if not math.isnan(v)]
    hist = _histogram(real)
    return RewardDistribution(
        name=name,
        weight=weight,
        mean=round(statistics.fmean(real), 4) if real else None,
        std=round(statistics.pstdev(real), 4) if real else None,
        min=min(real) if real else None,
        max=max(real) if real else None,
        zero_share=round(sum(v == 0 for v in real) / len(values), 4) if values else 0.0,
        none_count=len(values) - len(real),
        histogram=hist,
        zero_variance_groups=sum(_zero_variance([values[i] for i in g]) for g in groups),
    )


def _histogram(values: list[float]) -> dict[str, int]:
    """Count per distinct score; continuous scores (more than HIST_BINS values) in equal-width ranges."""
    counts = Counter(round(v, 3) for v in values)
    if len(counts) <= HIST_BINS:
        return {f"{v:g}": c for v, c in sorted(counts.items())}
    lo, hi = min(values), max(values)
    width = (hi - lo) / HIST_BINS
    bins = Counter(min(int((v - lo) / width), HIST_BINS - 1) for v in values)
    return {f"{lo + b * width:.3g}..{lo + (b + 1) * width:.3g}": bins[b] for b in sorted(bins)}


def _zero_variance(values: list[float]) -> bool:
    real = [v for v in values if not math.isnan(v)]
    return len(values) > 1 and (not real or max(real) - min(real) < 1e-9)


def wilson(successes: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (sound at 0 of n, unlike the normal approximation)."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = successes / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def _groups(samples: list[dict]) -> list[list[int]]:
    order = list(dict.fromkeys(s["prompt_index"] for s in samples))
    index: dict = {g: [] for g in order}
    for i, s in enumerate(samples):
        index[s["prompt_index"]].append(i)
    return [index[g] for g in order]


@runs_in_training  # needs torch / TRL / transformers: the training interpreter's worker
def _refuse_rewrite(run) -> None:
    """inspect_rewards replaces its own review files, never a person's, and never a launched run's: the review a
    launch went through is evidence (issue 49)."""
    refuse_review_if_launched(run)
    refuse_foreign_review_files(run, "inspect_rewards")


def inspect_rewards(request: InspectRequest, report: Report = silent) -> InspectResult:
    """Score every sample (the base success rate uses them all); the sheet shows the first 50-100. Every file the
    rewards open while they are imported and score is recorded (rewards.reads) and kept in review.json."""
    with reads.recording() as read:
        return _inspect(request, read, report)


def _inspect(request: InspectRequest, read: reads.Reads, report: Report) -> InspectResult:
    run = resolve_run(request.run)
    _refuse_rewrite(run)
    all_samples, data = read_samples(run, with_bytes=True)  # one read: scored, checked and hashed alike
    refuse_unsampled(run, data)  # issue 48 round 12 F2: completions the model never wrote
    meta = signed_samples_meta(run)[0] or {}  # only what the sampler signed says how the samples were drawn
    specs, source = _review_specs(request, run)
    funcs = build_reward_funcs(specs)
    reward_hash = reward_code_sha256(specs)
    samples, warnings = _sheet_samples(all_samples, request.max_samples, meta, run)
    names = _unique_names([getattr(f, "__name__", s.name) for f, s in zip(funcs, specs)])
    weights = [s.weight for s in specs]
    report(0, len(funcs), f"scoring {len(all_samples)} samples with {len(funcs)} rewards")
    all_scores = _score(funcs, specs, all_samples, report)
    check_threshold(specs, all_scores, request.success_threshold)
    probes = row_probes.review_rows(run, _score, funcs, specs, names, all_samples, all_scores, meta, warnings, report)
    all_totals = [_total(weights, [column[i] for column in all_scores]) for i in range(len(all_samples))]
    all_success = [is_success(specs, all_scores, i, all_totals[i], request.success_threshold)
                   for i in range(len(all_samples))]
    position = {id(s): i for i, s in enumerate(all_samples)}  # the sheet's samples: the first whole groups
    shown = [position[id(s)] for s in samples]
    scores = [[column[i] for i in shown] for column in all_scores]
    totals, successes = [all_totals[i] for i in shown], [all_success[i] for i in shown]
    groups = _groups(samples)
    distributions = [_distribution(n_, w, scores[r], groups) for r, (n_, w) in enumerate(zip(names, weights))]
    distributions.append(_distribution("total", 1.0, totals, groups))
    golds = [gold_column(f, {k for s in samples for k in s.get("columns", {})}) for f in funcs]
    rows, likely = _sheet_rows(samples, specs, names, scores, totals, successes, request.max_suspects, golds)
    rate_groups = _groups(all_samples)
    solved = sum(any(all_success[i] for i in g) for g in rate_groups)
    base_rate = solved / len(rate_groups)
    interval = wilson(solved, len(rate_groups))
    format_idx = [r for r, s in enumerate(specs) if is_format_spec(s)]
    task_idx = [r for r, s in enumerate(specs) if is_task_spec(s)]
    well = [r["well_formed"] for r in rows]
    malformed = sum(w is False for w in well) if format_idx else None
    wrong = sum(w is True and not r["success"] for w, r in zip(well, rows)) if format_idx and task_idx else None
    truncated = sum(bool(r["truncated"]) for r in rows)
    differs = (list(meta.get("differs_from_config") or []) if meta
               else ["samples.meta.json is missing: nothing says how these samples were drawn"])
    warnings += _sheet_warnings(len(rows), truncated, bool(format_idx), len(rate_groups), interval, meta, differs)
    can_learn = base_rate > 0
    filtered = difficulty.filter_or_standing(run, request.difficulty_filter, all_samples, all_success, meta)
    result = InspectResult(
        run_dir=str(run.dir),
        review_md_path=str(run.review_md),
        review_jsonl_path=str(run.review_jsonl),
        num_samples=len(rows),
        num_prompts=len(groups),
        samples_per_prompt=max(len(g) for g in groups),
        rewards=specs,
        rewards_source=source,
        reward_code_sha256=reward_hash,
        samples_sha256=hashlib.sha256(data).hexdigest(),
        distributions=distributions,
        zero_variance_groups=distributions[-1].zero_variance_groups,
        well_formed_but_wrong=wrong,
        malformed=malformed,
        truncated=truncated,
        likely_misscored=likely,
        reward_probes=probe_rewards(funcs, specs, names, all_samples, all_scores, golds, _score_one),
        row_probes=row_probes.summary(probes),
        success_rule=success_rule_text(specs, request.success_threshold),
        base_success_rate=base_rate,
        base_success_interval=interval,
        rate_prompts=len(rate_groups),
        mean_success_rate=sum(all_success) / len(all_samples),
        grpo_can_learn=can_learn,
        route="review" if can_learn else "sft_first",
        lengths=meta.get("lengths"),
        differs_from_config=differs,
        difficulty_filter=filtered,
        warnings=warnings,
        next_step=_next_step(can_learn, len(rate_groups), max(len(g) for g in rate_groups), interval, meta),
    )
    result = difficulty.with_next_step(result)
    result.warnings += filter(None, [review_signal_warning(result.model_dump())])  # verdict, launch: again (walk 11)
    _record(run, result, read, rows, meta, request.success_threshold, probes, (funcs, specs, names))
    return result


def _record(run: Run, result: InspectResult, read: reads.Reads, rows: list[dict], meta: dict,
            success_threshold: float | None, probes: dict, rewards: tuple) -> None:
    """The review's files (the files the rewards read and the child processes they start named), then its blind
    probes where this process holds the key (else the caller derives and signs them: blind_probes)."""
    result.reward_files = [p for p, pin in read.pins().items() if not pin.get("written")]
    result.warnings += [f"{name} starts child processes ({'; '.join(' '.join(argv)[:120] for argv in started)}): "
                        "the files their arguments name are pinned, but what those processes read themselves is "
                        "judged only by the trainer's replay (the reviewed samples, the row probes, the blind probes)"
                        for name, started in read.children.items()]
    review_sha256 = _write_review(run, result, rows, meta, success_threshold, read.pins(), probes)
    if evidence.ORACLE is None:
        blind_probes.record_review(run, lambda probe_samples: blind_probes.scored(*rewards, probe_samples, _score),
                                   review_sha256)


def score_blind_probes(run_dir: str, probe_samples: list[dict]) -> dict[str, list]:
    """The keyless worker's side of blind_probes.record_review: the review's rewards (review.json's) score the
    probes its caller derived and handed over as data."""
    run = Run(Path(run_dir))
    specs = [RewardSpec.model_validate(s) for s in json.loads(run.review.read_text(encoding="utf-8"))["result"]
             ["rewards"]]
    funcs = build_reward_funcs(specs)
    names = _unique_names([getattr(f, "__name__", s.name) for f, s in zip(funcs, specs)])
    return blind_probes.scored(funcs, specs, names, probe_samples, _score)


def _review_specs(request: InspectRequest, run: Run) -> tuple[list[RewardSpec], str]:
    """The rewards to review with (the request's, else the run's train/rewards.json) and where they came from."""
    if request.rewards is None:
        return [RewardSpec.model_validate(s) for s in read_run_rewards(run)], "train/rewards.json"
    specs = list(request.rewards)
    if not specs:
        raise UserInputError("rewards", "an empty list: give at least one reward spec, or leave it out to use "
                                        "train/rewards.json")
    return specs, "request"


def _sheet_samples(all_samples: list[dict], max_samples: int, meta: dict, run: Run) -> tuple[list[dict], list[str]]:
    """The samples the sheet shows (whole prompt groups, up to `max_samples`) and what to warn about them; too few
    to review is refused unless the data set has no more prompts."""
    samples = _select_groups(all_samples, max_samples)
    warnings = []
    if len(samples) < MIN_REVIEW_SAMPLES:
        data_rows = meta.get("dataset_rows")
        n = meta.get("n") or max(1, len(samples))
        if data_rows is None or meta.get("num_prompts", 0) < data_rows:
            raise UserInputError(
                "run",
                f"only {len(samples)} samples in {run.samples}; a review needs {MIN_REVIEW_SAMPLES}-"
                f"{max_samples}. Run sample_completions with num_prompts >= {-(-MIN_REVIEW_SAMPLES // n)} "
                f"(n={n}).",
            )
        warnings.append(f"only {len(samples)} samples: the data set has only {data_rows} prompts")
    if len(samples) < len(all_samples):
        warnings.append(f"the sheet shows the first {len(samples)} of {len(all_samples)} samples (whole prompt "
                        "groups); the base success rate counts them all")
    return samples, warnings


def _total(weights: list[float], scores: list[float]) -> float:
    """One sample's total as TRL computes it: the weighted nansum; all-None stays unscored (NaN)."""
    parts = [w * v for w, v in zip(weights, scores) if not math.isnan(v)]
    return sum(parts) if parts else math.nan


def _sheet_rows(samples: list[dict], specs: list[RewardSpec], names: list[str], scores: list[list[float]],
                totals: list[float], successes: list[bool], max_suspects: int,
                gold_columns: list[str | None]) -> tuple[list[dict], list[SuspectSample]]:
    """review.jsonl's rows (one per shown sample, with its scores and flags) and the likely mis-scored samples,
    most suspect first (`gold_columns`: the column each reward reads as the gold, suspects.gold_column)."""
    format_idx = [r for r, s in enumerate(specs) if is_format_spec(s)]
    rows, suspects = [], []
    for i, s in enumerate(samples):
        text = completion_text(s["completion"])
        reasons = suspect_reasons(text, s.get("columns", {}), specs, names, [scores[r][i] for r in range(len(specs))],
                                  bool(s.get("truncated", False)), totals[i], completion_text(s["prompt"]),
                                  gold_columns)
        if reasons:
            suspects.append(
                (max(w for w, _ in reasons), s["id"], s["prompt_index"], [r for _, r in reasons], totals[i])
            )
        rows.append(
            {
                "id": s["id"],
                "prompt_index": s["prompt_index"],
                "sample_index": s["sample_index"],
                "prompt": s["prompt"],
                "completion": text,
                "columns": s.get("columns", {}),
                "scores": {names[r]: _json_float(scores[r][i]) for r in range(len(names))},
                "total": _json_float(totals[i]),
                "success": successes[i],
                "well_formed": all(scores[r][i] > 0 for r in format_idx) if format_idx else None,
                "truncated": s.get("truncated", False),
                "finish_reason": s.get("finish_reason"),
                "suspect_reasons": [r for _, r in reasons],
            }
        )
    suspects.sort(key=lambda x: (-x[0], x[1]))
    likely = [
        SuspectSample(id=sid, prompt_index=p, reasons=reasons, total=_json_float(total) or 0.0)
        for _, sid, p, reasons, total in suspects[:max_suspects]
    ]
    return rows, likely


def _sheet_warnings(shown: int, truncated: int, has_format: bool, rate_prompts: int, interval: tuple[float, float],
                    meta: dict, differs: list[str]) -> list[str]:
    """What the reader should know before trusting the sheet: truncation, what is not counted, a route to SFT on
    too few prompts (walk 11: the CPU's default 16 always set off "sample at least 64", though a success among
    them already settles the route; the interval is on the sheet either way), samples that differ from what
    training would draw."""
    warnings = []
    if truncated > shown // 4:
        warnings.append(
            f"{truncated} of {shown} completions hit the length limit: raise max_completion_length or expect "
            "truncated completions in training too"
        )
    if not has_format:
        warnings.append("no format_reward configured: malformed and well-formed-but-wrong counts are not computed")
    if _few(rate_prompts, meta) and not interval[0]:  # only where the route rests on it: no prompt solved
        warnings.append(
            f"no success among {rate_prompts} prompts: that many (a CPU's default) show how the reward scores real "
            f"replies, and one success would show the task within reach, but none does not rule out a base rate up "
            f"to {interval[1]:.0%} (95% interval): sample {RATE_PROMPTS} prompts before routing to SFT on it"
        )
    if differs:
        warnings.append("these samples cannot back a verdict, they differ from what training would sample: "
                        + "; ".join(differs))
    return warnings + [w for w in meta.get("warnings") or [] if isinstance(w, str)]  # sampling's own


def _few(rate_prompts: int, meta: dict) -> bool:
    """Whether the base success rate rests on fewer prompts than RATE_PROMPTS while the data set holds more."""
    return rate_prompts < RATE_PROMPTS and (meta.get("dataset_rows") or 0) > rate_prompts


def _next_step(can_learn: bool, rate_prompts: int, k: int, interval: tuple[float, float], meta: dict) -> str:
    """The route's words. One resting on few prompts (a CPU's default sample) says so and how to firm it up
    (walk 10: "ROUTE: SFT FIRST" on 16 prompts, under a warning that 16 are too few to route on)."""
    firm = (f" This route rests on only {rate_prompts} prompts (the rate may be up to {interval[1]:.0%}): "
            f"sample again with num_prompts {RATE_PROMPTS} (--num-prompts {RATE_PROMPTS}) to confirm it before "
            "acting on it.") if _few(rate_prompts, meta) and not can_learn else ""
    if can_learn:
        return (
            "A person reads inspection/review.md (start with the likely mis-scored samples), then records the verdict "
            "with record_inspection_verdict (per-sample agree/disagree, pass/fail, who)."
        )
    return (
        f"GRPO cannot learn yet: none of the {rate_prompts} prompts got a single success in {k} samples "
        f"(95% interval of the rate {interval[0]:.0%}-{interval[1]:.0%}), so every group's advantage is zero. "
        "First check the likely mis-scored samples (a wrong reward also gives zero); if the scores are right, "
        "do SFT first (or use easier prompts or a stronger base model), then sample and inspect again. The "
        "gate stays closed until a prompt succeeds." + firm
    )


def _write_review(run: Run, result: InspectResult, rows: list[dict], meta: dict,
                  success_threshold: float | None, reward_reads: dict, probes: dict) -> str:
    """review.jsonl (the rows), review.md (the sheet a person reads) and review.json (the result the verdict and
    the gate read, with the training rows' probes the trainer replays: inspection.row_probes); returns review.json's
    sha256 as written."""
    rows_text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    rows_sha256 = written_digest(run.inside(run.review_jsonl), rows_text)
    sheet_sha256 = written_digest(run.review_md, render_review(result, rows, meta, run))
    # The sheet the person reads and the rows it shows are bound to the review (and so to the verdict), by the
    # bytes written here, never the files read back (round 18): an edited or replaced review.md or review.jsonl
    # cannot back a verdict (inspection.gate).
    return written_digest(run.review, json_text({
        "result": result.model_dump(mode="json"), "reviewed_ids": [r["id"] for r in rows],
        "success_threshold": success_threshold, "review_md_sha256": sheet_sha256, "review_jsonl_sha256": rows_sha256,
        READS_KEY: reward_reads,  # the files the rewards read (rewards.reads)
        row_probes.KEY: probes}))


def _unique_names(names: list[str]) -> list[str]:
    seen: Counter = Counter()
    out = []
    for name in names:
        out.append(name if not seen[name] else f"{name}_{seen[name]}")
        seen[name] += 1
    return out


def _json_float(value: float):
    return None if math.isnan(value) else round(value, 6)
