"""Reading a run's inspection inputs: the samples sample_completions wrote and the run's reward definition.
Where they live is runs.Run's job (docs/architecture.md, "The run directory")."""

from __future__ import annotations

import json

from mcp_server.errors import UserInputError
from mcp_server.rewards.dotted import import_dirs
from mcp_server.rewards.spec import read_reward_specs
from mcp_server.runs import Run
from mcp_server.userfiles import decode, foreign_review_files, read_bytes


def read_samples(run: Run, with_bytes: bool = False):
    """The samples of the run's samples.jsonl; `with_bytes`: (samples, the bytes they were parsed from), one read,
    so what is scored is what is checked against the sampler's signature and hashed (round 18)."""
    path = run.samples
    if not path.is_file():
        raise UserInputError("run", f"{path} does not exist: run sample_completions first")
    samples, data = [], read_bytes(path, "run")
    # "\n" only: a completion may hold U+2028 or U+0085, which str.splitlines() also splits on (written raw:
    # ensure_ascii=False), and a real model at temperature 1 writes them
    for number, line in enumerate(decode(data, path, "run").split("\n"), 1):
        try:
            sample = json.loads(line) if line.strip() else None
        except ValueError as exc:
            raise UserInputError("run", f"{path}:{number} is not JSON ({exc}): run sample_completions again") from None
        if sample is not None and not (isinstance(sample, dict) and {"prompt_index", "completion"} <= set(sample)):
            raise UserInputError("run", f"{path}:{number} is not a sample written by sample_completions: run it again")
        if sample is not None:
            samples.append(sample)
    return (samples, data) if with_bytes else samples


def run_reward_imports(run: Run) -> None:
    """Where a run's custom reward modules are imported from, whatever directory the command runs in: the
    workspace the run belongs to (runs/<name>/ sits in it) first, then the reviewed copy (inspection/reward_code/)
    last, for a module the workspace no longer holds. The workspace's copy stays first: it is what a person edits,
    and the gate must see an edit (the trainer imports the copy; the gate refuses a copy that is not that code)."""
    import_dirs(run.dir.resolve().parent.parent,
                last=run.reward_code.resolve() if run.reward_code.is_dir() else None)


def read_run_rewards(run: Run) -> list[dict]:
    """The run's reward definition (train/rewards.json: a list of RewardSpec dicts); its custom modules are then
    importable as run_reward_imports says."""
    run_reward_imports(run)
    path = run.rewards
    if not path.is_file():
        raise UserInputError(
            "rewards", f"{path} does not exist: emit the run's config (emit_grpo_config) or pass rewards explicitly"
        )
    return [spec.model_dump() for spec in read_reward_specs(path, "rewards")]


def refuse_foreign_review_files(run: Run, doing: str) -> None:
    """Before sample_completions clears the review (the samples it described are replaced) or inspect_rewards
    writes a new one: a review file there that inspect_rewards did not write (a person's own review.md: issue 48,
    round 8) is refused, named, before any work; nothing is written."""
    foreign = foreign_review_files(run.inspection)
    if foreign:
        raise UserInputError("run", f"{doing} would replace {'; '.join(foreign)}: nothing was written. Move those "
                             "files aside (or delete them) and run it again")


def clear_review(run: Run) -> None:
    """The review of samples that were just replaced, removed: only the files inspect_rewards wrote (the others
    were refused before sampling began, refuse_foreign_review_files)."""
    foreign = " ".join(foreign_review_files(run.inspection))
    for stale in (run.review_md, run.review_jsonl, run.review):
        if f"{stale} (" not in foreign:
            stale.unlink(missing_ok=True)
