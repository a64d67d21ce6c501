"""Agentic GRPO: the environment and tools a run trains with (TRL's `environment_factory` and `tools`).

`spec` reads and records them (train/agentic.json) and loads them fresh, each call under a timeout; `checks`
tests TRL's start-up requirements before a model loads; `sources` fingerprints their code for the gate.
"""
