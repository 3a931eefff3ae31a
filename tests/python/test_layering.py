"""The build checks the layering of src/ (cmake/check_layering.cmake): an include across layers
that docs/ARCHITECTURE.md does not allow fails it, naming the file and what is allowed."""
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cmake" / "check_layering.cmake"


def check(src):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("*** cmake is absent: SKIPPING the layering check ***")
    return subprocess.run([cmake, f"-DSRC={src}", "-P", str(SCRIPT)], capture_output=True,
                          text=True)


def test_the_tree_keeps_its_layers():
    r = check(ROOT / "src")
    assert r.returncode == 0, r.stderr


def tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "src"


def test_an_include_up_the_layers_fails_naming_the_file(tmp_path):
    src = tree(tmp_path, {"core/error.h": "#pragma once\n",
                          "model/model.h": "#include \"core/error.h\"\n",
                          "core/bad.cc": "#include <vector>\n#include \"model/model.h\"\n"})
    r = check(src)
    assert r.returncode != 0
    said = " ".join(r.stderr.split())  # cmake wraps its messages
    assert "src/core/bad.cc" in said and "model/model.h" in said
    assert "core/ may include only core/ and nothing else" in said


def test_allowed_includes_and_cli_pass(tmp_path):
    src = tree(tmp_path, {"core/error.h": "#pragma once\n",
                          "quant/q.h": "#include \"core/error.h\"\n",
                          "backend/b.cc": "#include \"quant/q.h\"\n#include \"backend/b.h\"\n",
                          "cli/main.cc": "#include \"server/x.h\"\n#include \"model/m.h\"\n"})
    assert check(src).returncode == 0


def test_a_folder_that_is_no_layer_fails(tmp_path):
    src = tree(tmp_path, {"core/error.h": "#pragma once\n", "extras/x.cc": "int x;\n"})
    r = check(src)
    assert r.returncode != 0
    assert "src/extras/ is no layer" in " ".join(r.stderr.split())


@pytest.mark.parametrize("folder,include", [("kv", "model/kv_storage.h"),
                                            ("kv", "backend/backend.h"),
                                            ("sched", "tokenizer/vocab.h"),
                                            ("tokenizer", "format/gguf.h"),
                                            ("model", "tools/synth.h"),
                                            ("bench", "cli/commands.h")])
def test_the_control_plane_and_the_readers_stay_below(tmp_path, folder, include):
    # The arrows that once pointed back up (kv/ into the model's storage, the tokenizer into
    # the GGUF reader) are refused like any other.
    src = tree(tmp_path, {include: "#pragma once\n",
                          f"{folder}/x.cc": f"#include \"{include}\"\n"})
    r = check(src)
    assert r.returncode != 0
    assert f"src/{folder}/x.cc" in " ".join(r.stderr.split())
