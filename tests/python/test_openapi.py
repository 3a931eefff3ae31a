"""schemathesis against pagoda serve's own OpenAPI description (/openapi.json), bounded in
examples and time: no 5xx, every answer in its documented status, content type, headers and
schema (streams too, event by event), requests that break the schema refused, and 405 for
methods a route does not take. The check that every schema-valid request is accepted is left
out: limits that depend on the model (a logit_bias key must be a token id below the vocabulary
size, a chat template may refuse a message) are enforced as 400s the schema cannot express."""
import json
import shutil
import subprocess
import sys
import urllib.request

import pytest

from server_util import SMOLLM, Server, need

CHECKS = ",".join([
    "not_a_server_error", "status_code_conformance", "content_type_conformance",
    "response_headers_conformance", "response_schema_conformance", "negative_data_rejection",
    "unsupported_method",
])


def schemathesis():
    exe = shutil.which("schemathesis") or shutil.which("st")
    if exe is None:
        pytest.fail("schemathesis is not installed: run scripts/setup")
    return exe


def test_the_description_is_served_and_names_this_servers_limits(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "1", "--kv-tokens", "2048",
               "--max-tokens-limit", 8, "--max-n", 2, "--model-name", "smol")
    try:
        with urllib.request.urlopen(s.url + "/openapi.json", timeout=10) as r:
            spec = json.loads(r.read())
        sampling = spec["components"]["schemas"]["Sampling"]["properties"]
        assert sampling["max_tokens"]["maximum"] == 8 and sampling["n"]["maximum"] == 2
        assert sampling["model"]["enum"] == ["smol"]
        assert set(spec["paths"]) >= {"/v1/completions", "/v1/chat/completions", "/tokenize",
                                      "/detokenize", "/v1/models", "/health", "/metrics",
                                      "/v1/messages", "/v1/messages/count_tokens",
                                      "/api/chat", "/api/generate", "/api/show", "/api/tags",
                                      "/api/ps", "/api/version", "/v1/responses",
                                      "/v1/responses/{response_id}", "/v1/embeddings",
                                      "/api/embed", "/api/embeddings"}
        messages = spec["components"]["schemas"]["MessagesRequest"]["allOf"][1]["properties"]
        assert messages["max_tokens"]["maximum"] == 8
        responses = spec["components"]["schemas"]["ResponsesRequest"]["properties"]
        assert responses["max_output_tokens"]["maximum"] == 8
        options = spec["components"]["schemas"]["OllamaOptions"]["properties"]
        assert options["num_predict"]["maximum"] == 8
        assert "smol:latest" in spec["components"]["schemas"]["OllamaModel"]["enum"]
    finally:
        s.stop()


def test_schemathesis_finds_no_failure(pagoda_bin, tmp_path):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "1", "--kv-tokens", "4096",
               "--max-tokens-limit", 8, "--max-n", 2, "--log-format", "none")
    try:
        r = subprocess.run(
            [schemathesis(), "run", s.url + "/openapi.json", "--checks", CHECKS,
             "--max-examples", "40", "--seed", "7", "--workers", "1",
             "--request-timeout", "60", "--no-color", "--report", "junit",
             "--report-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
        assert "generated" in r.stdout
        # The server took all of it and still answers.
        with urllib.request.urlopen(s.url + "/health", timeout=10) as h:
            assert h.status == 200
    finally:
        s.stop()
