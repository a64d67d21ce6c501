"""What is wrong with a batch of agentic trajectories, by stable code with counts (pure: reads the records that
inspection.trajectories wrote and the environment probes).

Each tool call of a trajectory gets a status from its messages as TRL built them (grpo_trainer._tool_call_loop):
- executed: a tool message follows it;
- failed: the tool message is TRL's `{'error': ...}` (the tool raised, timed out, or does not exist);
- dropped: the trajectory ends on the call with no tool message: TRL rolled the result back because it would
  pass max_completion_length (`budget`), or the turn cap stopped the loop (`turn_cap`);
- unparsed: an assistant turn without a parsed call whose text names a tool or carries a tool-call tag (a
  broken tag: TRL reads it as plain text and counts no call).
"""

from __future__ import annotations

import ast
import json
import re

from mcp_server.inspection.trajectory_models import TrajectoryCode

TAG = re.compile(r"<\s*/?\s*(tool|tol|function|call)\w*\s*>", re.IGNORECASE)
EXAMPLES = 3


def _error_of(content) -> str | None:
    """The error text of TRL's failure result (`str({'error': message})`), else None."""
    if not isinstance(content, str) or not content.startswith("{'error'"):
        return None
    try:
        value = ast.literal_eval(content)
    except (ValueError, SyntaxError):
        return None
    return str(value.get("error")) if isinstance(value, dict) and set(value) == {"error"} else None


def _attempted(text: str, names: list[str]) -> bool:
    return bool(TAG.search(text)) or any(re.search(rf'"{re.escape(n)}"|\b{re.escape(n)}\s*\(', text) for n in names)


def call_statuses(completion: list[dict], names: list[str], turn_cap: int) -> list[dict]:
    """Every tool call (and unparsed attempt) of one trajectory, in order, with its status."""
    calls, call_turns = [], 0
    for index, message in enumerate(completion):
        if message.get("role") != "assistant":
            continue
        tool_calls = message.get("tool_calls") or []
        if not tool_calls:
            text = message.get("content") or ""
            if isinstance(text, str) and _attempted(text, names):
                calls.append({"turn": index, "name": None, "status": "unparsed", "text": text[:300]})
            continue
        call_turns += 1
        results = []
        for follow in completion[index + 1:]:
            if follow.get("role") != "tool":
                break
            results.append(follow)
        for n, call in enumerate(tool_calls):
            function = call.get("function", call)
            entry = {"turn": index, "name": function.get("name"), "arguments": function.get("arguments")}
            if n >= len(results):
                entry["status"] = "dropped"
                entry["reason"] = "turn_cap" if call_turns > turn_cap else "budget"
            elif (error := _error_of(results[n].get("content"))) is not None:
                entry.update(status="failed", error=error)
            else:
                entry.update(status="executed", result=str(results[n].get("content"))[:300])
            calls.append(entry)
    return calls


def _code(code: str, severity: str, count: int, message: str) -> TrajectoryCode:
    return TrajectoryCode(code=code, severity=severity, count=count, message=message)


def _dropped_detail(records: list[dict], budget: int | None) -> str:
    """The numbers behind dropped results: how many tokens each trajectory had written when its result was rolled
    back, and so how few were left for the result and its wrapper."""
    if not budget:
        return ""
    used = sorted(len(r["completion_ids"]) for r in records if any(c.get("reason") == "budget" for c in r["calls"]))
    spans = f"{used[0]}" if used[0] == used[-1] else f"{used[0]}-{used[-1]}"
    left = f"{budget - used[-1]}" if used[0] == used[-1] else f"{budget - used[-1]}-{budget - used[0]}"
    return (f" (they had written {spans} of max_completion_length {budget} tokens: the result and its wrapper did "
            f"not fit in the {left} left)")


def _call_codes(records: list[dict], budget: int | None = None) -> list[TrajectoryCode]:
    codes = []
    unparsed = [r["id"] for r in records if any(c["status"] == "unparsed" for c in r["calls"])]
    if unparsed:
        example = next(c["text"] for r in records for c in r["calls"] if c["status"] == "unparsed")
        codes.append(_code("tool_call_unparsed", "error", len(unparsed),
                           f"{len(unparsed)} of {len(records)} trajectories attempt a tool call TRL does not parse "
                           f"(no call is made; TRL's call_frequency shows only fewer calls), e.g. {example[:120]!r}"))
    failures: dict[str, dict[str, int]] = {}
    for r in records:
        for c in r["calls"]:
            if c["status"] == "failed":
                per = failures.setdefault(str(c["name"]), {})
                per[c["error"]] = per.get(c["error"], 0) + 1
    for name, errors in failures.items():
        total = sum(errors.values())
        listed = "; ".join(f"{n}x {e[:100]!r}" for e, n in list(errors.items())[:EXAMPLES])
        codes.append(_code("tool_failed", "error", total, f"tool {name} failed {total} times: {listed}"))
    for reason, code, why in (("budget", "tool_result_dropped", "their result would pass max_completion_length, so "
                               "TRL rolled it back silently: the model never saw it; raise max_completion_length"),
                              ("turn_cap", "turn_cap_reached", "the trajectory hit max_tool_calling_iterations")):
        hit = [r["id"] for r in records if any(c.get("reason") == reason for c in r["calls"])]
        if hit:
            calls = sum(c.get("reason") == reason for r in records for c in r["calls"])
            detail = _dropped_detail(records, budget) if reason == "budget" else ""
            codes.append(_code(code, "error" if reason == "budget" else "warning", len(hit),
                               f"{len(hit)} of {len(records)} trajectories end on {calls} tool calls with no result"
                               f"{detail}: {why}"))
    return codes


