"""The external commands train/launch.sh and train/launch.slurm run, each by its absolute path, resolved when the
script is written: never looked up on the launching shell's PATH when it runs (issue 48, round 8: a `sha256sum`
first on PATH could answer the digest the training interpreter's check expects, and a `readlink` the path). As bash
is (processes.BASH), they are taken from the system's own folders, not from PATH; the scheduler's (srun, scontrol)
are the ones slurm/scheduler.py resolves. A command found in none is an error of the launch, before anything is
written, not a script that breaks when it runs."""

from __future__ import annotations

import os
import shlex

from mcp_server.errors import UserInputError

SYSTEM_FOLDERS = ("/usr/bin", "/bin")
# Every command the scripts run that is not a bash builtin, a function they define or the training interpreter
# (tests/test_gate_loader.py reads the rendered scripts for any other).
TOOLS = ("basename", "cut", "date", "dirname", "grep", "mkdir", "mktemp", "mv", "readlink", "rm", "sha256sum", "sleep",
         "tail")


def tool(name: str) -> str:
    """`name` by absolute path, from the first of SYSTEM_FOLDERS that holds it as an executable file; else
    UserInputError('launcher') naming it and where it was looked for."""
    for folder in SYSTEM_FOLDERS:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise UserInputError("launcher", f"{name} is in none of {', '.join(SYSTEM_FOLDERS)}: the launch scripts run it "
                         "by absolute path, never from PATH (a command first on PATH would answer their checks), and "
                         "nothing was written or started. Install it there (coreutils, grep), then launch again")


def tools() -> dict[str, str]:
    """Every command of TOOLS by its absolute path, quoted for the scripts (the names of the templates' fields)."""
    return {name: shlex.quote(tool(name)) for name in TOOLS}
