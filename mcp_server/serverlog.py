"""The MCP server's log handler: plain text on stderr, each record bounded (round 14 W1)."""

from __future__ import annotations

import logging
import sys

from mcp_server.errors import short


class _BoundedFormatter(logging.Formatter):
    """A log record as plain text, each line cut to MAX_LOG_LINE characters and the whole to MAX_LOG_LINES lines.
    Round 14 W1: the SDK logs a failed request's traceback (an unknown prompt name's message in it) through rich,
    on the event loop, in time growing with the square of the text's length (a 60k-character name held every other
    request for 172 s); here what a request sends costs at most linear time and a bounded write."""

    MAX_LOG_LINE, MAX_LOG_LINES = 1000, 200

    def format(self, record: logging.LogRecord) -> str:
        lines = super().format(record).splitlines()
        cut = [short(line, self.MAX_LOG_LINE) for line in lines[: self.MAX_LOG_LINES]]
        if len(lines) > self.MAX_LOG_LINES:
            cut.append(f"... ({len(lines) - self.MAX_LOG_LINES} more lines)")
        return "\n".join(cut)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (as rich's console did), bounded by _BoundedFormatter."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_BoundedFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler.__init__ sets it
        pass


def bound_logging() -> None:
    """The SDK's rich log handler (MCPServer's configure_logging, on the root logger) replaced by _StderrHandler."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler).__name__ == "RichHandler":
            root.removeHandler(handler)
            root.addHandler(_StderrHandler())