def _reward_codes(records: list[dict]) -> list[TrajectoryCode]:
    paid = [r["id"] for r in records if any(c["status"] == "dropped" for c in r["calls"])
            and not any(c["status"] == "executed" for c in r["calls"])
            and sum(v for v in r["rewards"].values() if v == v) > 0]
    if not paid:
        return []
    return [_code("reward_for_unseen_result", "error", len(paid),
                  f"{len(paid)} trajectories are rewarded although the model never saw a tool result (the call ran, "
                  f"its result was dropped): ids {paid[:10]}")]


def _mask_codes(records: list[dict]) -> list[TrajectoryCode]:
    bad = [r["id"] for r in records if not r["mask_is_tool_results"]]
    if not bad:
        return []
    return [_code("mask_not_tool_results", "error", len(bad),
                  f"in {len(bad)} trajectories the tokens masked from the loss are not exactly the tool results TRL "
                  f"appended: ids {bad[:10]}")]


def _group_codes(records: list[dict]) -> list[TrajectoryCode]:
    groups: dict[int, set] = {}
    for r in records:
        groups.setdefault(r["group"], set()).add(repr(r["prompt"]))
    differ = [g for g, starts in groups.items() if len(starts) > 1]
    if not differ:
        return []
    return [_code("group_start_differs", "error", len(differ),
                  f"in {len(differ)} of {len(groups)} groups the members do not start from the same observation: "
                  "GRPO compares completions of one prompt, so reset(**row) must give the same start for one row")]


def _probe_codes(probes: dict) -> list[TrajectoryCode]:
    codes = []
    for key, code, why in (
        ("replay_differs", "replay_differs", "a fresh environment reset with the same row and given the same calls "
         "returns different observations (seed the environment's randomness from the row)"),
        ("keeps_state", "environment_keeps_state", "a pooled instance reset with a row is not in the state a fresh "
         "instance reset with that row is in: reset must clear everything a rollout changed (TRL reuses instances)"),
        ("errors", "environment_failed", "the environment raised or timed out"),
    ):
        found = probes.get(key) or []
        if found:
            codes.append(_code(code, "error", len(found), f"{why}: {found[:EXAMPLES]}"))
    return codes


def review(records: list[dict], probes: dict, turn_cap: int, budget: int | None = None) -> list[TrajectoryCode]:
    """Every code the trajectories and probes show, errors first (`budget`: max_completion_length)."""
    codes = [*_call_codes(records, budget), *_reward_codes(records), *_mask_codes(records), *_group_codes(records),
             *_probe_codes(probes)]
    return sorted(codes, key=lambda c: c.severity != "error")


SHEET_TRAJECTORIES = 24


def _turn_lines(record: dict) -> list[str]:
    lines = []
    for message in record["completion"]:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call.get("function", call)
                lines.append(f"- **call** `{function.get('name')}({json.dumps(function.get('arguments'))})`")
        elif role == "assistant":
            lines.append(f"- **assistant** {json.dumps(message.get('content') or '')[:300]}")
        else:
            lines.append(f"- **{role}** (masked from the loss) {json.dumps(str(message.get('content')))[:300]}")
    return lines


def render_sheet(records: list[dict], codes: list[TrajectoryCode]) -> str:
    """inspection/trajectories.md: the codes, then the first trajectories turn by turn with each call's status,
    the rewards, and what the loss sees and masks."""
    out = ["# Trajectory review", "", "| code | severity | count | what |", "|---|---|---|---|"]
    out += [f"| `{c.code}` | {c.severity} | {c.count} | {c.message.replace('|', '/')[:300]} |" for c in codes]
    if not codes:
        out.append("| (none) | | | every call parsed and returned, masks are the tool results, resets agree |")
    for record in records[:SHEET_TRAJECTORIES]:
        statuses = ", ".join(c["status"] + (f" ({c.get('reason') or c.get('error')})" if c["status"] in
                                            ("dropped", "failed") else "") for c in record["calls"]) or "no call"
        out += ["", f"## Trajectory {record['id']} (group {record['group']})",
                f"rewards {json.dumps(record['rewards'])}; calls: {statuses}; the loss sees {record['loss_tokens']} "
                f"tokens and masks {record['masked_tokens']} (exactly the tool results: "
                f"{'yes' if record['mask_is_tool_results'] else 'NO'})", "", *_turn_lines(record)]
    if len(records) > SHEET_TRAJECTORIES:
        out += ["", f"({len(records) - SHEET_TRAJECTORIES} more in trajectories.jsonl)"]
    return "\n".join(out) + "\n"
