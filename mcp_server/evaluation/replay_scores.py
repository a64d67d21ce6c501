"""The grader replay's comparison (grader_replay.py holds the design and the tolerance's reasons): whether a score
graded again is the one stored, the per-golden results a baseline keeps, and the lines naming what moved. Apart
from grader_replay so that evaluate_model (which grader_replay imports) files a baseline by the same rule."""

from __future__ import annotations

import math

REL_TOL = 1e-6
ABS_TOL = 1e-9
QUOTED = 3  # items quoted per grader in a refusal


def same_score(stored, now: float) -> bool:
    """Whether `now` is the score the baseline stored as `stored` (the module's tolerance)."""
    if isinstance(stored, bool) or not isinstance(stored, (int, float)) or not isinstance(now, (int, float)):
        return False
    stored, now = float(stored), float(now)
    if math.isnan(stored) or math.isnan(now):
        return math.isnan(stored) and math.isnan(now)
    if math.isinf(stored) or stored.is_integer():
        return now == stored
    return (stored > 0) == (now > 0) and math.isclose(now, stored, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def stored_items(baseline: dict, count: int) -> list[dict] | None:
    """The baseline's per-golden results, each with its completion and scores, in goldens order; None when it keeps
    none for `count` goldens (it cannot be replayed)."""
    items = baseline.get("items")
    if not isinstance(items, list) or len(items) != count or not count:
        return None
    for index, item in enumerate(items):
        if not (isinstance(item, dict) and item.get("index") == index and isinstance(item.get("completion"), str)
                and isinstance(item.get("scores"), dict)):
            return None
    return items


def moved(stored: list[dict], now: list[dict[str, float]], graders: list) -> list[str]:
    """One line per grader whose scores `now` are not the `stored` items' scores: its name, how many items, the
    first QUOTED (index, the reply's start, stored and now)."""
    names = list(dict.fromkeys([*(k for s in now for k in s), *(k for i in stored for k in i["scores"])]))
    specs = [getattr(g, "name", None) or (g.get("name") if isinstance(g, dict) else None) for g in graders]
    lines = []
    for number, name in enumerate(names):
        differ = [(i["index"], i["completion"], i["scores"].get(name, "none"), s.get(name, "none"))
                  for i, s in zip(stored, now) if name not in s or not same_score(i["scores"].get(name), s[name])]
        if not differ:
            continue
        spec = specs[number] if len(specs) == len(names) and specs[number] not in (None, name) else None
        quoted = "; ".join(f"#{index} {_quote(text)}: stored {_shown(then)}, now {_shown(value)}"
                           for index, text, then, value in differ[:QUOTED])
        more = f"; and {len(differ) - QUOTED} more" if len(differ) > QUOTED else ""
        lines.append(f"{name}{f' ({spec})' if spec else ''} scores {len(differ)} of the {len(stored)} replies "
                     f"otherwise: {quoted}{more}")
    return lines


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:40] + ("..." if len(flat) > 40 else ""))


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


# ---------------------------------------------------------------- blind probes (rewards.blind_texts)
BLIND_KEY = "blind_probes"  # a baseline's: {count, scores: one {grader: score} per probe}; the texts never stored


def blind_pairs(baseline: dict, replies: list[str]) -> list[tuple[int, str]]:
    """The baseline's blind probes, (golden index, reply text), derived from the evidence key and what identifies
    the baseline (its goldens, decoding budget and seed) over its replies: the same at baseline and at promote."""
    from mcp_server import evidence
    from mcp_server.rewards import blind_texts

    identity = f"{baseline.get('goldens_sha256')}\0{baseline.get('max_new_tokens')}\0{baseline.get('seed')}"
    return blind_texts.derive(blind_texts.seed(evidence.key(create=True), "baseline", identity), replies)


def blind_grades(grade, rows: list[dict], pairs: list[tuple[int, str]], graders: list, read) -> list[dict]:
    """Each blind probe graded alone by `grade` (evaluate.grade): {grader: score}, or {"raised": the error's type}
    where a grader raises on a reply it never met (recorded at the baseline, expected alike at promote)."""
    out = []
    for index, text in pairs:
        try:
            out.append(grade([rows[index]], [text], graders, read)[0])
        except Exception as exc:  # noqa: BLE001 - the grader's own error on this reply is its grade here
            out.append({"raised": type(exc).__name__})
    return out


def blind_moved(stored, now: list[dict[str, float]], pairs: list[tuple[int, str]]) -> list[str]:
    """One line per grader that scores a blind probe otherwise than `stored` (the baseline's record): the probes by
    number, kind and golden, never by text (a refusal must not tell the texts)."""
    from mcp_server.rewards.blind_texts import KINDS

    scores = stored.get("scores") if isinstance(stored, dict) else None
    if not isinstance(scores, list) or len(scores) != len(now):
        return [f"the baseline's blind probes are not {len(now)} recorded scores"]
    names = list(dict.fromkeys([*(k for s in now for k in s), *(k for s in scores if isinstance(s, dict) for k in s)]))
    lines = []
    for name in names:
        differ = [(k, pairs[k][0], (s if isinstance(s, dict) else {}).get(name, "none"), n.get(name, "none"))
                  for k, (s, n) in enumerate(zip(scores, now)) if s != n and (
                      name not in n or not same_score((s if isinstance(s, dict) else {}).get(name), n[name]))]
        if differ:
            k, index, then, value = differ[0]
            lines.append(f"{name} scores {len(differ)} of the {len(now)} blind probes (replies derived from the "
                         f"evidence key, never stored: nobody in the workspace knows them) otherwise: probe {k} "
                         f"({KINDS[k % len(KINDS)]}, golden #{index}): stored {_shown(then)}, now {_shown(value)}")
    return lines
