"""Structured output, function calling and beam search through the real server and the official
openai client: every output under a JSON schema parses and validates (jsonschema) over many
seeds at temperature 1; json_object, regex and GBNF constraints hold; unsupported schema
keywords are a 400 naming them; a weather-function round trip; streaming and non-streaming give
the same tool_calls; beam search answers n beams."""
import json
import re

import jsonschema
import openai
import pytest

from server_util import SMOLLM, Server, need

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "email": {"type": "string", "format": "uuid"},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                             "maxItems": 3}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object",
     "properties": {"kind": {"enum": ["cat", "dog", "bird"]},
                    "weight": {"type": "number"},
                    "vaccinated": {"type": "boolean"},
                    "owner": {"anyOf": [{"type": "null"},
                                        {"type": "object",
                                         "properties": {"city": {"type": "string", "maxLength": 12},
                                                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                         "required": ["city", "zip"], "additionalProperties": False}]}},
     "required": ["kind", "weight", "vaccinated", "owner"], "additionalProperties": False},
    {"$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 6},
                                                          "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                        "required": ["sku", "qty"], "additionalProperties": False}},
     "type": "object",
     "properties": {"order": {"type": "integer", "exclusiveMinimum": 0, "maximum": 100000},
                    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 3},
                    "date": {"type": "string", "format": "date"}},
     "required": ["order", "items", "date"], "additionalProperties": False},
]


@pytest.fixture(scope="module")
def server(pagoda_bin):
    s = Server(pagoda_bin, need(SMOLLM), "-t", "2", "--kv-tokens", "16384", "--model-name", "smol")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("schema", SCHEMAS, ids=["person", "pet", "order"])
def test_every_output_validates_against_the_schema(client, schema):
    messages = [{"role": "user", "content": "Answer with a JSON object for this schema: "
                 + json.dumps(schema)}]
    for seed in range(12):
        r = client.chat.completions.create(
            model="smol", messages=messages, temperature=1.0, seed=seed, max_tokens=200,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x", "schema": schema, "strict": True}})
        choice = r.choices[0]
        assert choice.finish_reason == "stop", (seed, choice.message.content)
        value = json.loads(choice.message.content)
        jsonschema.validate(value, schema)


def test_json_object_on_completions_and_chat(client):
    for seed in range(6):
        r = client.completions.create(model="smol", prompt="A JSON object describing a city:",
                                      temperature=1.0, seed=seed, max_tokens=120,
                                      extra_body={"response_format": {"type": "json_object"}})
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].text), dict)
        else:  # cut by max_tokens: still a prefix of a JSON object
            assert r.choices[0].text.lstrip().startswith("{")
    r = client.chat.completions.create(model="smol", temperature=0, max_tokens=120,
                                       messages=[{"role": "user", "content": "Describe Paris."}],
                                       response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_regex_and_gbnf(client):
    for seed in range(8):
        r = client.completions.create(model="smol", prompt="A phone number:", temperature=1.0,
                                      seed=seed, max_tokens=20,
                                      extra_body={"regex": r"\(\d{3}\) \d{3}-\d{4}"})
        assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", r.choices[0].text), r.choices[0].text
    grammar = 'root ::= answer "." \nanswer ::= "yes" | "no" | "maybe"'
    for seed in range(5):
        r = client.completions.create(model="smol", prompt="Will it rain?", temperature=1.0,
                                      seed=seed, max_tokens=10, extra_body={"grammar": grammar})
        assert r.choices[0].text in ("yes.", "no.", "maybe.")


def test_streaming_under_a_schema_equals_non_streaming(client):
    kw = dict(model="smol", temperature=0, max_tokens=120,
              messages=[{"role": "user", "content": "Give me a person."}],
              response_format={"type": "json_schema",
                               "json_schema": {"name": "p", "schema": SCHEMAS[0]}})
    whole = client.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or ""
                       for c in client.chat.completions.create(stream=True, **kw) if c.choices)
    assert streamed == whole
    jsonschema.validate(json.loads(whole), SCHEMAS[0])


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "number", "maximum": 2.5}, "maximum"),
    ({"type": "string", "format": "email"}, "format"),
    ({"type": "object", "patternProperties": {"^a": {}}}, "patternProperties"),
])
def test_unsupported_keywords_are_a_400_naming_them(client, schema, keyword):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "x"}], max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert keyword in str(e.value) and e.value.body["param"] == "response_format"


def test_bad_constraints_are_a_400(client):
    with pytest.raises(openai.BadRequestError, match="grammar"):
        client.completions.create(model="smol", prompt="x", max_tokens=2,
                                  extra_body={"grammar": "root ::= undefined-rule"})
    with pytest.raises(openai.BadRequestError, match="regex"):
        client.completions.create(model="smol", prompt="x", max_tokens=2,
                                  extra_body={"regex": "(?<=a)b"})
    with pytest.raises(openai.BadRequestError, match="both constrain"):
        client.completions.create(model="smol", prompt="x", max_tokens=2,
                                  extra_body={"regex": "a", "grammar": 'root ::= "a"'})


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 30},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
                         ids=["required", "named"])
def test_weather_round_trip(client, choice):
    messages = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    r = client.chat.completions.create(model="smol", messages=messages, tools=WEATHER,
                                       tool_choice=choice, temperature=0, max_tokens=80)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert len(c.message.tool_calls) >= 1
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER[0]["function"]["parameters"])
    # Streaming gives the same call (its id aside).
    stream = list(client.chat.completions.create(model="smol", messages=messages, tools=WEATHER,
                                                 tool_choice=choice, temperature=0,
                                                 max_tokens=80, stream=True))
    name, arguments = None, ""
    for chunk in stream:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert tc.index == 0
            name = tc.function.name or name
            arguments += tc.function.arguments or ""
    assert name == "get_weather" and json.loads(arguments) == args
    assert [ch.choices[0].finish_reason for ch in stream if ch.choices][-1] == "tool_calls"
    # The tool's result goes back and the model answers in text.
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id,
                  "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    r2 = client.chat.completions.create(model="smol", messages=messages, tools=WEATHER,
                                        temperature=0, max_tokens=40)
    assert r2.choices[0].message.content
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens


def test_tool_choice_errors(client):
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "x"}],
                                       tools=WEATHER, max_tokens=5,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "x"}],
                                       tools=[{"type": "function", "function": {}}], max_tokens=5)


def test_beam_search_answers_n_beams(client, server):
    r = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=12,
                                  n=3, extra_body={"use_beam_search": True, "best_of": 4})
    assert len(r.choices) == 3
    texts = [c.text for c in r.choices]
    assert len(set(texts)) == 3
    greedy = client.completions.create(model="smol", prompt="The capital of France is",
                                       max_tokens=12, temperature=0)
    width1 = client.completions.create(model="smol", prompt="The capital of France is",
                                       max_tokens=12, extra_body={"use_beam_search": True})
    assert width1.choices[0].text == greedy.choices[0].text
    assert server.metric("pagoda_kv_blocks_used") == 0
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client.completions.create(model="smol", prompt="x", max_tokens=2, n=4,
                                  extra_body={"use_beam_search": True, "best_of": 2})
