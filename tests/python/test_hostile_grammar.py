"""pagoda serve against hostile structured-output requests (issue 33, findings 1-3), on
loopback, each case bounded in time and the server's address space capped (4 GiB), so a
regression fails here instead of taking the machine: an exponential schema, CPU bombs in
regexes, GBNF and schemas, the grammar cache filled with large enums, compiles that must not
hold the request threads, that end when their client leaves and at SIGTERM."""
import concurrent.futures
import json
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from server_util import SMOLLM, Server, need, post_json, wait_for

MIB = 1 << 20
# The server runs under this cap on its address space: a compile without bounds dies against
# it rather than filling the machine's memory.
LAUNCHER = ("prlimit", f"--as={4 << 30}", "--")


def port_of(server):
    return int(server.url.rsplit(":", 1)[1])


def rss_bytes(server):
    for line in pathlib.Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(server):
    fields = pathlib.Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks


def health(server, timeout=10):
    with urllib.request.urlopen(server.url + "/health", timeout=timeout) as r:
        return r.status


def post(server, payload, path="/v1/chat/completions", timeout=20):
    return post_json(server, path, payload, timeout)


def chat(**extra):
    return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, **extra}


def schema_request(schema):
    return chat(response_format={"type": "json_schema",
                                 "json_schema": {"name": "x", "schema": schema}})


def anyof_ref_chain(levels):
    """Each level an anyOf of two $refs to the next: the red team's 2 KB schema."""
    d = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    d[f"d{levels}"] = {"type": "integer"}
    return {"$defs": d, "$ref": "#/$defs/d0"}


# A grammar every path of which matches nothing: 2^41 expansions, no memory. Under generous
# limits it compiles for minutes: the case for cancelling.
SLOW_GBNF = "root ::= a0\n" + "".join(f"a{i} ::= a{i + 1} | a{i + 1}\n" for i in range(40)) + \
    'a40 ::= ""\n'


