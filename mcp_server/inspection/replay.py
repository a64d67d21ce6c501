"""The trainer replays the review before its first step, at every logging step and after the last step: same
samples, same rewards, same scores (issue 48).

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
replayed while sampling (inspection.trained.sampling), nor without a verdict (nothing was reviewed); a resume
replays again (its environment may differ). Once is not enough (round 16, G1: an input changed after step 1 trained
at 5.0 and the run "succeeded"): the first replay that passed is kept (`AGAIN`) and run again at every logging step,
on every rank alike (training.trainer.script_support.ReplayAgain), and after the last step, before the run is
recorded succeeded; a moved score stops the run there (exit 3, the run failed), and the log's last line says what
the replays during training cost (each costs what the first did: the review's scoring, the row probes). A replay
shows an input that changed since the review, not reward code written to tell a replay from training: that is what
reading the reviewed code is for.

The samples cover only the prompts the review sampled: an input keyed by the prompt (an answer key read through a
process, a table in a variable) changed for the rows nobody sampled would replay the same (round 15, G2). So the
replay also scores the review's row probes (inspection.row_probes): each training row, as the trainer's loader read
and its point-of-use check verified it, with the reviewed completion the review paired to it, per reward written in
the workspace, compared with the score review.json recorded (exactly as above); a difference names the reward, the
row and both scores. The line says what the probes cost, and names the rows past row_probes.CAP, which are not
probed.

Both score only texts stored in the workspace: an input changed after the verdict to pay every text but the
reviewed completions replayed "same scores" and trained at 5.0 (round 17, b01). So the replay also scores the
review's blind probes (inspection.blind_probes, rewards.blind_texts): completions derived from the evidence key,
which this process holds, whose scores alone the review kept, signed; one scored otherwise names the reward and the
probe's number and kind (never its text) and exits 3 as above. Their cost is in the same line (12 reward calls per
probed reward).

A run of several processes (WORLD_SIZE > 1) replays on every rank, not on rank 0 alone: each rank trains with its
own rewards in its own environment, and ranks on different nodes can differ (a variable one node's shell exports,
a node-local file, a tool installed on one node), so rank 0's replay says nothing of rank 1's. The process group
exists by then (train.py's config parse starts it, before the rewards are built). Each rank replays, then every
rank, whether its replay passed or not, meets the others in one all-gather of what differed where, so all decide
alike: all train, or all say which rank and reward differ (a line each) and leave with status 3. A rank that left
alone would leave the others waiting in the trainer's first collective (or ended by the launcher with a signal
and no word of why); the refusing ranks meet once more before leaving and ignore the launcher's SIGTERM meanwhile,
so each one's line and own status 3 come through. A rank's replay as slow as the review's scoring is waited for up
to the process group's timeout (ddp_timeout). The replay was once off in such runs: a two-node SLURM test run
"hung" at its first step. It was the test's own reward (tests/fixtures: held from its second call in a process
on), which counted the replay as its first call and so held step 1 itself; nothing in the replay waited.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import socket
import sys
import time

from mcp_server.errors import UserInputError
from mcp_server.inspection import blind_probes, row_probes
from mcp_server.inspection.row_probes import same, shown as _shown  # noqa: F401 - same: the replay's rule
from mcp_server.runs import Run
from mcp_server import userfiles

CAUSES = ("it reads an input outside the completion and its row that changed since the review (an environment "
          "variable, a file's metadata, a process it starts, the clock or randomness)")


class ScoresChanged(SystemExit):
    """The rewards this process would train with do not score the reviewed samples as the review did (exit status 3;
    `line`: what differs, said by replay_review on every rank)."""

    def __init__(self, code: int, line: str = ""):
        super().__init__(code)
        self.line = line


def read_bytes(path) -> bytes | None:
    """A run file's bytes from one open of a regular file (userfiles.read_bytes), None where it cannot be read
    (missing, not a regular file, unreadable): the caller refuses that as a file the verdict does not pin."""
    try:
        return userfiles.read_bytes(path, "run")
    except UserInputError:
        return None


def _refuse(line: str) -> None:
    raise ScoresChanged(3, line)


def _say(line: str) -> None:
    print(f"llm-finetuning: {line}", file=sys.stderr, flush=True)


def _pinned(data: bytes | None, sha: object, what: str) -> bytes:
    if data is None or hashlib.sha256(data).hexdigest() != sha:
        _refuse(f"{what} is not the one the inspection verdict signed (changed or removed since), so the review "
                "cannot be replayed. Put it back, or sample and inspect again and record a new verdict.")
    return data


def _lines(data: bytes) -> list[dict]:
    # "\n" only, as inspection.files.read_samples: a completion may hold U+2028
    return [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]


def reviewed(run: Run, verdict: dict, samples: bytes | None = None) -> tuple[list[dict], list[dict], dict]:
    """(every sample the review scored, the rows review.jsonl recorded, review.json), each file's bytes the ones
    the verdict pins (samples.jsonl and review.json by hash, review.jsonl by review.json's hash); `samples`:
    samples.jsonl's bytes as the point-of-use check read them (None: read here)."""
    samples = _pinned(samples if samples is not None else read_bytes(run.samples), verdict.get("samples_sha256"),
                      "inspection/samples.jsonl")
    review = json.loads(_pinned(read_bytes(run.review), verdict.get("review_sha256"), "inspection/review.json"))
    rows = _pinned(read_bytes(run.review_jsonl), review.get("review_jsonl_sha256"), "inspection/review.jsonl")
    return _lines(samples), _lines(rows), review


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


def replay_review(run: Run, rewards: list, funcs: list, verdict: dict | None, samples: bytes | None = None,
                  dataset=None, step: int | None = None) -> None:
    """The trainer's replay (the module's doc), on every rank: returns when every rank scores every reviewed sample
    and every probed training row as the review did, after one line on stderr saying what it cost; else
    ScoresChanged (exit status 3) on every rank, naming each rank and reward that scores otherwise. `dataset`: the
    rows this process trains on, as its point-of-use check verified them (None: read here). `step`: the replay
    again during training (`again`), after that optimizer step (None: before the first step, which keeps the
    replay for `again`)."""
    started = time.monotonic()
    try:
        done = _replay_here(run, rewards, funcs, verdict, samples, dataset)
        problem = None
    except ScoresChanged as exc:
        done, problem = None, exc.line
    group = _process_group()
    where = "" if group is None else f" (rank {group.get_rank()} of {group.get_world_size()})"
    problems = _agree(group, problem)
    if problems:
        when = "refusing to train" if step is None else f"stopping training after step {step}, refused"
        _say(f"{when}{where}: " + "; ".join(problems))
        if group is not None:
            _leave_together(group)
        raise ScoresChanged(3, "; ".join(problems))
    if done and step is None:
        _say(f"{done}{where}, {time.monotonic() - started:.2f} s")
        AGAIN[:] = [lambda at: replay_review(run, rewards, funcs, verdict, samples, dataset, step=at)]
    elif done:
        AGAIN_COST.append(time.monotonic() - started)


# The replay again during training (training.trainer.script_support.ReplayAgain: at every logging step, on every
# rank, and once more after the last step, before the run is recorded succeeded; round 16, G1: an input changed
# after the first replay trained at 5.0 and the run "succeeded"), kept by the first replay that passed; the seconds
# each took after it.
AGAIN: list = []
AGAIN_COST: list[float] = []


def again(step: int) -> None:
    """The review replayed again after optimizer step `step` (ScoresChanged, exit 3, when a score moved); nothing
    when this process made no replay (no verdict, sampling)."""
    if AGAIN:
        AGAIN[0](step)


def again_said() -> None:
    """One line: how often the review was replayed during training and what each replay cost."""
    if AGAIN_COST:
        _say(f"replayed the review {len(AGAIN_COST)} more times during training (every logging step and after the "
             f"last), same scores, {sum(AGAIN_COST) / len(AGAIN_COST):.3f} s each, {sum(AGAIN_COST):.2f} s in all")


def _replay_here(run: Run, rewards: list, funcs: list, verdict: dict | None, samples: bytes | None,
                 dataset) -> str | None:
    """This process's replay: what it compared (None: nothing to replay, said here); ScoresChanged naming what
    differs."""
    from mcp_server.inspection.review import _score
    from mcp_server.rewards.spec import RewardSpec

    if verdict is None or not (verdict.get("samples_sha256") and verdict.get("review_sha256")):
        # no verdict, or a record that signs no review (not a verdict the gate opens for, and one the point-of-use
        # check refuses before this: its samples are not the ones it signed)
        _say("the inspection verdict signs no review to replay")
        return None
    all_samples, rows, review = reviewed(run, verdict, samples)
    specs = [RewardSpec(name=s) if isinstance(s, str) else RewardSpec.model_validate(s) for s in rewards]
    names, differ = replay(funcs, specs, all_samples, rows)
    started = time.monotonic()
    try:
        probes, row_differ = row_probes.replay_rows(run, _score, review.get(row_probes.KEY), verdict, funcs, specs,
                                                    names, all_samples, dataset)
    except row_probes.Unreplayable as exc:
        _refuse(str(exc))
    differ += row_differ
    try:  # texts nobody in the workspace knows (blind_probes): a change that spares every stored text shows there
        blind, blind_differ = blind_probes.replay(run, verdict, funcs, specs, names, all_samples, _score)
    except UserInputError as exc:
        _refuse(str(exc).split(": ", 1)[-1])
    differ += blind_differ
    if differ:
        _refuse("; ".join(differ) + f": {CAUSES}. Put that input back as it was, or make the reward depend only "
                "on the completion and its row, then sample and inspect again, record a new verdict and launch again.")
    compared = "" if len(rows) == len(all_samples) else f" ({len(rows)} reviewed compared)"
    probes = "".join(f"; {line}, same scores" for line in (probes, blind) if line)
    probes = f"{probes} ({time.monotonic() - started:.2f} s)" if probes else ""
    return f"replayed the review: {len(all_samples)} samples x {len(names)} rewards{compared}, same scores{probes}"


def _process_group():
    """torch.distributed when this process is one rank of several in an initialised process group (train.py's
    config parse starts it, before the rewards are built); None for a single process, or ranks that share none."""
    if int(os.environ.get("WORLD_SIZE") or 1) <= 1:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _leave_together(group) -> None:
    """Every rank refuses: each has said so when any leaves (a barrier), and each leaves with its own status 3. The
    launcher (torchrun) ends the others with SIGTERM at the first rank's exit, which would cut a rank's line or turn
    its status into the signal; a rank that is leaving anyway ignores it (the launcher's SIGKILL after its grace
    period still ends one that does not leave)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread: the status may read as the signal, the line is said already
        pass
    group.barrier()


def _agree(group, problem: str | None) -> list[str]:
    """What differs on any rank, the same list on every rank (one all-gather: every rank reaches it, whether its
    own replay passed or not, so none waits in a later collective for a rank that left); each names its rank and
    node. Without a group: this process's own."""
    if group is None:
        return [problem] if problem else []
    gathered: list = [None] * group.get_world_size()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    group.all_gather_object(gathered, (group.get_rank(), node, problem))
    return [f"on rank {rank} ({node}): {line}" for rank, node, line in gathered if line]
