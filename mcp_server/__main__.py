"""`python -m mcp_server` serves MCP over stdio."""

from mcp_server.server import main

main()
