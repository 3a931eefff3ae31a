"""Prompt log-probabilities on /v1/completions (echo + logprobs), in the shape
lm-evaluation-harness's `local-completions` model reads: choices[0].logprobs.tokens,
token_logprobs (the first prompt token's null), top_logprobs, text_offset, and the prompt's text
before the choice's. A multiple-choice task's log-likelihoods (the sum of each continuation's
token log-probabilities given the context, as the harness computes them) through the `openai`
client: the same whether the choices come one request at a time or all in one batch, and the
mean negative log-likelihood of a text equal to `pagoda bench quality`'s on the same window;
streamed, the echo and its scores come in the first chunk."""
import json
import math
import subprocess

import openai
import pytest

from server_util import SMOLLM, Server, need

CONTEXT = "Question: What color is the sky on a clear day?\nAnswer:"
CHOICES = [" blue", " green", " a loud noise", " purple with yellow stripes"]


@pytest.fixture(scope="module")
def server(pagoda_bin):
    # F32 K/V, as bench quality's default, so the two compare to float rounding.
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "8192", "--max-model-len",
               1024, "--model-name", "smol", "--kv-type", "f32")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def tokenize(server, text):
    import urllib.request
    req = urllib.request.Request(server.url + "/tokenize", data=json.dumps({"prompt": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["tokens"]


def loglikelihoods(client, requests, max_tokens):
    """Each (context tokens, continuation tokens): the sum of the continuation's log-probabilities,
    as the harness reads them (with max_tokens 1 it drops the generated token's)."""
    r = client.completions.create(model="smol", prompt=[c + x for c, x in requests], echo=True,
                                  logprobs=1, max_tokens=max_tokens, temperature=0)
    out = []
    for choice, (ctx, cont) in zip(r.choices, requests):
        lp = choice.logprobs
        assert len(lp.tokens) == len(ctx) + len(cont) + max_tokens
        values = lp.token_logprobs[len(ctx):len(ctx) + len(cont)]
        assert all(v is not None and v <= 0 for v in values)
        out.append(sum(values))
    return out


def test_the_shape_the_harness_reads(client, server):
    r = client.completions.create(model="smol", prompt=CONTEXT, echo=True, logprobs=2,
                                  max_tokens=0)
    c = r.choices[0]
    assert c.text == CONTEXT and c.finish_reason == "length"
    lp = c.logprobs
    ids = tokenize(server, CONTEXT)
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ids)
    assert "".join(lp.tokens) == CONTEXT
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.text_offset == [len("".join(lp.tokens[:k])) for k in range(len(ids))]
    for value, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert len(top) == 2 and max(top.values()) >= value - 1e-6
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 0
    # With a generated token: the prompt's entries, then the token's.
    r = client.completions.create(model="smol", prompt=CONTEXT, echo=True, logprobs=1,
                                  max_tokens=1, temperature=0)
    lp1 = r.choices[0].logprobs
    assert lp1.token_logprobs[0] is None
    assert lp1.token_logprobs[1:-1] == pytest.approx(lp.token_logprobs[1:], abs=1e-4)
    assert lp1.token_logprobs[-1] is not None
    assert len(lp1.tokens) == len(ids) + 1 and r.choices[0].text.startswith(CONTEXT)
    assert lp1.text_offset[-1] == len(CONTEXT)


def test_a_multiple_choice_task(client, server):
    ctx = tokenize(server, CONTEXT)
    requests = [(ctx, tokenize(server, CONTEXT + x)[len(ctx):]) for x in CHOICES]
    for _, cont in requests:
        assert cont  # each continuation has tokens of its own after the context's
    batched = loglikelihoods(client, requests, 0)
    alone = [loglikelihoods(client, [r], 1)[0] for r in requests]
    assert batched == pytest.approx(alone, abs=1e-3)
    assert all(math.isfinite(v) for v in batched)
    # Not a constant: the choices score differently, the plain answer ahead of the long one.
    assert batched[0] > batched[3]


def test_mean_nll_equals_bench_quality(client, server, pagoda_bin, tmp_path):
    text = ("Once upon a time there was a small cat. The cat liked to sit in the sun and watch "
            "the birds. One day a bird sat next to the cat, and they became friends.")
    r = client.completions.create(model="smol", prompt=text, echo=True, logprobs=0, max_tokens=0)
    values = r.choices[0].logprobs.token_logprobs
    n = len(values)
    f = tmp_path / "text.txt"
    f.write_text(text)
    out = subprocess.run([str(pagoda_bin), "bench", "quality", "-m", str(need(SMOLLM)), "-f",
                          str(f), "--ctx", str(n), "--max-windows", "1", "-t", "2", "--json", "-"],
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    j = json.loads(out.stdout)
    assert j["scored_tokens"] == n - 1

    assert -sum(values[1:]) / (n - 1) == pytest.approx(j["mean_nll"], abs=1e-3)


def test_streamed_equals_whole(client):
    for max_tokens in (0, 3):
        kw = dict(model="smol", prompt=CONTEXT, echo=True, logprobs=1, max_tokens=max_tokens,
                  temperature=0)
        whole = client.completions.create(**kw).choices[0]
        text, tokens, values, offsets = "", [], [], []
        for chunk in client.completions.create(stream=True, **kw):
            c = chunk.choices[0]
            text += c.text
            if c.logprobs:
                tokens += c.logprobs.tokens
                values += c.logprobs.token_logprobs
                offsets += c.logprobs.text_offset
        assert text == whole.text and text.startswith(CONTEXT)
        assert tokens == whole.logprobs.tokens and offsets == whole.logprobs.text_offset
        assert values[0] is None
        assert values[1:] == pytest.approx(whole.logprobs.token_logprobs[1:], abs=1e-5)
