"""Memory planning for GRPO runs: GPU catalog, model architectures (exact parameter counts), the planner.

`gpus` is import-light (no torch) because the config validator and the server import it at start-up.
"""
