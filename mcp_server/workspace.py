"""Where files go: the workspace root, run directories, path safety and atomic writes."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path


def workspace_root() -> Path:
    """`LLM_FINETUNING_WORKSPACE` when set, else the current directory."""
    return Path(os.environ.get("LLM_FINETUNING_WORKSPACE") or os.getcwd()).resolve()


def runs_root() -> Path:
    return workspace_root() / "runs"


def eval_root() -> Path:
    """`eval/` beside `runs/`: baselines, goldens and drift measurements outlive runs."""
    return workspace_root() / "eval"


def find_existing(text: str | Path) -> Path | None:
    """An existing path a person or an agent named, resolved: an absolute path as is; a relative one under the
    workspace root, then under runs/ (a run's name), then under the current directory (a CLI user's habit). The
    workspace comes first so a relative path means the same through the MCP door, whose current directory is the
    harness's, as on the command line. None when none exists; never the current directory for an empty string."""
    raw = Path(str(text)).expanduser()
    if not str(text).strip():
        return None
    candidates = [raw] if raw.is_absolute() else [workspace_root() / raw, runs_root() / raw, Path.cwd() / raw]
    for path in candidates:
        try:
            if path.exists():
                return path.resolve()
        except OSError:  # a name too long for the file system: no such path
            continue
    return None


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:48] or "run"


def new_run_dir(slug: str, date: _dt.date | None = None) -> Path:
    """`runs/<YYYY-MM-DD>-<slug>/`, created if missing."""
    date = date or _dt.date.today()
    path = runs_root() / f"{date.isoformat()}-{slugify(slug)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write to a temporary file beside `path`, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_save_figure(fig, path: Path, **savefig_kwargs) -> Path:
    """A matplotlib figure as a PNG, written atomically like every other file."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **savefig_kwargs)
    return atomic_write_bytes(path, buffer.getvalue())


def atomic_write_json(path: Path, data) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
