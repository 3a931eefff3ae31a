"""Embeddings end to end on all-MiniLM-L6-v2 (scripts/setup unpacks it into models/): pagoda's
BERT against an independent numpy forward pass (bert_reference.py) from the folder and after
`pagoda convert`, against llama.cpp's vectors of the converted file (committed, made by
scripts/llamacpp_embeddings.py), and the server's /v1/embeddings, /api/embed and /api/embeddings
through the official openai and ollama clients, with hostile bodies refused."""
import base64
import json
import struct
import subprocess

import numpy as np
import pytest

from bert_reference import Bert, cosine
from server_util import ROOT, SMOLLM, Server, need, post_json

MINILM = ROOT / "models" / "all-minilm-l6-v2"
LLAMACPP_VECTORS = ROOT / "tests" / "data" / "embeddings" / "minilm_llamacpp.json"

TEXTS = [
    "Hello world",
    "The cat sat on the mat.",
    "Café déjà vu: naïve résumé, coöperate!",
    "東京は日本の首都です。",
    "pagoda serves embeddings at /v1/embeddings; 3.14159 is pi, 42 is the answer.",
    "  leading and trailing spaces\tand\ttabs  ",
]


def long_text(shared_dir, words=300):
    text = (shared_dir / "testdata" / "text" / "war-and-peace.txt").read_text(errors="replace")
    return " ".join(text.split()[2000:2000 + words])


def tokens(pagoda_bin, model, text):
    out = subprocess.run([pagoda_bin, "tokenize", "-m", model, "--bos", text], capture_output=True,
                         text=True, check=True).stdout
    return [int(x) for x in out.split()]


