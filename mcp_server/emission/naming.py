"""The name of a run emitted without `run_name` (issue 49: every run was named after its model, so two runs on one
model were told apart only by a `-2`): after its data, the task it trains, then its model."""

from __future__ import annotations

import re
from pathlib import Path

from mcp_server.model_ref import TINY, shown_name

# words that name a data file's role, not its task: `data/train.jsonl` is named after the folder above it
GENERIC = {"train", "training", "test", "eval", "dev", "valid", "validation", "data", "dataset", "datasets", "prompts",
           "rows", "split", "all", "default", "main", "input", "inputs"}


def default_run_name(model: str, dataset: str) -> str:
    """`<data>-<model>` ('json-field-smollm2-135m'), the model's name alone where the data has no name of its own
    (the tiny data set, a file named only for its role in a folder of no name)."""
    data, model_name = data_name(dataset), Path(shown_name(model)).name
    return f"{data}-{model_name}" if data and data != model_name else model_name


def data_name(dataset: str) -> str:
    """The data set's own name: a hub id's last part; a local file's stem without its role words ('train', 'data'),
    else the nearest folder above it with a name of its own; '' for the embedded tiny set or none found."""
    if dataset == TINY:
        return ""
    path = Path(dataset).expanduser()
    if not path.exists():  # a hub id ('openai/gsm8k'): its last part
        return _own_words(dataset.rstrip("/").rsplit("/", 1)[-1])
    path = path.resolve()
    for part in [path.name if path.is_dir() else path.stem, *(p.name for p in path.parents)][:4]:
        name = _own_words(part)
        if name:
            return name
    return ""


def _own_words(text: str) -> str:
    words = [w for w in re.split(r"[\W_]+", re.sub(r"\.(jsonl|json|csv|parquet|arrow)$", "", text.lower())) if w]
    return "-".join(w for w in words if w not in GENERIC)
