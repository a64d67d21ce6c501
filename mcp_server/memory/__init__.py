"""Memory planning for GRPO runs: model architectures (exact parameter counts), the planner.

The GPU catalog it plans against is `mcp_server.gpus`, on the ground floor.
"""
