"""CLI door (`llm-finetuning ...`): the same core calls as the MCP tools.

Each command's flags come from its request model, the same pydantic model that is the MCP tool's schema: a field
`max_new_tokens` is the flag `--max-new-tokens`, typed, defaulted, bounded and described by the field (a Literal
gives the choices, a bool a switch, a list of choices one name or a comma list, any other list or dict JSON inline or
as @file.json). The flags are built in cli_flags.py. The commands are the registered
tools (`mcp_server.tools.TOOLS`); each tool's `Command` (in its package's tools.py) holds only what the command line
adds: the positional argument, a flag named otherwise than its field, a shorter help line, fields left off the
command line, the human-readable summary and the exit code.

`--json` prints the pydantic result for machines; without it, a short readable summary for people. Stdout carries
only that: whatever the work prints (a reward module at its import) goes to stderr.
Exit code 0 on success (for validation: only when the config is valid), 1 on a failed check, 2 on bad input
(the message names the field or file), 3 on an unexpected error (one line; LLM_FINETUNING_DEBUG=1 shows the traceback),
141 when the reader of the output went away (`| head`), quietly; 130 on Ctrl-C, with one line saying what was kept.
A standard stream closed at start (`cmd >&-`, a service without one) is /dev/null for the command (never a file it
opens later); the command runs, and a closed stdout is said on stderr (its result went nowhere).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import inspect
import os
import sys

from pydantic import ValidationError

from mcp_server.cli_flags import add_arguments, refuse_unknown_flags, request_from
from mcp_server.errors import UserInputError, describe_failure
from mcp_server.interpreter import keep_caches_private
from mcp_server.reporting import PIPE_EVERY_S, ProgressLines, silent
from mcp_server.tools import TOOLS
from mcp_server.toolspec import RESULT_FILE, ToolSpec, print_result, result_stream
from mcp_server.worker_targets import DAEMON_TARGETS, DAEMON_WARM_UP


def _progress(args):
    """A long command's progress as lines on stderr (reporting.ProgressLines): at a terminal every line, otherwise
    (issue 49: minutes of silence in a pipe) the first of each kind, the last and one every PIPE_EVERY_S. Never
    with --json."""
    if args.json:
        return silent
    return ProgressLines(sys.stderr, every=0.0 if sys.stderr.isatty() else PIPE_EVERY_S)



@contextlib.contextmanager
def _output_to_stderr():
    """While the core runs, what its code writes to stdout goes to stderr: a reward module's print at import, and
    (issue 48) its os.write(1, ...) or a child process's output, so file descriptor 1 itself points at stderr
    until the core returns; then the result is printed on the real stdout."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        sys.stderr.flush()
        os.dup2(2, 1)
    except OSError:  # no descriptor 1 or 2 (closed): the Python-level redirect alone
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            with contextlib.suppress(Exception):  # what user code buffered on the real stdout object goes to stderr
                sys.__stdout__.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _run(args: argparse.Namespace) -> int:
    spec: ToolSpec = args._spec
    _loading.update(said=False, quiet=bool(getattr(args, "json", False)))
    request = request_from(spec, args) if spec.request else None
    if spec.cli.handler:
        return spec.cli.handler(args, request)
    kwargs = {"report": _progress(args)} if "report" in inspect.signature(spec.core).parameters else {}
    with _output_to_stderr():  # stdout carries only the result
        result = spec.core(request, **kwargs) if request is not None else spec.core(**kwargs)
    print_result(result, args.json, spec.cli.human)
    return 0 if spec.cli.ok(result) else 1


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the flags of that command alone (what one run needs)."""
    parser = argparse.ArgumentParser(prog="llm-finetuning", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for spec in TOOLS:
        p = sub.add_parser(spec.command, help=spec.cli.help)
        if only in (None, spec.command):
            add_arguments(p, spec)
    return parser


def _reader_gone() -> int:
    """The output's reader closed it (`llm-finetuning ... | head`): stop quietly, as a command killed by SIGPIPE
    would (exit 141), with what is left unwritten sent nowhere instead of a traceback at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), result_stream().fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (an in-process caller's buffer)
        pass
    return 141


# Said on stderr before the training interpreter first imports TRL in this command (issue 49: the first emit-config
# in a fresh environment printed nothing for 86 s; the time is that import, measured 40-80 s on 2 busy cores with
# no .pyc yet, under a minute with them). Not with --json, like the progress lines.
LOADING = ("llm-finetuning: loading torch, transformers and TRL in the training interpreter ({python}) to check the "
           "config against the installed TRL: about a minute the first time in a fresh environment or on a busy "
           "machine; the next commands within 10 minutes reuse it...")
# Said where this command's own worker starts for work that imports them (sampling, evaluation, export; walk 13:
# sample-completions was silent 15-28 s, its first line a datasets progress bar).
LOADING_HERE = ("llm-finetuning: starting the training interpreter ({python}) for this command; it loads torch, "
                "transformers and TRL as its work needs them: up to about a minute on a busy machine...")
_loading = {"said": False, "quiet": False}


def _say_loading(python: str, text: str = LOADING) -> None:
    if not (_loading["said"] or _loading["quiet"]):
        _loading["said"] = True
        print(text.format(python=python), file=sys.stderr, flush=True)


def _route(python: str, target: str, args: tuple, kwargs: dict, report) -> tuple[bool, object]:
    if target not in DAEMON_TARGETS:
        from mcp_server import worker

        if "trl" not in sys.modules and not worker.started_any():
            _say_loading(python, LOADING_HERE)
        return False, None
    from mcp_server import worker_daemon

    handled, result = worker_daemon.call(python, target, args, kwargs, report, warm_up=DAEMON_WARM_UP,
                                         starting=lambda: _say_loading(python))
    if not handled and "trl" not in sys.modules:  # no daemon to be had: this command imports TRL now (its worker)
        _say_loading(python)
    return handled, result


def main(argv: list[str] | None = None) -> int:
    """The CLI. Called without `argv` (the console script, `python -m mcp_server.cli`) it is the whole process
    (_as_process) and never returns; with a list (a script or test in its own process), the command's exit code."""
    from mcp_server import worker

    before, worker.route = worker.route, _route
    try:
        if argv is None:
            _reserve_standard_streams()
            worker.holds_protocol = True  # workspace code runs in a worker, never beside the result's descriptor
            _as_process(sys.argv[1:])
        return _main(argv)
    finally:
        worker.route = before


def _as_process(argv: list[str]) -> None:
    """The CLI as a process (issue 48, sixth round): a reward module may start a thread at its import that writes
    to descriptor 1 later, or never ends. With --json, descriptor 1 points at stderr from the parsed command line to
    the exit and the result goes to a copy of the real stdout (_result_apart); and the process ends once its
    output is written and the exit handlers ran (os._exit), so no such thread writes after it or keeps it alive."""
    code = _main(argv, process=True)
    for stream in (result_stream(), sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            code = _reader_gone()
        except (OSError, ValueError, AttributeError):
            pass
    atexit._run_exitfuncs()  # this process's scratch folder removed, as at a normal exit
    os._exit(code)


STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def _reserve_standard_streams() -> None:
    """Descriptors 0, 1 and 2 closed at start (`llm-finetuning list-runs >&-`, a cron or service without them) are
    opened on /dev/null, and Python's stream for each (None then) made on it (round 17, b10: every command died
    with an AttributeError on sys.stdout.flush). Never left closed: the next file the command opened would take
    the number, and the result or a reward module's print would be written into it. With stdout closed the command
    runs, and stderr (when open) says that its result was not written."""
    closed = []
    for fd, name, mode in STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            closed.append(name)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                    closefd=False, **({"buffering": 1} if fd else {})))
    if "stdout" in closed and "stderr" not in closed:
        print("llm-finetuning: standard output is closed: the command runs, its result goes nowhere (redirect it "
              "to a file to keep it)", file=sys.stderr, flush=True)


