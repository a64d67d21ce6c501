"""The MCP SDK internals the doors still use, each named with why the SDK's public surface cannot do it.

The doors register tools through the public surface where it can (`Tool.from_function`, `MCPServer(tools=...)`,
`Context.report_progress` and `log`, `ToolAnnotations`, structured output from the declared result). Two behaviours
the tests hold are out of its reach: the published input schema is the request model's own (the SDK derives one from
a function signature), and an unknown argument is refused with a message naming it (the SDK's argument model drops it
silently). For those, and for the stdio transport with JSON-RPC error replies (jsonrpc.py), the doors use the
internals below; pyproject.toml pins the SDK's minor version, and these tests fail when one disappears or changes
shape, when the source stops using one (strike it here), or when the source imports an SDK name no `__all__` exports
without naming it here.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import re
import tomllib

import pytest
from conftest import ROOT

SOURCE = ROOT / "mcp_server"

# Attribute internals: (where the source uses it, as it is written there; why the public surface cannot do it).
ATTRIBUTES = {
    "tool.parameters = ": "MCPServer publishes the input schema it derives from a function's signature (a model "
    "titled '<fn>Arguments'); the door publishes the request model's own model_json_schema() (its descriptions, "
    "$defs, additionalProperties false), so server._tool sets Tool.parameters after Tool.from_function.",
    "tool.fn_metadata.arg_model = ": "The SDK validates arguments with FuncMetadata.arg_model, which drops unknown "
    "names silently; server._RawArguments (an ArgModelBase) hands every argument on, so the request model refuses an "
    "unknown one with a message naming it and what is accepted.",
    "server._lowlevel_server": "MCPServer.run_stdio_async reads the SDK's own stdin; jsonrpc.serve_stdio runs the "
    "low-level server on checked lines, so a bad line gets its JSON-RPC error reply instead of silence.",
    "mcp._lowlevel_server.add_request_handler": "MCPServer has no hook for logging/setLevel (deprecated from "
    "2026-07-28) and an extension's MethodBinding refuses spec methods; the SDK's MethodBinding docstring names "
    "the low-level Server.add_request_handler for re-providing it (served.install).",
}
# Imported names no `__all__` of their module or a package above it exports: {name: why}.
IMPORTS = {
    "ArgModelBase": "the base of server._RawArguments (see tool.fn_metadata.arg_model above).",
    "ToolError": "the exception the SDK turns into a tool error with our message (mcp.server.mcpserver.exceptions "
    "has no __all__; any other exception becomes a message-less crash).",
    "SessionMessage": "what the low-level server's streams carry: jsonrpc.py passes good lines on in it and writes "
    "its error replies through it.",
    "Extension": "the SDK's extension API (SEP-2133, MCPServer(extensions=...)) that served.Skills serves SEP-2640 "
    "through; mcp.server.extension has no __all__.",
    "MethodBinding": "an extension's request method (skills/list, skills/get), from the same module.",
    "ResourceBinding": "an extension's resource (each skill file), from the same module.",
}


def _sdk_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) of every `from mcp... import name` / `from mcp_types... import name` in mcp_server."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("mcp", "mcp_types"):
                found += [(path.name, node.module, alias.name) for alias in node.names]
    return found


def _public(module: str, name: str) -> bool:
    """Whether `module` or a package above it exports `name` (the same object) in its `__all__`."""
    target = getattr(importlib.import_module(module), name)
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        above = importlib.import_module(".".join(parts[:i]))
        if name in getattr(above, "__all__", ()) and getattr(above, name, None) is target:
            return True
    return False


def test_the_sdk_minor_version_is_pinned_and_installed():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (pin,) = [d for d in deps if re.match(r"mcp\b", d)]
    found = re.fullmatch(r"mcp>=(\d+)\.(\d+)(?:\.\d+)?,<(\d+)\.(\d+)", pin)
    assert found, f"pyproject.toml's {pin!r} does not pin the SDK's minor version (mcp>=X.Y,<X.Y+1)"
    major, minor, top_major, top_minor = map(int, found.groups())
    assert (top_major, top_minor) == (major, minor + 1), pin
    installed = tuple(int(p) for p in importlib.metadata.version("mcp").split(".")[:2])
    assert installed == (major, minor), f"installed mcp {installed} is not the pinned {major}.{minor}: recheck " \
                                        "every internal named here before moving the pin"


def test_every_non_public_sdk_import_is_named_with_its_reason():
    imports = _sdk_imports()
    internal = {name for _, module, name in imports if not _public(module, name)}
    unnamed = internal - set(IMPORTS)
    assert not unnamed, f"SDK names imported that no __all__ exports, not named in IMPORTS with a reason: {unnamed}"
    stale = set(IMPORTS) - internal
    assert not stale, f"named in IMPORTS but no longer imported (or now public): strike {stale}"


@pytest.mark.parametrize("written", sorted(ATTRIBUTES))
def test_every_attribute_internal_named_is_still_used(written):
    used = [p.name for p in SOURCE.rglob("*.py") if written in p.read_text(encoding="utf-8")]
    assert used, f"no module uses {written.strip()!r} any more: strike it from ATTRIBUTES"


def test_the_internals_still_do_what_the_doors_rely_on():
    """Each internal, through the server the door builds: the published schema is the request model's, the argument
    model hands an unknown argument on, and the low-level server runs on given streams."""
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
    from mcp.shared.message import SessionMessage

    from mcp_server.server import TOOLS, mcp
    from mcp_server.tools import MCP_TOOLS
    from mcp_server.toolspec import compact

    assert {"parameters", "fn_metadata"} <= set(Tool.model_fields) and "arg_model" in FuncMetadata.model_fields
    assert callable(ArgModelBase.model_dump_one_level) and "message" in SessionMessage.__dataclass_fields__
    listed = {t.name: t for t in asyncio.run(mcp.list_tools())}
    for spec, tool in zip(MCP_TOOLS, TOOLS, strict=True):
        model = spec.request
        if model is not None:
            assert listed[spec.name].input_schema == compact(model.model_json_schema()), spec.name
        assert tool.fn_metadata.validate_arguments({"no_such_field": 1}) == {"no_such_field": 1}, spec.name
    lowlevel = mcp._lowlevel_server
    assert callable(lowlevel.run) and callable(lowlevel.create_initialization_options)


def test_the_public_surface_still_cannot_refuse_an_unknown_argument():
    """Why the argument model is replaced: a tool added the public way (`MCPServer.add_tool`) takes an unknown
    argument without a word. When the SDK refuses it, this fails: drop `_RawArguments` and register publicly."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("probe")

    def probe(x: int) -> int:
        return x

    server.add_tool(probe)
    result = asyncio.run(server.call_tool("probe", {"x": 1, "no_such_field": 2}))
    assert not result.is_error and result.structured_content == {"result": 1}
    (tool,) = asyncio.run(server.list_tools())
    assert tool.input_schema.get("title") == "probeArguments" and "additionalProperties" not in tool.input_schema
