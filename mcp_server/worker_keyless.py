"""The keyless worker: where code nobody has reviewed yet is imported, the evidence key cannot be read.

A reward module named in a request runs at its import, before any review: emission's and validation's reward
checks (worker_targets.REWARD_PROBLEMS), the rehearsal (REHEARSE), inspect_rewards, record_inspection_verdict and
every check of the inspection gate, the baseline's graders at launch (`worker.apart`). In the worker that held the
key, such a module copied evidence.key into the workspace, and a script confined to the workspace then signed a
progress log that read "succeeded, reward=99" (issue 48, round 16, F1; docs/development.md "Evidence").
The processes that sign what they measured (the keyed worker, or a core API caller) send the user code they call
here too, through `worker.keyless` (a keyed worker starts a keyless worker of its own): evaluate_model's and
promote_checkpoint's graders, their import, scoring and code hash (evaluation.graders_apart, one round trip per
batch of completions), export's reward hash, and an agentic run's rollout, its train.py, environment and rewards
(inspection.trajectories.rollout_apart; sample_trajectories runs here whole). What comes back is data; the keyed
process signs the baseline line, promotion.json or samples.meta.json over it.

Those calls go to a worker of their own, started apart (worker_apart) with every evidence key file this process
could name (`evidence.key_candidates`) covered by /dev/null, read-only: the file reads empty, and nothing can be
written in its place. The key is made first (the worker never watches one appear), and a worker that hid other
files than the current ones is stopped before the next call starts a fresh one. In that worker evidence.key()
refuses (it never signs); whether a record carries the key's mac (a sampler's samples.meta.json, the launch
ledger) is asked of the caller (`ask` there, `answer` here): a verification, never a signature, so nothing it
learns signs a line. Where bwrap is missing the worker starts beside the caller, and the key is readable there
(worker_apart says so on stderr; check_environment warns).
"""

from __future__ import annotations

import json
import os
import sys
import threading

from mcp_server import evidence
from mcp_server.errors import UserInputError

FLAG = "LLM_FINETUNING_WORKER_KEYLESS"  # set in the keyless worker's environment (never synced from a caller)


def key_files() -> tuple[tuple[str, int, int], ...]:
    """The key files that exist now, as (path, device, inode): what the worker hides, and how a change is seen.
    The current path's key is made first (when it may be: outside the workspace), so none appears later."""
    try:
        evidence.key(create=True)
    except UserInputError:
        pass
    return _key_files()


def _key_files() -> tuple[tuple[str, int, int], ...]:
    """Every key file there is now: (path, device, inode), sorted."""
    found = []
    for path in evidence.key_candidates():
        try:
            info = os.stat(path)
        except OSError:
            continue
        found.append((str(path), info.st_dev, info.st_ino))
    return tuple(sorted(set(found)))


def still_hides(hidden: tuple[tuple[str, int, int], ...]) -> bool:
    """Whether a worker started hiding `hidden` hides every key file there is now and the current path's key
    (asked before anything makes one: a worker that does not is stopped first)."""
    current = str(evidence.key_candidates()[0])
    return _key_files() == hidden and any(path == current for path, _d, _i in hidden)


def bwrap_args(files: tuple[tuple[str, int, int], ...]) -> list[str]:
    """What covers each key file in the worker's mount namespace."""
    return [arg for path, _dev, _ino in files for arg in ("--ro-bind", "/dev/null", path)]


def answer(query) -> dict:
    """The caller's side: a verification the keyless worker asked for (never a signature)."""
    if not isinstance(query, dict):
        return {"error": "not a query"}
    if query.get("op") == "valid" and isinstance(query.get("scope"), str) and isinstance(query.get("file"), str):
        return {"valid": evidence.valid(query["scope"], query["file"], query.get("record"))}
    if query.get("op") == "problem":
        return {"problem": evidence.key_problem()}
    return {"error": "unknown query"}


def replier(proc):
    """The caller's side for one worker process: each question answered on its stdin."""
    def reply(query) -> None:
        try:
            proc.stdin.write(json.dumps({"evidence": answer(query)}, default=str) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
    return reply


class _Asker:
    """The worker's side: evidence.ORACLE while a call runs. One question at a time, answered on stdin (the
    worker's loop reads its next request only after the call ends)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.call: tuple | None = None  # (call id, send)

    def __call__(self, query: dict) -> dict:
        with self.lock:
            if self.call is None:
                return {}
            call_id, send = self.call
            send({"id": call_id, "evidence": query})
            line = sys.stdin.readline()
        try:
            reply = json.loads(line)
        except ValueError:
            return {}
        return reply.get("evidence", {}) if isinstance(reply, dict) else {}


ASKER = _Asker()


def install() -> None:
    """In the worker, at its start: evidence asks the caller instead of reading a key."""
    if os.environ.get(FLAG):
        evidence.ORACLE = ASKER
