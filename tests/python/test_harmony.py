"""gpt-oss's harmony chat format through the server: `pagoda synth --like gpt-oss-tiny` served
with the real gpt-oss chat template (tests/data/templates, see PROVENANCE.md).

The synthetic model has random weights and the stories260K vocabulary, which has no harmony
tokens: its outputs are garbage, and the markers (<|channel|> ...) are spelled in byte tokens.
So the outputs that matter are forced by a grammar (the `grammar` extension; tool_choice
"required"'s own grammar), and what these tests prove is the plumbing: the template is
recognised as harmony, a forced analysis message comes back as reasoning and the final message
as content (through the openai client, streamed and not), a forced message to functions.NAME as
a tool call, no marker or channel name reaches the content or a delta, every API gives the same
reasoning and the same call (tool_choice "required", its analysis ended by a thinking budget),
a thinking budget ends the analysis after exactly N tokens, and an earlier turn's reasoning and
tool call reach the prompt as the template writes them. They do not prove that a gpt-oss model writes these messages, nor anything about a real
gpt-oss vocabulary's tokens (tests/unit/test_harmony_vocab.cc covers those)."""
import json
import pathlib
import subprocess

import openai
import pytest

from server_util import Server, post_json

TEMPLATE = pathlib.Path(__file__).resolve().parents[1] / "data" / "templates" / \
    "openai-gpt-oss-120b.jinja"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                           "parameters": PARAMS}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
THOUGHT = "The user wants the weather; call get_weather."
ANSWER = "It is sunny."
FINAL_GBNF = ('root ::= "<|channel|>analysis<|message|>' + THOUGHT +
              '<|end|><|start|>assistant<|channel|>final<|message|>' + ANSWER + '"\n')
CALL_GBNF = ('root ::= "<|channel|>analysis<|message|>' + THOUGHT +
             '<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather '
             '<|constrain|>json<|message|>{\\"city\\": \\"Paris\\"}"\n')
MARKERS = ("<|", "|>", "analysis", "commentary", "to=functions")


@pytest.fixture(scope="module")
def model(pagoda_bin, shared_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("harmony") / "gpt-oss-tiny.gguf"
    r = subprocess.run([str(pagoda_bin), "synth", "--like", "gpt-oss-tiny", "--type", "f32",
                        "--seed", "3", "--vocab", str(shared_dir / "models" / "stories260K.gguf"),
                        "-o", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return path


def serve(pagoda_bin, path, *args):
    return Server(pagoda_bin, path, "-t", "2", "--kv-tokens", "4096", "--max-model-len", 2048,
                  "--model-name", "g", "--chat-template", TEMPLATE, *args)


@pytest.fixture(scope="module")
def server(pagoda_bin, model):
    s = serve(pagoda_bin, model)
    yield s
    s.stop()


def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def chat(server, grammar, **kw):
    kw.setdefault("extra_body", {"grammar": grammar})
    return oai(server).chat.completions.create(model="g", messages=ASK, max_tokens=300,
                                               temperature=0, **kw)


def streamed(server, grammar, **kw):
    """(reasoning, content, tool calls by index, finish reason), checking no delta leaks."""
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in chat(server, grammar, stream=True, **kw):
        d = chunk.choices[0].delta
        assert not any(m in (d.content or "") for m in MARKERS), d.content
        assert not any(m in (getattr(d, "reasoning_content", None) or "") for m in MARKERS)
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        for c in d.tool_calls or []:
            entry = calls.setdefault(c.index, {"name": "", "arguments": ""})
            entry["name"] += c.function.name or ""
            entry["arguments"] += c.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return reasoning, content, calls, finish


def test_analysis_is_reasoning_final_is_content(server):
    r = chat(server, FINAL_GBNF)
    m = r.choices[0].message
    assert m.reasoning_content == THOUGHT
    assert m.content == ANSWER
    assert r.choices[0].finish_reason == "stop"
    assert streamed(server, FINAL_GBNF) == (THOUGHT, ANSWER, {}, "stop")


def test_message_to_a_function_is_a_tool_call(server):
    r = chat(server, CALL_GBNF, tools=TOOLS)
    m = r.choices[0].message
    assert m.reasoning_content == THOUGHT
    assert not m.content
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == \
        [("get_weather", '{"city":"Paris"}')]
    assert r.choices[0].finish_reason == "tool_calls"
    reasoning, content, calls, finish = streamed(server, CALL_GBNF, tools=TOOLS)
    assert (reasoning, content, finish) == (THOUGHT, "", "tool_calls")
    assert calls == {0: {"name": "get_weather", "arguments": '{"city":"Paris"}'}}


def test_every_api_gives_the_same_reasoning_and_call(pagoda_bin, model):
    """tool_choice "required" (its grammar lets an analysis come first, as gpt-oss writes one)
    with a thinking budget of 5 (without one the greedy random model stays in its analysis):
    the budget ends the analysis, the grammar forces the call (an enum keeps its arguments
    short), and the chat completion (whole and streamed), the Messages API and the Responses
    API give the same reasoning and the same call."""
    params = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
              "required": ["city"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                               "parameters": params}}]
    s = serve(pagoda_bin, model, "--reasoning-budget", 5)
    try:
        r = oai(s).chat.completions.create(model="g", messages=ASK, max_tokens=300,
                                           temperature=0, tools=tools, tool_choice="required")
        m = r.choices[0].message
        reasoning = m.reasoning_content
        [call] = m.tool_calls
        assert reasoning and not m.content and r.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "get_weather"
        arguments = json.loads(call.function.arguments)
        assert arguments["city"] in ("Paris", "Oslo")

        got = streamed(s, None, extra_body={}, tools=tools, tool_choice="required")
        assert got == (reasoning, "", {0: {"name": "get_weather",
                                           "arguments": call.function.arguments}}, "tool_calls")

        status, r = post_json(s, "/v1/messages", {
            "model": "g", "messages": ASK, "max_tokens": 300, "temperature": 0,
            "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": params}],
            "tool_choice": {"type": "any"}})
        assert status == 200, r
        assert [b["type"] for b in r["content"]] == ["thinking", "tool_use"], r
        assert r["content"][0]["thinking"] == reasoning
        assert (r["content"][1]["name"], r["content"][1]["input"]) == ("get_weather", arguments)
        assert r["stop_reason"] == "tool_use"

        status, r = post_json(s, "/v1/responses", {
            "model": "g", "input": ASK, "max_output_tokens": 300, "temperature": 0,
            "tools": [{"type": "function", "name": "get_weather", "description": "Weather.",
                       "parameters": params}], "tool_choice": "required"})
        assert status == 200, r
        assert [i["type"] for i in r["output"]] == ["reasoning", "function_call"], r["output"]
        assert r["output"][0]["content"] == [{"type": "reasoning_text", "text": reasoning}]
        assert r["output"][1]["name"] == "get_weather"
        assert json.loads(r["output"][1]["arguments"]) == arguments
    finally:
        s.stop()


