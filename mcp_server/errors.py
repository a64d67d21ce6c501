"""The one error type the doors turn into a clear message (never a traceback)."""


class UserInputError(ValueError):
    """Bad input from a person or an agent. The message names the field or file and what is accepted."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")
