"""Server mode's vLLM server: `vllm serve` with the flags TRL's `trl vllm-serve` adds, read from the installed TRL.

    python -m mcp_server.training.trainer.vllm_serve --model M --port 8000 [trl vllm-serve's flags] [vllm flags]

TRL 1.16 turned `trl vllm-serve` into a shim it marks "removed in v2.0.0" (trl/scripts/vllm_serve.py): it parses
its `ScriptArguments`, builds a `vllm serve` command line (`build_command`: the sizes, plus `--weight-transfer-config
{"backend": "nccl"}`, `--logprobs-mode processed_logprobs`, `--max-logprobs -1`, and `--enable-scale-out` from vLLM
0.30) and execs it with `VLLM_SERVER_DEV_MODE=1` (the weight-transfer and `/collective_rpc` endpoints live behind
it). The launch scripts run this module instead of the shim: the same arguments, parsed by TRL's own parser into
TRL's own `ScriptArguments`, the command built by TRL's own `build_command`, so what the trainer's `VLLMClient`
expects of the server follows the installed TRL, and nothing depends on the shim surviving. The command is printed
first, so the server's log shows exactly what ran. Arguments TRL does not know (`--worker-extension-cls ...` on a
CPU) go to `vllm serve` as they are, as the shim does. A TRL without `build_command` (before the shim, where
`trl vllm-serve` is its own server) runs its `trl vllm-serve`.
"""

from __future__ import annotations

import os
import shlex
import sys

# What the launch scripts run with `python -m`.
SERVE_MODULE = "mcp_server.training.trainer.vllm_serve"
# vLLM's dev-mode endpoints, which TRL's weight sync (NCCL, or this plugin's CPU reload over /collective_rpc) calls.
DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}


def serve_command(argv: list[str]) -> list[str]:
    """The `vllm serve` command line (starting with this Python) the installed TRL builds for `argv`."""
    from trl import TrlParser
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    script_args, extra = TrlParser(ScriptArguments).parse_args_and_config(args=argv, return_remaining_strings=True)
    return build_command(script_args, extra)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        import trl.scripts.vllm_serve as trl_serve
    except ImportError as exc:
        sys.exit(f"cannot start the vLLM server: TRL's vllm_serve does not import in {sys.executable} ({exc})")
    if not hasattr(trl_serve, "build_command"):  # an older TRL: its vllm-serve is the server itself
        command = [sys.executable, "-m", "trl.cli.main", "vllm-serve", *argv]
    else:
        try:
            command = serve_command(argv)
        except Exception as exc:  # TRL's parser refused an argument, or TRL could not read the installed vLLM
            sys.exit(f"cannot build the vLLM server's command with TRL's build_command: {type(exc).__name__}: {exc}")
    print("vLLM server: " + " ".join(f"{k}={v}" for k, v in DEV_MODE.items()) + " " + shlex.join(command),
          flush=True)
    from mcp_server.kernel_sets import private_compile_cache

    private_compile_cache()  # vLLM compiles: a cache of this user's alone (inherited through the exec)
    os.execve(sys.executable, command, {**os.environ, **DEV_MODE})


if __name__ == "__main__":
    main()
