"""The readable summary of `validate_grpo_config` and the findings renderer emission reuses (the tool itself is
registered in memory/tools.py)."""

from __future__ import annotations

from mcp_server.recipe.models import ValidationResult
from mcp_server.toolspec import ToolSpec


def render_findings(findings) -> list[str]:
    icons = {"error": "ERROR  ", "warning": "WARN   ", "info": "INFO   "}
    lines = []
    for f in findings:
        lines.append(f"  {icons[f.severity]}{f.code}" + (f" [{f.field}]" if f.field else "") + f": {f.message}")
        if f.fix:
            lines.append(f"         fix: {f.fix}")
    return lines


def human_validation(result: ValidationResult) -> str:
    errors = {f.code for f in result.findings if f.severity == "error"}
    # a config TRL accepts that will not fit the GPU: its own verdict
    head = "VALID" if result.valid else "VALID BUT WILL NOT FIT" if errors == {"memory_does_not_fit"} else "NOT VALID"
    lines = [f"{head} for {result.target} (TRL {result.trl_version})"]
    lines += render_findings(result.findings) or ["  no findings"]
    return "\n".join(lines)


# validate_grpo_config is registered by memory/tools.py: validation for a target includes the memory plan, which
# lives a floor above the recipe (memory.verdict.validate_config).
TOOLS: list[ToolSpec] = []
