#!/usr/bin/env python3
"""Makes encoder test vectors with llama.cpp's quantizers as the reference: ggml from
llama-cpp-python 0.3.36's bundled libggml-base.so (called through ctypes; not needed by CI).
Made with:

    pip install llama-cpp-python==0.3.36
    python3 scripts/make_quant_vectors.py > tests/data/quant_vectors.json

or, with llama.cpp built from that package's source tree (vendor/llama.cpp, cmake) instead,
`--ggml BUILD/bin/libggml-base.so`: the same ggml, the same bytes.

A few sets of F32 rows (fixed seed; stored as little-endian bytes so the test needs no matching
random generator) are quantized by ggml_quantize_chunk with no importance matrix, the way
llama-quantize does without --imatrix. That takes ggml's scalar reference encoders
(quantize_row_*_ref), which are deterministic: the legacy types round to nearest against the
block's extreme, the K-quants run ggml's own scale searches. For each type and row set the
file holds ggml's bytes and the squared error of ggml's round trip (decoded with ggml's
to_float), summed in float64 over the set. tests/kernels/test_quant_vs_llamacpp.cc quantizes
the same rows with pagoda and compares.
"""
import argparse
import base64
import ctypes
import json
import pathlib
import sys

import numpy as np

ROW_LENGTH = 256  # one K-quant super-block, eight legacy blocks
ROWS_PER_SET = 4

# ggml_type numbers (ggml/include/ggml.h) of the types pagoda can encode that ggml's
# ggml_quantize_chunk also encodes (Q8_K is a dot-product intermediate it does not write).
GGML_TYPES = {
    "F16": 1, "BF16": 30,
    "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
    "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14,
    "IQ4_NL": 20, "IQ4_XS": 23,
}


def row_sets() -> dict[str, np.ndarray]:
    """Shapes that stress different parts of an encoder, each ROWS_PER_SET x ROW_LENGTH."""
    rng = np.random.default_rng(20240519)
    shape = (ROWS_PER_SET, ROW_LENGTH)
    sets = {}
    sets["gaussian"] = rng.normal(0.0, 1.0, shape)
    # Trained weights: small values with a few large ones that set each block's scale.
    outliers = rng.normal(0.0, 0.02, shape)
    spots = rng.random(shape) < 0.01
    outliers[spots] = rng.normal(0.0, 0.5, spots.sum())
    sets["outliers"] = outliers
    sets["heavy_tailed"] = rng.standard_t(3, shape)
    # Group scales far apart inside one super-block: the K-quants code them against one scale.
    group_scales = np.exp(rng.uniform(-4.0, 1.0, (ROWS_PER_SET, ROW_LENGTH // 16)))
    sets["mixed_scales"] = rng.normal(0.0, 1.0, shape) * np.repeat(group_scales, 16, axis=1)
    # One-signed and offset data, where a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) pays.
    sets["offset"] = np.stack([
        rng.uniform(0.0, 1.0, ROW_LENGTH),
        rng.exponential(1.0, ROW_LENGTH),
        3.0 + rng.normal(0.0, 0.1, ROW_LENGTH),
        -rng.uniform(1.0, 2.0, ROW_LENGTH),
    ])
    # Degenerate rows: zero, constant, nearly constant, a lone spike.
    spike = np.zeros(ROW_LENGTH)
    spike[77] = 5.0
    sets["flat"] = np.stack([
        np.zeros(ROW_LENGTH),
        np.full(ROW_LENGTH, 0.25),
        0.5 + rng.normal(0.0, 1e-4, ROW_LENGTH),
        spike,
    ])
    return {name: rows.astype("<f4") for name, rows in sets.items()}


class TypeTraits(ctypes.Structure):
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


def load_ggml(path) -> ctypes.CDLL:
    ggml = ctypes.CDLL(str(path))
    ggml.ggml_row_size.restype = ctypes.c_size_t
    ggml.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
    ggml.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_void_p]
    ggml.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    ggml.ggml_get_type_traits.argtypes = [ctypes.c_int]
    return ggml


def quantize(ggml: ctypes.CDLL, type_id: int, rows: np.ndarray) -> bytes:
    nrows, n = rows.shape
    dst = ctypes.create_string_buffer(ggml.ggml_row_size(type_id, n) * nrows)
    written = ggml.ggml_quantize_chunk(type_id, rows.ctypes.data, dst, 0, nrows, n, None)
    assert written == len(dst.raw), (type_id, written, len(dst.raw))
    return dst.raw


def dequantize(ggml: ctypes.CDLL, type_id: int, data: bytes, count: int) -> np.ndarray:
    to_float = TO_FLOAT(ggml.ggml_get_type_traits(type_id).contents.to_float)
    out = np.zeros(count, np.float32)
    src = ctypes.create_string_buffer(data, len(data))
    to_float(ctypes.cast(src, ctypes.c_void_p), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
             count)
    return out


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ggml", help="libggml-base.so (default: llama-cpp-python's)")
    args = p.parse_args()
    if args.ggml:
        path, origin = pathlib.Path(args.ggml), "llama.cpp of llama-cpp-python 0.3.36's source"
    else:
        import llama_cpp
        path = pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"
        origin = f"llama-cpp-python {llama_cpp.__version__}"
    ggml = load_ggml(path)
    sets = row_sets()
    types = {}
    for type_name, type_id in GGML_TYPES.items():
        per_set = {}
        for set_name, rows in sets.items():
            data = quantize(ggml, type_id, rows)
            decoded = dequantize(ggml, type_id, data, rows.size).astype(np.float64)
            error = float(np.sum((decoded - rows.reshape(-1).astype(np.float64)) ** 2))
            per_set[set_name] = {"bytes": b64(data), "sq_error": error}
        types[type_name] = per_set
    json.dump({
        "oracle": f"ggml_quantize_chunk of {origin}, no imatrix",
        "command": "python3 scripts/make_quant_vectors.py "
                   + ("--ggml BUILD/bin/libggml-base.so " if args.ggml else "")
                   + "> tests/data/quant_vectors.json",
        "row_length": ROW_LENGTH,
        "row_sets": {name: b64(rows.tobytes()) for name, rows in sets.items()},
        "types": types,
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
