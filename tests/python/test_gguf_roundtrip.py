"""GGUF round trips between pagoda and the reference `gguf` package, in both directions.

pagoda -> gguf: tests/tools/gguf_write_sample writes a file with pagoda's GgufWriter and prints
what it wrote as JSON; gguf.GGUFReader must see exactly that (every key in order, type, value,
nested array structure, tensor name, type, shape, offset alignment and bytes).

gguf -> pagoda: gguf.GGUFWriter writes a file; tests/tools/gguf_dump prints what pagoda's
GgufFile reads, which must equal what Python wrote and what GGUFReader reads.
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
from conftest import find_tools

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType, GGUFValueType  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

TOOL_NAMES = ("gguf_write_sample", "gguf_dump")


@pytest.fixture(scope="session")
def tools_dir() -> pathlib.Path:
    """The folder of gguf_write_sample and gguf_dump."""
    return find_tools(*TOOL_NAMES)


def run_tool(tools_dir: pathlib.Path, *args) -> dict:
    proc = subprocess.run([str(tools_dir / args[0]), *map(str, args[1:])], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{args[0]} failed: {proc.stderr}"
    return json.loads(proc.stdout)


# ---- what gguf.GGUFReader sees, in the JSON form of tests/tools/gguf_json.h ----

def _scalar(part, vtype: GGUFValueType):
    x = part[0]
    if vtype == GGUFValueType.BOOL:
        return bool(x)
    if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return float(x)
    return int(x)


def _walk(parts, i: int, vtype: GGUFValueType):
    """Rebuilds one value from GGUFReader's flat parts list; returns (value, next index).

    GGUFReader.contents() flattens nested arrays, so the structure is rebuilt from the raw parts
    (element type and length before each array's items)."""
    name = vtype.name.lower()
    if vtype == GGUFValueType.STRING:
        return {"type": name, "value": bytes(parts[i + 1]).decode("utf-8")}, i + 2
    if vtype == GGUFValueType.ARRAY:
        elem = GGUFValueType(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            item, i = _walk(parts, i, elem)
            items.append(item)
        return {"type": name, "elem_type": elem.name.lower(), "value": items}, i
    return {"type": name, "value": _scalar(parts[i], vtype)}, i + 1


def reader_view(path: pathlib.Path, with_data: bool = True) -> dict:
    r = gguf.GGUFReader(str(path))
    metadata = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue  # the header's own counts, which GGUFReader lists as fields
        # parts: key length, key bytes, value type, then the value's parts
        value, end = _walk(field.parts, 3, GGUFValueType(int(field.parts[2][0])))
        assert end == len(field.parts), f"{key}: parts left over"
        value["key"] = key
        metadata.append(value)
    tensors = []
    for t in r.tensors:
        entry = {
            "name": t.name,
            "type": t.tensor_type.name,
            "type_id": int(t.tensor_type),
            "shape": [int(x) for x in t.shape],
            "num_bytes": int(t.n_bytes),
            "offset": int(t.data_offset) - int(r.data_offset),
        }
        if with_data:
            entry["data"] = bytes(r.data[t.data_offset:t.data_offset + t.n_bytes]).hex()
        tensors.append(entry)
    return {"alignment": int(r.alignment), "data_offset": int(r.data_offset),
            "metadata": metadata, "tensors": tensors}


def assert_same_metadata(got: list, want: list):
    assert [m["key"] for m in got] == [m["key"] for m in want], "keys or their order differ"
    for g, w in zip(got, want):
        assert g == w, f"metadata key {w['key']!r}"


def strip(tensors: list, keys=("offset",)) -> list:
    return [{k: v for k, v in t.items() if k not in keys} for t in tensors]


# ---- pagoda -> gguf ----

@pytest.mark.parametrize("alignment", [0, 1, 64, 4096])
def test_pagoda_writer_read_by_gguf(tools_dir, tmp_path, alignment):
    out = tmp_path / "sample.gguf"
    wrote = run_tool(tools_dir, "gguf_write_sample", "--alignment", alignment, out)
    want_alignment = alignment or 32
    assert wrote["alignment"] == want_alignment

    seen = reader_view(out)
    assert seen["alignment"] == want_alignment
    assert seen["data_offset"] % want_alignment == 0
    assert_same_metadata(seen["metadata"], wrote["metadata"])
    if alignment:
        assert wrote["metadata"][-1] == {"key": "general.alignment", "type": "uint32",
                                         "value": alignment}
    else:
        assert all(m["key"] != "general.alignment" for m in seen["metadata"])
    assert strip(seen["tensors"]) == wrote["tensors"]
    # Tensors are laid out in order, each at the next aligned offset; the file ends padded.
    offset = 0
    for t in seen["tensors"]:
        assert t["offset"] == offset, t["name"]
        offset = -(-(offset + t["num_bytes"]) // want_alignment) * want_alignment
    assert out.stat().st_size == seen["data_offset"] + offset
    types = {t["type"] for t in seen["tensors"]}
    assert {"F32", "F16", "Q8_0", "Q4_K"} <= types

    # pagoda's own reader agrees with both.
    dumped = run_tool(tools_dir, "gguf_dump", "--data", out)
    assert_same_metadata(dumped["metadata"], wrote["metadata"])
    assert dumped["tensors"] == seen["tensors"]
    assert dumped["data_offset"] == seen["data_offset"]
    assert not list(tmp_path.glob("*.tmp*")), "temporary file left behind"


def test_sample_covers_every_value_type(tools_dir, tmp_path):
    wrote = run_tool(tools_dir, "gguf_write_sample", tmp_path / "s.gguf")
    seen_types, nested = set(), False

    def visit(v, depth):
        nonlocal nested
        seen_types.add(v["type"])
        if v["type"] == "array":
            seen_types.add("array of " + v["elem_type"])
            nested |= depth > 0
            for item in v["value"]:
                visit(item, depth + 1)

    for m in wrote["metadata"]:
        visit(m, 0)
    scalars = {t.name.lower() for t in GGUFValueType if t != GGUFValueType.ARRAY}
    assert scalars <= seen_types
    assert {"array of " + s for s in scalars} <= seen_types
    assert "array of array" in seen_types and nested


# ---- gguf -> pagoda ----

def write_with_gguf_package(path: pathlib.Path):
    """Writes a file with gguf.GGUFWriter; returns (metadata, tensors) as pagoda should see them."""
    w = gguf.GGUFWriter(str(path), arch="pyarch")
    w.add_custom_alignment(128)
    want = [("general.architecture", "string", "pyarch"),
            ("general.alignment", "uint32", 128)]

    def add(key, adder, tname, value):
        adder(key, value)
        want.append((key, tname, value))

    add("py.u8", w.add_uint8, "uint8", 200)
    add("py.i8", w.add_int8, "int8", -100)
    add("py.u16", w.add_uint16, "uint16", 60000)
    add("py.i16", w.add_int16, "int16", -30000)
    add("py.u32", w.add_uint32, "uint32", 4000000000)
    add("py.i32", w.add_int32, "int32", -2000000000)
    add("py.u64", w.add_uint64, "uint64", 2**64 - 2)
    add("py.i64", w.add_int64, "int64", -(2**62))
    add("py.f32", w.add_float32, "float32", float(np.float32(0.1)))
    add("py.f64", w.add_float64, "float64", 0.1)
    add("py.bool", w.add_bool, "bool", True)
    add("py.string", w.add_string, "string", "grüße, 世界")
    tokens = ["<s>", "</s>", " hello", "▁world", "\n"]
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_key_value("py.f64_array", [0.5, -1.25], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
    w.add_key_value("py.u64_array", [1, 2**63], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT64)
    w.add_array("py.nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("py.nested_strings", [["a"], ["b", "c"]])

    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((3, 64)).astype(np.float32)         # numpy shape: GGUF [64, 3]
    f16 = rng.standard_normal((2, 2, 32)).astype(np.float16)      # GGUF [32, 2, 2]
    q8 = rng.integers(0, 256, size=(4, 2 * 34), dtype=np.uint8)   # 4 rows of 64: GGUF [64, 4]
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)     # 2 rows of 256
    w.add_tensor("t.f32", f32)
    w.add_tensor("t.f16", f16)
    w.add_tensor("t.q8_0", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    w.add_tensor("t.q4_k", q4k, raw_dtype=GGMLQuantizationType.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    def typed(tname, value):
        return {"type": tname, "value": value}

    metadata = [dict(typed(t, v), key=k) for k, t, v in want]
    metadata.append({"key": "tokenizer.ggml.tokens", "type": "array", "elem_type": "string",
                     "value": [typed("string", s) for s in tokens]})
    metadata.append({"key": "py.f64_array", "type": "array", "elem_type": "float64",
                     "value": [typed("float64", 0.5), typed("float64", -1.25)]})
    metadata.append({"key": "py.u64_array", "type": "array", "elem_type": "uint64",
                     "value": [typed("uint64", 1), typed("uint64", 2**63)]})
    metadata.append({"key": "py.nested", "type": "array", "elem_type": "array", "value": [
        {"type": "array", "elem_type": "int32", "value": [typed("int32", x) for x in row]}
        for row in ([1, 2], [3], [4, 5, 6])]})
    metadata.append({"key": "py.nested_strings", "type": "array", "elem_type": "array", "value": [
        {"type": "array", "elem_type": "string", "value": [typed("string", s) for s in row]}
        for row in (["a"], ["b", "c"])]})
    tensors = [
        {"name": "t.f32", "type": "F32", "type_id": 0, "shape": [64, 3], "data": f32.tobytes()},
        {"name": "t.f16", "type": "F16", "type_id": 1, "shape": [32, 2, 2], "data": f16.tobytes()},
        {"name": "t.q8_0", "type": "Q8_0", "type_id": 8, "shape": [64, 4], "data": q8.tobytes()},
        {"name": "t.q4_k", "type": "Q4_K", "type_id": 12, "shape": [256, 2],
         "data": q4k.tobytes()},
    ]
    for t in tensors:
        t["num_bytes"] = len(t["data"])
        t["data"] = t["data"].hex()
    return metadata, tensors


def test_gguf_package_file_read_by_pagoda(tools_dir, tmp_path):
    path = tmp_path / "py.gguf"
    want_metadata, want_tensors = write_with_gguf_package(path)
    dumped = run_tool(tools_dir, "gguf_dump", "--data", path)
    assert dumped["version"] == 3
    assert dumped["alignment"] == 128
    assert dumped["data_offset"] % 128 == 0
    # The package may order keys its own way; compare as a mapping, then order against its reader.
    by_key = {m["key"]: m for m in dumped["metadata"]}
    assert sorted(by_key) == sorted(m["key"] for m in want_metadata)
    for m in want_metadata:
        assert by_key[m["key"]] == m, m["key"]
    assert strip(dumped["tensors"]) == want_tensors
    for t in dumped["tensors"]:
        assert t["offset"] % 128 == 0, t["name"]

    seen = reader_view(path)
    assert_same_metadata(dumped["metadata"], seen["metadata"])
    assert dumped["tensors"] == seen["tensors"]
    assert dumped["data_offset"] == seen["data_offset"]


def real_gguf_files():
    shared = pathlib.Path(os.environ.get("PAGODA_SHARED", ROOT.parent / "shared"))
    files = sorted(shared.glob("models/*.gguf")) + sorted(shared.glob("models/*/*.gguf"))
    return files


@pytest.mark.parametrize("path", real_gguf_files(), ids=lambda p: p.name)
def test_real_files_read_alike(tools_dir, path):
    """pagoda and the gguf package agree on every key, value and tensor of the real models."""
    dumped = run_tool(tools_dir, "gguf_dump", path)
    seen = reader_view(path, with_data=False)
    assert_same_metadata(dumped["metadata"], seen["metadata"])
    assert dumped["tensors"] == seen["tensors"]
    assert dumped["data_offset"] == seen["data_offset"]
    assert dumped["alignment"] == seen["alignment"]
