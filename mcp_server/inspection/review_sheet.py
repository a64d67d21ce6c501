"""review.md: the sheet a person reads before recording a verdict (inspect_rewards writes it beside
review.jsonl and review.json)."""

from __future__ import annotations

import json
import re

from mcp_server.inspection.excerpt import excerpt
from mcp_server.inspection.models import InspectResult
from mcp_server.model_ref import shown_name
from mcp_server.runs import Run
from mcp_server.userfiles import REVIEW_SHEET_TITLE

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _readable(text: str) -> str:
    """Control characters shown as \\xNN so the sheet renders (and the reader sees they are there)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}text\n{_readable(text)}\n{ticks}"


def _code(text: str) -> str:
    """An inline code span (so tags like <answer> show instead of vanishing as HTML)."""
    text = " ".join(text.split())
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _prompt_block(prompt) -> str:
    if isinstance(prompt, list):
        return "\n\n".join(f"**{m.get('role', '?')}:**\n{_fence(str(m.get('content', '')))}" for m in prompt)
    return _fence(str(prompt))


def _fmt(value) -> str:
    return "None" if value is None else f"{value:g}"


def render_review(result: InspectResult, rows: list[dict], meta: dict, run: Run) -> str:
    """review.md: how to read it, the summary, the reward table, the likely mis-scored samples, then every sample
    by prompt."""
    lines = [
        f"{REVIEW_SHEET_TITLE}{run.name}",
        "",
        "Read every sample and ask: would I give this completion these scores? Disagree where a reward "
        "pays for something wrong or misses something right. Then record the verdict: "
        "`record_inspection_verdict` (CLI: `llm-finetuning record-inspection-verdict RUN --verdict pass|fail "
        "--reviewer NAME [--agree-rest] [--disagree IDS]`). Changing the model, the data, the sampling settings, a "
        "reward (or a module it imports) or train/train.py afterwards voids the verdict.",
        "",
        "## Summary",
        "",
        *_summary(result, meta),
        "",
        *_reward_table(result),
        "",
        "## Read these first: likely mis-scored",
        "",
    ]
    lines += [f"- Reward `{p.reward}`: " + "; ".join(p.reasons) for p in result.reward_probes if p.flagged]
    lines += [f"- Sample {s.id} (prompt {s.prompt_index}): " + "; ".join(s.reasons) for s in result.likely_misscored]
    if lines[-1] == "":
        lines.append("- none flagged (still read the samples: the checks are heuristics)")
    lines += ["", "## Samples", "", *_samples(result, rows), *_built_replies(result)]
    return "\n".join(lines) + "\n"


def _built_replies(result: InspectResult) -> list[str]:
    """The replies reward_probes built to be right or wrong, and what each reward paid them: how to reproduce a
    flag (call the reward on the reply, the row's prompt and columns)."""
    if not result.reward_probes:
        return []
    lines = ["## Replies built to be right or wrong", "",
             "Each reward of unknown rule (and each answer verifier) was called as training calls it, with a data "
             "row's prompt and columns, on replies built from that row: right ones (the gold g alone, \"The answer "
             "is g.\", \"g, not w\"), wrong ones (w alone, \"The answer is w.\", \"w, not g\"), and a real sample "
             "the reward paid, as sampled, then wrong: with \" Actually, the answer is w.\" appended, and with g "
             "replaced by w. w is another row's gold of g's length, else g+1 or g-1. Flagged: a wrong reply paid at "
             "least as much as its twin; a reward that pays neither bare right form needs a format, and only its "
             "swapped samples count (mcp_server/inspection/reward_probes.py).", ""]
    for probe in result.reward_probes:
        judged = any((b.score or 0) > 0 for b in probe.replies if b.built_to_be != "wrong")
        verdict = "FLAGGED" if probe.flagged else "no flag" if judged else "nothing to judge (it paid no right reply)"
        lines += [f"### {probe.reward}: {verdict}", "",
                  "| row | g | w | built to be | how | reply | score |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {b.row} | {_code(b.gold)} | {_code(b.wrong)} | {b.built_to_be} | {b.form} | "
                  f"{_code(excerpt(_readable(b.text), 160)).replace('|', '&#124;')} | {_fmt(b.score)} |"
                  for b in probe.replies]
        lines.append("")
    return lines


def _summary(result: InspectResult, meta: dict) -> list[str]:
    """The summary's bullets: what was sampled and scored, the base success rate, lengths, counts, warnings."""
    lines = [
        f"- Samples: {result.num_samples} ({result.num_prompts} prompts x {result.samples_per_prompt})"
        + (f", model `{shown_name(meta['model'])}`" if meta.get("model") else "")
        + (f", engine {meta['engine']}" if meta.get("engine") else "")
        + "".join(f", {k} {v}" for k, v in (meta.get("generation") or {}).items() if v is not None),
        f"- Rewards ({result.rewards_source}): "
        + ", ".join(f"`{s.name}` x{s.weight:g}" + (f" {s.params}" if s.params else "") for s in result.rewards),
        f"- Success: {result.success_rule}",
        *([f"- Files the rewards read (pinned by the verdict): {', '.join(result.reward_files)}"]
          if result.reward_files else []),
        *([f"- Training rows (the trainer scores them again before its first step): {result.row_probes}"]
          if result.row_probes else []),
        f"- Base success rate (prompts with >= 1 success in {result.samples_per_prompt}): "
        f"**{result.base_success_rate:.0%}** of {result.rate_prompts} prompts (95% interval "
        f"{result.base_success_interval[0]:.0%}-{result.base_success_interval[1]:.0%}); per-sample success "
        f"{result.mean_success_rate:.0%}",
    ]
    lengths = result.lengths or {}
    if lengths.get("completion_tokens"):
        tokens = lengths["completion_tokens"]
        lines.append(
            f"- Completion lengths (tokens, {lengths['completions']} completions): median {tokens['p50']}, p90 "
            f"{tokens['p90']}, p99 {tokens['p99']}, max {tokens['max']}; {lengths['truncated_share']:.0%} cut off at "
            f"{lengths['max_new_tokens']}. {lengths.get('advice', '')}"
        )
        patch = lengths.get("config_patch") or {}
        lines.append(f"- Config patch from these samples: `{json.dumps(patch)}`" if patch else
                     "- Config patch from these samples: none (train/config.yaml holds these settings already)")
    if result.differs_from_config:
        lines.append("- **These samples cannot back a verdict**: " + "; ".join(result.differs_from_config))
    if not result.grpo_can_learn:
        lines.append(f"- **Route: SFT first.** {result.next_step}")
    lines += [
        f"- Zero-variance groups (total): {result.zero_variance_groups} of {result.num_prompts} (no learning signal)",
        f"- Malformed: {_fmt(result.malformed)}; well-formed but wrong: {_fmt(result.well_formed_but_wrong)}; "
        f"truncated: {result.truncated}",
    ]
    lines += _difficulty_lines(result)
    return lines + [f"- Warning: {w}" for w in result.warnings if not w.startswith("these samples cannot back")]


def _difficulty_lines(result: InspectResult) -> list[str]:
    """The difficulty filter (inspection.difficulty): how many prompts went and why."""
    applied = result.difficulty_filter
    if applied is None:
        return []
    when = "applied by this review" if applied.applied_now else "the data these samples come from went through it"
    return [f"- Difficulty filter ({when}): {applied.dropped} of {applied.rows_before} prompts of `{applied.source}` "
            f"dropped ({applied.always_solved} always solved, {applied.never_solved} never solved, "
            f"{applied.kept_by_share} of those kept by keep_share; {applied.judged} judged, {applied.unjudged} kept "
            f"for want of samples); training reads `{applied.data_file}` ({applied.rows_after} prompts). Rule: "
            f"{applied.rule}"]


def _reward_table(result: InspectResult) -> list[str]:
    """One row per reward and the total: its weight, spread, zeros, Nones, zero-variance groups and histogram."""
    lines = [
        "| reward | weight | mean | std | min | max | zeros | None | zero-var groups | scores (value: count) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in result.distributions:
        hist = ", ".join(f"{k}: {v}" for k, v in d.histogram.items())
        lines.append(
            f"| {d.name} | {d.weight:g} | {_fmt(d.mean)} | {_fmt(d.std)} | {_fmt(d.min)} | {_fmt(d.max)} | "
            f"{d.zero_share:.0%} | {d.none_count} | {d.zero_variance_groups} | {hist} |"
        )
    return lines


def _samples(result: InspectResult, rows: list[dict]) -> list[str]:
    """Every sample under its prompt (shown once, with its data columns): the completion, its scores, its flags."""
    names = [d.name for d in result.distributions if d.name != "total"]
    suspect_ids = {s.id for s in result.likely_misscored}
    lines = []
    current = None
    for r in rows:
        if r["prompt_index"] != current:
            current = r["prompt_index"]
            lines += [f"### Prompt {current}", "", _prompt_block(r["prompt"]), ""]
            if r["columns"]:
                lines += [
                    "Data: " + "; ".join(f"`{k}` = {_code(excerpt(_readable(str(v)), 200))}"
                                         for k, v in r["columns"].items()),
                    "",
                ]
        flags = [
            f
            for f, on in (("SUCCESS", r["success"]), ("TRUNCATED", r["truncated"]), ("CHECK", r["id"] in suspect_ids))
            if on
        ]
        lines += [
            f"#### Sample {r['id']} (prompt {r['prompt_index']}, #{r['sample_index']}): total {_fmt(r['total'])}"
            + (f" [{', '.join(flags)}]" if flags else ""),
            "",
            _fence(r["completion"]),
            "",
            "| " + " | ".join(names + ["total"]) + " |",
            "|" + "---|" * (len(names) + 1),
            "| " + " | ".join(_fmt(r["scores"][n]) for n in names) + f" | {_fmt(r['total'])} |",
            "",
        ]
        if r["suspect_reasons"]:
            lines += ["Check: " + "; ".join(r["suspect_reasons"]), ""]
    return lines
