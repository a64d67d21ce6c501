"""What every request model shares: unknown fields are refused (never silently dropped) and strings are bounded,
so a misspelt argument or a pasted file body gets a message naming the field instead of a default or a crash."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints
from pydantic_core import PydanticCustomError


class Request(BaseModel):
    """Base of the tools' request models and of the input models nested in them."""

    model_config = ConfigDict(extra="forbid")


NAME_MAX = 255  # no file or directory name is longer (bytes), on Linux, macOS and Windows alike


def _path_text(value: str) -> str:
    """Refuse what no file system accepts, before any core call turns it into an OSError or, worse, a meaning:
    an empty string is not "the current directory", and a NUL, a lone surrogate or a 300-character name is no
    path at all."""
    if not value.strip():
        raise PydanticCustomError("path_empty", "empty; give a path or a name (an empty string does not mean the "
                                  "current directory)")
    if "\x00" in value:
        raise PydanticCustomError("path_nul", "contains a NUL character, which no path can hold")
    try:
        parts = [part.encode("utf-8") for part in value.replace("\\", "/").split("/")]
    except UnicodeEncodeError:
        raise PydanticCustomError("path_unicode", "is not valid Unicode text (it holds a lone surrogate)") from None
    longest = max(parts, key=len)
    if len(longest) > NAME_MAX:
        raise PydanticCustomError(
            "path_name_too_long", "has a name of {size} bytes ('{start}...'); no file or directory name is longer "
            "than {limit} bytes", {"size": len(longest), "start": longest[:40].decode("utf-8", "replace"),
                                   "limit": NAME_MAX})
    return value


# A path, or the name of a model, data set or run (PATH_MAX: no path is longer; never empty).
PathText = Annotated[str, StringConstraints(max_length=4096), AfterValidator(_path_text)]
# A short name: GPU type, split, column, reviewer, reward.
Name = Annotated[str, StringConstraints(max_length=256)]
# Free text a person writes (a note, a reason).
Note = Annotated[str, StringConstraints(max_length=20_000)]


class NoArguments(Request):
    """This tool takes no arguments."""
