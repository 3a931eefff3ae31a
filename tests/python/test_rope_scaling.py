"""RoPE scaling: YaRN computed as transformers defines it (_compute_yarn_parameters), checked at
positions past the original context on a Qwen2-shaped folder and the GGUF file convert writes of
it; any scaling type pagoda does not compute is refused in one line, never run as plain RoPE.

The oracle is numpy (float64) written from transformers' definition, not from pagoda's code:
llama.cpp's ggml rope with ext_factor 1 computes the same frequencies (its ramp over the
correction dimensions mixes interpolated and extrapolated angles the way transformers mixes
inverse frequencies) and the same attention factor (cos and sin times 0.1 * ln(factor) + 1)."""
import json
import math

import numpy as np
import pytest

from test_vocab_any_shape import write_model
from test_convert_families import (FAMILIES, make_folder, one_line_error, pagoda, prompt_logits,
                                   reference_logits)


def yarn_parameters(base, dim, scaling, max_position_embeddings):
    """transformers' _compute_yarn_parameters: (inverse frequencies [dim / 2], attention factor)."""
    factor = scaling["factor"]
    original = scaling.get("original_max_position_embeddings") or max_position_embeddings
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = get_mscale(factor)

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    pos_freqs = base ** (np.arange(0, dim, 2) / dim)
    inv_extrapolation = 1.0 / pos_freqs
    inv_interpolation = 1.0 / (factor * pos_freqs)
    inv = (inv_interpolation * (1 - extrapolation_factor)
           + inv_extrapolation * extrapolation_factor)
    return inv, attention_factor, (low, high)


def yarn_rope(scaling, max_position_embeddings):
    def rope(x, base):
        half = x.shape[-1] // 2
        inv, attn, _ = yarn_parameters(base, x.shape[-1], scaling, max_position_embeddings)
        ang = np.arange(x.shape[0])[:, None] * inv[None, :]
        cos, sin = (np.cos(ang) * attn)[:, None, :], (np.sin(ang) * attn)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    return rope


# theta 100 and an original context of 16 put the correction range inside the 8 pairs of a
# 16-wide head, so every part of the ramp is exercised by the 40 positions.
SCALINGS = {
    "defaults": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "betas": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
              "beta_fast": 4.0, "beta_slow": 0.5},
    "attention_factor": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                         "attention_factor": 1.3},
}
# Measured the same way as test_convert_families's bound (float32 sums in another order).
BOUND = 3e-5


def yarn_folder(path, shared_dir, scaling):
    f, w, ntok = make_folder(path, "qwen2", shared_dir)
    f = dict(f, theta=100.0)
    config = json.loads((path / "config.json").read_text())
    config.update(rope_theta=100.0, rope_scaling=scaling)
    (path / "config.json").write_text(json.dumps(config))
    return f, w, ntok, config


def expect_scaled_logits(pagoda_bin, folder, gguf_path, f, w, ids, backend, rope, label):
    """The folder, and the GGUF file `convert` makes of it, give the numpy pass's logits with
    `rope` at every position of `ids` on `backend`."""
    r = pagoda(pagoda_bin, "convert", folder, "-o", gguf_path, "--type", "f32")
    assert r.returncode == 0, r.stderr
    vocab = w["model.embed_tokens.weight"].shape[0]
    want = reference_logits(f, w, ids, rope)
    plain = reference_logits(f, w, ids)
    # The scaling must matter at these positions, or the test could not fail.
    assert np.abs(want - plain).max() > 100 * BOUND
    for model in (folder, gguf_path):
        got = prompt_logits(model, ids, backend, vocab)
        diff = np.abs(got - want).max()
        print(f"{label} {backend} {model.name}: largest difference {diff:.3g}")
        assert diff < BOUND, (label, backend, str(model), diff)


def test_yarn_correction_range_is_inside_the_head():
    for scaling in SCALINGS.values():
        _, _, (low, high) = yarn_parameters(100.0, 16, scaling, 256)
        assert 0 <= low < high < 8, (scaling, low, high)


@pytest.mark.parametrize("name", sorted(SCALINGS))
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_yarn_matches_transformers_past_the_original_context(pagoda_bin, shared_dir, tmp_path,
                                                            name, backend):
    scaling = SCALINGS[name]
    folder = tmp_path / "yarn"
    f, w, ntok, config = yarn_folder(folder, shared_dir, scaling)
    ids = np.random.default_rng(11).integers(0, ntok, 40).tolist()
    expect_scaled_logits(pagoda_bin, folder, tmp_path / "yarn.gguf", f, w, ids, backend,
                         yarn_rope(scaling, config["max_position_embeddings"]), f"yarn {name}")


