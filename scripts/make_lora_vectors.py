#!/usr/bin/env python3
"""Makes teacher-forced logit vectors of a LoRA adapter with llama.cpp as the oracle (through
llama-cpp-python's `lora_path` / `lora_scale`; not needed by CI). Run once from the checkout:

    pip install llama-cpp-python==0.3.36
    python3 scripts/make_lora_vectors.py [PAGODA_SHARED]   # default ../shared

The base is ../shared/models/stories260K.gguf (F32); the adapter is written from a formula by
tests/python/lora_formula.py (every attention and feed-forward matrix of every layer and the
output matrix, rank 4), once with alpha 8 at scale 1 and once with alpha 0 at scale 0.5, so both
of llama.cpp's scale rules are covered. One sequence runs in one batch with logits at every
position, an F32 KV cache and flash attention off; each position keeps the 20 largest logits of
the adapted model and of the base. Output: tests/data/logits/lora-stories260K.json, read by
tests/python/test_lora_peer.py.
"""
import json
import pathlib
import sys
import tempfile

import llama_cpp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import lora_formula  # noqa: E402

TOP_K = 20
TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park with her friends. One day, she saw a big red ball under a tree.")
CASES = [{"alpha": 8.0, "scale": 1.0}, {"alpha": 0.0, "scale": 0.5}]


def logits(base, ids, **lora):
    llm = llama_cpp.Llama(model_path=str(base), n_ctx=256, n_batch=256, n_ubatch=256,
                          n_threads=2, logits_all=True, flash_attn=False, type_k=0, type_v=0,
                          verbose=False, **lora)  # type 0: GGML_TYPE_F32
    llm.reset()
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    return out


def top_of(rows):
    return [[[int(i), float(f"{row[i]:.7g}")] for i in np.argsort(-row, kind="stable")[:TOP_K]]
            for row in rows]


def main():
    shared = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared").resolve()
    base = shared / "models" / "stories260K.gguf"
    probe = llama_cpp.Llama(model_path=str(base), n_ctx=256, verbose=False)
    ids = probe.tokenize(TEXT.encode(), add_bos=True)
    del probe
    plain = logits(base, ids)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            adapter = pathlib.Path(tmp) / "adapter.gguf"
            lora_formula.write(adapter, base, case["alpha"])
            adapted = logits(base, ids, lora_path=str(adapter), lora_scale=case["scale"])
            effect = float(np.abs(adapted - plain).max())
            print(f"alpha {case['alpha']} scale {case['scale']}: the adapter moves the logits by "
                  f"up to {effect:.3g}", file=sys.stderr)
            cases.append({**case, "top": top_of(adapted), "effect": float(f"{effect:.5g}")})
    doc = {"oracle": f"llama-cpp-python {llama_cpp.__version__}, F32 KV cache, flash attention "
                     "off, whole sequence in one batch",
           "command": "python3 scripts/make_lora_vectors.py", "base": "models/stories260K.gguf",
           "adapter": "tests/python/lora_formula.py", "ids": ids, "top_k": TOP_K,
           "base_top": top_of(plain), "cases": cases}
    with open(ROOT / "tests" / "data" / "logits" / "lora-stories260K.json", "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
