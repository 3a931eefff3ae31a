"""pagoda's chat template interpreter against Python jinja2, byte for byte.

jinja2 is configured the way Hugging Face transformers renders chat templates (an immutable
sandbox with trim_blocks and lstrip_blocks, loop controls, the {% generation %} tag,
raise_exception, strftime_now and a json.dumps-style tojson). pagoda renders through
tests/tools/render_template. Compared: the chat templates stored in real GGUF files, pagoda's
built-in templates, many small feature snippets, and seeded random templates (whitespace control
and expressions). When jinja2 raises, pagoda must fail too (with the raise_exception message).
"""
import copy
import datetime
import json
import os
import pathlib
import random
import subprocess

import pytest
from conftest import find_tools

jinja2 = pytest.importorskip("jinja2")
from jinja2 import nodes  # noqa: E402
from jinja2.ext import Extension, loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = 1_700_000_000  # the clock both sides give strftime_now()


@pytest.fixture(scope="session")
def tool() -> pathlib.Path:
    """tests/tools/render_template."""
    return find_tools("render_template") / "render_template"


# ---- jinja2 as transformers configures it ----

class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: marks assistant text for transformers' masks; it
    renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def hf_environment(**options):
    env = ImmutableSandboxedEnvironment(trim_blocks=options.get("trim_blocks", True),
                                        lstrip_blocks=options.get("lstrip_blocks", True),
                                        keep_trailing_newline=options.get("keep_trailing_newline",
                                                                          False),
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.fromtimestamp(NOW).strftime(fmt)
    return env


HF = hf_environment()


def jinja_render(template, context, options=None):
    """{"output": text} or {"error": message, "raised": raise_exception's message or None}."""
    env = hf_environment(**options) if options else HF
    try:
        return {"output": env.from_string(template).render(**copy.deepcopy(context))}
    except jinja2.exceptions.TemplateError as e:
        raised = str(e) if type(e) is jinja2.exceptions.TemplateError else None
        return {"error": f"{type(e).__name__}: {e}", "raised": raised}
    except Exception as e:  # noqa: BLE001 - any Python error is an error pagoda must also raise
        return {"error": f"{type(e).__name__}: {e}", "raised": None}


def pagoda_render(tool, cases):
    """Renders [(template, context, options)] in one process; returns [{"output"} | {"error"}]."""
    request = [{"template": t, "context": c, "options": {"now_unix": NOW, **(o or {})}}
               for t, c, o in cases]
    r = subprocess.run([str(tool)], input=json.dumps(request), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"render_template failed: {r.stderr}"
    results = json.loads(r.stdout)
    assert len(results) == len(cases)
    return results


def compare(tool, cases):
    """Every case renders identically in pagoda and jinja2, or fails in both."""
    results = pagoda_render(tool, cases)
    mismatches = []
    for (template, context, options), ours in zip(cases, results):
        ref = jinja_render(template, context, options)
        if "output" in ref:
            if ours.get("output") != ref["output"]:
                mismatches.append((template, context, ref, ours))
        elif "error" not in ours or (ref["raised"] and ref["raised"] not in ours["error"]):
            mismatches.append((template, context, ref, ours))
    report = "\n".join(f"template {t!r}\n  context {json.dumps(c)[:200]}\n  jinja2: {r!r}\n"
                       f"  pagoda: {o!r}" for t, c, r, o in mismatches[:10])
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ:\n{report}"
    return results


# ---- conversations ----

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}},
        "required": ["city"]}}}]

CONVERSATIONS = {
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Hello!"}],
    "multi_turn": [{"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello, how can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "system_multi_turn": [{"role": "system", "content": "  Be nice.  "},
                          {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": " Sure "},
                          {"role": "user", "content": "Again"}],
    "unicode": [{"role": "user", "content": "Grüße, 世界! 🎉 ñandú — «ok»\ttab"}],
    "jinja_looking": [{"role": "user",
                       "content": "Print {{ x }} and {% if y %} {# z #} literally"}],
    "tool_calls": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "Sunny, 20C"},
        {"role": "tool", "tool_call_id": "call00001", "content": "{\"ok\": true}"}],
    "bad_alternation": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    "empty": [],
}


