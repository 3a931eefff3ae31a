"""Speculative decoding through the real server and CLI: what a client receives with proposals
is exactly what it receives without them (greedy text, streaming and not, stop strings, max_tokens,
usage, logprobs), alone and among 16 concurrent requests; the per-request switch works; the
metrics count proposals; a draft with another vocabulary is refused."""
import concurrent.futures
import json
import subprocess

import openai
import pytest

from server_util import GEMMA, SMOLLM, Server, need

# Input-grounded prompts: the answer copies from the prompt, so n-gram proposals are accepted.
PROMPTS = [
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n"
    "def fib(n):\n    return n if n < 2 else",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox",
    "Paris is the capital of France. Berlin is the capital of Germany. Rome is the capital of",
]


@pytest.fixture(scope="module")
def draft(pagoda_bin, tmp_path_factory):
    """SmolLM2 requantized to Q4_0: a draft with the target's vocabulary."""
    path = tmp_path_factory.mktemp("draft") / "smollm2-q4_0.gguf"
    subprocess.run([str(pagoda_bin), "quantize", "-i", str(need(SMOLLM)), "-o", str(path),
                    "--type", "q4_0", "--allow-requantize"],
                   check=True, capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="module")
def server(pagoda_bin, draft):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "16384", "--draft-model",
               draft, "--spec-method", "both", "--num-speculative-tokens", 4,
               "--spec-max-running", 64, "--model-name", "smol")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


def complete(client, prompt, spec, **kw):
    return client.completions.create(model="smol", prompt=prompt, temperature=0,
                                     extra_body={"num_speculative_tokens": spec}, **kw)


def test_greedy_text_usage_and_logprobs_are_those_without(client):
    for prompt in PROMPTS:
        plain = complete(client, prompt, 0, max_tokens=40, logprobs=2)
        spec = complete(client, prompt, 4, max_tokens=40, logprobs=2)
        assert spec.choices[0].text == plain.choices[0].text
        assert spec.choices[0].finish_reason == plain.choices[0].finish_reason
        assert spec.usage.completion_tokens == plain.usage.completion_tokens
        assert spec.choices[0].logprobs.tokens == plain.choices[0].logprobs.tokens
        a = spec.choices[0].logprobs.token_logprobs
        b = plain.choices[0].logprobs.token_logprobs
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
        assert getattr(plain.usage, "speculative", None) is None
    # The grounded prompts were proposed for, and most proposals accepted.
    spec = complete(client, PROMPTS[0], 4, max_tokens=40)
    assert spec.usage.speculative["proposed_tokens"] > 0
    assert spec.usage.speculative["accepted_tokens"] > 0


def test_streaming_and_stop_strings_are_those_without(client):
    prompt = PROMPTS[1]
    whole = complete(client, prompt, 0, max_tokens=40).choices[0].text
    stop = whole.strip().split(" ")[3]  # a word a few tokens in
    for spec in (0, 4):
        chunks = list(complete(client, prompt, spec, max_tokens=40, stream=True, stop=[stop],
                               stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == whole[:whole.index(stop)]
        assert stop not in text
        assert chunks[-2].choices[0].finish_reason == "stop"
        if spec == 0:
            plain_usage = chunks[-1].usage.completion_tokens
        else:
            assert chunks[-1].usage.completion_tokens == plain_usage


def test_sixteen_concurrent_requests_match_alone(client):
    prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(16)]
    alone = [complete(client, p, 0, max_tokens=24).choices[0].text for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: complete(client, p, 4, max_tokens=24).choices[0].text,
                                 prompts))
    assert together == alone


def test_metrics_and_stats_count_proposals(server, client):
    complete(client, PROMPTS[0], 4, max_tokens=32)
    assert server.metric("pagoda_spec_proposed_tokens_total") > 0
    assert 0 < server.metric("pagoda_spec_accepted_tokens_total") <= server.metric(
        "pagoda_spec_proposed_tokens_total")
    assert 0 < server.metric("pagoda_spec_acceptance_rate") <= 1
    metrics = server.metrics()
    assert 'pagoda_spec_accepted_at_position_total{position="0"}' in metrics
    import urllib.request
    with urllib.request.urlopen(server.url + "/stats", timeout=10) as r:
        stats = json.loads(r.read())
    assert stats["spec_proposed_tokens"] > 0 and stats["spec_mean_accepted_length"] > 1


def test_a_bad_field_value_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, "hi", 9, max_tokens=2)
    assert "num_speculative_tokens" in str(e.value)


def test_run_with_a_draft_prints_the_same_text(pagoda_bin, draft):
    def run(*extra):
        r = subprocess.run([str(pagoda_bin), "run", "-m", str(need(SMOLLM)), "-p", PROMPTS[0],
                            "-n", "32", "--temp", "0", "-t", "2", *map(str, extra)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout, r.stderr.strip().splitlines()[-1]
    plain, plain_stats = run()
    spec, spec_stats = run("--draft-model", draft, "--spec-method", "both")
    assert spec == plain
    assert "decode: 32 tokens at" in plain_stats and "proposed" not in plain_stats
    assert "decode: 32 tokens at" in spec_stats and "accepted" in spec_stats


def test_a_draft_with_another_vocabulary_is_refused(pagoda_bin):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(need(SMOLLM)), "-p", "hi", "-n", "2",
                        "--draft-model", str(need(GEMMA))], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1
    assert "a draft must share the model's vocabulary" in r.stderr
