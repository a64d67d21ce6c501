"""What model-written code can read of the host inside the sandbox (issue 48, S3), through run_python.

One sandbox walks every file it can read under /proc (its own process folder, /proc/self, included) and /sys,
and the host's own state is looked for in all of them at once:

- every file read has a row in ROWS (a file the table does not know fails: a new kernel's new file gets a row
  before it passes): the sandbox's own (its process, its namespaces, its mount table), the kernel's build and
  settings (the same on any host of that kernel), or OPEN: a per-process file that still shows host state and
  that no mount can hide (a /proc/<pid> folder is made with its process; docs/development.md says which);
- every entry the code declares masked (sandbox_command.masked_proc(), generated from the host's /proc and
  PROC_SYS_MASKED) reads empty or not at all;
- no file holds a marker of the host, taken from the host when the test runs: its boot id, its memory (MemTotal,
  the devtmpfs's size=), its hostname, its kernel command line, its cgroup paths, its network interfaces;
- /proc/self/cgroup reads "/" for every hierarchy: the sandbox's cgroup namespace is rooted at its own group;
- the device nodes in /dev were made for the sandbox (the host's date from its boot: a stat gave its uptime).

Where this machine cannot give the sandbox device nodes of its own (not root: sandbox_command.private_dev() says
why), the device nodes are the host's and the devtmpfs's size is expected in the mount table; the test says so."""

from __future__ import annotations

import os
import re
import shutil
import socket

import pytest
from conftest import skip_unless_ci

from mcp_server.rewards import sandbox_command
from mcp_server.rewards.sandbox import Limits, run_python

OWN, BUILD, OPEN = "the sandbox's own", "the kernel's build or settings", "open: host state no mount can hide"
ROWS = [  # (path pattern, kind, why): the first that matches is the file's row
    (r"/proc/self/sched", OPEN, "se.exec_start is the scheduler's clock, counted from the host's boot"),
    (r"/proc/self/timens_offsets", OPEN, "the time namespace's offsets are minus the host's clocks at the start"),
    (r"/proc/self/autogroup", OPEN, "the autogroup's number counts the sessions the host has made"),
    (r"/proc/self/sessionid", OPEN, "the audit session of the login that started the host process"),
    (r"/proc/self/net/(softnet_stat|sockstat|protocols|stat/rt_cache|rt_acct)", OPEN,
     "per-CPU or global counters of the host's network stack (packets, TCP memory), not the namespace's"),
    (r"/proc/self/cgroup", OWN, "the sandbox's cgroup namespace, rooted at its own group: every line reads /"),
    (r"/proc/(self/)?(mountinfo|mounts|mountstats)", OWN, "the sandbox's mount table (no host devtmpfs in it)"),
    (r"/proc/self/net/.+", OWN, "the sandbox's network namespace: loopback only"),
    (r"/proc/self/.+", OWN, "the process's own state"),
    (r"/proc/sysvipc/.+", OWN, "the sandbox's IPC namespace"),
    (r"/proc/sys/net/.+", OWN, "the sandbox's network namespace's settings"),
    (r"/proc/sys/user/.+", OWN, "the sandbox's user namespace's limits"),
    (r"/proc/sys/kernel/(hostname|domainname)", OWN, "the sandbox's UTS namespace"),
    (r"/proc/sys/kernel/ns_last_pid", OWN, "the sandbox's pid namespace"),
    (r"/proc/sys/kernel/(msg\w*|sem\w*|shm\w*|auto_msgmni)", OWN, "the sandbox's IPC namespace"),
    (r"/proc/(version|filesystems)", BUILD, "the kernel's build and the filesystems it knows"),
    (r"/proc/cpuinfo", BUILD, "the CPU's model, features and count (sched_getaffinity gives the count too)"),
    (r"/proc/sys/(kernel|abi|debug|dev)/.+", BUILD, "the kernel's settings"),
]

WALK = """\
import os
def walk():
    me, seen = os.path.realpath('/proc/self'), {}
    skip = {me + '/' + name for name in ('task', 'fd', 'map_files', 'exe', 'mem', 'pagemap', 'cwd', 'root')}
    for top in ('/proc', me, '/sys'):
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not (folder == '/proc' and d.isdigit())
                       and os.path.join(folder, d) not in skip]
            for name in files:
                path = os.path.join(folder, name)
                if path in skip:
                    continue
                try:
                    with open(path, 'rb') as handle:
                        data = handle.read(65536)
                except OSError:
                    continue
                if data.strip(b'\\0 \\n'):
                    seen[path.replace(me, '/proc/self')] = data.decode('latin1')
    return seen
"""

