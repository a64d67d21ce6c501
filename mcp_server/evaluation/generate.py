"""Decoding for evaluation: batched transformers `generate`, greedy by default, the same prompt rendering as TRL."""

from __future__ import annotations

from mcp_server.model_ref import eos_ids, small_model_threads
from mcp_server.reporting import Report, silent


def render_prompt(tokenizer, prompt, chat_template_kwargs: dict | None = None) -> str:
    """Chat messages through the chat template (with the generation prompt), plain text as is: what TRL does."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


def generate(
    model, tokenizer, texts: list[str], max_new_tokens: int, batch_size: int = 64,
    temperature: float = 0.0, seed: int = 3407, report: Report = silent,
) -> list[str]:
    """One completion per prompt text: greedy when temperature is 0, else sampled under `seed`.

    `report(done, total, message)` is called after each batch (the demo draws a bar with it)."""
    import torch
    from transformers import set_seed

    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos = eos_ids(tokenizer, model.generation_config)
    sampling = (
        dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    )
    set_seed(seed)
    outputs: list[str] = []
    with small_model_threads(model), torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            # Like TRL: the chat template already holds the special tokens, so none are added here.
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            out = model.generate(
                **enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling,
                # Greedy: silence the model's own sampling defaults (generation_config may carry them).
                **({} if temperature > 0 else dict(temperature=None, top_p=None, top_k=None)),
            )
            for ids in out[:, enc["input_ids"].shape[1] :].tolist():
                stop = next((i for i, t in enumerate(ids) if t in eos), len(ids))
                outputs.append(tokenizer.decode(ids[:stop], skip_special_tokens=True))
            report(len(outputs), len(texts), f"decoded {len(outputs)}/{len(texts)} prompts")
    return outputs
