"""MCP door: one tool per registered tool (`mcp_server.tools.TOOLS`, each package's `tools.py`); each takes its
request model's fields as flat arguments, calls the core and returns the pydantic result.

One declaration per request: the pydantic request model is the tool's input schema (descriptions, defaults, enums,
bounds; unknown fields refused) and is what the core receives. The core modules are light at import (no torch, trl or
transformers: those are imported where the work needs them), so the server lists its tools fast.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
import warnings
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types.methods import serialize_server_result
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_server import served, serverlog, warm_up
from mcp_server.errors import UserInputError, describe_failure, validation_message
from mcp_server import jsonrpc
from mcp_server.calls import run_cancellable, stop_point
from mcp_server.inputs import NoArguments
from mcp_server.interpreter import keep_caches_private
from mcp_server.reporting import Report
from mcp_server.tools import MCP_TOOLS
from mcp_server.toolspec import ToolSpec, compact, outline

logger = logging.getLogger("llm-finetuning")
# MCP logging is deprecated from protocol 2026-07-28 (clients opt in per request) but still how today's clients
# show a server's messages; the SDK would warn on every call.
warnings.filterwarnings("ignore", message="The logging capability is deprecated", category=MCPDeprecationWarning)


class _RawArguments(ArgModelBase):
    """Hands every argument to the tool as given. The SDK's argument model drops unknown names silently; the tool
    validates against its request model instead, so an unknown or bad field gets one message naming it."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _parse(model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    """The request, or a ToolError naming each bad field and, for an unknown one, what is accepted."""
    data = dict(arguments)
    for key, value in arguments.items():
        field = model.model_fields.get(key)
        # Some clients send a list or object as a JSON string (the SDK's own argument parsing allows it too).
        if field is not None and field.annotation is not str and isinstance(value, str) and value[:1] in "[{":
            try:
                data[key] = json.loads(value)
            except (ValueError, RecursionError):  # not JSON (or nested past what json reads): validated as given
                pass
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ToolError(validation_message(exc, model)) from None


def _reporter(ctx: Context, token, stop: threading.Event) -> Report:
    """A `report` for the core (which runs in a worker thread): each call becomes an MCP log message and, when the
    client asked for progress, a progress notification, both sent on the server's event loop.

    A core reports stage by stage (each stage counting from 0), while MCP progress must only grow: a stage that
    starts again from 0 continues from where the previous one ended, with the total unknown from then on."""
    seen = {"offset": 0.0, "last": 0.0, "sent": -1.0}

    async def notify(progress: float | None, total: float | None, message: str) -> None:
        if progress is not None:
            await ctx.report_progress(progress, total, message)
        if served.logs("info"):  # the client's logging/setLevel
            await ctx.log("info", message, logger_name="llm-finetuning")

    def report(done: float, total: float | None, message: str) -> None:
        stop_point(stop)  # a cancelled call stops here
        if done < seen["last"]:
            seen["offset"] += seen["last"]
        seen["last"] = done
        progress = seen["offset"] + done
        fresh = progress > seen["sent"]
        seen["sent"] = max(seen["sent"], progress)
        try:
            anyio.from_thread.run(
                notify, progress if fresh else None, total if not seen["offset"] else None, message, token=token
            )
        except Exception as exc:  # a client gone away must not fail the work
            logger.debug("progress not sent: %r", exc)

    return report


def _tool(spec: ToolSpec) -> Tool:
    """The MCP tool of one registered tool: its flat arguments are the fields of the request model (none without
    one), validated here so a bad field gets one message naming it. A core that takes `report` gets progress and
    log messages while it works; the core runs in a worker thread. Every failure reaches the client as a tool error
    with one message: bad input names the field or file and what is accepted; anything unexpected keeps its type
    and text (the traceback goes to the server's log)."""
    model = spec.request or NoArguments
    reports = "report" in inspect.signature(spec.core).parameters

    def work(request: BaseModel, kwargs: dict[str, Any]):
        result = spec.core(request, **kwargs) if spec.request else spec.core(**kwargs)
        return _with_image(result, getattr(result, spec.image)) if spec.image else result

    async def call(ctx: Context, **arguments: Any):
        stop = threading.Event()  # set when the client cancels: the work stops at its next progress report
        try:
            request = _parse(model, arguments)
            kwargs: dict[str, Any] = {"report": _reporter(ctx, anyio.lowlevel.current_token(), stop)} if reports else {}
            return await run_cancellable(functools.partial(work, request, kwargs), stop)
        except (MCPError, ToolError):
            raise
        except Exception as exc:
            if not isinstance(exc, (UserInputError, ValidationError, OSError)):
                logger.exception("tool %s failed unexpectedly", spec.name)
            raise ToolError(describe_failure(exc)) from None

    # The SDK builds the tool from this signature: the context only, and the declared result.
    returns = Annotated[CallToolResult, spec.result] if spec.image else spec.result
    call.__signature__ = inspect.Signature(
        [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)], return_annotation=returns
    )
    call.__annotations__ = {"ctx": Context, "return": returns}
    effects = spec.effects
    if effects is None:
        raise TypeError(f"{spec.name} declares no effects (toolspec.Effects): an MCP tool says what a call changes")
    hints = ToolAnnotations(read_only_hint=not effects.writes, destructive_hint=effects.destroys,
                            idempotent_hint=effects.repeatable, open_world_hint=effects.open_world)
    tool = Tool.from_function(call, name=spec.name, description=spec.description, structured_output=True,
                              annotations=hints)
    tool.parameters = model.model_json_schema()
    tool.fn_metadata.arg_model = _RawArguments
    return tool


