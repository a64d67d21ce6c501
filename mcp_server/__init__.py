"""llm-finetuning's MCP server, CLI and core API."""

import os as _os
import sys as _sys

# `python -m mcp_server[.cli|.worker]` puts the working folder first on sys.path, and MCP clients start the server in
# the person's project: a yaml.py (or any module named like a library) there would be imported in the process that
# holds the protocol (issue 48, round 12, S1). While -m locates the module, sys.argv[0] is "-m".
# A working folder deleted under the process (round 13, N1) has no path to compare: the entry -m put first is its
# old path, which holds nothing now, and goes too; the command then says the folder is gone (workspace).


def _working_folder():
    try:
        return _os.path.realpath(_os.getcwd())
    except OSError:
        return None


if (_sys.argv[:1] == ["-m"] and not getattr(_sys.flags, "safe_path", False) and _sys.path and _sys.path[0]
        and _working_folder() in (None, _os.path.realpath(_sys.path[0]))):
    del _sys.path[0]
