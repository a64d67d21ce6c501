"""A user extension module runs from a private copy of the bytes the review hashed (rewards.source_only), so a
library it links from its own run path (`$ORIGIN`, or an absolute run path into the workspace) is neither pinned nor
beside that copy: the import failed with the linker's bare "cannot open shared object file", or, with a library of
that name already loaded in the process, ran with an unpinned one. Refused at the review, naming the module, the
library's file and what is accepted (rewards.elf_links reads the run path from the hashed bytes). Each row builds a
library and an extension with the system C compiler (as tests/test_reward_reads.py's extension rows), never skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from mcp_server.errors import UserInputError
from mcp_server.inspection.models import InspectRequest
from mcp_server.inspection.review import inspect_rewards
from support import hand_made_run

pytestmark = pytest.mark.slow  # each row runs the system C compiler (a process each)

EXTENSION = '''#include <Python.h>
double {call}(void);
static PyObject* val(PyObject* s, PyObject* a) {{ return PyFloat_FromDouble({call}()); }}
static PyMethodDef M[] = {{{{"val", val, METH_NOARGS, ""}}, {{0}}}};
static struct PyModuleDef D = {{PyModuleDef_HEAD_INIT, "{name}", 0, -1, M}};
PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&D); }}
'''
REWARD = ("from {name} import val\n\n\ndef linked_reward(completions, **kwargs):\n"
          "    return [val() for _ in completions]\n")

# row -> (where the library is, relative to the extension's folder; the run path; the linker's tag for it;
# whether the library is loaded into the process before the review imports the extension)
ROWS = {
    "beside it, $ORIGIN (DT_RUNPATH)": (".", "$ORIGIN", "--enable-new-dtags", False),
    "beside it, $ORIGIN (DT_RPATH)": (".", "$ORIGIN", "--disable-new-dtags", False),
    "in ../lib, ${ORIGIN}/../lib": ("../lib", "${ORIGIN}/../lib", "--enable-new-dtags", False),
    "in a workspace folder, by an absolute run path": ("../vendored", "{absolute}", "--enable-new-dtags", False),
    "beside it, already loaded in the process (the linker reuses it)": (".", "$ORIGIN", "--enable-new-dtags", True),
}


def _compiler() -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler (cc, gcc) on this machine: the extension rows need one"
    return compiler


def _build(args: list[str]) -> None:
    done = subprocess.run([_compiler(), "-shared", "-fPIC", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _linked_extension(folder: Path, name: str, row: str) -> tuple[Path, Path]:
    """folder/<name><EXT_SUFFIX>, whose val() returns what the library lib<name>_sib.so's function does, linked by
    the row's run path: (the extension, the library)."""
    where, runpath, dtags, _ = ROWS[row]
    libdir = (folder / where).resolve()
    libdir.mkdir(parents=True, exist_ok=True)
    call, library = f"{name}_sib", libdir / f"lib{name}_sib.so"
    (folder / f".{name}_sib.c").write_text(f"double {call}(void) {{ return 1.0; }}\n")
    _build([str(folder / f".{name}_sib.c"), "-o", str(library), f"-Wl,-soname,{library.name}"])
    (folder / f".{name}.c").write_text(EXTENSION.format(name=name, call=call))
    extension = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    _build([f"-I{sysconfig.get_paths()['include']}", str(folder / f".{name}.c"), "-o", str(extension),
            f"-L{libdir}", f"-l{name}_sib", f"-Wl,-rpath,{runpath.replace('{absolute}', str(libdir))}", f"-Wl,{dtags}"])
    return extension, library


@pytest.mark.parametrize("row", list(ROWS))
def test_an_extension_linking_a_workspace_library_by_its_run_path_is_refused_naming_it(
        workspace, tiny_model, monkeypatch, row):
    import ctypes

    tag = "".join(c for c in row if c.isalnum())[:24].lower() + str(abs(hash(str(workspace))))[:6]
    name = f"linked_{tag}"
    folder = workspace / "code" / "ext"
    folder.mkdir(parents=True)
    extension, library = _linked_extension(folder, name, row)
    if ROWS[row][3]:
        ctypes.CDLL(str(library))  # the linker now finds a library of that name whatever the run path says
    (folder / f"rew_{tag}.py").write_text(REWARD.format(name=name))
    monkeypatch.syspath_prepend(str(folder))
    run_dir = hand_made_run(workspace, tiny_model, "linked", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"rew_{tag}.linked_reward"}])
    with pytest.raises(UserInputError) as refused:
        inspect_rewards(InspectRequest(run=str(run_dir)))
    said = str(refused.value)
    assert f"{name} ({extension}) links lib{name}_sib.so from {os.path.realpath(library)}" in said, said
    assert f"link lib{name}_sib.so statically into {extension.name}" in said, said
    assert not (run_dir / "inspection" / "review.json").exists()


def test_an_extension_whose_run_path_finds_no_workspace_library_still_loads(workspace, tiny_model, monkeypatch):
    """The refusal is of a linked workspace library only: a run path of $ORIGIN with nothing of the libraries it
    needs beside it (the interpreter's libc, found by the system's search) loads and scores as before."""
    from mcp_server.rewards.elf_links import dynamic_entries

    tag = str(abs(hash(str(workspace))))[:8]
    name = f"plain_{tag}"
    folder = workspace / "code" / "ext"
    folder.mkdir(parents=True)
    one = "#include <math.h>\nstatic double one(void) { volatile double x = 1.0; return sqrt(x); }\n"
    (folder / f".{name}.c").write_text(EXTENSION.format(name=name, call="one").replace("double one(void);\n", one))
    extension = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    _build([f"-I{sysconfig.get_paths()['include']}", str(folder / f".{name}.c"), "-o", str(extension),
            "-Wl,--no-as-needed", "-lm", "-Wl,-rpath,$ORIGIN"])
    needed, runpath = dynamic_entries(extension.read_bytes())  # as the linker reads it: a run path, a library
    assert runpath == ["$ORIGIN"] and any(n.startswith("libm.so") for n in needed), (needed, runpath)
    (folder / f"rew_{tag}.py").write_text(REWARD.format(name=name))
    monkeypatch.syspath_prepend(str(folder))
    run_dir = hand_made_run(workspace, tiny_model, "plain", [["a", "b", "c", "d"]] * 13, ["2"] * 13,
                            rewards=[{"name": f"rew_{tag}.linked_reward"}])
    result = inspect_rewards(InspectRequest(run=str(run_dir)))
    assert (run_dir / "inspection" / "review.json").exists(), result