def apply_context(messages, add_generation_prompt, tools=None):
    return {"messages": messages, "tools": tools, "documents": None,
            "add_generation_prompt": add_generation_prompt, "bos_token": "<s>",
            "eos_token": "</s>"}


def conversation_cases(template):
    cases = []
    for messages in CONVERSATIONS.values():
        for add_generation_prompt in (True, False):
            for tools in (None, TOOLS):
                context = apply_context(messages, add_generation_prompt, tools)
                cases.append((template, context, None))
    return cases


# ---- templates from real GGUF files ----

def gguf_template(path):
    gguf = pytest.importorskip("gguf")
    field = gguf.GGUFReader(str(path)).fields.get("tokenizer.chat_template")
    assert field is not None, f"{path} has no tokenizer.chat_template"
    return bytes(field.parts[field.data[0]]).decode("utf-8")


@pytest.mark.parametrize("name", ["ggml-vocab-llama-bpe.gguf", "ggml-vocab-phi-3.gguf"])
def test_shared_gguf_templates(tool, shared_dir, name):
    compare(tool, conversation_cases(gguf_template(shared_dir / "testdata" / "vocab" / name)))


def test_smollm2_template(tool):
    path = ROOT / "models" / "smollm2-135m-instruct-q4_1.gguf"
    if not path.exists():
        pytest.skip(f"*** {path} is absent: run scripts/setup; SKIPPING ***")
    compare(tool, conversation_cases(gguf_template(path)))


# ---- gpt-oss's harmony template (tests/data/templates, see PROVENANCE.md) ----

GPT_OSS = ROOT / "tests" / "data" / "templates" / "openai-gpt-oss-120b.jinja"

HARMONY_TURNS = [
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "thinking": "I should call get_weather.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 20C"}]
# A later final answer drops the thinking before the call.
HARMONY_DONE = HARMONY_TURNS + [
    {"role": "assistant", "content": "Sunny, 20C.", "thinking": "Report it."},
    {"role": "user", "content": "And tomorrow?"}]


def test_gpt_oss_template(tool):
    """The real gpt-oss template renders as jinja2 renders it: every conversation, and one with
    the earlier thinking, a tool call and its result, the developer role and reasoning_effort."""
    source = GPT_OSS.read_text()
    cases = conversation_cases(source)
    for effort in (None, "low", "high"):
        for turns in (HARMONY_DONE, HARMONY_TURNS):
            for add_generation_prompt in (False, True):
                context = apply_context(turns, add_generation_prompt, TOOLS)
                if effort:
                    context["reasoning_effort"] = effort
                cases.append((source, context, None))
    results = compare(tool, cases)
    text = results[len(cases) - 1]["output"]
    assert ("<|start|>assistant<|channel|>analysis<|message|>I should call get_weather.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
            '{"city": "Paris"}<|call|><|start|>functions.get_weather to=assistant'
            '<|channel|>commentary<|message|>"Sunny, 20C"<|end|>') in text, text
    assert "Reasoning: high" in text and text.endswith("<|start|>assistant")


# ---- pagoda's built-in templates ----