def _result_apart() -> None:
    """Descriptor 1 points at stderr for the rest of the process; the result is written to a copy of the real
    stdout (toolspec.RESULT_FILE). Without a descriptor 1 or 2 (closed), nothing changes."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        sys.stderr.flush()
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):
        return
    RESULT_FILE["file"] = open(saved, "w", encoding=sys.stdout.encoding or "utf-8",  # noqa: SIM115 - held to exit
                               errors=sys.stdout.errors or "strict", closefd=True)


def _main(argv: list[str], process: bool = False) -> int:
    keep_caches_private()
    names = {spec.command for spec in TOOLS}
    command = next((a for a in argv if a in names), "") if argv else ""
    parser = build_parser(only=command)
    if command:
        refuse_unknown_flags(parser, command, argv[argv.index(command) + 1:])
    args = parser.parse_args(argv)
    if process and getattr(args, "json", False):
        _result_apart()
    try:
        code = _run(args)
        result_stream().flush()  # here, so a reader that went away (`| head`) is met below, not at exit
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (an Interrupted says what was kept), never a traceback
        print(str(exc) or "stopped (Ctrl-C)", file=sys.stderr)
        return 130
    except (UserInputError, ValidationError, OSError) as exc:  # bad input, or a file the system refused
        print(f"error: {describe_failure(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line, the traceback only on request
        if os.environ.get("LLM_FINETUNING_DEBUG"):
            raise
        print(f"error: {describe_failure(exc)} (set LLM_FINETUNING_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
