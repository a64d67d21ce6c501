"""The emitter's tool: `emit_grpo_config`, its readable summary and the `--override KEY=VALUE` flag."""

from __future__ import annotations

import json

from mcp_server.errors import UserInputError
from mcp_server.recipe.models import EmitResult, GRPORecipeRequest
from mcp_server.recipe.tools import human_validation
from mcp_server.toolspec import Command, Effects, ToolSpec


# The core is imported on the first call, not with the registry: the doors start without the cores' imports.
def emit_grpo_config(request: GRPORecipeRequest) -> EmitResult:
    from mcp_server.emission.emit import emit_grpo_config

    return emit_grpo_config(request)


def fits(result: EmitResult) -> bool:
    """Whether the emitted run fits its target: the memory finding emission adds (none on a CPU target)."""
    return not any(f.code == "memory_does_not_fit" for f in result.validation.findings)


def human_emit(result: EmitResult) -> str:
    verdict = human_validation(result.validation)  # VALID BUT WILL NOT FIT when memory is the only error
    if result.kept and "nothing was written" in result.kept:  # NOT VALID: no paths to show, none exist
        return "\n".join([f"GRPO config not emitted ({result.variant}: {result.variant_reason})", verdict,
                          result.kept])
    lines = [
        f"Emitted GRPO config ({result.variant}: {result.variant_reason})",
        f"  run dir:   {result.run_dir}",
        f"  config:    {result.config_path}",
        f"  script:    {result.train_script_path}",
        f"  schema:    {result.schema_path}",
        f"  run with:  {result.launch_command}",
        *([f"  per step:  {result.per_step}"] if result.per_step else []),
        *([f"  time:      {result.cpu_time}"] if result.cpu_time else []),
        verdict,
        *([result.kept] if result.kept else []),
    ]
    return "\n".join(lines)


def _add_overrides(p) -> None:
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="Set a GRPOConfig field (repeatable).")


def _fold_overrides(args, data: dict) -> None:
    for item in args.override or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise UserInputError("--override", f"expected KEY=VALUE, got '{item}'")
        overrides = data.setdefault("overrides", {})
        if not isinstance(overrides, dict):  # --request gave overrides that are not a mapping
            raise UserInputError("--override", "the request's overrides must be a JSON object of fields")
        try:
            overrides[key] = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON: the text itself
            overrides[key] = raw


TOOLS = [
    ToolSpec(
        "emit_grpo_config", emit_grpo_config, EmitResult, request=GRPORecipeRequest,
        effects=Effects(writes=True, destroys=True),
        description="""Build a GRPO config for the installed TRL and the target hardware, validate it, and write
    train/config.yaml (for `trl grpo --config`), train/train.py and the request's JSON Schema into a run directory.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "Emit a validated GRPO config and train.py into a run directory.", human_emit,
            lambda r: r.validation.valid and fits(r), name="emit-config",
            whole_request="The whole request as JSON (inline or @file.json); flags override it.",
            hide=("dataset_config", "dataset_split", "lora_r", "lora_alpha", "lora_target_modules", "overrides"),
            extra=_add_overrides, fold=_fold_overrides,
        ),
    ),
]
