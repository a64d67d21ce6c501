"""The one error type the doors turn into a clear message (never a traceback)."""

from mcp.server.mcpserver.exceptions import ToolError


class UserInputError(ToolError, ValueError):
    """Bad input from a person or an agent. The message names the field or file and what is accepted.

    It is a ToolError so the MCP door shows its text to the client (the SDK hides the text of other
    exceptions), and a ValueError so the core and the CLI can treat it as plain bad input.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")
