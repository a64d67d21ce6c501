"""Emission: a recipe request -> validated files in a run directory (train/config.yaml, rewards.json, train.py).

A floor above the recipe's rules and the memory planner, which it calls (docs/architecture.md, "Floors").
"""
