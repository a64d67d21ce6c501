"""Every function called across the worker boundary by name, declared once.

`mcp_server.worker.in_training(target, ...)` imports "module:function" in the training interpreter: the caller's
process may lack torch, TRL or transformers, so it names the function instead of importing it. These strings are
all that in_training is called with (tests/test_layers.py refuses a string written at a call); callers import the
constant (`from mcp_server.worker_targets import NAME`), and test_layers reads each use as an import of the named
module from the caller's floor.
(Functions decorated with `worker.runs_in_training` are imported by name and need no entry here.)
"""

from __future__ import annotations

READ_FILE = "mcp_server.dataset:read_file"  # a parquet file where pyarrow is missing (the light server)
LORA_TARGETS_WITHOUT_ROUTERS = "mcp_server.model_ref:lora_targets_without_routers"
SCHEMA_TOKENS = "mcp_server.agentic.checks:schema_tokens"
CHECK_AGENTIC = "mcp_server.agentic.checks:check_agentic"
TEMPLATE_FINDINGS = "mcp_server.agentic.checks:model_template_findings"  # emission's refusal before anything loads
TURN_COST = "mcp_server.agentic.budget:turn_cost"  # an agentic run's costliest tool-calling turn
TURN_BUDGET = "mcp_server.agentic.budget:turn_budget_findings"  # whether max_completion_length holds the turns
PROBE_INSTALLED_TRL = "mcp_server.recipe.trl_fields:probe_installed_trl"
PARSE_LIKE_TRL = "mcp_server.recipe.trl_fields:parse_like_trl"
INSTANTIATE_GRPO_CONFIG = "mcp_server.recipe.trl_fields:instantiate_grpo_config"
GRPO_BATCH = "mcp_server.recipe.trl_fields:grpo_batch_layout"  # TRL's batch fields: prompts per step (emission)
WARM_TRL = "mcp_server.recipe.trl_fields:warm_trl"
REWARD_PROBLEMS = "mcp_server.recipe.reward_rules:reward_problems"
REHEARSE = "mcp_server.recipe.rehearsal_run:rehearse_here"  # the run on a miniature (recipe.rehearsal)
SAMPLE_COMPLETIONS = "mcp_server.inspection.sampling:sample_here"
SAMPLE_TRAJECTORIES = "mcp_server.inspection.trajectories:sample_here"
PROBE_INTERPRETER = "mcp_server.training.environment:probe_interpreter"
BUILD_SMOLLM2 = "mcp_server.smollm2:build_here"  # the real model's one-time conversion (torch, transformers, gguf)
# Tools that import workspace code (reward modules): in the worker when the caller holds a protocol (worker.apart)
INSPECT_REWARDS = "mcp_server.inspection.review:inspect_rewards"
SCORE_BLIND = "mcp_server.inspection.review:score_blind_probes"  # the review's blind probes, derived by the caller
RECORD_VERDICT = "mcp_server.inspection.gate:record_inspection_verdict"
CHECK_GATE = "mcp_server.inspection.gate:check_inspection_gate"
# launch_training's door: what promote_checkpoint would find wrong with the run's baseline (imports the graders)
BASELINE_WARNINGS = "mcp_server.evaluation.baseline_choice:launch_warnings"

# The graders' import, scoring and code hash for evaluate_model and promote_checkpoint (worker.keyless, from the
# keyed worker that signs what they measured: evaluation.graders_apart), and an agentic sampling's rollout (the
# run's train.py, environment and rewards: inspection.trajectories), whose samples.meta.json the caller signs
GRADE = "mcp_server.evaluation.graders_apart:grade_here"
GRADERS_CODE = "mcp_server.evaluation.graders_apart:code_here"
ROLLOUT = "mcp_server.inspection.trajectories:rollout_here"

# Work that imports reward modules no one has reviewed yet, sent to the keyless worker (worker_keyless) as every
# worker.apart call is: emission's and validation's reward checks, the rehearsal, sample_trajectories (the run's
# train.py, environment and rewards; it signs nothing)
KEYLESS_TARGETS = frozenset({REWARD_PROBLEMS, REHEARSE, SAMPLE_TRAJECTORIES, GRADE, GRADERS_CODE, ROLLOUT})

# The light checks the CLI sends to its warm per-user worker (mcp_server.worker_daemon), so a repeated call does not
# import TRL again; work that loads models or imports the person's code stays in the call's own process.
DAEMON_TARGETS = frozenset({PROBE_INSTALLED_TRL, PARSE_LIKE_TRL, INSTANTIATE_GRPO_CONFIG, GRPO_BATCH})
DAEMON_WARM_UP = WARM_TRL  # what the daemon does before its first caller
