"""The trainer process's one read of its run (issue 46): the run as one value, read once, passed to every check.

The emitted train/train.py parses its config with `parse_config` (through training.trainer.script_support): it
reads the run once (recipe.runspec.RunSpec: train/config.yaml, request.json, rewards.json, agentic.json and
dynamic_sampling.json, each file once) and hands TRL's parser that read's mapping, so the bytes the point-of-use
check judges are the bytes that train, never a second read of a file that may have changed in between. The spec
travels with the GRPOConfig TRL parsed (`spec_for`): the point-of-use check (inspection.trained) reads the verdict
once and hands both to the reward-code check (`hand_on`, `take`); the guard (training.trainer.progress) and the
dynamic-sampling trainer take the spec from the trainer's arguments. The emitted script's calls are unchanged (its
bytes are emission's fixtures): this module is how those calls share one read. Called without a spec (a check run
by hand, a test), each reader reads the run itself, once.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from pathlib import Path

from mcp_server.config.loader import parse_config as parse_values
from mcp_server.errors import UserInputError
from mcp_server.recipe.runspec import RunSpec
from mcp_server.runs import Run

# id(parsed GRPOConfig) -> (a weak reference to it, the spec its values came from): kept no longer than the config.
_PARSED: dict[int, tuple[weakref.ref, RunSpec]] = {}


@dataclass(frozen=True)
class Checked:
    """What the point-of-use check read: the spec it judged, the verdict's bytes (None: no verdict),
    samples.jsonl's (None: none; the replay scores them, inspection.replay) and the rows it verified (the replay's
    row probes score them, inspection.row_probes)."""

    spec: RunSpec
    verdict: bytes | None
    samples: bytes | None = None
    dataset: object = None


# run directory -> what its point-of-use check read, until the reward-code check of the same build takes it.
_CHECKED: dict[str, Checked] = {}


def _bad_request(exc: UserInputError) -> None:
    """A request.json this version does not read must not stop training: said once on stderr (the run's
    stdout.log); the guard then runs without the record (mode warn)."""
    print(f"llm-finetuning guard: {exc}; the guard runs without the recorded request (mode warn)",
          file=sys.stderr, flush=True)


def read_run(where: Run | Path) -> RunSpec:
    """The run (or the config file at `where`) read once as the trainer reads it: a broken request.json is said and
    read as an empty record."""
    return RunSpec.read(where, field="config", on_bad_request=_bad_request)


def parse_config(argv=None):
    """(script_args, training_args, model_args, dataset_args) as `trl grpo` parses the config named in `argv`
    (default sys.argv), from one read of the run (`read_run`): the spec is kept with training_args (`spec_for`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    at = args.index("--config") + 1 if "--config" in args else None
    if at is None or at >= len(args):  # no config named: TRL's parser says so
        return parse_values(args)
    spec = read_run(Path(args[at]))
    parsed = parse_values(args, values=spec.values)
    key = id(parsed[1])
    _PARSED[key] = (weakref.ref(parsed[1], lambda _, key=key: _PARSED.pop(key, None)), spec)
    return parsed


def spec_for(run_dir: str | Path, training_args) -> RunSpec | None:
    """The spec `parse_config` read for these parsed arguments, when it is the run at `run_dir`'s (None: parsed
    elsewhere, or from another config: the caller reads the run itself)."""
    entry = _PARSED.get(id(training_args))
    if entry is None or entry[0]() is not training_args:
        return None
    spec = entry[1]
    return spec if spec.base_dir is not None and spec.base_dir == Path(run_dir).resolve() else None


def _key(run: Run) -> str:
    return str(run.dir.resolve())


def hand_on(run: Run, checked: Checked) -> None:
    """The point-of-use check's read, for the reward-code check that follows it in the same build."""
    _CHECKED[_key(run)] = checked


def take(run: Run) -> Checked | None:
    """What the point-of-use check of this build read (once: a later call reads the run again), None when none."""
    return _CHECKED.pop(_key(run), None)


def drop(run: Run) -> None:
    """Forget a read the check refused or failed on: nothing stale is handed to a later call."""
    _CHECKED.pop(_key(run), None)