def builtin_source(tool, name):
    r = subprocess.run([str(tool), "--source", name], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout, r.stderr
    return r.stdout


@pytest.mark.parametrize("name", ["llama3", "chatml", "mistral", "gemma"])
def test_builtin_templates(tool, name):
    source = builtin_source(tool, name)
    results = compare(tool, conversation_cases(source))
    assert any("output" in r and r["output"] for r in results)


@pytest.mark.parametrize("name", ["mistral", "gemma"])
def test_builtin_templates_raise_on_bad_alternation(tool, name):
    source = builtin_source(tool, name)
    context = apply_context(CONVERSATIONS["bad_alternation"], True)
    ref = jinja_render(source, context)
    assert ref.get("raised", "").startswith("Conversation roles must alternate"), ref
    [ours] = pagoda_render(tool, [(source, context, None)])
    assert "raise_exception: Conversation roles must alternate" in ours.get("error", ""), ours


def test_unknown_builtin_is_refused(tool):
    r = subprocess.run([str(tool), "--source", "nope"], capture_output=True, text=True)
    assert r.returncode == 1 and "nope" in r.stderr


# ---- feature snippets ----

SNIPPET_CONTEXT = {
    "x": [3, 1, 2], "d": {"b": 1, "a": 2}, "s": "Hello, World", "e": "", "n": -7, "f": 1.25,
    "u": "ÄÖü ß ǅ ﬁ İ Σσς", "text": "  Hello,  World!\nSecond line\n\n  third ",
    "items": [{"name": "b", "age": 3, "tags": ["x"]}, {"name": "A", "age": 1},
              {"name": "a", "age": 3, "tags": []}],
    "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
             {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}],
    "m": {"z": 1, "B": 2, "a": {"n": [1, {"k": None}]}},
}

