#!/usr/bin/env python3
"""Makes the importance-matrix vectors pagoda's imatrix is tested against, with llama.cpp's
llama-imatrix as the oracle (built from llama-cpp-python's source package; not needed by CI):

    python3 scripts/make_imatrix_vectors.py --llama-imatrix PATH [PAGODA_SHARED]

llama-imatrix runs stories260K (../shared/models) over the head of
../shared/testdata/text/tinystories_valid_head.txt in 4 chunks of 128 tokens; its GGUF output
(with an F32 KV cache and flash attention off: pagoda's exact configuration) is read with the `gguf` package and every entry (the per-column sums of squared activations and
the token counts) written to tests/data/imatrix/stories260K.json.
"""
import argparse
import json
import pathlib
import subprocess
import tempfile

import gguf

ROOT = pathlib.Path(__file__).resolve().parents[1]
CTX, CHUNKS = 128, 4


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-imatrix", required=True, help="the llama-imatrix binary")
    p.add_argument("shared", nargs="?", default=str(ROOT.parent / "shared"))
    args = p.parse_args()
    shared = pathlib.Path(args.shared)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "imatrix.gguf"
        subprocess.run([args.llama_imatrix, "-m", shared / "models/stories260K.gguf", "-f",
                        shared / "testdata/text/tinystories_valid_head.txt", "-c", str(CTX),
                        "--chunks", str(CHUNKS), "--no-ppl", "-t", "2", "-ctk", "f32", "-ctv", "f32", "-fa", "off",
                        "-o", out],
                       check=True, capture_output=True)
        reader = gguf.GGUFReader(out)
        entries = {}
        for t in reader.tensors:
            name, kind = t.name.rsplit(".", 1)
            values = [float(f"{v:.7g}") for v in t.data.reshape(-1)]
            entries.setdefault(name, {})["counts" if kind == "counts" else "in_sum2"] = values
        field = reader.fields["imatrix.chunk_count"]
        chunk_count = int(field.parts[field.data[0]][0])
    doc = {"source": "llama-imatrix (llama.cpp from llama-cpp-python 0.3.36)",
           "model": "stories260K.gguf", "text": "testdata/text/tinystories_valid_head.txt",
           "ctx": CTX, "chunks": CHUNKS, "chunk_count": chunk_count, "entries": entries}
    dest = ROOT / "tests/data/imatrix/stories260K.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{dest}: {len(entries)} entries")


if __name__ == "__main__":
    main()
