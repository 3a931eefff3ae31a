"""IQ4_NL and IQ4_XS written by pagoda, read by the gguf Python package (llama.cpp's own numpy
decoder) as the oracle.

1. Rows encoded by pagoda's reference quantizer (tests/quant_tools/dequant_tool) decode in gguf
   to exactly the floats pagoda decodes, and close to the input.
2. `pagoda quantize --type iq4_nl | iq4_xs` on stories260K (64-wide rows: IQ4_XS falls back to
   IQ4_NL there, as llama.cpp's quantizer does) and on a synthetic qwen3-tiny with 256-wide rows
   (real IQ4_XS tensors): every tensor's type is the recipe's, every IQ4 tensor decodes in gguf
   to what pagoda decodes and close to the F32 source, and the file runs (`pagoda run -n 4`).

The 2- and 3-bit i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, which pagoda reads and runs but
does not write:

3. Random blocks of each type (every bit pattern is a valid block) decode in pagoda's reference
   to exactly gguf's floats, over scales from zero and subnormals to the largest F16; neither
   the tool nor `pagoda quantize` encodes them.
4. Real files from llama.cpp's quantizer: the synthetic qwen3-tiny (its matrices really take
   these types), an importance matrix from llama-imatrix (llama-quantize requires one for the
   IQ2 types) and llama-quantize to each type. Every such tensor decodes in pagoda to gguf's
   floats bit for bit, `pagoda inspect` lists the type, and `pagoda run` generates. llama.cpp's
   tools are no part of CI: set $LLAMA_CPP_BIN_DIR to the folder holding llama-quantize and
   llama-imatrix (and their shared libraries), else these tests skip, loudly.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip(
    "gguf", reason="*** the gguf Python package is absent: SKIPPING IQ4 cross-checks ***")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from quant_util import run_tool, tool_values  # noqa: E402

IQ4_TYPES = ["IQ4_NL", "IQ4_XS"]
# NMSE of the round trip on standard Gaussian data, about 1.5x pagoda's measured 5.4e-3 for
# both (tests/unit/test_quant.cc); Q4_0's round-to-nearest gives 7.4e-3.
GAUSSIAN_NMSE_BOUND = 8e-3
# Relative RMS error of a whole quantized tensor (Gaussian-like synthetic or trained weights):
# measured at most 8.0e-2 on stories260K and 7.2e-2 on the synthetic model.
TENSOR_REL_RMS_BOUND = 0.1


def assert_bits_equal(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    ours = np.ascontiguousarray(ours, np.float32).reshape(-1)
    theirs = np.ascontiguousarray(theirs, np.float32).reshape(-1)
    assert ours.shape == theirs.shape, what
    bad = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
    assert bad.size == 0, (f"{what}: {bad.size} of {ours.size} values differ; first at {bad[0]}: "
                           f"pagoda {ours[bad[0]]!r} vs gguf {theirs[bad[0]]!r}")


@pytest.mark.parametrize("type_name", IQ4_TYPES)
def test_pagoda_rows_decode_the_same_in_gguf(dequant_tool, tmp_path, type_name):
    rng = np.random.default_rng(17 + IQ4_TYPES.index(type_name))
    gaussian = rng.standard_normal(256 * 64)
    values = np.concatenate([
        gaussian,
        rng.standard_normal(256 * 8) * 1e-3,
        rng.standard_normal(256 * 8) * 300.0,
        np.zeros(256 * 2),
        np.full(256, 0.75), np.full(256, -2.5),
        np.abs(rng.standard_normal(256 * 4)) + 1.0,  # all positive: the scale's sign matters
        -np.abs(rng.standard_normal(256 * 4)) - 1.0,
        np.where(rng.random(256 * 8) < 0.02, 50.0, 1.0) * rng.standard_normal(256 * 8),
    ]).astype(np.float32)
    blocks = np.frombuffer(run_tool(dequant_tool, tmp_path, "quantize", type_name, values.tobytes()),
                           np.uint8)
    ours = tool_values(dequant_tool, tmp_path, "dequantize", type_name, blocks.tobytes())
    theirs = dequantize(blocks.copy(), T[type_name]).reshape(-1)
    assert_bits_equal(ours, theirs, f"decode of pagoda's {type_name} bytes")
    n = gaussian.size
    nmse = np.sum((theirs[:n] - values[:n]) ** 2) / np.sum(values[:n].astype(np.float64) ** 2)
    assert nmse < GAUSSIAN_NMSE_BOUND, f"{type_name} NMSE {nmse:.3g}"
    zeros = slice(256 * 80, 256 * 82)
    assert np.all(theirs[zeros] == 0.0)
    # Every block of 32 comes back within a fraction of its largest element: the grid's widest
    # gap is 24 of its 240; IQ4_XS also rounds each sub-block's scale to a 6-bit multiple of
    # the super-scale, coarse for a sub-block far smaller than its neighbours (the outliers).
    # Measured worst: IQ4_NL 0.128, IQ4_XS 0.183.
    err = np.abs(theirs - values).reshape(-1, 32).max(axis=1)
    ratio = err / np.maximum(np.abs(values).reshape(-1, 32).max(axis=1), 1e-30)
    assert ratio.max() <= {"IQ4_NL": 0.2, "IQ4_XS": 0.3}[type_name], ratio.max()


@pytest.fixture(scope="module")
def stories(shared_dir):
    path = shared_dir / "models" / "stories260K.gguf"
    if not path.exists():
        pytest.skip(f"*** {path} is absent: SKIPPING IQ4 model tests ***")
    return path


@pytest.fixture(scope="module")
def synthetic(pagoda_bin, stories, tmp_path_factory):
    """An F32 qwen3-tiny (rows of 256 and more) with stories260K's vocabulary."""
    out = tmp_path_factory.mktemp("iq4-synth") / "qwen3-tiny-f32.gguf"
    r = subprocess.run([str(pagoda_bin), "synth", "--like", "qwen3-tiny", "--type", "f32",
                        "--vocab", str(stories), "-o", str(out), "-t", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def quantize(pagoda_bin, src, out, recipe):
    r = subprocess.run([str(pagoda_bin), "quantize", "-i", str(src), "-o", str(out), "--type",
                        recipe, "-t", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def check_file(pagoda_bin, dequant_tool, tmp_path, src, out, expect_types):
    """Every IQ4 tensor of `out`: gguf's decode equals pagoda's and is close to `src`'s F32
    values; the set of tensor types is `expect_types`; the file runs."""
    source = {t.name: t for t in gguf.GGUFReader(src).tensors}
    tensors = gguf.GGUFReader(out).tensors
    assert {t.tensor_type.name for t in tensors} == expect_types
    checked = 0
    for t in tensors:
        if t.tensor_type.name not in IQ4_TYPES:
            continue
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        theirs = dequantize(raw.copy(), t.tensor_type).reshape(-1)
        ours = tool_values(dequant_tool, tmp_path, "dequantize", t.tensor_type.name, raw.tobytes())
        assert_bits_equal(ours, theirs, f"{out.name}: {t.name}")
        w = np.asarray(source[t.name].data, np.float64).reshape(-1)
        rel = np.linalg.norm(w - theirs) / np.linalg.norm(w)
        assert rel < TENSOR_REL_RMS_BOUND, (t.name, rel)
        checked += 1
    assert checked > 0
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(out), "-p", "Once upon a time", "-n",
                        "4", "--temp", "0", "-t", "2"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().startswith("Once upon a time")
    assert len(r.stdout.decode()) > len("Once upon a time")


@pytest.mark.parametrize("recipe", ["iq4_nl", "iq4_xs"])
def test_stories_quantized(pagoda_bin, dequant_tool, stories, tmp_path, recipe):
    # 64-wide rows: IQ4_XS falls back to IQ4_NL; the output matrix's Q6_K to Q8_0; rows that
    # are no multiple of 32 (the feed-forward's 172) to F16.
    out = quantize(pagoda_bin, stories, tmp_path / f"stories-{recipe}.gguf", recipe)
    check_file(pagoda_bin, dequant_tool, tmp_path, stories, out, {"F32", "F16", "Q8_0", "IQ4_NL"})


@pytest.mark.parametrize("recipe,base", [("iq4_nl", "IQ4_NL"), ("iq4_xs", "IQ4_XS")])
def test_synthetic_quantized(pagoda_bin, dequant_tool, synthetic, tmp_path, recipe, base):
    # Tied embeddings: the token table is the output matrix, Q6_K; every other matrix the base.
    out = quantize(pagoda_bin, synthetic, tmp_path / f"synth-{recipe}.gguf", recipe)
    check_file(pagoda_bin, dequant_tool, tmp_path, synthetic, out, {"F32", "Q6_K", base})


LOW_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S"]


@pytest.mark.parametrize("type_name", LOW_TYPES)
def test_random_blocks_decode_as_gguf_does(dequant_tool, tmp_path, type_name):
    rng = np.random.default_rng(41 + LOW_TYPES.index(type_name))
    num_blocks = 2000
    block_bytes = gguf.GGML_QUANT_SIZES[T[type_name]][1]
    blocks = rng.integers(0, 256, (num_blocks, block_bytes), dtype=np.uint8)
    # The leading F16 scale d: ordinary sizes of either sign, then zeros, subnormals and the
    # largest finite values (never Inf / NaN, whose payloads the two sides need not share).
    d = (rng.standard_normal(num_blocks) * 1e-2).astype(np.float16)
    d[:8] = [0.0, -0.0, 6e-8, -6e-8, 6.1e-5, 65504.0, -65504.0, 1.0]
    blocks[:, :2] = d.view(np.uint8).reshape(-1, 2)
    raw = blocks.reshape(-1)
    ours = tool_values(dequant_tool, tmp_path, "dequantize", type_name, raw.tobytes())
    theirs = dequantize(raw.copy(), T[type_name]).reshape(-1)
    assert_bits_equal(ours, theirs, f"decode of random {type_name} blocks")
    assert np.all(np.isfinite(ours))
    assert np.all(ours[:2 * 256] == 0.0)  # d = +-0


@pytest.mark.parametrize("type_name", LOW_TYPES)
def test_the_tool_refuses_to_encode(dequant_tool, tmp_path, type_name):
    src, dst = tmp_path / "in.f32", tmp_path / "out.bin"
    src.write_bytes(np.zeros(256, np.float32).tobytes())
    r = subprocess.run([str(dequant_tool), "quantize", type_name, str(src), str(dst)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0


@pytest.mark.parametrize("type_name", ["iq2_xxs", "IQ3_S"])
def test_quantize_refuses_them_as_targets(pagoda_bin, stories, tmp_path, type_name):
    r = subprocess.run([str(pagoda_bin), "quantize", "-i", str(stories), "-o",
                        str(tmp_path / "out.gguf"), "--type", type_name],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert type_name.lower() in r.stderr.lower(), r.stderr
    assert not (tmp_path / "out.gguf").exists()


@pytest.fixture(scope="module")
def llama_tools():
    folder = os.environ.get("LLAMA_CPP_BIN_DIR")
    if not folder:
        pytest.skip("*** $LLAMA_CPP_BIN_DIR is unset (llama.cpp's llama-quantize and "
                    "llama-imatrix): SKIPPING the IQ2/IQ3 files made by llama.cpp ***")
    folder = pathlib.Path(folder)
    for name in ("llama-quantize", "llama-imatrix"):
        if not (folder / name).exists():
            pytest.skip(f"*** {folder / name} is absent: SKIPPING the IQ2/IQ3 files made by "
                        f"llama.cpp ***")
    env = dict(os.environ)
    libraries = [str(folder), env.get("LD_LIBRARY_PATH")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, libraries))
    return folder, env


@pytest.fixture(scope="module")
def imatrix(llama_tools, synthetic, tmp_path_factory):
    folder, env = llama_tools
    work = tmp_path_factory.mktemp("iq-low-imatrix")
    text = work / "calibration.txt"
    text.write_text("Once upon a time there was a little girl who liked to play in the park. " * 40)
    out = work / "imatrix.gguf"
    r = subprocess.run([str(folder / "llama-imatrix"), "-m", str(synthetic), "-f", str(text), "-o",
                        str(out), "-c", "128", "--chunks", "4", "-t", "2"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


# llama-quantize's file types and the type each must hold: its IQ2_S file type writes IQ2_XS
# and IQ3_S tensors, while IQ2_M's (and IQ3_XXS's) hold IQ2_S.
LLAMACPP_FILE_TYPES = {"IQ2_XXS": "IQ2_XXS", "IQ2_XS": "IQ2_XS", "IQ2_M": "IQ2_S",
                       "IQ3_XXS": "IQ3_XXS", "IQ3_S": "IQ3_S"}


@pytest.mark.parametrize("file_type,type_name", LLAMACPP_FILE_TYPES.items())
def test_llamacpp_files_read_and_run(pagoda_bin, dequant_tool, llama_tools, synthetic, imatrix,
                                     tmp_path, file_type, type_name):
    folder, env = llama_tools
    out = tmp_path / f"synth-{file_type}.gguf"
    r = subprocess.run([str(folder / "llama-quantize"), "--imatrix", str(imatrix), str(synthetic),
                        str(out), file_type, "2"], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]

    seen = set()
    for t in gguf.GGUFReader(out).tensors:
        name = t.tensor_type.name
        if name not in LOW_TYPES:
            continue
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        theirs = dequantize(raw.copy(), t.tensor_type).reshape(-1)
        ours = tool_values(dequant_tool, tmp_path, "dequantize", name, raw.tobytes())
        assert_bits_equal(ours, theirs, f"{out.name}: {t.name}")
        seen.add(name)
    assert type_name in seen, f"llama-quantize wrote no {type_name} tensor"

    r = subprocess.run([str(pagoda_bin), "inspect", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert type_name in r.stdout
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(out), "-p", "Once upon a time", "-n", "8",
                        "--temp", "0", "-t", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Once upon a time")
    assert len(r.stdout) > len("Once upon a time")