def assert_limit_error(status, reply, param):
    assert status == 400, reply
    error = reply["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert error["code"] == "grammar_too_large", error
    assert "--max-grammar-states" in error["message"] or "--max-grammar-ms" in error["message"]


@pytest.fixture(scope="module")
def server(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "4096",
               "--max-body-bytes", 4 * MIB, launcher=LAUNCHER)
    # One structured request first: buffers sized at first use are not the cases' memory.
    status, _ = post(s, schema_request({"type": "object", "properties": {"a": {"type": "integer"}}}))
    assert status == 200
    yield s
    s.stop()


def generous_flags(pagoda_bin):
    """Limits so high that a compile runs until it is cancelled (where the server has them)."""
    help_text = subprocess.run([str(pagoda_bin), "serve", "--help"], capture_output=True,
                               text=True).stdout
    if "--max-grammar-ms" not in help_text:
        return []
    return ["--max-grammar-ms", 600000, "--max-grammar-states", 1 << 28]


def test_an_exponential_schema_is_a_400_naming_the_limit(server):
    before = rss_bytes(server)
    start = time.time()
    status, reply = post(server, schema_request(anyof_ref_chain(40)))
    assert_limit_error(status, reply, "response_format")
    assert time.time() - start < 5
    assert health(server) == 200
    assert rss_bytes(server) < before + 256 * MIB


def test_tool_choice_required_has_the_same_budget(server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": anyof_ref_chain(40)}}]
    status, reply = post(server, chat(tools=tools, tool_choice="required"))
    assert_limit_error(status, reply, "tools")


@pytest.mark.parametrize("name,extra", [
    ("regex", {"regex": ".{0,65535}"}),
    ("gbnf", {"grammar": 'root ::= "a"{0,100000}'}),
    ("max_length", schema_request({"type": "string", "maxLength": 65535})),
    ("pattern", schema_request({"type": "string", "pattern": "^.{0,65535}$"})),
    ("properties", schema_request({"type": "object", "properties": {
        f"p{i}": {"type": "integer"} for i in range(10000)}})),
    ("enum", schema_request({"enum": [f"value-{i}" for i in range(100000)]})),
])
def test_cpu_bombs_are_refused_fast(server, name, extra):
    before = rss_bytes(server)
    start = time.time()
    param = "regex" if name == "regex" else "grammar" if name == "gbnf" else "response_format"
    status, reply = post(server, {**chat(), **extra})
    assert_limit_error(status, reply, param)
    assert time.time() - start < 5, name
    assert health(server) == 200
    assert rss_bytes(server) < before + 256 * MIB


@pytest.mark.parametrize("name,extra", [
    ("gbnf", {"grammar": 'root ::= ("a"{0,100}){0,100}'}),
    ("regex", {"regex": "(a{0,100}){0,100}"}),
    ("schema", schema_request({"type": "string", "pattern": "^(a{0,100}){0,100}$"})),
    ("ambiguous", {"grammar": 'root ::= ("a"{0,100} | "b"){0,100}'}),
])
def test_nested_repetition_compiles_or_is_refused_before_generating(server, name, extra):
    # Each "a" may end either repetition: the stacks of a parse state would grow with every
    # byte until, in the middle of the generation, one passed the limit (a 500). Either the
    # compile makes it a repetition of "a" alone and every token follows it, or the compile
    # refuses it with the 400 naming the limit.
    before = rss_bytes(server)
    start = time.time()
    prompt = "Repeat the letter a forever: " + "a" * 32  # so that the model keeps to "a"
    request = {**chat(max_tokens=48, ignore_eos=True, temperature=0), **extra,
               "messages": [{"role": "user", "content": prompt}]}
    status, reply = post(server, request, timeout=60)
    assert time.time() - start < 30, name
    if status == 400:
        assert_limit_error(status, reply, "grammar" if name in ("gbnf", "ambiguous") else
                           "regex" if name == "regex" else "response_format")
    else:
        assert status == 200, reply
        text = reply["choices"][0]["message"]["content"]
        if name == "schema":  # a JSON string, closed unless the length cut it
            assert text.startswith('"'), text
            text = json.loads(text) if reply["choices"][0]["finish_reason"] == "stop" else text[1:]
        else:
            assert reply["usage"]["completion_tokens"] == 48, reply
        assert 1 <= len(text) <= 10000 and set(text) <= {"a", "b"}, text
    assert health(server) == 200
    assert rss_bytes(server) < before + 256 * MIB


def test_the_grammar_cache_is_bounded_in_bytes(server):
    before = rss_bytes(server)
    for i in range(12):  # twelve distinct 5,000-value enums
        status, reply = post(server, schema_request({"enum": [f"v{i}-{k}" for k in range(5000)]}),
                             timeout=30)
        assert status == 200, reply
    assert rss_bytes(server) < before + 512 * MIB
    assert health(server) == 200


def send_slow_compile(server, timeout=60):
    body = json.dumps({**chat(), "grammar": SLOW_GBNF}).encode()
    sock = socket.create_connection(("127.0.0.1", port_of(server)), timeout=timeout)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return sock


def test_compiles_do_not_hold_the_request_threads(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "4096",
               *generous_flags(pagoda_bin), launcher=LAUNCHER)
    socks = []
    try:
        socks = [send_slow_compile(s) for _ in range(6)]  # more than the 4 request threads
        time.sleep(0.5)
        start = time.time()
        status, reply = post(s, {"prompt": "The capital of France is", "max_tokens": 2},
                             path="/v1/completions", timeout=15)
        assert status == 200, reply
        assert time.time() - start < 10
    finally:
        for c in socks:
            c.close()
        s.stop()


def test_a_client_that_leaves_cancels_its_compile(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "4096",
               *generous_flags(pagoda_bin), launcher=LAUNCHER)
    try:
        sock = send_slow_compile(s)
        time.sleep(1.0)
        assert cpu_seconds(s) > 0.2  # it is compiling
        sock.close()

        def idle():
            used = cpu_seconds(s)
            time.sleep(1.0)
            return cpu_seconds(s) - used < 0.2

        assert wait_for(idle, 10)
        assert health(s) == 200
    finally:
        s.stop()


def test_sigterm_exits_promptly_with_compiles_in_flight(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "4096",
               *generous_flags(pagoda_bin), launcher=LAUNCHER)
    socks = []
    try:
        socks = [send_slow_compile(s, timeout=15) for _ in range(6)]
        time.sleep(1.0)
        start = time.time()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(15) == 0
        assert time.time() - start < 10
        for c in socks:  # each gets a 503, or the connection closed under it
            try:
                head = c.recv(65536)
            except OSError:
                continue
            assert head == b"" or head.startswith(b"HTTP/1.1 503"), head[:100]
    finally:
        for c in socks:
            c.close()
        s.stop()
