"""GPU catalog: memory, bf16 support, memory bandwidth and compute for the GPUs people train GRPO on.

Kept free of torch: the config validator and the MCP server import it at start-up. It sits on the ground floor
(docs/architecture.md, "Floors"): the recipe's rules, the memory planner and the environment check all read it.
`memory_gib` is what the CUDA runtime reports as total memory (what an OOM message calls "total capacity"),
not the marketing GB figure, because that is the number a run actually has to fit in.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from mcp_server.errors import UserInputError, closest_names, did_you_mean


class GPU(BaseModel):
    name: str = Field(description="Canonical catalog name, e.g. 'H100' or 'A100-40GB'.")
    description: str = Field(description="Full product name and memory type.")
    memory_gb: float = Field(description="Marketed memory size in GB (10^9 bytes).")
    memory_gib: float = Field(description="Usable memory in GiB as the CUDA runtime reports it (total capacity).")
    bf16: bool = Field(description="Whether the GPU supports bfloat16 natively (compute capability >= 8.0).")
    bandwidth_gbs: float = Field(description="Peak memory bandwidth in GB/s from the spec sheet.")
    sustained_bandwidth_gbs: float = Field(
        description="Memory bandwidth in GB/s to plan decode speed with (what decode kernels sustain, below the peak)."
    )
    bf16_tflops: float = Field(description="Dense bf16 (or fp16 where bf16 is missing) tensor-core TFLOPS.")
    compute_capability: str = Field(description="CUDA compute capability, e.g. '9.0'.")
    unified_memory: bool = Field(
        default=False, description="True when CPU and GPU share one memory pool (DGX Spark): no CPU offload headroom."
    )
    aliases: list[str] = Field(
        default_factory=list, description="Other names accepted for this GPU (case-insensitive)."
    )


def _gpu(name, description, memory_gb, memory_gib, bandwidth, tflops, cc, aliases, sustained=None, bf16=None,
         unified=False) -> GPU:
    return GPU(
        name=name,
        description=description,
        memory_gb=memory_gb,
        memory_gib=memory_gib,
        bf16=(float(cc) >= 8.0) if bf16 is None else bf16,
        bandwidth_gbs=bandwidth,
        # HBM/GDDR decode kernels sustain roughly 80-85% of the peak; measured figures override below.
        sustained_bandwidth_gbs=sustained if sustained is not None else round(bandwidth * 0.82),
        bf16_tflops=tflops,
        compute_capability=cc,
        unified_memory=unified,
        aliases=aliases,
    )


_CATALOG: list[GPU] = [
    _gpu("H100", "NVIDIA H100 SXM5 80GB HBM3", 80, 79.2, 3350, 989, "9.0",
         ["H100-SXM", "H100 SXM", "H100-SXM5", "H100-80GB", "H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]),
    _gpu("H100-PCIe", "NVIDIA H100 PCIe 80GB HBM2e", 80, 79.2, 2000, 756, "9.0",
         ["H100 PCIe", "H100PCIe", "NVIDIA H100 PCIe"]),
    _gpu("H100-NVL", "NVIDIA H100 NVL 94GB HBM3", 94, 93.1, 3900, 835, "9.0", ["H100 NVL", "NVIDIA H100 NVL"]),
    _gpu("H200", "NVIDIA H200 SXM 141GB HBM3e", 141, 139.8, 4800, 989, "9.0",
         ["H200-SXM", "H200 SXM", "H200-141GB", "NVIDIA H200"]),
    _gpu("B200", "NVIDIA B200 180GB HBM3e", 180, 178.4, 8000, 2250, "10.0",
         ["B200-SXM", "B200 SXM", "NVIDIA B200", "HGX B200", "DGX B200"]),
    _gpu("A100", "NVIDIA A100 SXM4 80GB HBM2e", 80, 79.2, 2039, 312, "8.0",
         ["A100-80GB", "A100 80GB", "A100-SXM4-80GB", "A100 80GB PCIe", "NVIDIA A100-SXM4-80GB",
          "NVIDIA A100 80GB PCIe", "A100-80G"]),
    _gpu("A100-40GB", "NVIDIA A100 SXM4 40GB HBM2", 40, 39.4, 1555, 312, "8.0",
         ["A100 40GB", "A100-SXM4-40GB", "A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB",
          "A100-40G"]),
    _gpu("L40S", "NVIDIA L40S 48GB GDDR6", 48, 44.4, 864, 362, "8.9", ["L40-S", "NVIDIA L40S"]),
    _gpu("L40", "NVIDIA L40 48GB GDDR6", 48, 44.4, 864, 181, "8.9", ["NVIDIA L40"]),
    _gpu("L4", "NVIDIA L4 24GB GDDR6", 24, 22.0, 300, 121, "8.9", ["NVIDIA L4"]),
    _gpu("A10G", "NVIDIA A10G 24GB GDDR6 (AWS g5)", 24, 22.0, 600, 70, "8.6", ["A10", "NVIDIA A10G", "NVIDIA A10"]),
    _gpu("RTX 5090", "NVIDIA GeForce RTX 5090 32GB GDDR7", 32, 31.4, 1792, 209, "12.0",
         ["RTX5090", "5090", "GeForce RTX 5090", "NVIDIA GeForce RTX 5090"]),
    _gpu("RTX 4090", "NVIDIA GeForce RTX 4090 24GB GDDR6X", 24, 23.6, 1008, 165, "8.9",
         ["RTX4090", "4090", "GeForce RTX 4090", "NVIDIA GeForce RTX 4090"]),
    _gpu("RTX 3090", "NVIDIA GeForce RTX 3090 24GB GDDR6X", 24, 23.6, 936, 71, "8.6",
         ["RTX3090", "3090", "GeForce RTX 3090", "NVIDIA GeForce RTX 3090"]),
    _gpu("T4", "NVIDIA T4 16GB GDDR6 (no bf16)", 16, 14.7, 320, 65, "7.5", ["Tesla T4", "NVIDIA T4"]),
    _gpu("V100", "NVIDIA V100 SXM2 32GB HBM2 (no bf16)", 32, 31.7, 900, 125, "7.0",
         ["V100-32GB", "V100 32GB", "Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB"]),
    _gpu("V100-16GB", "NVIDIA V100 SXM2 16GB HBM2 (no bf16)", 16, 15.8, 900, 125, "7.0",
         ["V100 16GB", "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB"]),
    # DGX Spark (GB10): 128 GB unified LPDDR5x. 273 GB/s is the spec; decode sustains ~180-192 GB/s, so plan on that.
    _gpu("DGX Spark", "NVIDIA DGX Spark (GB10 Grace Blackwell, 128GB unified LPDDR5x)", 128, 119.7, 273, 125, "12.1",
         ["DGX-Spark", "Spark", "GB10", "NVIDIA GB10", "DGXSpark"], sustained=186, unified=True),
]


def _key(name: str) -> str:
    """Case-, space- and punctuation-insensitive key: 'NVIDIA H100 80GB HBM3' -> 'nvidiah10080gbhbm3'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY: dict[str, GPU] = {}
