"""Embeddings under concurrency through `pagoda serve` and the official openai client: an
encoder's concurrent requests share forward passes, each answer still its own texts' vectors;
a generative model's embedding requests (serve --pooling) run through the scheduler beside
generation, their vectors those of `pagoda embed` (one input per pass, a cache of its own) and
the greedy completions beside them those of the same completions alone."""
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from bert_reference import cosine
from server_util import ROOT, SMOLLM, Server, need, post_json

MINILM = ROOT / "models" / "all-minilm-l6-v2"

TEXTS = [
    "The cat sat on the mat.",
    "A cat was sitting on a rug.",
    "Stock prices fell sharply today after the announcement.",
    "東京は日本の首都です。",
    "pagoda serves embeddings; 3.14159 is pi.",
    "Once upon a time there was a little girl named Lily who loved to play outside in the "
    "sunshine, and one day she saw a big red ball in the park and ran to get it.",
]
PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):",
           "List three colours:"]


def embed_cli(pagoda_bin, model, texts, *args):
    r = subprocess.run([pagoda_bin, "embed", "-m", model, "-q", *args, *texts],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [json.loads(line)["embedding"] for line in r.stdout.splitlines()]


def client_of(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_an_encoders_concurrent_requests_get_their_own_vectors(pagoda_bin):
    want = embed_cli(pagoda_bin, need(MINILM), TEXTS)
    s = Server(pagoda_bin, MINILM, "-t", "2")
    try:
        client = client_of(s)

        def one(i):
            # Requests of one text and of several, so a shared pass mixes both.
            texts = TEXTS[i % len(TEXTS):] if i % 3 == 0 else [TEXTS[i % len(TEXTS)]]
            r = client.embeddings.create(model="all-minilm-l6-v2", input=texts,
                                         encoding_format="float")
            return texts, r

        with ThreadPoolExecutor(12) as pool:
            results = list(pool.map(one, range(36)))
        for texts, r in results:
            assert len(r.data) == len(texts)
            for d, text in zip(r.data, texts):
                assert cosine(d.embedding, want[TEXTS.index(text)]) > 0.999999, text
    finally:
        s.stop()


def complete(client, prompt):
    r = client.completions.create(model=SMOLLM.stem, prompt=prompt, max_tokens=24, temperature=0,
                                  extra_body={"ignore_eos": True})
    return r.choices[0].text


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_a_generative_models_embeddings_share_steps_with_generation(pagoda_bin, pooling):
    want = embed_cli(pagoda_bin, need(SMOLLM), TEXTS, "--pooling", pooling)
    # A small token budget: the longer texts are embedded in chunks beside the decodes.
    s = Server(pagoda_bin, SMOLLM, "-t", "2", "--kv-tokens", "4096", "--pooling", pooling,
               "--max-batched-tokens", "16")
    try:
        client = client_of(s)
        # The inputs are the engine's work: run through its steps, chunked by its budget.
        tokens, steps = s.metric("pagoda_computed_tokens_total"), s.metric("pagoda_engine_steps_total")
        r = client.embeddings.create(model=SMOLLM.stem, input=TEXTS)
        assert s.metric("pagoda_computed_tokens_total") - tokens == r.usage.prompt_tokens
        assert s.metric("pagoda_engine_steps_total") - steps >= r.usage.prompt_tokens / 16
        alone = [complete(client, p) for p in PROMPTS]

        def embed(i):
            text = TEXTS[i % len(TEXTS)]
            r = client.embeddings.create(model=SMOLLM.stem, input=[text, TEXTS[(i + 1) % len(TEXTS)]],
                                         encoding_format="float")
            return i, r

        with ThreadPoolExecutor(10) as pool:
            completions = [pool.submit(complete, client, p) for p in PROMPTS * 2]
            embeddings = [pool.submit(embed, i) for i in range(12)]
            got = [f.result() for f in completions]
            for f in embeddings:
                i, r = f.result()
                for k, d in enumerate(r.data):
                    assert cosine(d.embedding, want[(i + k) % len(TEXTS)]) > 0.99999, (i, k)
        assert got == alone * 2  # greedy completions unchanged by the embeddings beside them
    finally:
        s.stop()


def test_a_generative_models_inputs_are_bounded_by_its_kv_cache(pagoda_bin):
    """The inputs run in the engine's K/V cache: a longer one is a 400 naming the bound (or cut
    to it where the route truncates), not a server error."""
    s = Server(pagoda_bin, need(SMOLLM), "-t", "1", "--kv-tokens", "256", "--pooling", "last")
    try:
        status, r = post_json(s, "/v1/embeddings", {"input": "word " * 400})
        assert status == 400 and "256" in r["error"]["message"], r
        status, r = post_json(s, "/v1/embeddings", {"input": [[1] * 256]})
        assert status == 200 and r["usage"]["prompt_tokens"] == 256
        status, r = post_json(s, "/api/embed", {"model": SMOLLM.stem, "input": "word " * 400})
        assert status == 200 and r["prompt_eval_count"] == 256, r
    finally:
        s.stop()
