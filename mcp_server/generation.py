"""Generation, one module for reward inspection (`inspection.sampling`) and evaluation (`evaluation.evaluate`,
`promote`, `export`): the prompt rendered as TRL renders it, batched transformers `generate` (greedy or sampled,
`n` completions per prompt) and vLLM (GPU only).

On the ground floor so both stand on it; torch, transformers and vLLM are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import time

from mcp_server.model_ref import eos_ids, release_gpu, small_model_threads
from mcp_server.reporting import Report, silent, ticking


def render_prompt(tokenizer, prompt, chat_template_kwargs: dict | None = None) -> str:
    """Chat messages through the chat template (with the generation prompt), plain text as is: what TRL does."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


def plain_prompts_warning(model) -> str:
    """Plain-text prompts for a model whose tokenizer has a chat template: TRL's GRPOTrainer applies the template
    only to chat-message prompts (`_tokenize_prompts`: is_conversational, else the tokenizer on the raw text), so
    these train and sample without it, as sampling does here; validation warns of it too (run_rules)."""
    return (f"the prompts are plain text and {model}'s tokenizer has a chat template: TRL's GRPOTrainer applies a "
            "chat template only to chat-message prompts and tokenizes plain text as it is, so the model trains (and "
            "samples here) on text without its chat format, and a chat model may answer empty or ramble; write each "
            "prompt as messages, [{\"role\": \"user\", \"content\": \"...\"}], unless the model is a base "
            "(non-chat) model.")


WAIT_TICK_S = 10.0  # while a generate call has no decode step yet (the prompts' prefill, threads waking on a busy
# machine): a line this often (walk 12: 30-50 s without a line between the plan and "token 1" at load 8)
STEP_EVERY = 16  # decode steps between two `on_step` calls within one generate call, unless STEP_EVERY_S comes first
STEP_EVERY_S = 15.0  # wall seconds after which the next decode step calls `on_step` (issue 49: 16 steps of 64
# sequences took 5.8 min on a loaded 2-core machine, with no line between the plan and that step)


