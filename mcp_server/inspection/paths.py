"""Where the inspection files of a run live (DESIGN.md: <run>/inspection/)."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.workspace import WorkspaceError, resolve_run


def resolve_run_dir(run: str | Path) -> Path:
    try:
        return resolve_run(run)
    except WorkspaceError as exc:
        raise UserInputError("run", str(exc).removeprefix("run: ")) from None


def inspection_dir(run_dir: Path) -> Path:
    path = run_dir / "inspection"
    path.mkdir(parents=True, exist_ok=True)
    return path


def samples_path(run_dir: Path) -> Path:
    return run_dir / "inspection" / "samples.jsonl"


def meta_path(run_dir: Path) -> Path:
    return run_dir / "inspection" / "samples.meta.json"


def review_json_path(run_dir: Path) -> Path:
    """The summary of the last inspect_rewards (the InspectResult), read by the verdict and the gate."""
    return run_dir / "inspection" / "review.json"


def verdict_path(run_dir: Path) -> Path:
    return run_dir / "inspection" / "verdict.json"


def rewards_json_path(run_dir: Path) -> Path:
    return run_dir / "train" / "rewards.json"


def read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserInputError(str(path), f"cannot read {what}: {exc}") from None


def read_samples(run_dir: Path) -> list[dict]:
    path = samples_path(run_dir)
    if not path.is_file():
        raise UserInputError("run", f"{path} does not exist: run sample_completions first")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_run_rewards(run_dir: Path) -> list[dict]:
    """The run's reward definition (train/rewards.json: a list of RewardSpec dicts)."""
    path = rewards_json_path(run_dir)
    if not path.is_file():
        raise UserInputError(
            "rewards", f"{path} does not exist: emit the run's config (emit_grpo_config) or pass rewards explicitly"
        )
    specs = read_json(path, "the run's rewards")
    if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
        raise UserInputError(str(path), "expected a JSON list of {name, params, weight} objects")
    return specs