SNIPPETS = [
    # printing and literals
    "{{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.00001 }} {{ -0.0 }} {{ 1e16 }}"
    "{{ 123456789.123 }}",
    "{{ [none, true, 'a\\'b', \"x\\\"y'\"] }}|{{ (1,) }}|{{ () }}|{{ {'a': [1, (2, 3)]} }}",
    "{{ 'tab\\there' }}|{{ '\\x41\\u00e9\\U0001F600' }}|{{ '\\d' }}|{{ 'o\\101' }}|{{ \"a\" 'b' }}",
    "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2.5E+2 }} {{ 1_0.0_1 }}",
    # arithmetic and logic
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"
    "{{ 2 ** 3 ** 2 }}",
    "{{ 5 % -3 }} {{ 5.5 % 2 }} {{ -5.5 // 2 }} {{ 0.5 // 0.1 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }}",
    "{{ 'a' ~ 1 ~ none ~ missing }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ (1,) * 2 }} {{ -2 ** 2 }}",
    "{{ 'abc' is string and 3 }}{{ '' or 'x' }}{{ 0 and 1 }}{{ not 1 == 2 }}{{ 1 < 2 < 3 }}",
    "{{ 1 == 1.0 }}{{ true == 1 }}{{ (1, 2) == [1, 2] }}{{ missing == other }}"
    "{{ missing == none }}",
    "{{ 'a' in 'cat' }}{{ 1 in x }}{{ 'b' in d }}{{ 4 not in x }}{{ 1 in missing }}",
    "{{ x if false }}|{{ 1 if true else 2 }}|{{ 1 if false else 2 if false else 3 }}",
    "{{ '%s=%05.1f|%-3d|%x|%r|%c' % ('k', 3.14159, 7, 255, 'q', 65) }}|{{ '%(a)s' % {'a': 5} }}",
    # attributes, items, slices
    "{{ d.a }}{{ d['b'] }}{{ x.0 }}{{ x[-1] }}{{ s[1] }}{{ x[10] }}{{ d.nope }}{{ x.foo }}",
    "{{ x[1:] }}|{{ x[::-1] }}|{{ s[::-2] }}|{{ x[5:] }}|{{ s[-5:] }}|{{ u[2:5] }}",
    "{{ d.items()|list }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('z', 0) }}",
    # statements
    "{% for i in x %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
    "{% for i in x if i > 1 %}{{ i }}/{{ loop.length }} {% else %}none{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}",
    "{% for i in x %}{{ loop.previtem }}-{{ loop.nextitem }}{{ loop.cycle('a', 'b') }}"
    "{{ loop.changed(i > 1) }};{% endfor %}",
    "{% for i in x %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% if i == 2 %}{% break %}"
    "{% endif %}{% endfor %}",
    "{% set z = 1 %}{% for i in [1, 2] %}{{ z }}{% set z = z + 1 %}{{ z }},{% endfor %}|{{ z }}",
    "{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% with a = 1 %}{{ a }}{% endwith %}{{ a }}",
    "{% set ns = namespace(n=0, l=[]) %}{% for i in x %}{% set ns.n = ns.n + i %}"
    "{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.n }}{{ ns.l }}{{ ns }}",
    "{% set a, b = 'xy' %}{{ b }}{{ a }}{% set t %}  a {{ s }}{% endset %}[{{ t }}]",
    "{% set t | trim | upper %}  a  {% endset %}[{{ t }}]"
    "{% filter title %}hi {{ s }}{% endfilter %}",
    "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}"
    "{{ m(1) }}|{{ m(1, 3, 4, z=5) }}",
    "{% macro m(a, b=a) %}{{ b }}{% endmacro %}{{ m(7) }}{% macro n() %}{{ y }}{% endmacro %}"
    "{% set y = 1 %}{{ n() }}",
    "{% macro m(a) %}<{{ caller() }}{{ a }}>{% endmacro %}{% call m(1) %}in{% endcall %}"
    "|{% call(v) m(2) %}[{{ v }}]{% endcall %}",
    "{% generation %}kept {{ s }}{% endgeneration %}|{% raw %}{{ raw }}{% endraw %}",
    # filters
    "{{ '  a  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ text|title }}|{{ 'aBC'|capitalize }}",
    "{{ u|upper }}|{{ u|lower }}|{{ u|title }}|{{ u|capitalize }}|{{ u.title() }}|{{ u|length }}",
    "{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}|{{ text|wordcount }}",
    "{{ text|indent }}|{{ text|indent(3, first=true, blank=true) }}|{{ 'ab'|center(7) }}",
    "{{ '42.7'|int }}|{{ 'x'|int(5) }}|{{ '0x1A'|int(0, 16) }}|{{ '3'|float }}|{{ n|abs }}",
    "{{ 2.5|round }}|{{ 3.5|round }}|{{ 5|round }}|{{ 2.675|round(2) }}|{{ 7|round(-1) }}"
    "|{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(0, 'floor') }}",
    "{{ x|join(', ') }}|{{ x|first }}|{{ x|last }}|{{ x|length }}|{{ 'héllo'|count }}",
    "{{ 'abc'|list }}|{{ d|list }}|{{ x|reverse|list }}|{{ 'abc'|reverse }}|{{ x|sum }}",
    "{{ ['b', 'A', 'a', 'B']|sort }}|{{ ['b', 'A', 'a', 'B']|unique|list }}|{{ ['b', 'A']|max }}",
    "{{ items|sort(attribute='age,name')|map(attribute='name')|list }}"
    "|{{ items|sort(attribute='age', reverse=true)|map(attribute='name')|join }}",
    "{{ m|dictsort }}|{{ m|dictsort(true) }}|{{ d|items|list }}|{{ range(5)|batch(2, 0)|list }}",
    "{{ x|select('odd')|list }}{{ x|reject('odd')|list }}"
    "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}"
    "{{ items|rejectattr('tags')|map(attribute='name')|list }}{{ x|map('string')|join }}",
    "{{ items|map(attribute='tags.0', default='-')|list }}|{{ msgs|groupby('role') }}",
    "{{ missing|default('d') }}|{{ ''|default('e', true) }}|{{ none|d('n') }}",
    "{% set g = x|select('odd') %}{{ g|first }}{% for i in g %}{{ i }}{% endfor %}"
    "{% for i in g %}{{ i }}{% endfor %}{{ 'yes' if [1]|select('even') else 'no' }}",
    "{{ m|tojson }}|{{ m|tojson(indent=2) }}|{{ [1.5, none, {}]|tojson(indent=0) }}",
    "{{ u|tojson }}|{{ u|tojson(ensure_ascii=true) }}|{{ m|tojson(sort_keys=true) }}"
    "|{{ m|tojson(separators=(',', ':')) }}|{{ items|tojson(indent='\\t') }}",
    "{{ '<a href=\"x\">'|e }}|{{ '<i>'|safe + '<b>' }}|{{ ['<']|join|e }}|{{ '%s'|format('<') }}",
    # tests
    "{{ x is sequence }}{{ 'a' is sequence }}{{ d is mapping }}{{ missing is iterable }}"
    "{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}",
    "{{ none is none }}{{ x is callable }}{{ range is callable }}{{ 3 is odd }}"
    "{{ 9 is divisibleby 3 }}{{ 'a' is lower }}{{ missing is defined }}{{ 2 is eq 2 }}"
    "{{ 'upper' is filter }}{{ 2 is in x }}",
    # methods
    "{{ text.split() }}|{{ text.split(',', 1) }}|{{ text.rsplit(None, 1) }}"
    "|{{ text.splitlines() }}",
    "{{ text.strip() }}|{{ text.lstrip(' H') }}|{{ 'xa'.rstrip('a') }}|{{ text.partition(',') }}",
    "{{ s.startswith('He') }}{{ s.endswith(('x', 'd')) }}{{ u.find('ß') }}{{ s.count('l') }}"
    "{{ s.replace('l', 'L', 2) }}{{ '-'.join(['a', 'b']) }}{{ s.upper().lower() }}",
    "{{ '{} and {name} {0}'.format(1, name='n') if false else '{0}{1}{0}'.format('a', 'b') }}"
    "|{{ '{:>6}|{:.2f}|{:,}|{:x}|{!r}'.format('a', 2, 1234567, 255, 'q') }}",
    "{{ x.index(2) }}{{ x.count(5) }}{{ s.zfill(15) }}{{ s.center(16, '*') }}",
    # globals
    "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}{{ dict(a=1, b=[2]) }}",
    "{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ namespace(a=1) }}",
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # jinja2 decoding '\\d' in a literal
def test_feature_snippets(tool):
    compare(tool, [(s, SNIPPET_CONTEXT, None) for s in SNIPPETS])


ERROR_SNIPPETS = [
    "{{ raise_exception('Bad role: ' ~ msgs[0].role) }}", "{{ foo.bar }}", "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}", "{{ x|nofilter }}", "{{ 1 is nope }}", "{% set y = [] %}{{ y.append(1) }}",
    "{{ range(1000000) }}", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{{ [1, 'a']|sort }}",
    "{% for a, b in [1] %}{% endfor %}", "{{ missing|tojson }}", "{{ x[::0] }}", "{{ d[1:] }}",
    "{% if x %}", "{{ x", "{% endfor %}", "{% include 'other.j2' %}", "{{ (1 }}",
]


def test_error_snippets_fail_in_both(tool):
    results = compare(tool, [(s, SNIPPET_CONTEXT, None) for s in ERROR_SNIPPETS])
    assert all("error" in r for r in results)
    assert results[0]["error"].endswith("raise_exception: Bad role: system")


def test_object_key_order_is_kept(tool):
    tools = [{"type": "function", "function": {"name": "z", "parameters": {"zeta": 1, "alpha": 2}}}]
    template = "{{ tools|tojson }}{% for k in tools[0].function.parameters %}{{ k }}{% endfor %}"
    [ours] = compare(tool, [(template, {"tools": tools}, None)])
    assert ours["output"].index("zeta") < ours["output"].index("alpha")


# ---- seeded random templates ----

def random_whitespace_template(rng, depth=0):
    text = ["", " ", "  ", "\n", "\n\n", "\t", " \n ", "a", "b c", "\r\n", "x\n  ", "\u00a0"]

    def sign():
        return rng.choice(["", "", "-", "+"])

    def tag(body):
        return "{%" + sign() + " " + body + " " + rng.choice(["", "-", "+"]) + "%}"

    def piece(d):
        r = rng.random()
        if r < 0.35 or d > 2:
            return rng.choice(text)
        if r < 0.5:
            return "{{" + rng.choice(["", "-", "+"]) + " 'v' " + rng.choice(["", "-"]) + "}}"
        if r < 0.6:
            return "{#" + rng.choice(["", "-"]) + " c " + rng.choice(["", "-", "+"]) + "#}"
        if r < 0.68:
            return ("{%" + sign() + " raw " + rng.choice(["", "-"]) + "%}" + rng.choice(text)
                    + "{{ r }}" + "{%" + sign() + " endraw " + sign() + "%}")
        inner = "".join(piece(d + 1) for _ in range(rng.randint(0, 3)))
        if r < 0.85:
            return tag("if true") + inner + tag("endif")
        return tag("for i in [1, 2]") + inner + tag("endfor")

    return "".join(piece(depth) for _ in range(rng.randint(1, 5))) + rng.choice(["", "\n", " "])


def test_random_whitespace_control(tool):
    rng = random.Random(2024)
    option_sets = [None, {"trim_blocks": False}, {"lstrip_blocks": False},
                   {"trim_blocks": False, "lstrip_blocks": False}, {"keep_trailing_newline": True}]
    compare(tool, [(random_whitespace_template(rng), {}, rng.choice(option_sets))
                   for _ in range(600)])


ATOMS = ["1", "0", "-3", "2.5", "'ab'", "''", "'A b c'", "none", "true", "x", "d", "s", "e",
         "missing", "[1, 2]", "[]", "('a', 1)", "{'k': 1}", "msgs", "msgs[0]", "n", "f", "'%s'"]
OPERATORS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "first", "last", "list", "upper", "trim", "title", "string", "int", "float",
           "abs", "round", "sort", "unique|list", "reverse|list", "join(',')", "default('D')",
           "tojson", "items|list", "sum", "min", "max", "wordcount", "indent(2)", "escape",
           "map('string')|list", "select|list", "selectattr('role')|list", "batch(2)|list"]
