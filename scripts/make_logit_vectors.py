#!/usr/bin/env python3
"""Makes teacher-forced logit vectors with llama.cpp as the oracle (through llama-cpp-python, which
builds llama.cpp from source; not needed by CI). Run once from the checkout, after scripts/setup
and a build (the synthetic files are written by build/pagoda synth):

    pip install llama-cpp-python==0.3.36
    python3 scripts/make_logit_vectors.py [PAGODA_SHARED [NAME...]]  # default ../shared, all

For each model, a few fixed token sequences (the texts below, tokenized by llama.cpp) are run in
one batch with logits at every position; at each position the file keeps the 20 largest logits
and their ids. llama.cpp runs with an F32 KV cache and flash attention off, its closest
configuration to pagoda's default math. Output: tests/data/logits/<model>.json.

Two oracles per quantized model. `top`: llama.cpp on the file itself, which rounds activations
to 8 bits before each quantized matrix product (as pagoda's CPU backend does). `top_exact`:
llama.cpp on an F32 twin of the file (every tensor dequantized; written by `pagoda quantize
--type f32` and checked here, tensor by tensor, against the `gguf` package's dequantizer), so
float math throughout: the oracle for pagoda's reference backend. `peer_max_diff` per sequence:
how far llama.cpp's own logits on the quantized file are from its exact ones (over the exact
top 20), the yardstick for pagoda's CPU backend against exact math.

Models: the three that scripts/setup installs (Gemma 3, Llama / SmolLM2, Qwen2 with biases) and
synthetic files (`pagoda synth`, F32 weights, a small vocabulary) that cover Qwen3's per-head Q/K
norm, Gemma 3's sliding window, Gemma 4's dense layer, Phi-3's fused tensors, Mixtral's and Qwen3-MoE's routed
experts, Qwen3.5's Gated DeltaNet layers (dense and MoE) and gpt-oss (also in MXFP4, with both oracles) without a download. A test writes the same
synthetic file again (synth is seeded and thread-count independent) and reads these vectors.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import gguf
import llama_cpp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP_K = 20
MAX_TOKENS = 160

PROSE = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. He carried a "
         "small lamp, a thermos of tea and a notebook in which he wrote down the ships he saw. "
         "Some nights the sea was calm and silver; other nights the wind howled so loudly that he "
         "could not hear his own footsteps. His granddaughter asked him once why he never left. "
         "He smiled and said that somebody had to keep the light burning.")
CODE = ('def merge_sorted(a, b):\n    """Merge two sorted lists into one sorted list."""\n'
        "    result = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            result.append(a[i])\n            i += 1\n"
        "        else:\n            result.append(b[j])\n            j += 1\n"
        "    result.extend(a[i:])\n    result.extend(b[j:])\n    return result\n")
QUESTION = "Explain in two sentences why the sea is salty."
ANSWER = ("The sea is salty because rivers carry dissolved minerals from rocks into it, and when "
          "the water evaporates the salt stays behind. Over millions of years this salt has built "
          "up to the level we see today, about thirty-five grams of salt in every litre of seawater.")
CHATML = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{ANSWER}<|im_end|>\n"
GEMMA_CHAT = (f"<start_of_turn>user\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n{ANSWER}"
              "<end_of_turn>\n")

# file name in models/ (or a synth recipe) -> texts
MODELS = {
    "gemma-3-270m-q4_k_m": {"file": "gemma-3-270m-q4_k_m.gguf", "texts": [PROSE, CODE, GEMMA_CHAT]},
    "smollm2-135m-instruct-q4_1": {"file": "smollm2-135m-instruct-q4_1.gguf",
                                   "texts": [PROSE, CODE, CHATML]},
    "qwen2.5-coder-0.5b-instruct-q4_k_m": {"file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                                           "texts": [PROSE, CODE, CHATML]},
    "synth-qwen3-tiny-f32": {"synth": {"like": "qwen3-tiny", "type": "f32", "seed": 1,
                                       "vocab": "models/stories260K.gguf"}, "texts": [PROSE, CODE]},
    "synth-gemma3-tiny-f32": {"synth": {"like": "gemma3-tiny", "type": "f32", "seed": 1,
                                        "vocab": "models/stories260K.gguf"}, "texts": [PROSE, CODE]},
    "synth-mixtral-tiny-f32": {"synth": {"like": "mixtral-tiny", "type": "f32", "seed": 1,
                                         "vocab": "models/stories260K.gguf"}, "texts": [PROSE, CODE]},
    "synth-qwen3-moe-tiny-f32": {"synth": {"like": "qwen3-moe-tiny", "type": "f32", "seed": 1,
                                           "vocab": "models/stories260K.gguf"},
                                 "texts": [PROSE, CODE]},
    # gpt-oss: sinks, sliding and full layers, biases, the clamped SwiGLU, YaRN past its original
    # context; in F32, and in its published type (MXFP4 experts, Q8_0 elsewhere) with both oracles.
    "synth-gpt-oss-tiny-f32": {"synth": {"like": "gpt-oss-tiny", "type": "f32", "seed": 1,
                                         "vocab": "models/stories260K.gguf"}, "texts": [PROSE, CODE]},
    "synth-gpt-oss-tiny-mxfp4_moe": {"synth": {"like": "gpt-oss-tiny", "type": "mxfp4_moe",
                                               "seed": 1, "vocab": "models/stories260K.gguf"},
                                     "texts": [PROSE, CODE]},
    # Phi-3's own vocabulary: llama.cpp sets attributes on its special tokens by the model name.
    "synth-phi-3-tiny-f32": {"synth": {"like": "phi-3-tiny", "type": "f32", "seed": 1,
                                       "vocab": "testdata/vocab/ggml-vocab-phi-3.gguf"},
                             "texts": [PROSE, CODE]},
    # Phi-3 128K's LongRoPE: the sequences run past the original context of 64 and llama.cpp's
    # context (512) exceeds it, so both engines rotate with the long factors.
    "synth-phi-3-tiny-longrope-f32": {"synth": {"like": "phi-3-tiny-longrope", "type": "f32",
                                                "seed": 1,
                                                "vocab": "testdata/vocab/ggml-vocab-phi-3.gguf"},
                                      "texts": [PROSE, CODE]},
    # Gemma 4's dense layer: sliding and global layers of different head sizes and KV heads,
    # K/V shared by the last three layers, per-layer input embeddings, V = K on global layers,
    # partial RoPE on global layers, final logit soft-capping.
    "synth-gemma4-tiny-f32": {"synth": {"like": "gemma4-tiny", "type": "f32", "seed": 1,
                                        "vocab": "models/stories260K.gguf"},
                              "texts": [PROSE, CODE]},
    # Gemma 4 26B-A4B's feed-forward: a dense block beside 8 routed experts (2 used) whose router
    # reads its own norm of the input and whose outputs are scaled per expert. Seed 14: of the
    # first 16 seeds, the one whose closest routing choice over both texts is widest (the 2nd
    # and 3rd experts' logits 8e-4 apart, std 1; seed 1's are 4.5e-5 apart, close enough for
    # llama.cpp's F16 GELU to swap them, and the swap reaches every later position through K/V).
    "synth-gemma4-moe-tiny-f32": {"synth": {"like": "gemma4-moe-tiny", "type": "f32", "seed": 14,
                                            "vocab": "models/stories260K.gguf"},
                                  "texts": [PROSE, CODE]},
    # Qwen3.5's hybrid layers: Gated DeltaNet (conv1d and delta-rule state), full attention with
    # an output gate, Gated DeltaNet last; two key heads shared by four value heads.
    "synth-qwen3.5-tiny-f32": {"synth": {"like": "qwen3.5-tiny", "type": "f32", "seed": 1,
                                         "vocab": "models/stories260K.gguf"},
                               "texts": [PROSE, CODE], "greedy": 32},
    # Qwen3.5-MoE: the same hybrid layers with 8 routed experts (2 used, softmax, weights
    # renormalised) and a shared expert behind a sigmoid gate. Seed 4: of the first 16 seeds,
    # the one whose closest routing choice over both texts is widest (the 2nd and 3rd experts'
    # router logits 4.3e-4 apart, logits of std 0.3; seeds 3, 6 and 9 come within 6e-5), 400
    # times the engines' F32 distance, so that no routing choice flips between them.
    "synth-qwen3.5-moe-tiny-f32": {"synth": {"like": "qwen3.5-moe-tiny", "type": "f32", "seed": 4,
                                             "vocab": "models/stories260K.gguf"},
                                   "texts": [PROSE, CODE], "greedy": 32},
}


def synth(recipe, shared, out):
    subprocess.run([str(ROOT / "build" / "pagoda"), "synth", "--like", recipe["like"], "--type",
                    recipe["type"], "--seed", str(recipe["seed"]), "--vocab",
                    str(shared / recipe["vocab"]), "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL)


def all_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float32)


def greedy_ids(llm, ids, count):
    """llama.cpp's greedy continuation of `ids`, one token at a time."""
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(count):
        out.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([out[-1]])
    return out