def embed_cli(pagoda_bin, model, texts, *args):
    r = subprocess.run([pagoda_bin, "embed", "-m", model, "-q", *args, *texts], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.fixture(scope="module")
def bert():
    return Bert(need(MINILM))


@pytest.fixture(scope="module")
def converted(pagoda_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "minilm-f16.gguf"
    subprocess.run([pagoda_bin, "convert", need(MINILM), "-o", out, "-q"], check=True,
                   capture_output=True)
    return out


def test_the_folder_matches_a_numpy_bert(pagoda_bin, bert, shared_dir):
    texts = TEXTS + [long_text(shared_dir)]
    got = embed_cli(pagoda_bin, MINILM, texts)
    for text, line in zip(texts, got):
        ids = tokens(pagoda_bin, MINILM, text)
        assert line["tokens"] == len(ids)
        want = bert.embed(ids, "mean", normalize=True)
        assert cosine(line["embedding"], want) >= 0.9999, text
        assert abs(np.linalg.norm(line["embedding"]) - 1) < 1e-5  # modules.json lists Normalize
    assert got[-1]["tokens"] > 300


def test_the_converted_file_matches_a_numpy_bert(pagoda_bin, bert, converted):
    got = embed_cli(pagoda_bin, converted, TEXTS)
    for text, line in zip(TEXTS, got):
        ids = tokens(pagoda_bin, converted, text)
        assert ids == tokens(pagoda_bin, MINILM, text)
        assert cosine(line["embedding"], bert.embed(ids)) >= 0.9999, text


def test_the_converted_file_has_llama_cpps_bert_layout(converted):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(converted)
    fields = {k: f.contents() for k, f in r.fields.items()}
    assert fields["general.architecture"] == "bert"
    assert fields["bert.pooling_type"] == 1 and fields["bert.attention.causal"] is False
    assert fields["bert.context_length"] == 512 and fields["bert.block_count"] == 6
    assert abs(fields["bert.attention.layer_norm_epsilon"] - 1e-12) < 1e-18
    assert fields["tokenizer.ggml.model"] == "bert" and fields["tokenizer.ggml.token_type_count"] == 2
    assert fields["tokenizer.ggml.cls_token_id"] == 101
    assert fields["tokenizer.ggml.seperator_token_id"] == 102
    tokens_list = fields["tokenizer.ggml.tokens"]
    assert tokens_list[101] == "[CLS]" and tokens_list[7592] == "\u2581hello"
    names = {t.name: t for t in r.tensors}
    for name in ["token_embd.weight", "token_types.weight", "position_embd.weight",
                 "token_embd_norm.weight", "token_embd_norm.bias", "blk.5.attn_q.weight",
                 "blk.5.attn_k.bias", "blk.5.attn_v.weight", "blk.5.attn_output.weight",
                 "blk.5.attn_output_norm.weight", "blk.5.ffn_up.weight", "blk.5.ffn_down.bias",
                 "blk.5.layer_output_norm.bias"]:
        assert name in names, name
    assert len(names) == 3 + 2 + 6 * 16
    assert names["position_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F32


def test_the_converted_file_matches_llama_cpp(pagoda_bin, converted):
    if not LLAMACPP_VECTORS.exists():
        pytest.fail(f"{LLAMACPP_VECTORS} is missing: make it with scripts/llamacpp_embeddings.py")
    ref = json.loads(LLAMACPP_VECTORS.read_text())
    got = embed_cli(pagoda_bin, converted, ref["texts"])
    assert len(got) == len(ref["embeddings"])
    for text, line, want in zip(ref["texts"], got, ref["embeddings"]):
        assert line["tokens"] == ref["tokens"][ref["texts"].index(text)]
        assert cosine(line["embedding"], want) >= 0.9999, text


def test_pooling_and_plain_output(pagoda_bin, bert):
    ids = tokens(pagoda_bin, MINILM, "Hello world")
    cls = embed_cli(pagoda_bin, MINILM, ["Hello world"], "--pooling", "cls")[0]["embedding"]
    assert cosine(cls, bert.embed(ids, "cls")) >= 0.9999
    r = subprocess.run([pagoda_bin, "embed", "-m", MINILM, "--plain", "-q", "Hello world"],
                       capture_output=True, text=True, check=True)
    assert len(r.stdout.split()) == 384


def test_embed_errors_are_one_line(pagoda_bin):
    r = subprocess.run([pagoda_bin, "embed", "-m", need(MINILM)], capture_output=True, text=True)
    assert r.returncode == 2 and "no text given" in r.stderr and r.stderr.count("\n") == 1
    r = subprocess.run([pagoda_bin, "embed", "-m", need(SMOLLM), "hi"], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "generative" in r.stderr and r.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def server(pagoda_bin):
    s = Server(pagoda_bin, need(MINILM), "-t", "2")
    yield s
    s.stop()


def test_openai_client(server, pagoda_bin):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    want = embed_cli(pagoda_bin, MINILM, TEXTS[:3])
    r = client.embeddings.create(model="all-minilm-l6-v2", input=TEXTS[:3])  # base64 on the wire
    assert [d.index for d in r.data] == [0, 1, 2]
    for d, w in zip(r.data, want):
        assert cosine(d.embedding, w["embedding"]) > 0.999999
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(w["tokens"] for w in want)
    r = client.embeddings.create(model="all-minilm-l6-v2", input="Hello world",
                                 encoding_format="float", user="someone")
    assert cosine(r.data[0].embedding, want[0]["embedding"]) > 0.999999
    ids = tokens(pagoda_bin, MINILM, "Hello world")
    r = client.embeddings.create(model="all-minilm-l6-v2", input=[ids, ids[:-1]])
    assert cosine(r.data[0].embedding, want[0]["embedding"]) > 0.999999 and r.usage.prompt_tokens == 7
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model="all-minilm-l6-v2", input="x", dimensions=64)


def test_base64_is_little_endian_float32(server):
    status, f = post_json(server, "/v1/embeddings", {"input": "Hello world"})
    status, b = post_json(server, "/v1/embeddings", {"input": "Hello world",
                                                     "encoding_format": "base64"})
    assert status == 200
    raw = base64.b64decode(b["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(f["data"][0]["embedding"],
                                                                           rel=1e-6)


def test_ollama_client(server, pagoda_bin):
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=server.url)
    want = embed_cli(pagoda_bin, MINILM, TEXTS[:2])
    r = client.embed(model="all-minilm-l6-v2", input=TEXTS[:2], keep_alive="5m",
                     options={"num_ctx": 512})
    assert len(r.embeddings) == 2 and r.prompt_eval_count == want[0]["tokens"] + want[1]["tokens"]
    assert cosine(r.embeddings[1], want[1]["embedding"]) > 0.999999
    assert r.total_duration > 0
    r = client.embeddings(model="all-minilm-l6-v2", prompt=TEXTS[0])
    assert cosine(r.embedding, want[0]["embedding"]) > 0.999999
    with pytest.raises(ollama.ResponseError):
        client.embed(model="all-minilm-l6-v2", input="x", options={"temperature": 0.5})


def test_ollama_truncate(server, shared_dir):
    text = long_text(shared_dir, 600)
    status, r = post_json(server, "/api/embed", {"model": "all-minilm-l6-v2", "input": text})
    assert status == 200 and r["prompt_eval_count"] == 512
    status, r = post_json(server, "/api/embed", {"model": "all-minilm-l6-v2", "input": text,
                                                 "truncate": False})
    assert status == 400 and "512" in r["error"]
    status, r = post_json(server, "/api/embed", {"model": "all-minilm-l6-v2", "input": "a b c",
                                                 "options": {"num_ctx": 3}})
    assert status == 200 and r["prompt_eval_count"] == 3


@pytest.mark.parametrize("body,param", [
    ({"input": ["x"] * 2049}, "input"),
    ({"input": list(range(1000, 1600))}, "input"),
    ({"input": 5}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": [[]]}, "input[0]"),
    ({"input": [1, "a"]}, "input"),
    ({"input": [[1], "a"]}, "input"),
    ({"input": [[1, 2], [3, 99999999]]}, "input[1]"),
    ({"input": [-1]}, "input"),
    ({"input": [1.5]}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "dimensions": 384}, "dimensions"),
    ({"input": "x", "user": 5}, "user"),
    ({"input": "x", "stream": True}, "stream"),
    ({}, "input"),
])
def test_hostile_openai_bodies_are_400(server, body, param):
    status, r = post_json(server, "/v1/embeddings", body)
    assert status == 400 and r["error"]["param"] == param, r


def test_hostile_bodies_elsewhere(server):
    status, r = post_json(server, "/v1/embeddings", {"input": "x", "model": "gpt-4"})
    assert status == 404 and r["error"]["code"] == "model_not_found"
    status, r = post_json(server, "/v1/embeddings", [[[[[[[[]]]]]]]] * 3)
    assert status == 400
    status, r = post_json(server, "/api/embed", {"input": "x"})
    assert status == 400 and "model" in r["error"]
    status, r = post_json(server, "/api/embed", {"model": "all-minilm-l6-v2", "input": [[1, 2]]})
    assert status == 400 and "list of strings" in r["error"]
    status, r = post_json(server, "/api/embed", {"model": "all-minilm-l6-v2", "input": ["x"] * 3000})
    assert status == 400
    status, r = post_json(server, "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and r["error"]["code"] == "model_not_generative"
    status, r = post_json(server, "/api/generate", {"model": "all-minilm-l6-v2", "prompt": "hi"})
    assert status == 400 and "embedding model" in r["error"]


def test_a_generative_model_says_how_to_turn_embeddings_on(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "1", "--kv-tokens", "256")
    try:
        status, r = post_json(s, "/v1/embeddings", {"input": "hello"})
        assert status == 400 and "--pooling" in r["error"]["message"]
        status, r = post_json(s, "/api/embed", {"model": "smollm2-135m-instruct-q4_1", "input": "hi"})
        assert status == 400 and "--pooling" in r["error"]
    finally:
        s.stop()


def test_a_generative_model_embeds_with_pooling(pagoda_bin):
    texts = ["The cat sat on the mat.", "A cat was sitting on a rug.", "Stock prices fell today."]
    last = embed_cli(pagoda_bin, need(SMOLLM), texts, "--pooling", "last")
    mean = embed_cli(pagoda_bin, SMOLLM, texts[:1], "--pooling", "mean")
    assert len(last[0]["embedding"]) == 576 and abs(np.linalg.norm(last[0]["embedding"]) - 1) < 1e-5
    assert cosine(mean[0]["embedding"], last[0]["embedding"]) < 0.999
    # One input per pass: an input's vector does not depend on its neighbours.
    alone = embed_cli(pagoda_bin, SMOLLM, texts[2:], "--pooling", "last")
    assert cosine(alone[0]["embedding"], last[2]["embedding"]) > 0.999999
    s = Server(pagoda_bin, SMOLLM, "-t", "1", "--kv-tokens", "1024", "--pooling", "last")
    try:
        status, r = post_json(s, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0})
        assert status == 200  # still generates
        status, r = post_json(s, "/v1/embeddings", {"input": texts})
        assert status == 200 and r["usage"]["prompt_tokens"] == sum(x["tokens"] for x in last)
        for got, want in zip(r["data"], last):
            assert cosine(got["embedding"], want["embedding"]) > 0.99999
    finally:
        s.stop()


def test_schemathesis_on_the_embedding_routes(server, tmp_path):
    """The embedding routes' description against a server that embeds (test_openapi.py runs
    every route against a generative model, where these answer 400)."""
    import shutil
    exe = shutil.which("schemathesis") or shutil.which("st")
    if exe is None:
        pytest.fail("schemathesis is not installed: run scripts/setup")
    checks = ("not_a_server_error,status_code_conformance,content_type_conformance,"
              "response_schema_conformance,negative_data_rejection")
    r = subprocess.run(
        [exe, "run", server.url + "/openapi.json", "--include-path-regex", "embed",
         "--phases", "examples,coverage,fuzzing", "--checks", checks, "--max-examples", "40", "--seed", "7", "--workers", "1",
         "--request-timeout", "60", "--no-color", "--report", "junit", "--report-dir",
         str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "generated" in r.stdout
