"""The one error type the doors turn into a clear message (never a traceback), and how a failure reads in one line."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

# A message stays readable: a pasted file body or a huge value never floods the client.
MAX_MESSAGE = 2000
MAX_UNKNOWN_LISTED = 10  # unknown fields named in one message; the rest counted


class UserInputError(ValueError):
    """Bad input from a person or an agent. The message names the field or file and what is accepted.

    The CLI prints it and exits 2; the MCP door (server.py's `tool`) returns it to the client as a tool error.
    Kept free of the MCP SDK so the core and the CLI do not pay for importing it.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in a long core, with what it kept and where in its message: the CLI prints it as one line (exit 130)
    instead of a traceback."""


def one_line(text: str) -> str:
    """`text` as one line: a newline, a tab or any other control character a value carried into the message is
    shown escaped (\\n, \\x1e), so a message stays one line whatever the input held; a name's bytes that are not
    UTF-8 too (escaped_name)."""
    text = escaped_name(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def escaped_name(text: str) -> str:
    """`text` as it can be written out in UTF-8 (JSON, a terminal): a file name's bytes that are not UTF-8 (Python
    reads them as surrogate escapes: `runs/bad\\xffname`) shown escaped as \\xff; `text` itself when it encodes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate no file name holds
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


def short(value, limit: int = 200) -> str:
    """A value as shown in a message: cut to `limit` characters."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# The "did you mean" lookup's bounds (round 15, M1: difflib is quadratic in a name's length, and a workspace module
# with one 150k-letter function name held validate_grpo_config for ten minutes): a name longer than this is neither
# looked up nor suggested, and at most CLOSE_NAMES names are compared (a dotted reward path, a config key, a model).
CLOSE_NAME_CHARS = 200
CLOSE_NAMES = 5000


def closest_names(name: str, accepted, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The accepted names nearest a misspelt one, best first: the one "did you mean" lookup (each difflib use goes
    through here), bounded by CLOSE_NAME_CHARS and CLOSE_NAMES. `accepted` is a list of names, or a dict from the
    form a name is compared in (lower-cased, an alias) to the name shown."""
    shown = accepted if isinstance(accepted, dict) else {name: name for name in accepted}
    if len(name) > CLOSE_NAME_CHARS:  # no one types a name this long: not a misspelling to look up
        return []
    keys = [key for key in shown if len(key) <= CLOSE_NAME_CHARS][:CLOSE_NAMES]
    out: list[str] = []
    for key in difflib.get_close_matches(name, keys, n=max(1, len(keys)), cutoff=cutoff):
        if shown[key] not in out:
            out.append(shown[key])
    return out[:n]


def did_you_mean(close: list[str]) -> str:
    """The sentence a message adds for the nearest names (closest_names): " Did you mean 'a', 'b'?", or ""."""
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _model_at(model: type[BaseModel] | None, loc: tuple) -> type[BaseModel] | None:
    """The (nested) request model that owns the field at `loc`, for listing what it accepts."""
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):  # a list item: same model as the list's
            continue
        field = model.model_fields.get(str(part))
        model = _first_model(field.annotation) if field else None
    return model


def _first_model(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if found := _first_model(arg):
            return found
    return None


def validation_message(exc: ValidationError, model: type[BaseModel] | None = None, what: str = "") -> str:
    """Pydantic's errors as one line 'field: message; ...', each naming its field. Unknown fields are listed
    with the closest accepted name and every accepted one (when the model is known)."""
    parts: list[str] = []
    unknown: dict[tuple, list[str]] = {}
    for error in exc.errors():
        loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden":
            unknown.setdefault(loc[:-1], []).append(str(loc[-1]))
        else:
            message = error["msg"].removeprefix("Value error, ")  # a validator's own sentence, as written
            parts.append(f"{'.'.join(map(str, loc)) or what}: {message}")
    for owner_loc, names in unknown.items():
        owner = _model_at(model, owner_loc)
        accepted = list(owner.model_fields) if owner else []
        where = ".".join(map(str, owner_loc))
        # at most MAX_UNKNOWN_LISTED named (issue 48: 250k unknown keys took seconds of "did you mean" look-ups)
        text = f"unknown field{'s' if len(names) > 1 else ''} " + ", ".join(
            f"'{short(name, 60)}'"
            + (f" (did you mean '{close[0]}'?)" if (close := closest_names(name, accepted, n=1)) else "")
            for name in names[:MAX_UNKNOWN_LISTED]
        ) + (f" and {len(names) - MAX_UNKNOWN_LISTED} more" if len(names) > MAX_UNKNOWN_LISTED else "")
        if accepted:
            text += f"; accepted: {', '.join(accepted)}"
        parts.insert(0, f"{where}: {text}" if where else text)
    return one_line(short("; ".join(parts), MAX_MESSAGE))


def describe_failure(exc: BaseException) -> str:
    """One line for any failure a door reports: bad input as is; a file the system refused names the file; anything
    else (a bug) keeps its type and text."""
    if isinstance(exc, UserInputError):
        return one_line(short(str(exc), MAX_MESSAGE))
    if isinstance(exc, ValidationError):
        return validation_message(exc)
    if isinstance(exc, OSError) and exc.filename:
        return one_line(short(f"{short(exc.filename)}: {exc.strerror or exc}", MAX_MESSAGE))
    return one_line(short(f"unexpected {type(exc).__name__}: {exc}", MAX_MESSAGE))