for _g in _CATALOG:
    for _n in [_g.name, *_g.aliases]:
        _BY_KEY[_key(_n)] = _g
        # nvidia-smi names come with vendor prefixes; accept them with or without.
        for _prefix in ("nvidia", "tesla", "geforce", "nvidiageforce"):
            _BY_KEY.setdefault(_key(_prefix + _n), _g)


def list_gpus() -> list[GPU]:
    """Every GPU in the catalog, in catalog order."""
    return [g.model_copy(deep=True) for g in _CATALOG]


def gpu_names() -> list[str]:
    return [g.name for g in _CATALOG]


def closest_gpu_names(name: str, n: int = 3) -> list[str]:
    """Catalog names closest to a misspelt one (by canonical name and aliases)."""
    return closest_names(_key(name), {key: gpu.name for key, gpu in _BY_KEY.items()}, n=n, cutoff=0.4)


def lookup_gpu(name: str, field: str = "gpu") -> GPU:
    """The catalog entry for a GPU name (case-insensitive, aliases and nvidia-smi names accepted).

    Unknown names raise UserInputError(field, ...) naming the closest catalog entries.
    """
    if not isinstance(name, str) or not name.strip():
        raise UserInputError(field, f"expected a GPU name, one of: {', '.join(gpu_names())}")
    gpu = _BY_KEY.get(_key(name))
    if gpu is None:
        hint = did_you_mean(closest_gpu_names(name))
        raise UserInputError(
            field,
            f"unknown GPU '{name}'.{hint} Known: {', '.join(gpu_names())}. "
            "For another GPU give its memory size instead (gpu_memory_gib).",
        )
    return gpu.model_copy(deep=True)


def resolve_target(gpu_name: str) -> tuple[GPU | None, str]:
    """A training target: (None, 'cpu') for the CPU, else (the catalog GPU, its canonical name). Unknown names
    raise UserInputError with the closest names."""
    if gpu_name.strip().lower() == "cpu":
        return None, "cpu"
    gpu = lookup_gpu(gpu_name)
    return gpu, gpu.name
