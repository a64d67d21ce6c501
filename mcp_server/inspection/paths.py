"""Where the inspection files of a run live (DESIGN.md: <run>/inspection/)."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.userfiles import read_reward_specs, read_text
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
    text = read_text(path, str(path))
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UserInputError(str(path), f"cannot read {what}: {exc}") from None


def read_samples(run_dir: Path) -> list[dict]:
    path = samples_path(run_dir)
    if not path.is_file():
        raise UserInputError("run", f"{path} does not exist: run sample_completions first")
    samples = []
    for number, line in enumerate(read_text(path, "run").splitlines(), 1):
        try:
            sample = json.loads(line) if line.strip() else None
        except ValueError as exc:
            raise UserInputError("run", f"{path}:{number} is not JSON ({exc}): run sample_completions again") from None
        if sample is not None and not (isinstance(sample, dict) and {"prompt_index", "completion"} <= set(sample)):
            raise UserInputError("run", f"{path}:{number} is not a sample written by sample_completions: run it again")
        if sample is not None:
            samples.append(sample)
    return samples


def read_run_rewards(run_dir: Path) -> list[dict]:
    """The run's reward definition (train/rewards.json: a list of RewardSpec dicts)."""
    path = rewards_json_path(run_dir)
    if not path.is_file():
        raise UserInputError(
            "rewards", f"{path} does not exist: emit the run's config (emit_grpo_config) or pass rewards explicitly"
        )
    return [spec.model_dump() for spec in read_reward_specs(path, "rewards")]
