"""Where a sandbox's cgroup is made (rewards/sandbox_cgroup.py, issue 48), on constructed cgroup trees: the machine
that runs the suite has one kind of tree at most (this project's: cgroup v1 as root), so the other kinds a CI or
a developer's machine has (v2 delegated to a user session, v2 at a container's root, v2 without the controllers
handed down) are built as folders of the files the kernel would show. tests/test_sandbox_table.py runs the real
sandboxes."""

from __future__ import annotations

from pathlib import Path

from mcp_server.rewards import sandbox_cgroup as cg


def _v2_tree(root: Path, own: str, enabled: str, controllers: str = "cpu memory pids") -> None:
    """A cgroup2 hierarchy at `root` with this process in `own`, whose parent hands `enabled` to its children."""
    mine = root / own.strip("/")
    mine.mkdir(parents=True)
    (mine / "cgroup.controllers").write_text(controllers + "\n")
    (mine.parent / "cgroup.subtree_control").write_text(enabled + "\n")


def test_v2_groups_go_beside_this_process_in_a_delegated_parent(tmp_path):
    """A systemd user session (Delegate=yes): this process sits in app.slice/me.scope; app.slice is the user's and
    hands memory, pids and cpu down. Groups go in app.slice, never under me.scope (v2 lets no group that has
    processes hand controllers to children)."""
    own = "/user.slice/user-1000.slice/user@1000.service/app.slice/me.scope"
    _v2_tree(tmp_path, own, "cpu memory pids")
    tree, why = cg._v2([("/", str(tmp_path), "cgroup2", {"rw"})], {"": own})
    assert tree == cg.Tree(2, (("", str(tmp_path / own.strip("/")).rsplit("/", 1)[0]),)), why


def test_v2_without_the_controllers_handed_down_gives_no_group_and_says_why(tmp_path):
    own = "/system.slice/runner.service"
    _v2_tree(tmp_path, own, "cpu")  # memory and pids not enabled for the parent's children
    tree, why = cg._v2([("/", str(tmp_path), "cgroup2", {"rw"})], {"": own})
    assert tree is None and "memory and pids" in why


def test_v2_without_the_memory_controller_at_all_says_so(tmp_path):
    own = "/a/b"
    _v2_tree(tmp_path, own, "memory pids", controllers="cpu pids")
    tree, why = cg._v2([("/", str(tmp_path), "cgroup2", {"rw"})], {"": own})
    assert tree is None and "lacks the memory or pids controller" in why


def test_v2_at_a_containers_root_makes_groups_under_it(tmp_path):
    """A container with its own cgroup namespace: this process's group is the mount's root ("/")."""
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    tree, _ = cg._v2([("/", str(tmp_path), "cgroup2", {"rw"})], {"": "/"})
    assert tree == cg.Tree(2, (("", str(tmp_path)),))


def test_v1_needs_memory_pids_and_cpuacct_and_uses_cpu_when_there(tmp_path):
    mounts, own = [], {}
    for controller in ("memory", "pids", "cpuacct", "cpu"):
        (tmp_path / controller / "sub").mkdir(parents=True)
        mounts.append(("/", str(tmp_path / controller), "cgroup", {"rw", controller}))
        own[controller] = "/sub"
    tree, _ = cg._v1(mounts, own)
    assert tree == cg.Tree(1, tuple((c, str(tmp_path / c / "sub")) for c in ("memory", "pids", "cpuacct", "cpu")))
    tree, why = cg._v1([m for m in mounts if "pids" not in m[3]], own)
    assert tree is None and "pids" in why


def test_a_mount_of_a_subtree_maps_the_group_inside_it(tmp_path):
    """A v1 hierarchy mounted from /process_api (a container's view): /process_api/abc is <mount>/abc."""
    assert cg._inside("/process_api", str(tmp_path), "/process_api/abc") == str(tmp_path / "abc")
    assert cg._inside("/process_api", str(tmp_path), "/elsewhere") is None
    assert cg._inside("/", str(tmp_path), "/") == str(tmp_path)


def test_a_group_gets_its_limits_and_is_removed(tmp_path):
    """On a v2 folder: memory.max, no swap, pids.max and one core of cpu.max written; close() removes it."""
    group = cg.Group(cg.Tree(2, (("", str(tmp_path)),)), 600 << 20, 11)
    (path,) = group.dirs.values()
    assert Path(path, "memory.max").read_text() == str(600 << 20)
    assert Path(path, "memory.swap.max").read_text() == "0"
    assert Path(path, "pids.max").read_text() == "11"
    assert Path(path, "cpu.max").read_text() == f"{cg.CPU_CORES * cg.CPU_PERIOD_US} {cg.CPU_PERIOD_US}"
    Path(path, "cpu.stat").write_text("usage_usec 2500000\nuser_usec 1\n")
    Path(path, "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.cpu_s() == 2.5 and group.oom_kills() == 1
    for name in list(Path(path).iterdir()):  # a real group's files vanish with it
        name.unlink()
    group.close()
    assert not Path(path).exists()


def test_groups_left_over_are_swept_and_a_new_one_is_not(tmp_path):
    """Empty groups of this package older than SWEEP_AFTER_S are swept (the old names, with a pid, too); a younger
    one may still be waiting for its sandbox's processes; another's group is never touched."""
    import os
    import time

    old = tmp_path / cg.new_name()
    old_with_pid = tmp_path / f"{cg.PREFIX}-999999999-0"
    young = tmp_path / cg.new_name()
    other = tmp_path / "someone-elses"
    for path in (old, old_with_pid, young, other):
        path.mkdir()
    for path in (old, old_with_pid, other):
        then = time.time() - cg.SWEEP_AFTER_S - 5
        os.utime(path, (then, then))
    cg._sweep(cg.Tree(2, (("", str(tmp_path)),)))
    assert not old.exists() and not old_with_pid.exists() and young.exists() and other.exists()


def test_a_group_name_carries_nothing_of_the_host():
    """S6 (issue 48): the sandbox reads its group's name in /proc/self/cgroup; it carried the caller's pid."""
    import os
    import re

    names = {cg.new_name() for _ in range(50)}
    assert len(names) == 50 and all(re.fullmatch(rf"{cg.PREFIX}-[0-9a-f]{{16}}", n) for n in names), names
    # no pid field (a random token may hold the pid's digits by chance: 1 in ~100 for a 4-digit pid over 50 names)
    assert not any(re.search(rf"(^|-){os.getpid()}(-|$)", n) for n in names)
