"""Run the MCP conformance suite (`@modelcontextprotocol/conformance`) against this server, over stdio.

    python scripts/conformance.py                  # the applicable scenarios (below); `make conformance`
    python scripts/conformance.py --scenario ping  # one (repeat the flag for several)

The suite tests a server at an HTTP URL; this server speaks stdio (what every harness starts). So supergateway
bridges them: it serves streamable HTTP on a free local port and starts the server's real command line,
`python3 scripts/launch_server.py` (the command each harness config holds), once per session, talking to it over
its stdin/stdout. Both npm packages are installed at pinned versions into the user's cache
(`~/.cache/llm-finetuning/conformance`, or under XDG_CACHE_HOME; LLM_FINETUNING_CONFORMANCE_DIR names another
folder), reused by later runs: never in this checkout, which harnesses copy when they install the plugin. The
server writes into a throwaway workspace, never this checkout. Prints PASS/FAIL per scenario with each failed
check's message, and exits 1 when a scenario fails (2 when the suite could not be installed or started).

Applicable scenarios: those that test the protocol against what this server offers. The others call the suite's
own fixtures (tools named `test_simple_text`, `test_image_content`, ..., resources `test://...`, prompts
`test_simple_prompt`, ...), which this server does not have (against it, `tools-call-simple-text` and
`tools-call-error` "pass" only because an unknown tool answers with an error result), use capabilities the server
does not declare (`completion/complete`, resource subscriptions), or test the HTTP transport, which here is
supergateway's, not the server's (`server-sse-*`, `dns-rebinding-protection`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"@modelcontextprotocol/conformance": "0.1.16", "supergateway": "4.0.0"}
NODE = ("node", "22")  # the suite imports fs.globSync (Node 22+): an older node gets Node 22 from npm beside it
APPLICABLE = ["server-initialize", "logging-set-level", "ping", "tools-list", "resources-list", "prompts-list"]


CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-finetuning" / "conformance"


def say(text: str) -> None:
    print(text, flush=True)


def die(text: str) -> NoReturn:
    print(f"conformance: {text}", file=sys.stderr, flush=True)
    sys.exit(2)


def node_major(node: str | None) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60).stdout if node else ""
    except OSError:
        return 0
    return int(out.strip().lstrip("v").split(".")[0] or 0) if out.strip().startswith("v") else 0


def install(folder: Path) -> tuple[str, Path]:
    """The pinned packages under `folder` (installed once; a half-finished install is redone), and Node 22 from
    npm when the node on PATH is older; returns the node to run them with and their bin folder."""
    packages = dict(PACKAGES)
    system_node = shutil.which("node")
    if node_major(system_node) < int(NODE[1]):
        packages[NODE[0]] = NODE[1]
    done = folder / ".installed"
    want = json.dumps(packages, sort_keys=True)
    if not (done.exists() and done.read_text() == want):
        npm = shutil.which("npm")
        if not npm:
            die("npm is not installed (Node.js 18+): it installs the MCP conformance suite")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        say(f"conformance: installing {', '.join(f'{p}@{v}' for p, v in packages.items())} into {folder}")
        proc = subprocess.run([npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund",
                               *(f"{p}@{v}" for p, v in packages.items())], capture_output=True, text=True)
        if proc.returncode != 0:
            die(f"npm install failed:\n{proc.stderr}{proc.stdout}")
        done.write_text(want)
    bin_dir = folder / "node_modules" / ".bin"
    node = str(bin_dir / "node") if NODE[0] in packages else system_node
    if node_major(node) < int(NODE[1]):
        die(f"{node} is not Node {NODE[1]}+ (the suite needs it); remove {folder} to reinstall")
    return node, bin_dir


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, gateway: subprocess.Popen, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if gateway.poll() is not None:
            die(f"supergateway exited ({gateway.returncode}) before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    die(f"supergateway did not listen on port {port} within {timeout:.0f} s")


def run_scenario(node: str, bin_dir: Path, url: str, scenario: str, out: Path) -> tuple[bool, list[str]]:
    """Runs one scenario; returns whether every check passed and the failed checks' messages."""
    out.mkdir(parents=True)
    proc = subprocess.run([node, str(bin_dir / "conformance"), "server", "--url", url, "--scenario", scenario,
                           "--output-dir", str(out)], capture_output=True, text=True, timeout=300)
    results = sorted(out.glob("*/checks.json"))
    if not results:
        return False, [f"no result written (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-800:]}"]
    checks = json.loads(results[-1].read_text())
    failed = [f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or ''}".strip()
              for c in checks if c.get("status") not in ("SUCCESS", "INFO")]
    return bool(checks) and not failed and proc.returncode == 0, failed or (
        [] if proc.returncode == 0 else [f"conformance exited {proc.returncode}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append",
                        help=f"a scenario to run (repeatable; default: {' '.join(APPLICABLE)})")
    parser.add_argument("--python", default=sys.executable,
                        help="the python3 that runs scripts/launch_server.py (default: this one)")
    args = parser.parse_args(argv)
    scenarios = args.scenario or APPLICABLE
    node, bin_dir = install(Path(os.environ.get("LLM_FINETUNING_CONFORMANCE_DIR") or CACHE))
    with tempfile.TemporaryDirectory(prefix="llm-finetuning-conformance-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        command = shlex.join([args.python, str(ROOT / "scripts" / "launch_server.py")])
        env = {**os.environ, "LLM_FINETUNING_WORKSPACE": str(workspace)}
        port = free_port()
        log = open(Path(tmp) / "supergateway.log", "w")
        gateway = subprocess.Popen(
            [node, str(bin_dir / "supergateway"), "--stdio", command, "--outputTransport", "streamableHttp",
             "--stateful", "--port", str(port), "--logLevel", "info"],
            cwd=workspace, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            wait_listening(port, gateway)
            say(f"conformance: {PACKAGES['@modelcontextprotocol/conformance']} against `{command}` over stdio "
                f"(bridged by supergateway on port {port})")
            failures = 0
            for scenario in scenarios:
                started = time.monotonic()
                url = f"http://127.0.0.1:{port}/mcp"
                ok, messages = run_scenario(node, bin_dir, url, scenario, Path(tmp) / scenario)
                failures += not ok
                say(f"{'PASS' if ok else 'FAIL'}  {scenario}  ({time.monotonic() - started:.1f} s)")
                for message in messages:
                    say(f"      {message}")
        finally:
            os.killpg(gateway.pid, signal.SIGTERM)  # supergateway and the servers it started
            try:
                gateway.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(gateway.pid, signal.SIGKILL)
                gateway.wait()
            log.close()
        if failures:
            tail = (Path(tmp) / "supergateway.log").read_text().splitlines()[-20:]
            say("supergateway's last lines:\n" + "\n".join(tail))
    say(f"conformance: {len(scenarios) - failures} of {len(scenarios)} scenarios passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
