"""`python -m mcp_server` serves MCP over stdio. A training interpreter that is another Python starts importing
TRL in its worker before this process imports the server (mcp_server.warm_up)."""

from mcp_server import warm_up
from mcp_server.interpreter import keep_caches_private

keep_caches_private()
warm_up.start()

from mcp_server.server import main  # noqa: E402  (after the warm-up began)

main()
