"""sample_trajectories: the rollouts an agentic run's training would produce, through TRL's own tool loop.

The run's train/train.py builds the GRPOTrainer exactly as training will (model, chat template, environment,
tools, max_completion_length, max_tool_calling_iterations); one batch of `num_prompts` rows x num_generations
goes through `GRPOTrainer._generate_and_score_completions`, the method each training step calls. Nothing is
trained. Each rollout is written to inspection/trajectories.jsonl with its turns, the tokens the loss sees and
those it masks, each tool call's status and each reward; the environments are then probed (a fresh replay of
the same calls, a pooled instance reset again) and `trajectory_review.review` names what is wrong by code.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import time
from pathlib import Path

from mcp_server.errors import UserInputError, one_line, short
from mcp_server.inspection.trained import sampling
from mcp_server.inspection.trajectory_models import TrajectoryCode, TrajectoryRequest, TrajectoryResult
from mcp_server.inspection.trajectory_review import call_statuses, render_sheet, review
from mcp_server.model_ref import small_model_threads
from mcp_server.reporting import Report, silent
from mcp_server.rewards.dotted import looked_in, on_path
from mcp_server.rewards.source_only import load_user_file
from mcp_server.runs import Run, resolve_run
from mcp_server.worker import in_training, keyless
from mcp_server.worker_targets import ROLLOUT, SAMPLE_TRAJECTORIES
from mcp_server.workspace import atomic_write_json, atomic_write_text


def sample_trajectories(request: TrajectoryRequest, report: Report = silent) -> TrajectoryResult:
    """In the training interpreter, where TRL runs."""
    run = resolve_run(request.run)
    if not run.agentic.is_file():
        raise UserInputError("run", f"{run.dir} has no train/agentic.json: emit the run with an environment or tools "
                                    "(emit_grpo_config environment=... / tools=...), or use sample_completions")
    return in_training(SAMPLE_TRAJECTORIES,
                       request.model_copy(update={"run": str(run.dir)}), report=report)


def _build_trainer(run: Run, output_dir: str):
    """The run's own GRPOTrainer from its train/train.py, writing nothing into the run."""
    module = load_user_file(f"llm_finetuning_train_{abs(hash(str(run.dir)))}", run.script)  # source, no bytecode
    argv = ["--config", str(run.config), "--output_dir", output_dir, "--report_to", "none",
            "--log_completions", "false"]
    try:  # sampling is not training: the trainer's point-of-use checks report and never refuse
        with contextlib.chdir(run.dir), sampling():
            return module.build_trainer(argv)
    except SystemExit as exc:  # train.py's requirement check: one line per unmet requirement
        raise UserInputError("run", one_line(str(exc.code))) from None


def _held_to(trainer, run: Run, pin: dict) -> None:
    """The trainer's models are the files `pin` hashed (round 18, b06): the trainer's own check after its load
    (loaded_weights.loaded_weight_problems, which sampling() leaves off), refused naming what changed."""
    from mcp_server.inspection.loaded_weights import loaded_weight_problems
    from mcp_server.inspection.pinned_load import pinned_folder
    from mcp_server.inspection.pins import model_content

    local = run.dir / str(pin.get("model"))
    folder = pinned_folder(local if local.is_dir() else pin.get("model"), pin)
    models = [m for m in (getattr(trainer, "model", None), getattr(trainer, "ref_model", None)) if m is not None]
    problems = loaded_weight_problems(models, folder, model_content(pin), pin.get("loads")) if folder else []
    if problems:
        raise UserInputError("model", f"{folder} changed while the run's trainer loaded it: not the model its pin "
                             f"recorded, so nothing was sampled: {'; '.join(problems[:4])}. Put its files back as "
                             "they were, then sample again")


def _segments(ids: list[int], mask: list[int]) -> tuple[list[list[int]], list[list[int]]]:
    """(runs of ids the loss sees, runs it masks), each in order."""
    seen, masked, last = [], [], None
    for token, bit in zip(ids, mask, strict=True):
        target = seen if bit else masked
        if last is not bit:
            target.append([])
            last = bit
        target[-1].append(token)
    return seen, masked