def longrope_rope(factors, attention_factor):
    """transformers' _compute_longrope_parameters' rotation: inv_freq = 1 / (factor_i *
    base^(2i / dim)), cos and sin times the attention factor."""
    def rope(x, base):
        half = x.shape[-1] // 2
        inv = 1.0 / (np.array(factors) * base ** (np.arange(0, x.shape[-1], 2) / x.shape[-1]))
        ang = np.arange(x.shape[0])[:, None] * inv[None, :]
        cos = (np.cos(ang) * attention_factor)[:, None, :]
        sin = (np.sin(ang) * attention_factor)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    return rope


LONG = [1.0, 1.3, 1.9, 2.8, 4.1, 6.0, 9.5, 14.0]
SHORT = [1.0, 1.05, 1.1, 1.2, 1.4, 1.6, 1.9, 2.3]


# Phi-3 128K's config: max_position_embeddings (256 here) over a top-level
# original_max_position_embeddings (16) sets the attention factor, sqrt(1 + ln 16 / ln 16); 40
# tokens run past the original context (the long factors, where the KV cache holds more than 16
# positions, as llama.cpp chooses by its context), 12 within it (the short ones).
@pytest.mark.parametrize("tokens,factors", [(40, LONG), (12, SHORT)])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_longrope_matches_transformers(pagoda_bin, shared_dir, tmp_path, tokens, factors,
                                       backend):
    folder = tmp_path / "longrope"
    f, w, ntok, config = yarn_folder(folder, shared_dir, {"rope_type": "longrope",
                                                          "long_factor": LONG,
                                                          "short_factor": SHORT})
    config["original_max_position_embeddings"] = 16
    (folder / "config.json").write_text(json.dumps(config))
    ids = np.random.default_rng(12).integers(0, ntok, tokens).tolist()
    expect_scaled_logits(pagoda_bin, folder, tmp_path / "longrope.gguf", f, w, ids, backend,
                         longrope_rope(factors, math.sqrt(2.0)), f"longrope {tokens}")


def test_longrope_without_its_factors_or_on_another_family_is_refused(pagoda_bin, shared_dir,
                                                                      tmp_path):
    folder = tmp_path / "scaled"
    yarn_folder(folder, shared_dir, {"rope_type": "longrope", "factor": 4.0})
    line = one_line_error(pagoda(pagoda_bin, "run", "-m", folder, "-p", "x", "-n", "1"))
    assert "LongRoPE needs 'rope_scaling.long_factor'" in line, line
    folder = tmp_path / "short_lists"
    yarn_folder(folder, shared_dir, {"rope_type": "longrope", "long_factor": LONG[:7],
                                     "short_factor": SHORT[:7]})
    line = one_line_error(pagoda(pagoda_bin, "run", "-m", folder, "-p", "x", "-n", "1"))
    assert "LongRoPE has 7 long and 7 short factors for 8 rotary pairs" in line, line
    f, _, _ = make_folder(tmp_path / "gemma", "gemma3", shared_dir)
    config = json.loads((tmp_path / "gemma" / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "longrope", "long_factor": LONG, "short_factor": SHORT}
    (tmp_path / "gemma" / "config.json").write_text(json.dumps(config))
    line = one_line_error(pagoda(pagoda_bin, "run", "-m", tmp_path / "gemma", "-p", "x", "-n", "1"))
    assert "RoPE scaling 'longrope' is not supported for gemma3" in line, line


@pytest.mark.parametrize("scaling", [{"type": "dynamic", "factor": 2.0}])
def test_scaling_pagoda_does_not_compute_is_refused(pagoda_bin, shared_dir, tmp_path, scaling):
    folder = tmp_path / "scaled"
    yarn_folder(folder, shared_dir, scaling)
    kind = scaling.get("rope_type") or scaling["type"]
    line = one_line_error(pagoda(pagoda_bin, "run", "-m", folder, "-p", "x", "-n", "1"))
    assert f"RoPE scaling '{kind}' is not supported" in line
    line = one_line_error(pagoda(pagoda_bin, "convert", folder, "-o", tmp_path / "o.gguf"))
    assert f"'{kind}'" in line


@pytest.mark.parametrize("kind", ["longrope", "dynamic"])
def test_gguf_scaling_pagoda_does_not_compute_is_refused(pagoda_bin, shared_dir, tmp_path, kind):
    path = tmp_path / "scaled.gguf"
    vocab = shared_dir / "testdata" / "vocab" / "ggml-vocab-gpt-2.gguf"
    write_model(path, vocab, "llama", 2, strings={"llama.rope.scaling.type": kind})
    line = one_line_error(pagoda(pagoda_bin, "run", "-m", path, "-p", "x", "-n", "1"))
    assert f"RoPE scaling '{kind}' is not supported" in line
