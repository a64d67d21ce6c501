"""The recipe's tool: `validate_grpo_config` (its readable summary and the findings renderer emission reuses)."""

from __future__ import annotations

from mcp_server.recipe.models import ValidateRequest, ValidationResult
from mcp_server.recipe.validate import validate_config
from mcp_server.toolspec import Command, Flag, ToolSpec


def render_findings(findings) -> list[str]:
    icons = {"error": "ERROR  ", "warning": "WARN   ", "info": "INFO   "}
    lines = []
    for f in findings:
        lines.append(f"  {icons[f.severity]}{f.code}" + (f" [{f.field}]" if f.field else "") + f": {f.message}")
        if f.fix:
            lines.append(f"         fix: {f.fix}")
    return lines


def human_validation(result: ValidationResult) -> str:
    head = "VALID" if result.valid else "NOT VALID"
    lines = [f"{head} for {result.target} (TRL {result.trl_version})"]
    lines += render_findings(result.findings) or ["  no findings"]
    return "\n".join(lines)


TOOLS = [
    ToolSpec(
        "validate_grpo_config", validate_config, ValidationResult, request=ValidateRequest,
        description="""Validate a GRPO config (a YAML path or a dict of fields) against the installed TRL and the target
    GPU type and count. Returns findings {code, field, severity, message, fix}; valid only with no errors.""",  # noqa: E501 (the text MCP clients list, as it was)
        cli=Command(
            "Validate a GRPO config YAML for the installed TRL and a target GPU.", human_validation,
            lambda r: r.valid, name="validate-config", hide=("config",), flags={"config_path": Flag("path")},
        ),
    ),
]