TESTS = ["defined", "none", "string", "number", "integer", "mapping", "iterable", "sequence",
         "odd", "divisibleby 2", "eq 1", "in [1, 'ab']"]
METHODS = ["upper()", "strip()", "split()", "startswith('a')", "replace('a','x')", "find('b')",
           "title()", "get('k')", "keys()|list", "items()|list", "index(1)", "format(1)"]


def random_expression(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(ATOMS)
    sub = lambda: random_expression(rng, depth + 1)  # noqa: E731
    if r < 0.45:
        return f"({sub()} {rng.choice(OPERATORS)} {sub()})"
    if r < 0.6:
        return f"({sub()}|{rng.choice(FILTERS)})"
    if r < 0.7:
        return f"({sub()} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if r < 0.78:
        return f"{rng.choice(ATOMS)}.{rng.choice(METHODS)}"
    if r < 0.86:
        return f"({sub()} if {sub()} else {sub()})"
    if r < 0.93:
        return rng.choice(["x", "s", "msgs", "n", "d", "'ab'"]) + rng.choice(
            ["[0]", "[-1]", "[1:]", "[::-1]", "['k']"])
    return f"[{sub()}, (not {sub()})]"


def test_random_expressions(tool):
    rng = random.Random(7)
    cases = []
    for _ in range(800):
        if rng.random() < 0.2:
            template = ("{% for i in " + random_expression(rng) + " %}{{ loop.index }}:{{ i }},"
                        "{% else %}E{% endfor %}")
        else:
            template = "{{ " + random_expression(rng) + " }}"
        cases.append((template, SNIPPET_CONTEXT, None))
    compare(tool, cases)
