"""`python -m mcp_server` serves MCP over stdio; `--read-only` lists only the tools that change nothing (the same as
LLM_FINETUNING_READ_ONLY=1): validation, memory plans, the reward registry, diagnosis, a run's status and gate."""

import argparse
import os

parser = argparse.ArgumentParser(
    prog="python -m mcp_server",
    description="The llm-finetuning MCP server: JSON-RPC over stdin/stdout (started by an MCP client, not typed "
    "into). The same tools as a command line: llm-finetuning --help.",
)
parser.add_argument("--read-only", action="store_true", help="Serve only the tools that change nothing "
                    "(validation, memory plans, the reward registry, diagnosis, a run's status and gate); the same "
                    "as LLM_FINETUNING_READ_ONLY=1. No user code (a run's reward modules) is imported or run.")
if parser.parse_args().read_only:
    os.environ["LLM_FINETUNING_READ_ONLY"] = "1"  # read when the server module builds its tool list

from mcp_server.server import main  # noqa: E402  (after the mode is set)

main()
