"""pagoda's scalar quant reference against the gguf Python package (llama.cpp's own numpy code).

Uses tests/quant_tools/dequant_tool, which CMake builds at build/tests/quant_tools/dequant_tool,
i.e. beside $PAGODA_BIN (build/pagoda) under tests/quant_tools/. $PAGODA_DEQUANT_TOOL overrides.

1. Decoding: random block bytes (F16 scales kept finite) decoded by gguf and by pagoda must be
   bit-identical float32 arrays; pagoda repeats ggml's float operations in the same order.
2. Encoding the legacy types, MXFP4 and F16 / BF16: pagoda copies ggml's reference quantizers, so the
   bytes must equal gguf.quants.quantize's bytes.
3. Encoding the K-quants (gguf has no quantizer for them): pagoda's bytes must decode in gguf
   to exactly what pagoda decodes, and close to the input.
"""

import numpy as np
import pytest

gguf = pytest.importorskip(
    "gguf", reason="*** the gguf Python package is absent: SKIPPING quant cross-checks ***")
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402
from quant_util import run_tool, tool_values  # noqa: E402


# Byte offsets of the F16 scale fields inside each block, from the ggml block layouts.
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}
BLOCK_TYPES = list(F16_FIELDS) + ["Q8_K", "MXFP4"]
LEGACY_QUANTIZERS = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
K_QUANTIZERS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]
# Normalized MSE bounds on Gaussian data for the K-quant round trip, about 1.5x the measured
# values (Q2_K 6.9e-2, Q3_K 2.1e-2, Q4_K 4.9e-3, Q5_K 1.2e-3, Q6_K 3.0e-4, Q8_K 4.9e-5).
K_NMSE_BOUND = {"Q2_K": 0.1, "Q3_K": 0.03, "Q4_K": 7.5e-3, "Q5_K": 2e-3, "Q6_K": 5e-4, "Q8_K": 8e-5}


def finite_f16(rng: np.random.Generator, size: int) -> np.ndarray:
    """Finite halves spread over many binades, subnormals and both zeros included."""
    bits = rng.integers(0, 1 << 16, size=size, dtype=np.uint16)
    exponent_all_ones = (bits & 0x7C00) == 0x7C00
    bits[exponent_all_ones] &= np.uint16(0xBFFF)  # clear an exponent bit: finite now
    return bits


def random_blocks(rng: np.random.Generator, type_name: str, num_blocks: int) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[T[type_name]]
    blocks = rng.integers(0, 256, size=(num_blocks, type_size), dtype=np.uint8)
    if type_name == "Q8_K":
        # d is a float32 here: keep it to a sane range so d * q stays finite.
        d = (rng.standard_normal(num_blocks) * 1e-2).astype(np.float32)
        blocks[:, 0:4] = d.view(np.uint8).reshape(num_blocks, 4)
        return blocks
    if type_name == "MXFP4":
        # The E8M0 exponent byte: every value but the top few, whose 12 * 2^(e - 128) overflows
        # float (0 and 1 are the subnormal scales).
        blocks[:, 0] = rng.integers(0, 250, size=num_blocks, dtype=np.uint8)
        return blocks
    for offset in F16_FIELDS[type_name]:
        # Mostly realistic scales, plus arbitrary finite halves to reach subnormals and extremes.
        sane = (rng.standard_normal(num_blocks) * 1e-2).astype(np.float16).view(np.uint16)
        wild = finite_f16(rng, num_blocks)
        bits = np.where(rng.random(num_blocks) < 0.8, sane, wild).astype(np.uint16)
        blocks[:, offset:offset + 2] = bits.view(np.uint8).reshape(num_blocks, 2)
    return blocks


def reference_dequantize(data: np.ndarray, type_name: str) -> np.ndarray:
    if type_name == "Q8_K":
        # gguf has no Q8_K; its layout is {float d; int8 qs[256]; int16 bsums[16]}, x = d * q.
        blocks = data.reshape(-1, 292)
        d = blocks[:, 0:4].copy().view(np.float32)
        qs = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * qs).reshape(-1)
    return dequantize(data, T[type_name]).reshape(-1)


