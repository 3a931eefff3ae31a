#!/usr/bin/env python3
"""Writes tests/data/embeddings/minilm_llamacpp.json: llama.cpp's embeddings of all-MiniLM-L6-v2
(models/all-minilm-l6-v2, from scripts/setup) converted to GGUF by `pagoda convert` (f16), the
oracle tests/python/test_embeddings.py compares pagoda's embeddings of the same file with. CI has
no llama.cpp, so the vectors are committed; rerun this where llama-cpp-python is installed:

    python3 scripts/llamacpp_embeddings.py [--pagoda build/pagoda]

llama.cpp reads the file's pooling_type (mean); its vectors are L2-normalised here, as
sentence-transformers' Normalize module (and llama-server by default) does."""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from test_embeddings import MINILM, TEXTS, LLAMACPP_VECTORS  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    args = ap.parse_args()
    import llama_cpp
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        gguf = pathlib.Path(tmp) / "minilm-f16.gguf"
        subprocess.run([args.pagoda, "convert", str(MINILM), "-o", str(gguf), "-q"], check=True)
        llm = llama_cpp.Llama(model_path=str(gguf), embedding=True, n_ctx=512, verbose=False)
        vectors, counts = [], []
        for text in TEXTS:
            v = np.asarray(llm.embed(text), dtype=np.float64)
            vectors.append([float(x) for x in v / np.linalg.norm(v)])
            counts.append(len(llm.tokenize(text.encode(), add_bos=True)))
    out = {"source": "llama-cpp-python " + llama_cpp.__version__ + ", Llama(embedding=True).embed, "
                     "L2-normalised; model: pagoda convert models/all-minilm-l6-v2 (f16)",
           "texts": TEXTS, "tokens": counts, "embeddings": vectors}
    LLAMACPP_VECTORS.parent.mkdir(parents=True, exist_ok=True)
    LLAMACPP_VECTORS.write_text(json.dumps(out) + "\n")
    print(f"wrote {LLAMACPP_VECTORS.relative_to(ROOT)}: {len(TEXTS)} texts, "
          f"{len(vectors[0])} dimensions")


if __name__ == "__main__":
    main()