def test_earlier_reasoning_and_tool_call_reach_the_prompt(server):
    """The assistant's reasoning_content and tool call, and the tool's result, rendered by the
    real template (reasoning_content given to it as the `thinking` it reads)."""
    messages = ASK + [
        {"role": "assistant", "content": None, "reasoning_content": THOUGHT,
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 20C"}]
    status, r = post_json(server, "/tokenize", {"model": "g", "messages": messages,
                                                "tools": TOOLS})
    assert status == 200, r
    status, r = post_json(server, "/detokenize", {"tokens": r["tokens"]})
    assert status == 200, r
    assert ("<|start|>user<|message|>Weather in Paris?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>" + THOUGHT + "<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
            '{"city": "Paris"}<|call|>'
            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
            '"Sunny, 20C"<|end|><|start|>assistant') in r["prompt"], r["prompt"]


def test_thinking_budget_ends_the_analysis(server):
    """reasoning_budget 5: after five tokens of analysis the engine forces the end of the
    analysis message and the final message's header (which the grammar lets through, and which
    here the model would not write by itself), and the model goes on with its answer."""
    grammar = ('root ::= "<|channel|>analysis<|message|>" [a-z ]* "<|end|><|start|>assistant'
               '<|channel|>final<|message|>" [a-z ]{1,10}\n')
    r = chat(server, grammar, logprobs=True, extra_body={"grammar": grammar,
                                                          "reasoning_budget": 5})
    m = r.choices[0].message
    tokens = [t.token for t in r.choices[0].logprobs.content]
    opened = next(i for i in range(len(tokens))
                  if "".join(tokens[:i + 1]).endswith("<|message|>"))
    thought = "".join(tokens[opened + 1:opened + 6])
    # An SPM vocabulary (stories260K) spells the forced text with its leading space.
    forced = "".join(tokens[opened + 6:]).lstrip()
    assert forced.startswith("<|end|><|start|>assistant<|channel|>final<|message|>"), tokens
    assert m.reasoning_content.strip() == thought.strip() and thought.strip()
    assert m.content and r.choices[0].finish_reason == "stop"


def test_reasoning_format_none_keeps_the_messages_and_still_finds_the_call(pagoda_bin, model):
    """--reasoning-format none: the generated text as it came (markers and the analysis in the
    content, as llama.cpp's none), the call still parsed out of it."""
    s = serve(pagoda_bin, model, "--reasoning-format", "none")
    try:
        r = chat(s, CALL_GBNF, tools=TOOLS)
        m = r.choices[0].message
        assert getattr(m, "reasoning_content", None) is None
        assert m.content == ("<|channel|>analysis<|message|>" + THOUGHT + "<|end|>"
                             "<|start|>assistant<|channel|>commentary")
        assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == \
            [("get_weather", '{"city":"Paris"}')]
    finally:
        s.stop()


def test_a_function_without_description(server):
    """The description is optional in the API; the gpt-oss template prints it unguarded (jinja2
    fails on it too), so the server gives it "" rather than answering 400."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
    r = chat(server, CALL_GBNF, tools=tools)
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