def _with_image(result: BaseModel, png: str | None) -> CallToolResult:
    """The result as text and structured content, plus the PNG it names as an image (training_status's plot)."""
    content = [TextContent(type="text", text=result.model_dump_json(indent=2))]
    if png:
        content.append(Image(path=png).to_image_content())
    return CallToolResult(content=content, structured_content=result.model_dump(mode="json"))


TOOLS: list[Tool] = [_tool(spec) for spec in MCP_TOOLS]

class _Server(MCPServer):
    async def list_tools(self):
        """The SDK's tools/list, its schemas compacted; the warm-up may hold this process from now on
        (warm_up.tools_listed)."""
        tools = [t.model_copy(update={
            "input_schema": compact(t.input_schema), "output_schema": outline(t.output_schema),
            "description": " ".join((t.description or "").split())}) for t in await super().list_tools()]
        warm_up.tools_listed()
        return tools


def package_version() -> str:
    """The installed package's version (pyproject.toml's, as the MCP handshake's serverInfo reports it); a
    checkout run without installing reads its pyproject.toml."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-finetuning")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"] if pyproject.is_file() else "unknown"


mcp = _Server(
    "llm-finetuning",
    version=package_version(),
    instructions=(
        "Fine-tune language models with GRPO / RLVR on Hugging Face TRL. Every number and check comes "
        "from these tools: emit and validate configs, plan memory, inspect rewards, launch, monitor and "
        "diagnose training, evaluate, promote and export."
    ),
    tools=TOOLS,
    extensions=[served.Skills()],
)


# A validation the warm-up rehearses (warm_up.start): a catalog model, never the person's (theirs is read when asked).
REHEARSAL = ("validate_grpo_config", {"config": {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
                                                 "learning_rate": 1e-6,
                                                 "reward_funcs": ["mcp_server.rewards.format_reward"]},
                                      "gpu": "H100"})


def rehearse_first_call() -> CallToolResult:
    """One validation through the door a client's call takes, in this thread's own event loop: the SDK's tool call
    (the arguments read, the core run in a worker thread, TRL's checks in the training interpreter, the result
    model validated and dumped), then the result shaped as the SDK's runner shapes a tools/call answer for each
    protocol version. What a first call builds or runs for the first time (the SDK's and pydantic's lazily built
    validators, the rules' and the memory verdict's imports, here and in the worker) is then built and run; no
    answer is kept."""
    name, arguments = REHEARSAL
    result = anyio.run(mcp.call_tool, name, arguments)
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    for version in KNOWN_PROTOCOL_VERSIONS:
        serialize_server_result("tools/call", version, wire)
    return result


served.install(mcp)


serverlog.bound_logging()  # not rich's handler, which the SDK installs (round 14 W1)


def main() -> None:
    keep_caches_private()
    from mcp_server import worker

    worker.holds_protocol = True  # workspace code runs in the worker, never beside the protocol's descriptors
    # TRL's import in the training interpreter and a rehearsed first validation, in the background, once
    # tools/list is answered
    warm_up.start(rehearse_first_call)
    # mcp.run("stdio"), with JSON-RPC error replies for bad lines
    anyio.run(jsonrpc.serve_stdio, mcp, served.LEGACY_CAPABILITIES)


if __name__ == "__main__":
    main()
