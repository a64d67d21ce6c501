"""Baseline and checkpoint evaluation, the promotion verdict and export (the demo, a door, is mcp_server/demo.py)."""
