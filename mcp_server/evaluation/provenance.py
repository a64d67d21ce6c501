"""What trained an exported checkpoint, for export_model's model card and result (issue 48, round 14: the card took
the config's, the reward code's and the verdict's hashes and reviewer from the workspace's files at export time, so
files edited after training described a training that never happened).

The source is the launcher's signed record of the launch, kept outside the workspace (evidence.record_launch, its
`trained`: launchers.base.trained_record), for the launch whose signed save line (train/logs/saves.jsonl) wrote
the exported checkpoint: the current launch, or an earlier one of a resumed run (the ledger keeps each earlier
launch's record under `earlier`). The reward functions' names and weights are the record's too (the reviewed
specs), never rewards.json as it is at export. The files as they are now are only compared with it: where one
differs, a note says so and the card still gives what trained. Without such a record the provenance is
unrecorded, and the card says so rather than print the files as they are now as if they trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mcp_server.evidence import launch_record
from mcp_server.evaluation.graders_apart import graders_code
from mcp_server.runs import Run
from mcp_server.training.launchers.base import trained_rewards
from mcp_server.training.trainer.digest import read_saves, save_key
from mcp_server.workspace import sha256_file

CHANGED = "{what} changed since training: the card gives what trained"


@dataclass
class Provenance:
    """What trained the checkpoint, as signed (None each: unrecorded), and notes on what differs now."""

    recorded: bool
    config_sha256: str | None = None
    reward_code_sha256: str | None = None
    inspection: dict | None = None  # {"verdict": ..., "reviewer": ...} as the launch's gate judged it
    rewards: list[dict] | None = None  # [{"name", "weight"}] as reviewed and trained
    notes: list[str] = field(default_factory=list)


def _unrecorded(run: Run, ckpt: Path, trained, launch, saved_by) -> str:
    key = save_key(run, ckpt)
    if not launch:
        why = (f"{run.name} has no signed launch record on this machine (never launched by launch_training here, "
               "moved or copied since, or its record was tampered with)")
    elif not isinstance(trained, dict):
        why = "its signed launch record names no config, reward code or verdict (launched before they were recorded)"
    elif saved_by is None:
        why = f"no signed save record (train/logs/saves.jsonl) ties {key} to a launch"
    else:
        why = (f"{key} was saved by a launch ({saved_by}) that is not the one recorded ({launch}) nor an earlier "
               "launch of this run")
    return (f"provenance unrecorded: {why}; the card gives no config, reward code or inspection verdict as trained "
            "(the files as they are now are not evidence of what trained)")


def _now(read) -> str | None:
    try:
        return read()
    except Exception:  # an unresolvable reward, an unreadable file: differs from any recorded hash
        return None


def trained_provenance(run: Run, ckpt: Path, rewards: list) -> Provenance:
    """The signed provenance of the launch that saved `ckpt`, with a note per file that changed since."""
    entry = launch_record(run.dir) or {}
    trained, launch = entry.get("trained"), entry.get("launch_id")
    key = save_key(run, ckpt)
    saved = [line for line in read_saves(run) if line.get("save") == key]
    saved_by = saved[-1].get("launch_id") if saved else None
    if launch and saved_by and saved_by != launch and saved_by in entry.get("earlier", {}):
        trained, launch = entry["earlier"][saved_by], saved_by  # an earlier launch of a resumed run saved it
    if not launch or not isinstance(trained, dict) or saved_by != launch:
        return Provenance(recorded=False, notes=[_unrecorded(run, ckpt, trained, launch, saved_by)])
    text = {k: v if isinstance(v, str) else None for k, v in trained.items()}
    notes = []
    current = {
        "config_sha256": ("train/config.yaml", lambda: sha256_file(run.config)),
        "reward_code_sha256": ("the reward code", lambda: graders_code(rewards)["sha256"]),  # keyless: imports
        "verdict_sha256": ("inspection/verdict.json", lambda: sha256_file(run.verdict)),
    }
    for name, (what, read) in current.items():
        if text.get(name) and _now(read) != text[name]:
            notes.append(CHANGED.format(what=what))
    inspection = {"verdict": text.get("verdict"), "reviewer": text.get("reviewer")} if text.get("verdict") else None
    return Provenance(recorded=True, config_sha256=text.get("config_sha256"),
                      reward_code_sha256=text.get("reward_code_sha256"), inspection=inspection,
                      rewards=trained_rewards(trained.get("rewards")), notes=notes)