def _tool_groups(messages: list[dict]) -> list[list[dict]]:
    """The consecutive tool messages after each assistant turn (what TRL appends as one tool suffix)."""
    groups, current = [], []
    for message in messages:
        if message.get("role") == "tool":
            current.append(message)
        elif current:
            groups.append(current)
            current = []
    return groups + ([current] if current else [])


def _record(trainer, index: int, row: dict, prompt, completion: list, ids: list[int], mask: list[int],
            rewards: dict, names: list[str]) -> dict:
    tok = trainer._tokenizer
    seen, masked = _segments(ids, mask)
    expected = [trainer._get_tool_suffix_ids(group) for group in _tool_groups(completion)]
    return {
        "id": index,
        "row": {k: v for k, v in row.items() if k != "prompt"},
        "prompt": prompt,
        "completion": completion,
        "turns": sum(m.get("role") == "assistant" for m in completion),
        "calls": call_statuses(completion, names, trainer.max_tool_calling_iterations),
        "loss_tokens": sum(mask),
        "masked_tokens": len(mask) - sum(mask),
        "loss_text": [tok.decode(s) for s in seen],
        "masked_text": [tok.decode(s) for s in masked],
        "mask_is_tool_results": masked == expected,
        "rewards": rewards,
        "completion_ids": ids,
        "tool_mask": mask,
    }


def _rollout(trainer, inputs: list[dict], row_of: list[int]) -> tuple[dict, dict]:
    """One training batch through TRL's generation and scoring; (its output, what the reward functions saw).
    TRL raises out of the batch when an environment's reset raises (training would stop there too): the one line
    names the data set row (`row_of[i]` is input i's row)."""
    seen: dict = {}
    original = trainer._calculate_rewards

    def capture(inputs_, prompts, completions, completion_ids_list):
        rewards = original(inputs_, prompts, completions, completion_ids_list)
        seen.update(prompts=prompts, completions=completions, rewards=rewards.tolist())
        return rewards

    trainer._calculate_rewards = capture
    trainer.model.train()
    try:
        output = trainer._generate_and_score_completions(inputs)
    except Exception as exc:  # noqa: BLE001 - an environment's reset, a reward: one line naming it
        row = getattr(exc, "reset_row", None)
        where = next((f" in the environment's reset on data set row {row_of[i]}" for i, given in enumerate(inputs)
                      if given == row), "")
        raise UserInputError("run", f"the rollout failed{where}: {type(exc).__name__}: {one_line(short(exc))}"
                             ) from None
    finally:
        trainer._calculate_rewards = original
    return output, seen