def assert_bits_equal(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    ours_bits, theirs_bits = ours.view(np.uint32), theirs.view(np.uint32)
    mismatches = np.flatnonzero(ours_bits != theirs_bits)
    assert mismatches.size == 0, (
        f"{what}: {mismatches.size} of {ours.size} values differ; first at {mismatches[0]}: "
        f"pagoda {ours[mismatches[0]]!r} vs gguf {theirs[mismatches[0]]!r}")


@pytest.mark.parametrize("type_name", BLOCK_TYPES)
def test_dequantize_random_blocks_matches_gguf(dequant_tool, tmp_path, type_name):
    rng = np.random.default_rng(1234 + BLOCK_TYPES.index(type_name))
    blocks = random_blocks(rng, type_name, num_blocks=300)
    ours = tool_values(dequant_tool, tmp_path, "dequantize", type_name, blocks.tobytes())
    theirs = reference_dequantize(blocks.reshape(-1), type_name).astype(np.float32)
    assert ours.shape == theirs.shape
    assert np.isfinite(theirs).all(), "test data should stay finite"
    assert_bits_equal(ours, theirs, f"dequantize {type_name}")


@pytest.mark.parametrize("type_name", ["F16", "BF16"])
def test_dequantize_every_16_bit_pattern_matches_gguf(dequant_tool, tmp_path, type_name):
    # All 65536 patterns: NaNs (payloads), infinities, subnormals, signed zeros.
    bits = np.arange(1 << 16, dtype=np.uint16)
    ours = tool_values(dequant_tool, tmp_path, "dequantize", type_name, bits.tobytes())
    theirs = dequantize(bits.view(np.uint8), T[type_name]).reshape(-1).astype(np.float32)
    assert_bits_equal(ours, theirs, f"dequantize {type_name}")


def test_dequantize_f32_is_identity(dequant_tool, tmp_path):
    values = np.random.default_rng(7).standard_normal(1000).astype(np.float32)
    ours = tool_values(dequant_tool, tmp_path, "dequantize", "F32", values.tobytes())
    assert_bits_equal(ours, values, "dequantize F32")


def tie_blocks() -> list[np.ndarray]:
    """32-element blocks whose scale comes out exactly 1 for one legacy type, so that x * (1/d)
    lands on exact halves: round-half-away (Q8_0), truncate(x + 0.5) (Q4_1, Q5_1) and
    truncate(x + 8.5) (Q4_0, Q5_0) all differ from round-half-even there."""
    halves = np.arange(32) % 16 - 8 + 0.5  # -7.5 .. 7.5
    q4_0 = np.concatenate([[-8.0], halves[1:]])  # extreme -8 -> d = 1
    q5_0 = np.concatenate([[-16.0], (np.arange(31) - 15) + 0.5])  # -16 -> d = 1
    q8_0 = np.concatenate([[127.0], halves[1:] * 3])  # amax 127 -> d = 1
    q4_1 = np.concatenate([[0.0, 15.0], np.arange(30) % 15 + 0.5])  # min 0, max 15 -> d = 1
    q5_1 = np.concatenate([[0.0, 31.0], np.arange(30) + 0.5])  # min 0, max 31 -> d = 1
    return [q4_0, q5_0, q8_0, q4_1, q5_1]


def quantize_inputs(rng: np.random.Generator, block_size: int) -> np.ndarray:
    """Rows that stress the encoders: Gaussian at several magnitudes, all-zero and constant
    blocks, all-positive and all-negative blocks, exact ties, and outliers."""
    ties = np.concatenate(tie_blocks())
    ties = np.pad(ties, (0, -ties.size % block_size))
    parts = [
        rng.standard_normal(block_size * 64),
        rng.standard_normal(block_size * 16) * 1e-3,
        rng.standard_normal(block_size * 16) * 300.0,
        np.zeros(block_size * 2),
        np.full(block_size, 0.75),
        np.full(block_size, -2.5),
        np.abs(rng.standard_normal(block_size * 4)) + 1.0,
        -np.abs(rng.standard_normal(block_size * 4)) - 1.0,
        rng.integers(-16, 16, size=block_size * 8) * 0.5,
        np.where(rng.random(block_size * 8) < 0.02, 50.0, 1.0)
        * rng.standard_normal(block_size * 8),
        ties,
    ]
    return np.concatenate(parts).astype(np.float32)


@pytest.mark.parametrize("type_name", LEGACY_QUANTIZERS + ["MXFP4", "F16", "BF16"])
def test_quantize_is_byte_identical_to_gguf(dequant_tool, tmp_path, type_name):
    values = quantize_inputs(np.random.default_rng(99), block_size=32)
    ours = run_tool(dequant_tool, tmp_path, "quantize", type_name, values.tobytes())
    theirs = quantize(values, T[type_name])
    theirs_bytes = np.ascontiguousarray(theirs).view(np.uint8).reshape(-1)
    ours_bytes = np.frombuffer(ours, np.uint8)
    assert ours_bytes.size == theirs_bytes.size
    # Decoded closeness first, so a mismatch report also says how bad it is.
    ours_decoded = reference_dequantize(ours_bytes, type_name)
    theirs_decoded = reference_dequantize(theirs_bytes, type_name)
    scale = np.abs(values).max()
    assert np.max(np.abs(ours_decoded - theirs_decoded)) <= 1e-2 * scale
    block_bytes = GGML_QUANT_SIZES[T[type_name]][1]
    differing = np.flatnonzero((ours_bytes != theirs_bytes).reshape(-1, block_bytes).any(axis=1))
    assert differing.size == 0, (
        f"quantize {type_name}: {differing.size} of {ours_bytes.size // block_bytes} blocks differ "
        f"from gguf's bytes; first is block {differing[0]}")


def test_quantize_bf16_special_values_match_gguf(dequant_tool, tmp_path):
    # gguf's BF16 quantizer is ggml's: quiet NaNs, ties to even, overflow to Inf, no flush.
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-40, -1e-45,
                         1.00390625, 1.01171875, 65504.0, 1e-30], dtype=np.float32)
    payload_nan = np.array([0x7F800001, 0xFFC00001, 0x7FBFFFFF], dtype=np.uint32).view(np.float32)
    values = np.concatenate([specials, payload_nan])
    ours = np.frombuffer(run_tool(dequant_tool, tmp_path, "quantize", "BF16", values.tobytes()), np.uint16)
    theirs = quantize(values, T.BF16).view(np.uint16).reshape(-1)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("type_name", K_QUANTIZERS)
def test_k_quant_bytes_decode_the_same_in_gguf(dequant_tool, tmp_path, type_name):
    rng = np.random.default_rng(5 + K_QUANTIZERS.index(type_name))
    values = quantize_inputs(rng, block_size=256)
    blocks = np.frombuffer(run_tool(dequant_tool, tmp_path, "quantize", type_name, values.tobytes()),
                           np.uint8)
    ours = tool_values(dequant_tool, tmp_path, "dequantize", type_name, blocks.tobytes())
    theirs = reference_dequantize(blocks.copy(), type_name).astype(np.float32)
    assert_bits_equal(ours, theirs, f"decode of pagoda's {type_name} bytes")
    # Closeness on the Gaussian part (the first 64 blocks), block-normalized MSE.
    gaussian = slice(0, 256 * 64)
    nmse = np.sum((theirs[gaussian] - values[gaussian]) ** 2) / np.sum(values[gaussian] ** 2)
    assert nmse < K_NMSE_BOUND[type_name], f"{type_name} NMSE {nmse:.3g}"
    # All-zero blocks come back as exact zeros (no NaN from a 0/0 scale).
    zeros = slice(256 * 96, 256 * 98)
    assert np.all(theirs[zeros] == 0.0)
