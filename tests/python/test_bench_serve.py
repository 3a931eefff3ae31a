"""pagoda bench serve against fake OpenAI-compatible servers started in the test (http.server in a
thread, streaming canned chunks), and against `pagoda serve` itself when the binary has it."""
import csv
import io
import json
import signal
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
STATS = ("count", "mean", "p50", "p90", "p99", "std", "min", "max")


class FakeOpenAI(ThreadingHTTPServer):
    """Streams `max_tokens` one-word chunks `delay` seconds apart, then usage and [DONE].
    fail_every=k answers every k-th POST with HTTP 500; usage=False leaves the usage chunk out."""

    daemon_threads = True

    def __init__(self, delay=0.002, fail_every=0, usage=True, model="fake-model"):
        super().__init__(("127.0.0.1", 0), Handler)
        self.delay, self.fail_every, self.usage, self.model = delay, fail_every, usage, model
        self.lock = threading.Lock()
        self.posts = []  # (path, headers, body) of every POST
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self):
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # each event leaves when written

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": self.server.model}]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.posts.append((self.path, dict(self.headers), body))
            number = len(srv.posts)
        if srv.fail_every and number % srv.fail_every == 0:
            self.send_json(500, {"error": {"message": "canned failure"}})
            return
        chat = self.path == "/v1/chat/completions"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        n = body["max_tokens"]
        if chat:  # role first, no text: must not count as an output arrival
            self.event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i in range(n):
            time.sleep(srv.delay)
            piece = {"delta": {"content": f" w{i}"}} if chat else {"text": f" w{i}"}
            self.event({"choices": [dict(index=0, **piece)]})
        if srv.usage:
            prompt = body["messages"][0]["content"] if chat else body["prompt"]
            self.event({"choices": [], "usage": {"prompt_tokens": len(prompt.split()),
                                                 "completion_tokens": n}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def event(self, obj):
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


@pytest.fixture
def fake():
    servers = []

    def start(**kwargs):
        s = FakeOpenAI(**kwargs)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def dead_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed again: connections are refused


def bench(pagoda_bin, *args, timeout=120):
    return subprocess.run([pagoda_bin, "bench", "serve", *map(str, args)], capture_output=True,
                          timeout=timeout)


def bench_json(pagoda_bin, *args):
    r = bench(pagoda_bin, *args, "--json", "-")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout), r.stderr.decode()


def check_endpoint_fields(e, num_prompts):
    for key in ("label", "url", "model", "endpoint_error", "interrupted", "concurrency",
                "max_concurrency", "request_rate", "num_requests", "completed", "failed",
                "duration_s", "total_prompt_tokens", "total_output_tokens", "token_counts",
                "request_throughput", "output_throughput", "total_token_throughput", "goodput",
                "num_good", "errors", "error_counts", *LATENCIES):
        assert key in e, key
    for key in LATENCIES:
        assert set(e[key]) == set(STATS), key
    assert e["completed"] + e["failed"] == e["num_requests"] == num_prompts
    assert len(e["errors"]) == e["failed"]
    assert sum(e["error_counts"].values()) == e["failed"]


def test_every_json_field(pagoda_bin, fake):
    s = fake(delay=0.003)
    j, _ = bench_json(pagoda_bin, "--url", s.url, "--num-prompts", 8, "--prompt-len", 20,
                      "--output-len", 6, "--concurrency", 2, "--seed", 3, "--api-key", "sekrit")
    assert j["benchmark"] == "serve" and j["interrupted"] is False
    assert j["settings"]["num_prompts"] == 8 and j["settings"]["seed"] == 3
    assert j["settings"]["api"] == "completions" and j["settings"]["output_len"] == "6"
    assert j["settings"]["concurrency"] == [2] and j["settings"]["request_rate"] is None
    [e] = j["endpoints"]
    check_endpoint_fields(e, 8)
    assert e["url"] == s.url and e["model"] == "fake-model" and e["endpoint_error"] is None
    assert e["completed"] == 8 and e["failed"] == 0 and e["errors"] == []
    assert e["concurrency"] == 2 and e["max_concurrency"] == 2
    assert e["request_rate"] is None  # infinite: a closed loop
    assert e["token_counts"] == "usage"
    assert e["total_output_tokens"] == 8 * 6 and e["total_prompt_tokens"] == 8 * 20
    d = e["duration_s"]
    assert d > 0
    assert e["request_throughput"] == pytest.approx(8 / d)
    assert e["output_throughput"] == pytest.approx(48 / d)
    assert e["total_token_throughput"] == pytest.approx((48 + 160) / d)
    assert e["goodput"] is None and e["num_good"] is None
    assert e["ttft_ms"]["count"] == 8 and e["tpot_ms"]["count"] == 8 and e["e2el_ms"]["count"] == 8
    assert 8 <= e["itl_ms"]["count"] <= 8 * 5  # events that arrive in one read share a time
    for key in LATENCIES:
        m = e[key]
        assert 0 <= m["min"] <= m["p50"] <= m["p90"] <= m["p99"] <= m["max"]
        assert m["min"] <= m["mean"] <= m["max"]
    # The fake sleeps 3 ms before each chunk.
    assert e["ttft_ms"]["min"] >= 2.5 and e["itl_ms"]["p50"] >= 2.5 and e["tpot_ms"]["min"] >= 2.5
    assert e["e2el_ms"]["min"] >= e["ttft_ms"]["min"]
    # What the server was sent.
    assert len(s.posts) == 8
    for path, headers, body in s.posts:
        assert path == "/v1/completions"
        assert headers["Authorization"] == "Bearer sekrit"
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == 6 and body["min_tokens"] == 6 and body["ignore_eos"] is True
        assert body["temperature"] == 0 and body["model"] == "fake-model"
        assert len(body["prompt"].split()) == 20


def test_dead_url_is_all_failed(pagoda_bin):
    url = dead_url()
    j, _ = bench_json(pagoda_bin, "--url", url, "--num-prompts", 5, "--output-len", 4)
    [e] = j["endpoints"]
    check_endpoint_fields(e, 5)
    assert e["completed"] == 0 and e["failed"] == 5
    assert "/v1/models" in e["endpoint_error"]
    assert all(err == e["endpoint_error"] for err in e["errors"])
    assert e["ttft_ms"]["count"] == 0 and e["ttft_ms"]["mean"] is None
    assert e["request_throughput"] == 0 and e["token_counts"] == "none"
    # With the model given, every request is sent and refused.
    j, _ = bench_json(pagoda_bin, "--url", url, "--num-prompts", 5, "--model", "m",
                      "--request-rate", 100)
    [e] = j["endpoints"]
    check_endpoint_fields(e, 5)
    assert e["failed"] == 5 and e["endpoint_error"] is None and e["model"] == "m"
    assert all("POST" in err and "/v1/completions" in err for err in e["errors"])


def test_two_urls_side_by_side(pagoda_bin, fake, tmp_path):
    a, b = fake(delay=0.001), fake(delay=0.006)
    dead = dead_url()
    out = {k: tmp_path / f"r.{k}" for k in ("json", "csv", "svg")}
    r = bench(pagoda_bin, "--url", a.url, "--url", b.url, "--url", dead, "--label", "fast",
              "--label", "slow", "--label", "dead", "--num-prompts", 6, "--prompt-len", "5:15",
              "--output-len", "3:9", "--max-concurrency", 3, "--json", out["json"], "--csv",
              out["csv"], "--svg", out["svg"])
    assert r.returncode == 0, r.stderr.decode()
    table = r.stdout.decode()
    header = table.splitlines()[0]
    assert "fast" in header and "slow" in header and "dead" in header
    assert "TTFT p99 (ms)" in table and "output tokens/s" in table
    j = json.loads(out["json"].read_text())
    fast, slow, gone = j["endpoints"]
    assert [e["label"] for e in j["endpoints"]] == ["fast", "slow", "dead"]
    for e in j["endpoints"]:
        check_endpoint_fields(e, 6)
    assert fast["completed"] == slow["completed"] == 6 and gone["failed"] == 6
    # Identical request sets: the same prompts and lengths, in the same order.
    assert [p[2] for p in a.posts] and sorted(json.dumps(p[2]) for p in a.posts) == sorted(
        json.dumps(p[2]) for p in b.posts)
    assert fast["total_output_tokens"] == slow["total_output_tokens"]
    assert fast["total_prompt_tokens"] == slow["total_prompt_tokens"]
    assert all(3 <= p[2]["max_tokens"] <= 9 and 5 <= len(p[2]["prompt"].split()) <= 15
               for p in a.posts)
    assert slow["tpot_ms"]["mean"] > fast["tpot_ms"]["mean"]
    rows = list(csv.DictReader(io.StringIO(out["csv"].read_text())))
    assert [row["label"] for row in rows] == ["fast", "slow", "dead"]
    assert rows[0]["completed"] == "6" and rows[2]["failed"] == "6"
    assert float(rows[1]["ttft_p99_ms"]) == pytest.approx(slow["ttft_ms"]["p99"], rel=1e-3)
    svg = ET.parse(out["svg"]).getroot()
    assert svg.tag.endswith("svg") and len(svg.findall("{http://www.w3.org/2000/svg}svg")) == 4


def test_http_500_and_missing_usage(pagoda_bin, fake):
    s = fake(fail_every=3, usage=False)
    j, _ = bench_json(pagoda_bin, "--url", s.url, "--num-prompts", 9, "--output-len", 5,
                      "--concurrency", 1)
    [e] = j["endpoints"]
    check_endpoint_fields(e, 9)
    assert e["failed"] == 3 and e["completed"] == 6
    assert all(err.startswith("HTTP 500") and "canned failure" in err for err in e["errors"])
    assert e["token_counts"] == "chunks"  # no usage chunk: output tokens are counted chunks
    assert e["total_output_tokens"] == 6 * 5


def test_chat_endpoint(pagoda_bin, fake):
    s = fake(delay=0.03)
    j, _ = bench_json(pagoda_bin, "--url", s.url + "/v1/", "--endpoint", "chat",
                      "--num-prompts", 3, "--output-len", 4, "--prompt-len", 7)
    [e] = j["endpoints"]
    assert e["completed"] == 3 and e["total_output_tokens"] == 12
    # The role chunk comes at once and carries no text: the first output comes 30 ms later.
    assert e["ttft_ms"]["min"] >= 25
    for path, _, body in s.posts:
        assert path == "/v1/chat/completions"
        assert body["messages"][0]["role"] == "user"
        assert len(body["messages"][0]["content"].split()) == 7


def test_goodput_and_poisson_rate(pagoda_bin, fake):
    s = fake()
    j, _ = bench_json(pagoda_bin, "--url", s.url, "--num-prompts", 20, "--output-len", 3,
                      "--request-rate", 40, "--goodput", "ttft:10000", "e2el:20000")
    [e] = j["endpoints"]
    assert e["request_rate"] == 40 and e["max_concurrency"] is None and e["concurrency"] is None
    assert e["num_good"] == 20 and e["goodput"] == pytest.approx(e["request_throughput"])
    assert j["settings"]["goodput"] == {"ttft_ms": 10000, "e2el_ms": 20000}
    assert j["settings"]["request_rate"] == 40 and j["settings"]["concurrency"] == []
    # 19 exponential gaps of mean 25 ms: far longer than all at once.
    assert e["duration_s"] > 0.15
    j, _ = bench_json(pagoda_bin, "--url", s.url, "--num-prompts", 4, "--output-len", 3,
                      "--goodput", "tpot:0.0001")
    assert j["endpoints"][0]["num_good"] == 0 and j["endpoints"][0]["goodput"] == 0


def test_concurrency_sweep(pagoda_bin, fake, tmp_path):
    s = fake(delay=0.002)
    svg = tmp_path / "sweep.svg"
    j, err = bench_json(pagoda_bin, "--url", s.url, "--num-prompts", 6, "--output-len", 4,
                        "--concurrency", "1,3", "--svg", svg)
    assert [e["concurrency"] for e in j["endpoints"]] == [1, 3]
    assert all(e["completed"] == 6 for e in j["endpoints"])
    assert "c=1" in err and "c=3" in err  # the table went to stderr, stdout holds the JSON
    root = ET.parse(svg).getroot()
    assert len(root.findall("{http://www.w3.org/2000/svg}svg")) == 5  # 4 bar charts + a line chart


def test_sharegpt_dataset(pagoda_bin, fake, tmp_path):
    data = [{"conversations": [{"from": "human", "value": f"question {i} " * (i + 1)},
                               {"from": "gpt", "value": "x" * (40 * (i + 1))}]} for i in range(3)]
    data.append({"conversations": [{"from": "human", "value": "lonely"}]})  # one turn: skipped
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    s = fake()
    j, _ = bench_json(pagoda_bin, "--url", s.url, "--dataset", path, "--num-prompts", 5)
    assert j["settings"]["dataset"] == str(path) and j["settings"]["prompt_len"] is None
    assert j["settings"]["output_len"] is None  # from the replies
    assert j["endpoints"][0]["completed"] == 5
    prompts = sorted(p[2]["prompt"] for p in s.posts)
    assert set(prompts) == {c["conversations"][0]["value"] for c in data[:3]}
    assert sorted({p[2]["max_tokens"] for p in s.posts}) == [10, 20, 30]  # 4 bytes a token
    s.posts.clear()
    j, _ = bench_json(pagoda_bin, "--url", s.url, "--dataset", path, "--num-prompts", 2,
                      "--output-len", 7)
    assert j["settings"]["output_len"] == "7"
    assert [p[2]["max_tokens"] for p in s.posts] == [7, 7]


@pytest.mark.parametrize("args", [
    ["--url", "localhost:8000"],
    ["--url", "ftp://x"],
    ["--url", "http://127.0.0.1:1", "--goodput", "ttfx:5"],
    ["--url", "http://127.0.0.1:1", "--prompt-len", "0"],
    ["--url", "http://127.0.0.1:1", "--output-len", "9:3"],
    ["--url", "http://127.0.0.1:1", "--request-rate", "-1"],
    ["--url", "http://127.0.0.1:1", "--concurrency", "2", "--request-rate", "3"],
    ["--url", "http://127.0.0.1:1", "--label", "a", "--label", "b"],
    ["--url", "http://127.0.0.1:1", "--dataset", "/nonexistent.json"],
])
def test_bad_arguments_fail(pagoda_bin, args):
    r = bench(pagoda_bin, *args, "--num-prompts", 2)
    assert r.returncode != 0
    assert r.stderr


def test_ctrl_c_reports_what_was_measured(pagoda_bin, fake, tmp_path):
    s = fake(delay=0.05)
    out = tmp_path / "r.json"
    args = ["--url", s.url, "--num-prompts", 200, "--output-len", 10, "--concurrency", 2,
            "--json", out]
    p = subprocess.Popen([pagoda_bin, "bench", "serve", *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=30)
    assert p.returncode == 0, stderr.decode()
    assert b"interrupted" in stderr
    j = json.loads(out.read_text())
    [e] = j["endpoints"]
    assert j["interrupted"] is True and e["interrupted"] is True
    assert 0 < e["completed"] < 200
    assert e["completed"] + e["failed"] == e["num_requests"] < 200
    assert all(err == "interrupted" for err in e["errors"])


def test_against_pagoda_serve(pagoda_bin):
    server_util = pytest.importorskip("server_util")
    server = server_util.Server(pagoda_bin, server_util.need(server_util.SMOLLM), "-t", "2",
                                "--model-name", "smollm2")
    try:
        j, err = bench_json(pagoda_bin, "--url", server.url, "--num-prompts", 6,
                            "--prompt-len", 16, "--output-len", 8, "--concurrency", "1,3")
    finally:
        server.stop()
    assert [e["concurrency"] for e in j["endpoints"]] == [1, 3]
    for e in j["endpoints"]:
        check_endpoint_fields(e, 6)
        assert e["model"] == "smollm2"
        assert e["completed"] == 6, e["errors"]
        assert e["token_counts"] == "usage"
        assert e["total_output_tokens"] == 6 * 8  # ignore_eos: exactly max_tokens each
        assert 6 * 8 <= e["total_prompt_tokens"] <= 6 * 32  # a word is about a token
        assert e["tpot_ms"]["count"] == 6 and e["ttft_ms"]["p50"] > 0
        assert e["output_throughput"] > 0
