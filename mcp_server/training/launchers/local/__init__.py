"""The local backend: one detached process on this machine (one GPU or CPU), or several CPU processes with
torchrun. It is also the template for a new backend (docs/development.md, "Adding a launcher backend"):

- launcher.py       the Launcher (base.py's protocol): accepts, plan, check, write, recorded, commit_message,
                    start, state, status_text, stop, relaunch
- shell.py          its script, train/launch.sh: a typed description in, one readable bash script out
- process_state.py  its `state`: the run's state from the verified process and the run's files
"""

from mcp_server.training.launchers.local.launcher import LocalLauncher

LAUNCHER = LocalLauncher()
