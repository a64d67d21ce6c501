"""The trainer replays the review before its first step: same samples, same rewards, same scores (issue 48).

A reward's score can depend on inputs no pin names: an environment variable, a file's size or mtime, the output of
a process it starts, the clock. Pinning each route one by one never ends; the trainer checks the result instead.
After `reviewed_reward_funcs` built the reward functions it is about to train with (in its own process and
environment), `replay_review` scores the verdict's samples (inspection/samples.jsonl, whose bytes the verdict
pins) with them through the review's own scoring code (review._score: one batch, called as TRL calls rewards) and
compares each reviewed sample's score per reward with the one review.jsonl recorded (pinned: the verdict pins
review.json, which pins review.jsonl). Values the review stored (rounded to 6 decimals, None for NaN) are compared
exactly after the same rounding, or within math.isclose(rel_tol=1e-9, abs_tol=1e-12). Any other score exits
(status 3) before training, naming the reward, how many samples differ and one example; the cost is one line in
the trainer's log. Agentic runs replay too (their trajectories are stored samples, scored by inspect_rewards like
any); a code-execution reward runs its sandbox again (the replay costs what the review's scoring cost). Nothing is
replayed while sampling (inspection.trained.sampling), nor without a verdict (nothing was reviewed), nor yet in a
run of several processes (WORLD_SIZE > 1: replayed on each rank, a two-node SLURM run hung at its first step; said
in the log); a resume replays again (its environment may differ). A replay shows an input that changed since the
review, not reward code written to tell a replay from training: that is what reading the reviewed code is for.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time

from mcp_server.errors import UserInputError
from mcp_server.runs import Run
from mcp_server import userfiles

CAUSES = ("it reads an input outside the completion and its row that changed since the review (an environment "
          "variable, a file's metadata, a process it starts, the clock or randomness)")


class ScoresChanged(SystemExit):
    """The rewards this process would train with do not score the reviewed samples as the review did."""


def read_bytes(path) -> bytes | None:
    """A run file's bytes from one open of a regular file (userfiles.read_bytes), None where it cannot be read
    (missing, not a regular file, unreadable): the caller refuses that as a file the verdict does not pin."""
    try:
        return userfiles.read_bytes(path, "run")
    except UserInputError:
        return None


def _refuse(line: str) -> None:
    print(f"llm-finetuning: refusing to train: {line}", file=sys.stderr, flush=True)
    raise ScoresChanged(3)


def _pinned(data: bytes | None, sha: object, what: str) -> bytes:
    if data is None or hashlib.sha256(data).hexdigest() != sha:
        _refuse(f"{what} is not the one the inspection verdict signed (changed or removed since), so the review "
                "cannot be replayed. Put it back, or sample and inspect again and record a new verdict.")
    return data


def _lines(data: bytes) -> list[dict]:
    # "\n" only, as inspection.files.read_samples: a completion may hold U+2028
    return [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]


def reviewed(run: Run, verdict: dict, samples: bytes | None = None) -> tuple[list[dict], list[dict]]:
    """(every sample the review scored, the rows review.jsonl recorded), each file's bytes the ones the verdict
    pins (samples.jsonl and review.json by hash, review.jsonl by review.json's hash); `samples`: samples.jsonl's
    bytes as the point-of-use check read them (None: read here)."""
    samples = _pinned(samples if samples is not None else read_bytes(run.samples), verdict.get("samples_sha256"),
                      "inspection/samples.jsonl")
    review = json.loads(_pinned(read_bytes(run.review), verdict.get("review_sha256"), "inspection/review.json"))
    rows = _pinned(read_bytes(run.review_jsonl), review.get("review_jsonl_sha256"), "inspection/review.jsonl")
    return _lines(samples), _lines(rows)


def same(stored, now: float) -> bool:
    """Whether `now` is the score the review stored as `stored` (review._json_float: None for NaN, 6 decimals)."""
    if stored is None:
        return math.isnan(now)
    if isinstance(stored, bool) or not isinstance(stored, (int, float)) or math.isnan(now):
        return False
    return round(now, 6) == stored or math.isclose(now, stored, rel_tol=1e-9, abs_tol=1e-12)


def differences(names: list[str], scores: list[list[float]], samples: list[dict], rows: list[dict]) -> list[str]:
    """One line per reward whose score now (scores[r][i] on samples[i]) differs from a reviewed row's: how many of
    the reviewed samples differ and the first (sample id, reviewed score, score now)."""
    position = {s.get("id"): i for i, s in enumerate(samples)}
    lines = []
    for r, name in enumerate(names):
        differ = []
        for row in rows:
            recorded = row.get("scores") if isinstance(row.get("scores"), dict) else {}
            at = position.get(row.get("id"))
            now = scores[r][at] if at is not None else math.nan
            if at is None or name not in recorded or not same(recorded[name], now):
                differ.append((row.get("id"), recorded.get(name, "none recorded"), now))
        if differ:
            sid, then, now = differ[0]
            lines.append(f"the reward {name} scores {len(differ)} of the {len(rows)} reviewed samples differently "
                         f"than the review recorded (sample {sid}: reviewed {_shown(then)}, now {_shown(now)})")
    return lines


def _shown(value) -> str:
    return "None" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:g}" \
        if isinstance(value, (int, float)) else str(value)


def replay(funcs: list, specs: list, samples: list[dict], rows: list[dict]) -> tuple[list[str], list[str]]:
    """Score `samples` with `funcs` as the review did (review._score) and compare with `rows`: (the reward names,
    the differences: empty when every reviewed score is the same). ScoresChanged when a reward raises or returns
    the wrong number of scores on them."""
    from mcp_server.inspection.review import _score, _unique_names

    try:
        scores = _score(funcs, specs, samples)
    except UserInputError as exc:
        _refuse(f"the review cannot be replayed: {exc}. The reviewed rewards scored these samples at review: "
                f"{CAUSES}.")
    names = _unique_names([getattr(f, "__name__", s.name) for f, s in zip(funcs, specs)])
    return names, differences(names, scores, samples, rows)


def replay_review(run: Run, rewards: list, funcs: list, verdict: dict | None, samples: bytes | None = None) -> None:
    """The trainer's replay (the module's doc): returns when every reviewed score is the same, after one line on
    stderr saying what it cost; ScoresChanged (exit status 3) naming each reward that scores otherwise."""
    from mcp_server.rewards.spec import RewardSpec

    if verdict is None or not (verdict.get("samples_sha256") and verdict.get("review_sha256")):
        # no verdict, or a record that signs no review (not a verdict the gate opens for, and one the point-of-use
        # check refuses before this: its samples are not the ones it signed)
        print("llm-finetuning: the inspection verdict signs no review to replay", file=sys.stderr, flush=True)
        return
    started = time.monotonic()
    all_samples, rows = reviewed(run, verdict, samples)
    specs = [RewardSpec(name=s) if isinstance(s, str) else RewardSpec.model_validate(s) for s in rewards]
    names, differ = replay(funcs, specs, all_samples, rows)
    if differ:
        _refuse("; ".join(differ) + f": {CAUSES}. Put that input back as it was, or make the reward depend only "
                "on the completion and its row, then sample and inspect again, record a new verdict and launch again.")
    compared = "" if len(rows) == len(all_samples) else f" ({len(rows)} reviewed compared)"
    print(f"llm-finetuning: replayed the review: {len(all_samples)} samples x {len(names)} rewards{compared}, "
          f"same scores, {time.monotonic() - started:.2f} s", file=sys.stderr, flush=True)
