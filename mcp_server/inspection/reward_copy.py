"""The reviewed copy of the reward code (inspection/reward_code/) file by file: the verdict keeps each file's sha256
so the trainer's refusal names the file that is not the reviewed one (issue 48, round 15), not only a hash."""

from __future__ import annotations

import hashlib

from mcp_server.rewards.sources import MOVED
from mcp_server.runs import Run


# The verdict's sha256 of each file of the reviewed copy (inspection/reward_code/): the trainer names the one that
# is not the verdict's when the reward-code hash differs (issue 48, round 15).
REWARD_SHAS = "reward_code_file_sha256"


def copy_changes(run: Run, verdict: dict | None) -> list[str]:
    """Why the reward code the trainer imported is not the reviewed code, file by file: each file of the reviewed
    copy whose bytes are not the verdict's now, and each module that ran other bytes than its file holds now
    (rewards.sources.MOVED: a module that rewrote its own file at its import)."""
    shas = (verdict or {}).get(REWARD_SHAS)
    said = []
    for relative, sha in (shas.items() if isinstance(shas, dict) else []):
        path = run.reward_code / str(relative)
        try:
            now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"
        except OSError:
            now = "unreadable"
        if now != sha:
            said.append(f"{path}: sha256 {str(sha)[:12]} reviewed, {now[:12]} now")
    return said + list(MOVED.values())