def rollout(run: Run, num_prompts: int, seed: int, report: Report = silent, pin: dict | None = None) -> dict:
    """One batch of the run's training through TRL's loop: its records, codes and what TRL logged. `pin`: the
    model pin the samples record (sample_completions'), which the trainer's models are held to once loaded."""
    from transformers import set_seed

    from mcp_server.inspection.trajectory_probes import probe_environments

    report(0, 3, "building the run's trainer (train/train.py)")
    with tempfile.TemporaryDirectory(prefix="trajectories-") as scratch:
        trainer = _build_trainer(run, scratch)
        if pin is not None:
            _held_to(trainer, run, pin)
        dataset = trainer.train_dataset
        k = min(num_prompts, len(dataset))
        picks = sorted(random.Random(seed).sample(range(len(dataset)), k))
        group = trainer.num_generations
        inputs = [dict(dataset[i]) for i in picks for _ in range(group)]
        set_seed(seed)
        report(1, 3, f"rolling out {k} prompts x {group} through TRL's tool loop")
        with small_model_threads(trainer.model):
            output, seen = _rollout(trainer, inputs, [picks[i // group] for i in range(len(inputs))])
    names = [getattr(t, "__name__", "") for t in trainer.tools]
    ids_rows, masks = output["completion_ids"].tolist(), output["completion_mask"].tolist()
    prompt_tokens = output["prompt_mask"].sum(dim=1).tolist()  # as the model saw it: the tool schema included
    tool_masks = output["tool_mask"].tolist() if "tool_mask" in output else [[1] * len(r) for r in ids_rows]
    records = []
    for i, row in enumerate(inputs):
        length = sum(masks[i])
        rewards = {name: seen["rewards"][i][j] for j, name in enumerate(trainer.reward_func_names)}
        records.append({**_record(trainer, i, row, seen["prompts"][i], seen["completions"][i], ids_rows[i][:length],
                                  tool_masks[i][:length], rewards, names),
                        "group": i // group, "row_index": picks[i // group], "prompt_tokens": int(prompt_tokens[i]),
                        "advantage": float(output["advantages"][i])})
    report(2, 3, "probing the environments (replay, reset)")
    probes = probe_environments(trainer, inputs, records, group) if trainer.environment_factories else {}
    metrics = {k_: v[-1] for k_, v in trainer._metrics["train"].items() if k_.startswith("tools/")}
    eos = {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}
    for record in records:
        record["truncated"] = not record["completion_ids"] or record["completion_ids"][-1] not in eos
        if record["truncated"] and trainer.mask_truncated_completions and not record["loss_tokens"]:
            record["mask_is_tool_results"] = True  # mask_truncated_completions masks the whole rollout, by design
    return {"records": records, "probes": probes, "metrics": metrics, "num_prompts": k, "group": group,
            "codes": review(records, probes, trainer.max_tool_calling_iterations, trainer.max_completion_length),
            "dataset_rows": len(dataset)}


def rollout_here(run_dir: str, num_prompts: int, seed: int, path: list[str] = (), pin: dict | None = None,
                 report: Report = silent) -> dict:
    """rollout in the keyless worker (worker_targets.ROLLOUT): the run's train.py, its environment and rewards run
    there, apart from the key that signs samples.meta.json (worker_keyless), imported from the caller's folders
    (`path`) too; its codes as plain data."""
    with on_path(list(path)):
        batch = rollout(Run(Path(run_dir)), num_prompts, seed, report, pin)
    return {**batch, "codes": [code.model_dump() for code in batch["codes"]]}


def rollout_apart(run: Run, num_prompts: int, seed: int, report: Report = silent, pin: dict | None = None) -> dict:
    """rollout_here's batch, from the keyless worker, in one round trip (`pin`: rollout's)."""
    batch = keyless(ROLLOUT, str(run.dir), num_prompts, seed, looked_in(), pin, report=report)
    return {**batch, "codes": [TrajectoryCode.model_validate(code) for code in batch["codes"]]}


def write_trajectories(run: Run, batch: dict, seed: int) -> tuple[Path, dict]:
    """inspection/trajectories.jsonl, the sheet a person reads (trajectories.md) and the .meta.json; (path, tool
    calls by status)."""
    records = batch["records"]
    path = atomic_write_text(run.trajectories,
                             "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records))
    statuses: dict[str, int] = {}
    for record in records:
        for call in record["calls"]:
            statuses[call["status"]] = statuses.get(call["status"], 0) + 1
    atomic_write_text(run.trajectories.with_suffix(".md"), render_sheet(records, batch["codes"]))
    atomic_write_json(run.trajectories.with_suffix(".meta.json"),
                      {"num_prompts": batch["num_prompts"], "num_generations": batch["group"], "seed": seed,
                       "tool_calls": statuses, "codes": [c.model_dump() for c in batch["codes"]],
                       "probes": batch["probes"], "trl_metrics": batch["metrics"]})
    return path, statuses


def sample_here(request: TrajectoryRequest, report: Report = silent) -> TrajectoryResult:
    """sample_trajectories in this (the training) interpreter."""
    run = Run(Path(request.run))
    started = time.perf_counter()
    batch = rollout_apart(run, request.num_prompts, request.seed, report)
    path, statuses = write_trajectories(run, batch, request.seed)
    codes = batch["codes"]
    next_step = ("Read inspection/trajectories.md; fix what the codes name, then sample again."
                 if any(c.severity == "error" for c in codes) else
                 "Trajectories are clean: sample_completions on this run draws the reviewed samples from the same "
                 "loop; then inspect_rewards and record the verdict.")
    return TrajectoryResult(run_dir=str(run.dir), trajectories_path=str(path), num_trajectories=len(batch["records"]),
                            tool_calls=statuses, codes=codes, trl_metrics=batch["metrics"],
                            seconds=round(time.perf_counter() - started, 3), next_step=next_step)


__all__ = ["TrajectoryCode", "sample_trajectories", "sample_here"]
