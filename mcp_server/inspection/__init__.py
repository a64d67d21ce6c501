"""The inspection gate: sample completions, score them with the run's rewards, record a person's verdict.

`check_inspection_gate(run)` is what the training launcher calls before it starts a run.
"""
