"""MCP door: each tool parses its request, calls the core and returns the pydantic result.

Only light modules (pydantic models) are imported at start-up so the server lists its tools fast;
torch, trl and transformers are imported inside the core functions that need them.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from mcp_server.recipe.models import EmitResult, GRPORecipeRequest, ValidateRequest, ValidationResult

mcp = MCPServer(
    "llm-finetuning",
    instructions=(
        "Fine-tune language models with GRPO / RLVR on Hugging Face TRL. Every number and check comes "
        "from these tools: emit and validate configs, plan memory, inspect rewards, launch, monitor and "
        "diagnose training, evaluate, promote and export."
    ),
)


# ---------------------------------------------------------------- recipe (configs)
@mcp.tool()
def emit_grpo_config(request: GRPORecipeRequest) -> EmitResult:
    """Build a GRPO config for the installed TRL and the target hardware, validate it, and write
    train/config.yaml (for `trl grpo --config`), train/train.py and the request's JSON Schema into a run directory."""
    from mcp_server.recipe.emit import emit_grpo_config as core

    return core(request)


@mcp.tool()
def validate_grpo_config(request: ValidateRequest) -> ValidationResult:
    """Validate a GRPO config (a YAML path or a dict of fields) against the installed TRL and the target
    GPU type and count. Returns findings {code, field, severity, message, fix}; valid only with no errors."""
    from mcp_server.recipe.validate import validate_config

    return validate_config(request)


def main() -> None:
    mcp.run("stdio")


if __name__ == "__main__":
    main()
