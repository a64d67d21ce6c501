"""Issue 48, round 20 b02: export_model's last check of its staging folder (export.refuse_staged_changes) listed the
files it did not write with rglob + Path.is_file(), False for a symbolic link to a folder, a dangling link and a
pipe: planted in <run>/.export-* while the export staged, they were exported (export/ carried a link out of the
workspace). Every entry that is not a regular file the export wrote is refused now, naming it; nothing is exported.

The window is forced by the export's own progress line ("reloading the export", after the save and before the
check): each kind of entry is planted there, through the core API.
"""

from __future__ import annotations

import os
import shutil
import socket

import pytest


def _plant(kind: str, staged, outside) -> str:
    """Plant `kind` in the staging folder; the name the refusal must give."""
    if kind == "link to a folder outside":
        os.symlink(outside, staged / "extra_weights")
        return "extra_weights: a symbolic link"
    if kind == "dangling link named as a shard":
        os.symlink("/nonexistent/elsewhere.safetensors", staged / "model-00002-of-00002.safetensors")
        return "model-00002-of-00002.safetensors: a symbolic link"
    if kind == "link to a copy of a written file":
        shutil.copy(staged / "config.json", outside / "config.json")
        os.replace(staged / "config.json", outside / "gone.json")
        os.symlink(outside / "config.json", staged / "config.json")
        return "config.json: a symbolic link"
    if kind == "pipe":
        os.mkfifo(staged / "added.pipe")
        return "added.pipe: a pipe (FIFO)"
    if kind == "socket":
        sock, here = socket.socket(socket.AF_UNIX), os.getcwd()
        try:  # bound by a relative name: a socket's path is at most 107 bytes
            os.chdir(staged)
            sock.bind("added.sock")
        finally:
            os.chdir(here)
            sock.close()
        return "added.sock: a socket"
    if kind == "extra folder":
        (staged / "extra").mkdir()
        return "extra: a folder"
    if kind == "hard link to a written file":
        os.link(staged / "config.json", outside / "second-name.json")
        return "config.json: a file with 2 names"
    raise AssertionError(kind)


KINDS = ["link to a folder outside", "dangling link named as a shard", "link to a copy of a written file", "pipe",
         "socket", "extra folder", "hard link to a written file"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_planted_in_the_staging_folder_is_refused_naming_it(workspace, tiny_model, tmp_path, kind):
    from support import emit_run

    from mcp_server.errors import UserInputError
    from mcp_server.evaluation.export import export_model
    from mcp_server.evaluation.models import ExportRequest
    from mcp_server.runs import Run

    run = Run(emit_run("export-staged"))
    shutil.copytree(tiny_model, run.checkpoints)
    outside = tmp_path / "outside"
    outside.mkdir()
    named = []

    def plant(done, total, line):
        if line.startswith("reloading the export") and not named:
            [staged] = [p for p in run.dir.iterdir() if p.name.startswith(".export-")]
            named.append(_plant(kind, staged, outside))

    with pytest.raises(UserInputError, match="staging folder .* changed as it was written") as refused:
        export_model.__wrapped__(ExportRequest(run=str(run.dir), allow_unpromoted=True, smoke_items=1), report=plant)
    assert named and named[0] in str(refused.value), refused.value
    assert not run.export.exists() and not [p for p in run.dir.iterdir() if p.name.startswith(".export-")]
