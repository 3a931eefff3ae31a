#!/usr/bin/env python3
"""Makes greedy test vectors for the models scripts/setup installs, with llama.cpp as the oracle
(through llama-cpp-python, which builds llama.cpp from source; not needed by CI). Run once, with
the opt-in models installed too (scripts/setup --models qwen):

    pip install llama-cpp-python==0.3.36
    python3 scripts/make_peer_vectors.py > tests/data/peer_greedy.json

For each model and prompt: the prompt ids (BOS as the model says, control tokens parsed) and the
first 32 greedy ids (argmax, no penalties) from llama.cpp, single sequence, whole prompt in one
batch (llama.cpp's defaults: F16 KV cache), with the top-1 minus top-2 logit gap at each step.
"""
import json
import pathlib
import sys

import llama_cpp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = {
    "gemma-3-270m-q4_k_m.gguf": [
        "The capital of France is",
        "Once upon a time, in a small village,",
        "def fibonacci(n):",
        "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    ],
    "smollm2-135m-instruct-q4_1.gguf": [
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "The quick brown fox",
        "Write a haiku about the sea.",
    ],
    # The Qwen2 family (attention biases), installed by scripts/setup --models qwen.
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": [
        "<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n"
        "<|im_start|>assistant\n",
        "def quicksort(arr):",
        "The capital of France is",
    ],
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf": [
        "<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n"
        "<|im_start|>assistant\n",
        "def quicksort(arr):",
        "The capital of France is",
    ],
}
NUM_TOKENS = 32


def greedy(llm, ids, n):
    """Argmax decoding; also the gap between the best and second-best logit at each step, so a
    test can tell a real difference from a near-tie that float rounding may flip."""
    llm.reset()
    llm.eval(ids)
    out, margins = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.argsort(logits)[-2:]
        token = int(top2[1])
        out.append(token)
        margins.append(round(float(logits[top2[1]] - logits[top2[0]]), 5))
        llm.eval([token])
    return out, margins


def main():
    result = {"oracle": f"llama-cpp-python {llama_cpp.__version__}", "num_tokens": NUM_TOKENS,
              "command": "python3 scripts/make_peer_vectors.py > tests/data/peer_greedy.json",
              "models": {}}
    for name, prompts in MODELS.items():
        path = ROOT / "models" / name
        if not path.exists():
            sys.exit(f"make_peer_vectors: {path} is absent: run scripts/setup --models qwen")
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=2, logits_all=True,
                              verbose=False)
        cases = []
        for prompt in prompts:
            ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
            out, margins = greedy(llm, ids, NUM_TOKENS)
            cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": out,
                          "top2_margins": margins})
        result["models"][name] = cases
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
