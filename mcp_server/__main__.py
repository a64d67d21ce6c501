"""`python -m mcp_server` serves MCP over stdio; `--read-only` lists only the tools that change nothing (the same as
LLM_FINETUNING_READ_ONLY=1): validation, memory plans, the reward registry, diagnosis, a run's status and gate."""

import os
import sys

if "--read-only" in sys.argv[1:]:
    os.environ["LLM_FINETUNING_READ_ONLY"] = "1"  # read when the server module builds its tool list

from mcp_server.server import main  # noqa: E402  (after the mode is set)

main()
