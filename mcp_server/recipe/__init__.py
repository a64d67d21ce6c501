"""The GRPO recipe: variants, TRL field introspection, the config rules and validation (emission is one floor up,
in `mcp_server.emission`)."""
