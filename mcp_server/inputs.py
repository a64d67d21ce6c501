"""What every request model shares: unknown fields are refused (never silently dropped) and strings are bounded,
so a misspelt argument or a pasted file body gets a message naming the field instead of a default or a crash."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints


class Request(BaseModel):
    """Base of the tools' request models and of the input models nested in them."""

    model_config = ConfigDict(extra="forbid")


# A path, or the name of a model, data set or run (PATH_MAX: no path is longer).
PathText = Annotated[str, StringConstraints(max_length=4096)]
# A short name: GPU type, split, column, reviewer, reward.
Name = Annotated[str, StringConstraints(max_length=256)]
# Free text a person writes (a note, a reason).
Note = Annotated[str, StringConstraints(max_length=20_000)]


class NoArguments(Request):
    """This tool takes no arguments."""