def _step_watch(on_step, done_before: int, seen: list | None = None):
    """A stopping criterion that never stops: it calls `on_step(prompts done before this batch, decode step)` at the
    first decode step (where the rate is measured from), then every STEP_EVERY steps or STEP_EVERY_S seconds,
    whichever comes first, so a long generate call is followed token by token."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Watch(StoppingCriteria):
        step = 0
        last = 0.0

        def __call__(self, input_ids, scores, **kwargs):
            self.step += 1
            now = time.monotonic()
            if seen is not None and not seen:
                seen.append(self.step)
            if self.step == 1 or self.step % STEP_EVERY == 0 or now - self.last >= STEP_EVERY_S:
                self.last = now
                on_step(done_before, self.step)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Watch()])


@contextlib.contextmanager
def _first_step_wait(on_wait, done_before: int, seen: list):
    """While the block runs and no decode step of it has been seen (`seen`, which its _step_watch fills), call
    `on_wait(done_before, seconds)` every WAIT_TICK_S from a thread of its own."""
    if on_wait is None:
        yield
        return

    def line(done: float, total, message) -> None:
        if not seen:
            on_wait(done_before, float(message))

    with ticking(line, WAIT_TICK_S, lambda elapsed: str(elapsed)):
        yield


def _give_up_watch(give_up, tokenizer, done_before: int, prompt_len: int, n: int, ended: dict):
    """A stopping criterion that ends each sequence whose text so far `give_up(prompt index, text)` says can no
    longer pass (walk 11: 2.5 minutes decoding a drift suite whose every reply had failed its format at its first
    words); the other sequences decode on as before. `ended["steps"]`: the decode steps the call took."""
    import torch
    from transformers import StoppingCriteria

    class GiveUp(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            ended["steps"] = max(ended.get("steps", 0), input_ids.shape[1] - prompt_len)
            texts = tokenizer.batch_decode(input_ids[:, prompt_len:], skip_special_tokens=True)
            done = [give_up(done_before + row // n, text) for row, text in enumerate(texts)]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return GiveUp()


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


class DecodeProgress:
    """Progress lines for batched decoding, one helper for sampling and evaluation (issue 49): prompts done (fractional
    within a generate call), the measured decode rate and the time left at that rate, on every line after the first:
    an estimate, not a bound (issue 49: "at most about 11 min left" for 10 minutes on a loaded machine whose rate fell
    from 0.3 to 0.2 steps/s; the plan gives the bound at the load it states). The rate counts the decode steps that
    ran (a call whose completions all end early runs fewer than max_new_tokens); the time left is for the steps that
    may still run (max_new_tokens for each call to come), so it is never 0 while a call remains (issue 49: "about 0 s
    left" with one of two calls to go, the rate inflated by counting a finished call as max_new_tokens steps). `doing`
    names the step lines ("decoding prompts 1-8 of 20: token 16 of up to 64"), `batch_message` the batch lines
    (formatted with done, total)."""

    def __init__(self, report: Report, total: int, calls: int, max_new_tokens: int, doing: str = "decoding",
                 batch_message: str = "decoded {done}/{total} prompts"):
        self.report, self.total, self.calls, self.max_new_tokens = report, total, calls, max_new_tokens
        self.doing, self.batch_message = doing, batch_message
        self.first: tuple[float, float] | None = None  # (time, decode steps run) at the first report: the rate
        # is measured from there, after the model has loaded
        self.per_call = max(1, min(total, -(-total // max(calls, 1))))
        self.ran = 0  # decode steps of the calls finished
        self.current = 0  # decode steps of the call under way
        self.loaded_at: float | None = None  # when the model had loaded (loaded()), where the caller says so

    def loaded(self) -> None:
        """The model has loaded and decoding starts: the first step line can then give a figure (issue 49's seventh
        walk: a plan's figure a busy machine broke, and nothing to revise it until the second line)."""
        self.loaded_at = time.perf_counter()

    def past_plan(self, decoding_s: float) -> str:
        """A phrase for a line once decoding has run `decoding_s` seconds: the subclass says when that is past its
        plan's figure and why (sampling_plan.Progress); nothing here."""
        return ""

    def _left(self, calls_done: int) -> str:
        now, ran = time.perf_counter(), self.ran + self.current
        to_run = max(max(self.calls - calls_done, 0) * self.max_new_tokens - self.current, 0)
        past = "" if self.loaded_at is None else self.past_plan(now - self.loaded_at)
        if self.first is None:
            self.first = (now, ran)
            if self.loaded_at is None or ran <= 0 or to_run <= 0:
                return past
            # never the first step's time for each step to come: it holds the prompts' prefill (walk 13: "about 45
            # min left at the first step's speed", then "about 9 min" from the next steps; it took 9.1 min)
            first = f" (the prompts' prefill with it: {duration(now - self.loaded_at)})"
            if not self.planned_step_s:
                return f"{first}; the time left follows from the next steps' speed{past}"
            left = to_run * self.planned_step_s
            return (f"{first}; about {'1 s' if left < 1 else duration(left)} left at the plan's decode step, until "
                    f"the next steps' speed replaces it{past}")
        elapsed, steps = now - self.first[0], ran - self.first[1]
        if steps <= 0 or elapsed <= 0:
            return past
        left = to_run * elapsed / steps
        rate = f"{steps / elapsed:.1f} decode steps/s" if steps >= elapsed else \
            f"{elapsed / steps:.1f} s per decode step"  # issue 49's sixth walk: "0.0 decode steps/s" under 0.05/s
        if left <= 0:
            return f"; {rate}{past}"
        return f"; {rate}, about " + (  # an estimate: the rate moves with the load
            "1 s" if left < 1 else duration(left)) + f" left at that rate{past}"

    planned_step_s: float | None = None  # a decode step's seconds as the plan has them, where one was made

    def waiting(self, done_before: int, elapsed: float) -> None:
        """A generate call that has run `elapsed` seconds without its first decode step: what it does and what it
        should take (the plan's decode step, else the last call's first step), so no wait is silent."""
        chunk = min(self.per_call, self.total - done_before)
        expected = self.planned_step_s if self.first is None else None
        if self.first is not None and self.ran:
            expected = (time.perf_counter() - self.first[0]) / max(self.ran + self.current - self.first[1], 1)
        figure = f"; a decode step {'planned at' if self.first is None else 'measured at'} about " \
            f"{duration(expected)}, the first one longer (the prompts' prefill)" if expected else ""
        self.report(done_before, self.total, f"{self.doing} prompts {done_before + 1}-{done_before + chunk} of "
                    f"{self.total}: waiting for token 1 of up to {self.max_new_tokens} (the prompts' prefill), "
                    f"{elapsed:.0f} s so far{figure}")

    def step(self, done_before: int, step: int) -> None:
        """Within a generate call: `step` decode steps of the call that starts at prompt `done_before`."""
        self.current = step
        fraction = min(step, self.max_new_tokens - 1) / self.max_new_tokens  # the batch's own report says
        # "done": MCP progress only grows, so a step never reaches it
        chunk = min(self.per_call, self.total - done_before)
        self.report(done_before + fraction * chunk, self.total,
                    f"{self.doing} prompts {done_before + 1}-{done_before + chunk} of {self.total}: token {step} of "
                    f"up to {self.max_new_tokens}" + self._left(done_before // self.per_call))

    def batch(self, done: int) -> None:
        calls_done = -(-done // self.per_call)
        self.ran, self.current = self.ran + self.current, 0
        self.report(done, self.total, self.batch_message.format(done=done, total=self.total)
                    + self._left(calls_done))


def generate_completions(
    model, tokenizer, texts: list[str], max_new_tokens: int, *, n: int = 1, batch_size: int = 64,
    options: dict | None = None, seed: int = 3407, drop_stop: bool = False, report: Report = silent,
    message: str = "decoded {done}/{total} prompts", on_batch=None, on_step=None,
    kept: tuple[list[list[dict]], dict] | None = None, give_up=None, ended: dict | None = None, on_wait=None,
) -> list[list[dict]]:
    """Per prompt text, `n` dicts {text, ids, finish_reason}: ids end at the first stop token (kept in ids; in
    text unless `drop_stop`), finish_reason is 'stop' or 'length'. Prompts are batched (left padding) so that about
    `batch_size` sequences are generated per call. `options`: generate() keywords; without do_sample, greedy (the
    model's own sampling defaults silenced). After each batch, `report` with `message` (formatted with done, total)
    and `on_batch(first prompt index, its groups)` (rng_state() there: the generator's state for the next batch);
    within one, `on_step(prompts done before it, decode step)`. `kept`: (the groups of the first whole batches of
    an earlier pass of the same request, the generator's state after them): generation goes on from there, so the
    result is that pass's, batch for batch (inspection.sample_files: a stopped sampling resumed). `give_up(prompt
    index, text so far)`: True ends that sequence there (_give_up_watch; `ended` gets the decode steps taken).
    `on_wait(prompts done before the call, seconds)`: every WAIT_TICK_S while a call has no decode step yet."""
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
    results: list[list[dict]] = list(kept[0]) if kept else []
    if kept:
        set_rng_state(kept[1])
    with small_model_threads(model), torch.inference_mode():
        for start in range(len(results), len(texts), prompts_per_call):
            chunk = texts[start : start + prompts_per_call]
            # Like TRL: the chat template already holds the special tokens, so none are added here.
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            seen: list = []  # the call's first decode step, once its watch has seen it
            watch = {"stopping_criteria": _step_watch(on_step, start, seen)} if on_step else {}
            if give_up is not None:
                from transformers import StoppingCriteriaList

                stop = _give_up_watch(give_up, tokenizer, start, enc["input_ids"].shape[1], n,
                                      ended if ended is not None else {})
                watch = {"stopping_criteria": StoppingCriteriaList([*watch.get("stopping_criteria", []), stop])}
            with _first_step_wait(on_wait if on_step else None, start, seen):
                out = model.generate(**enc, num_return_sequences=n, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, **options, **watch)
            generated = out[:, enc["input_ids"].shape[1] :].tolist()
            for p in range(len(chunk)):
                results.append([_completion(tokenizer, ids, eos, drop_stop) for ids in generated[p * n : (p + 1) * n]])
            if on_batch:
                on_batch(start, results[start:])
            report(len(results), len(texts), message.format(done=len(results), total=len(texts)))
    return results


def rng_state() -> dict:
    """torch's generator states (the CPU's, and each GPU's when there is one), as text for a JSON file: what
    sampling draws from next."""
    import base64

    import torch

    state = {"cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available():
        state["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    import base64

    import torch

    def tensor(text: str):
        return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

    torch.set_rng_state(tensor(state["cpu"]))
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensor(s) for s in state["cuda"]])


def _completion(tokenizer, ids: list[int], eos: set[int], drop_stop: bool) -> dict:
    stop = next((i for i, t in enumerate(ids) if t in eos), None)
    kept = ids[: stop + 1] if stop is not None else ids
    shown = kept[:-1] if drop_stop and stop is not None else kept
    return {"text": tokenizer.decode(shown, skip_special_tokens=True), "ids": kept,
            "finish_reason": "stop" if stop is not None else "length"}


def plan_step_s(plan: dict | None) -> float | None:
    """A decode step's seconds as a plan (sampling_plan) has them: its typical figure over its decode steps."""
    steps = (plan or {}).get("generate_calls", 0) * (plan or {}).get("max_new_tokens", 0)
    return plan["estimated_seconds"] / steps if steps and plan.get("estimated_seconds") else None


def planned(report: Report, plan: dict | None) -> Report:
    """`report`, carrying the decode step `plan` expects (plan_step_s): the figure generate's wait lines give."""
    def said(done: float, total: float | None, message: str) -> None:
        report(done, total, message)

    said.planned_step_s = plan_step_s(plan)
    return said


def loading(report: Report, what: str):
    """While the block loads `what`: a line every WAIT_TICK_S with the seconds so far (walk 12: a model's load and
    the first step were one silent wait)."""
    return ticking(report, WAIT_TICK_S, lambda elapsed: f"loading {what}: {elapsed:.0f} s so far")


def generate(
    model, tokenizer, texts: list[str], max_new_tokens: int, batch_size: int = 64,
    temperature: float = 0.0, seed: int = 3407, report: Report = silent, give_up=None, ended: dict | None = None,
) -> list[str]:
    """One completion per prompt text, up to its stop token: greedy when temperature is 0, else sampled under `seed`
    (top_k and top_p off). `report(done, total, message)` is called after each batch (the demo draws a bar with it).
    `give_up`, `ended`: generate_completions'."""
    options = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else None
    progress = None if report is silent else DecodeProgress(report, len(texts), -(-len(texts) // max(batch_size, 1)),
                                                            max_new_tokens)
    if progress is not None:
        progress.planned_step_s = getattr(report, "planned_step_s", None)  # planned(): the plan's decode step
    groups = generate_completions(
        model, tokenizer, texts, max_new_tokens, batch_size=batch_size, options=options, seed=seed, drop_stop=True,
        on_batch=progress and (lambda start, done_groups: progress.batch(start + len(done_groups))),
        on_step=progress and progress.step, give_up=give_up, ended=ended, on_wait=progress and progress.waiting)
    return [group[0]["text"] for group in groups]


def generate_vllm(model_ref, texts: list[str], settings: dict, params: dict, tokenizer=None, loaded=None,
                  **engine) -> list[list[dict]]:
    """The same dicts with vLLM (a GPU, or vLLM's CPU build). Prompts go in as token ids so both engines see the same
    tokens. `params`: the sampling settings by SamplingParams' names (inspection.sampling.engine_options, from
    config.fields); `settings`: seed, generation_kwargs; `tokenizer`: the one that tokenizes the prompts (None:
    `model_ref`'s); `loaded()`: called once the engine holds the model, before anything is sampled (it raises to
    refuse); `engine`: more of LLM's arguments (a load_format)."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    tokenizer = AutoTokenizer.from_pretrained(model_ref) if tokenizer is None else tokenizer
    prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    from mcp_server.kernel_sets import private_compile_cache

    private_compile_cache()  # vLLM compiles: a cache of this user's alone, one per forced CPU kernel set
    if current_platform.is_cpu():
        # The share is of the host's RAM there (vLLM's CPU worker), and compiling the model would take longer than
        # sampling: eager, a tenth of the RAM.
        engine = {"gpu_memory_utilization": 0.1, "enforce_eager": True, **engine}
    # Half the GPU: the server may share it; sampling 50-100 completions needs little KV cache.
    llm = LLM(model=str(model_ref), seed=settings["seed"], **{"gpu_memory_utilization": 0.5, **engine})
    params = dict(params)
    if params.get("top_k", 1) <= 0:  # TRL's 0 (off) is vLLM's -1
        params["top_k"] = -1
    params = SamplingParams(
        **{"min_p": 0.0, **params},  # TRL's None (off) is vLLM's 0.0
        seed=settings["seed"],
        **(settings.get("generation_kwargs") or {}),  # the config's generation_kwargs, as TRL passes them to vLLM
    )
    try:
        if loaded is not None:
            loaded()
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
