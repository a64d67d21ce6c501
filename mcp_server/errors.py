"""The one error type the doors turn into a clear message (never a traceback)."""


class UserInputError(ValueError):
    """Bad input from a person or an agent. The message names the field or file and what is accepted.

    The CLI prints it and exits 2; the MCP door (server.py's `tool`) returns it to the client as a tool error.
    Kept free of the MCP SDK so the core and the CLI do not pay for importing it.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")
