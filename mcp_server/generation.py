"""Generation, one module for reward inspection (`inspection.sampling`) and evaluation (`evaluation.evaluate`,
`promote`, `export`): the prompt rendered as TRL renders it, batched transformers `generate` (greedy or sampled,
`n` completions per prompt) and vLLM (GPU only).

On the ground floor so both stand on it; torch, transformers and vLLM are imported inside the functions.
"""

from __future__ import annotations

from mcp_server.model_ref import eos_ids, release_gpu, small_model_threads
from mcp_server.reporting import Report, silent


def render_prompt(tokenizer, prompt, chat_template_kwargs: dict | None = None) -> str:
    """Chat messages through the chat template (with the generation prompt), plain text as is: what TRL does."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


STEP_EVERY = 16  # decode steps between two `on_step` calls within one generate call


def _step_watch(on_step, done_before: int):
    """A stopping criterion that never stops: it calls `on_step(prompts done before this batch, decode step)` every
    STEP_EVERY steps, so a long generate call is followed token by token."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Watch(StoppingCriteria):
        step = 0

        def __call__(self, input_ids, scores, **kwargs):
            self.step += 1
            if self.step % STEP_EVERY == 0:
                on_step(done_before, self.step)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Watch()])


def generate_completions(
    model, tokenizer, texts: list[str], max_new_tokens: int, *, n: int = 1, batch_size: int = 64,
    options: dict | None = None, seed: int = 3407, drop_stop: bool = False, report: Report = silent,
    message: str = "decoded {done}/{total} prompts", on_batch=None, on_step=None,
) -> list[list[dict]]:
    """Per prompt text, `n` dicts {text, ids, finish_reason}: ids end at the first stop token (kept in ids; in
    text unless `drop_stop`), finish_reason is 'stop' or 'length'. Prompts are batched (left padding) so that about
    `batch_size` sequences are generated per call. `options`: generate() keywords; without do_sample, greedy (the
    model's own sampling defaults silenced). After each batch, `report` with `message` (formatted with done, total)
    and `on_batch(first prompt index, its groups)`; within one, `on_step(prompts done before it, decode step)`."""
    import torch
    from transformers import set_seed

    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos = eos_ids(tokenizer, model.generation_config)
    options = dict(options or {})
    if not options.get("do_sample"):  # greedy: generation_config may carry sampling defaults
        options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    set_seed(seed)
    prompts_per_call = max(1, batch_size // n)
    results: list[list[dict]] = []
    with small_model_threads(model), torch.inference_mode():
        for start in range(0, len(texts), prompts_per_call):
            chunk = texts[start : start + prompts_per_call]
            # Like TRL: the chat template already holds the special tokens, so none are added here.
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            watch = {"stopping_criteria": _step_watch(on_step, start)} if on_step else {}
            out = model.generate(**enc, num_return_sequences=n, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, **options, **watch)
            generated = out[:, enc["input_ids"].shape[1] :].tolist()
            for p in range(len(chunk)):
                results.append([_completion(tokenizer, ids, eos, drop_stop) for ids in generated[p * n : (p + 1) * n]])
            if on_batch:
                on_batch(start, results[start:])
            report(len(results), len(texts), message.format(done=len(results), total=len(texts)))
    return results


def _completion(tokenizer, ids: list[int], eos: set[int], drop_stop: bool) -> dict:
    stop = next((i for i, t in enumerate(ids) if t in eos), None)
    kept = ids[: stop + 1] if stop is not None else ids
    shown = kept[:-1] if drop_stop and stop is not None else kept
    return {"text": tokenizer.decode(shown, skip_special_tokens=True), "ids": kept,
            "finish_reason": "stop" if stop is not None else "length"}


def generate(
    model, tokenizer, texts: list[str], max_new_tokens: int, batch_size: int = 64,
    temperature: float = 0.0, seed: int = 3407, report: Report = silent,
) -> list[str]:
    """One completion per prompt text, up to its stop token: greedy when temperature is 0, else sampled under `seed`
    (top_k and top_p off). `report(done, total, message)` is called after each batch (the demo draws a bar with it)."""
    options = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else None

    def within(done_before: int, step: int) -> None:  # a long generate call followed token by token (issue 49)
        chunk = min(batch_size, len(texts) - done_before)
        report(done_before + min(step, max_new_tokens - 1) / max_new_tokens * chunk, len(texts),
               f"decoding prompts {done_before + 1}-{done_before + chunk} of {len(texts)}: token {step} of up to "
               f"{max_new_tokens}")

    groups = generate_completions(model, tokenizer, texts, max_new_tokens, batch_size=batch_size, options=options,
                                  seed=seed, drop_stop=True, report=report,
                                  on_step=None if report is silent else within)
    return [group[0]["text"] for group in groups]


def generate_vllm(model_ref, texts: list[str], settings: dict, params: dict) -> list[list[dict]]:
    """The same dicts with vLLM (a GPU, or vLLM's CPU build). Prompts go in as token ids so both engines see the same
    tokens. `params`: the sampling settings by SamplingParams' names (inspection.sampling.engine_options, from
    config.fields); `settings`: seed, generation_kwargs."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    tokenizer = AutoTokenizer.from_pretrained(model_ref)
    prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    if current_platform.is_cpu():
        from mcp_server.kernel_sets import compile_cache_per_kernel_set

        compile_cache_per_kernel_set()  # vLLM's CPU sampler is compiled: one cache per forced CPU kernel set
        # The share is of the host's RAM there (vLLM's CPU worker), and compiling the model would take longer than
        # sampling: eager, a tenth of the RAM.
        llm = LLM(model=str(model_ref), seed=settings["seed"], gpu_memory_utilization=0.1, enforce_eager=True)
    else:
        # Half the GPU: the server may share it; sampling 50-100 completions needs little KV cache.
        llm = LLM(model=str(model_ref), seed=settings["seed"], gpu_memory_utilization=0.5)
    params = dict(params)
    if params.get("top_k", 1) <= 0:  # TRL's 0 (off) is vLLM's -1
        params["top_k"] = -1
    params = SamplingParams(
        **{"min_p": 0.0, **params},  # TRL's None (off) is vLLM's 0.0
        seed=settings["seed"],
        **(settings.get("generation_kwargs") or {}),  # the config's generation_kwargs, as TRL passes them to vLLM
    )
    try:
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params)
    finally:
        del llm
        release_gpu()
    return [
        [
            {
                "text": c.text,
                "ids": list(c.token_ids),
                "finish_reason": "length" if c.finish_reason == "length" else "stop",
            }
            for c in out.outputs
        ]
        for out in outputs
    ]