CHECK = """\
import os, re, time
def test_host_state():
    seen, bad, kinds = walk(), [], {{}}
    for path, text in sorted(seen.items()):
        row = next((r for r in {rows!r} if re.fullmatch(r[0], path)), None)
        if row is None:
            bad.append(('no row', path, text[:80]))
            continue
        kinds.setdefault(row[1], []).append(path)
        for name, pattern in {markers!r}:
            if re.search(pattern, text) and (name, path) not in {expected!r}:
                bad.append((name, path, re.search(pattern, text).group(0)))
    for path, folder in {masked!r}:
        bad += [('masked, yet read', p, seen[p][:80]) for p in seen if p == path or p.startswith(path + '/')]
    for node in {nodes!r}:  # a node made at the host's boot dates from it: the host's uptime
        if time.time() - os.stat(node).st_mtime > 600:
            bad.append(('a device node as old as the host', node, time.ctime(os.stat(node).st_mtime)))
    groups = seen.get('/proc/self/cgroup', '').splitlines()
    bad += [('cgroup not the namespace root', '/proc/self/cgroup', line) for line in groups if not line.endswith(':/')]
    print({{kind: len(paths) for kind, paths in kinds.items()}}, sorted(kinds.get({open!r}, [])))
    assert groups and not bad, bad[:12]
"""


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def host_markers() -> list[tuple[str, str]]:
    """(what, a pattern) for each piece of the host's own state that must not show inside a sandbox."""
    markers = []
    boot_id = _read("/proc/sys/kernel/random/boot_id").strip()
    if boot_id:
        markers.append(("the host's boot id", re.escape(boot_id)))
    total = re.search(r"MemTotal:\s+(\d+) kB", _read("/proc/meminfo"))
    if total:
        markers.append(("the host's memory (MemTotal)", rf"\b{total.group(1)} ?kB\b"))
    for line in _read("/proc/self/mountinfo").splitlines():
        tail = line.partition(" - ")[2].split()
        size = re.search(r"size=\d+k", tail[2]) if len(tail) >= 3 and tail[0] == "devtmpfs" else None
        if size:
            markers.append(("the host's memory (its devtmpfs's size)", rf"\b{size.group(0)}"))
    hostname = socket.gethostname()
    if len(hostname) >= 4 and hostname not in ("sandbox", "localhost"):
        markers.append(("the host's name", rf"\b{re.escape(hostname)}\b"))
    cmdline = _read("/proc/cmdline").strip()
    if len(cmdline) >= 16:
        markers.append(("the host's kernel command line", re.escape(cmdline)))
    for line in _read("/proc/self/cgroup").splitlines():
        path = line.split(":", 2)[-1]
        if path not in ("", "/"):
            markers.append(("the host's cgroup path", re.escape(path)))
    for line in _read("/proc/net/dev").splitlines()[2:]:
        name = line.split(":", 1)[0].strip()
        if name and name != "lo":
            markers.append(("the host's network interface", rf"(?<![\w.-]){re.escape(name)}(?![\w.-])"))
    return markers


@pytest.mark.slow  # starts a sandbox
def test_the_sandbox_reads_nothing_of_the_host_in_proc_or_sys():
    if shutil.which("bwrap") is None:
        skip_unless_ci("bubblewrap is not installed (apt-get install bubblewrap)")
    own_dev = sandbox_command._private_dev()[0] is not None
    print(f"\nsandbox devices: {sandbox_command.private_dev()}")
    markers = host_markers()
    expected = set() if own_dev else {("the host's memory (its devtmpfs's size)", path)  # the host's nodes
                                      for path in ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/mounts")}
    with open("/proc/uptime") as host:
        booted_long_ago = float(host.read().split()[0]) > 3600  # else a node's time cannot tell
    nodes = [f"/dev/{name}" for name in sandbox_command.DEV_NODES] if own_dev and booted_long_ago else []
    tests = CHECK.format(rows=[(p, k) for p, k, _ in ROWS], markers=markers, expected=expected,
                         masked=list(sandbox_command.masked_proc()), open=OPEN, nodes=nodes)
    result = run_python(WALK, tests, Limits(timeout_s=60.0, cpu_s=20.0, max_output_bytes=1 << 20))
    assert result.passed, (result.error, result.output[-3000:])


def test_without_root_the_device_nodes_are_the_hosts_and_it_says_why(monkeypatch):
    """Not root (a CI runner's user): no mount namespace, no nodes of its own; the start is the gate alone, bwrap
    runs as this user, and private_dev() says why (nothing is started to find out)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    sandbox_command._private_dev.cache_clear()
    try:
        argv, how = sandbox_command.launch_argv(["bwrap", "true"])
        assert argv == ["/bin/sh", "-c", sandbox_command._GATE, "sh", "bwrap", "true"] and how == {}
        assert "needs root" in sandbox_command.private_dev()
    finally:
        sandbox_command._private_dev.cache_clear()