def top_of(logits):
    rows = []
    for row in logits:
        best = np.argsort(-row, kind="stable")[:TOP_K]
        rows.append([[int(i), float(f"{row[i]:.7g}")] for i in best])
    return rows


def f32_twin(path, out):
    """The file with every tensor in F32, each equal to the gguf package's dequantization."""
    subprocess.run([str(ROOT / "build" / "pagoda"), "quantize", "-i", str(path), "-o", str(out),
                    "--type", "f32"], check=True, stdout=subprocess.DEVNULL)
    twin = {t.name: t for t in gguf.GGUFReader(out).tensors}
    for t in gguf.GGUFReader(path).tensors:
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        if not np.array_equal(want, np.asarray(twin[t.name].data).reshape(-1)):
            sys.exit(f"make_logit_vectors: {t.name} of the F32 twin is not the gguf dequantization")


def load(path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=512, n_batch=512, n_ubatch=512,
                           n_threads=2, logits_all=True, flash_attn=False,
                           type_k=0, type_v=0, verbose=False)  # 0: GGML_TYPE_F32


def main():
    shared = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared").resolve()
    out_dir = ROOT / "tests" / "data" / "logits"
    out_dir.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[2:])
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in MODELS.items():
            if only and name not in only:
                continue
            if "synth" in spec:
                path = pathlib.Path(tmp) / f"{name}.gguf"
                synth(spec["synth"], shared, path)
            else:
                path = ROOT / "models" / spec["file"]
                if not path.exists():
                    sys.exit(f"make_logit_vectors: {path} is absent: run scripts/setup")
            llm = load(path)
            sequences = []
            for text in spec["texts"]:
                ids = llm.tokenize(text.encode(), add_bos=True, special=True)[:MAX_TOKENS]
                sequences.append({"text": text, "ids": ids, "top": top_of(all_logits(llm, ids))})
                if "greedy" in spec:  # a prompt half as long, then its greedy continuation
                    prompt = ids[:len(ids) // 2]
                    sequences[-1]["greedy"] = {"prompt": prompt,
                                               "ids": greedy_ids(llm, prompt, spec["greedy"])}
                print(f"{name}: {len(ids)} positions", file=sys.stderr)
            del llm
            if spec.get("synth", {}).get("type", "") != "f32":  # quantized: the exact oracle too
                twin = pathlib.Path(tmp) / "twin.gguf"
                f32_twin(path, twin)
                llm_q, llm_x = load(path), load(twin)
                for seq in sequences:
                    quantized, exact = all_logits(llm_q, seq["ids"]), all_logits(llm_x, seq["ids"])
                    seq["top_exact"] = top_of(exact)
                    worst = max(float(np.abs(quantized[p, [i for i, _ in top]] -
                                             exact[p, [i for i, _ in top]]).max())
                                for p, top in enumerate(seq["top_exact"]))
                    seq["peer_max_diff"] = float(f"{worst:.5g}")
                del llm_q, llm_x
                twin.unlink()
            doc = {"oracle": f"llama-cpp-python {llama_cpp.__version__}, F32 KV cache, "
                             "flash attention off, whole sequence in one batch",
                   "command": "python3 scripts/make_logit_vectors.py",
                   "top_k": TOP_K, "sequences": sequences}
            doc.update({"synth": spec["synth"]} if "synth" in spec else {"file": spec["file"]})
            with open(out_dir / f"{name}.json", "w") as f:
                json.dump(doc, f, separators=(",", ":"))
                f.write("\n")


if __name__ == "__main__":
    main()
