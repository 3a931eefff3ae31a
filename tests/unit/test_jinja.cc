// The chat template interpreter, feature by feature: whitespace rules, expressions, statements,
// filters, tests, methods, apply() and the built-in templates. Expected strings are what Python
// jinja2 renders with Hugging Face transformers' settings (tests/python/test_chat_template.py
// checks the same behaviour against jinja2 itself).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "template/chat_template.h"
#include "unit/jinja_test_util.h"

namespace pagoda {
namespace {

using nlohmann::json;

std::string render(const std::string& src, const json& ctx = json::object(),
                   TemplateOptions options = {}) {
  return ChatTemplate(src, {}, options).render(ctx);
}

std::string error_of(const std::string& src, const json& ctx = json::object(),
                     TemplateLimits limits = {}) {
  return test::jinja_error_of(src, ctx, limits);
}

const json kCtx = {{"x", {1, 2, 3}},
                   {"d", {{"a", 1}, {"b", 2}}},
                   {"s", "Hello World"},
                   {"messages", {{{"role", "user"}, {"content", "hi"}}}}};

TEST(JinjaWhitespace, TrimAndLstripBlocksByDefault) {
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("{% for i in [1, 2] %}\n- {{ i }}\n{% endfor %}\n"), "- 1\n- 2\n");
  EXPECT_EQ(render("  {# note #}\nx"), "x");
  // Expression tags are neither trimmed nor lstripped.
  EXPECT_EQ(render("  {{ 'x' }}\n"), "  x");
}

TEST(JinjaWhitespace, JinjaDefaultsWhenAsked) {
  TemplateOptions plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc", {}, plain), "a\n  \n  b\n  \nc");
  plain.keep_trailing_newline = true;
  EXPECT_EQ(render("x\n", {}, plain), "x\n");
}

TEST(JinjaWhitespace, MinusAndPlusMarkers) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a {{- 'x' -}} b"), "axb");
  EXPECT_EQ(render("text {#- c #} more"), "text more");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true %}x{% endif +%}\ny"), "x\ny");
  EXPECT_EQ(render("{%- for i in [1, 2, 3] -%}\n{{ i }}\n{%- endfor %}"), "123");
}

TEST(JinjaWhitespace, TrailingNewlineAndCarriageReturns) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaLexer, RawBlocksAndLiterals) {
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
  EXPECT_EQ(render(R"({{ 'tab\there' }}|{{ "\x41\u00e9\U0001F600" }}|{{ '\d' }}|{{ 'o\101' }})"),
            "tab\there|Aé😀|\\d|oA");
  EXPECT_EQ(render("{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 1e-3 }}"),
            "1000 31 15 5 1500.0 0.001");
  EXPECT_EQ(render("{{ 'a' \"b\" 'c' }}"), "abc");
}

TEST(JinjaExpr, PythonPrinting) {
  EXPECT_EQ(
      render("{{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 1e20 }} {{ 0.00001 }} {{ -0.0 }}"),
      "None True False 1.0 1e+20 1e-05 -0.0");
  EXPECT_EQ(render("{{ [none, true, 'a\\'b', \"x\\\"y'\"] }}"), R"([None, True, "a'b", 'x"y\''])");
  EXPECT_EQ(render("{{ (1,) }} {{ () }} {{ {'a': [1, 2]} }} {{ 0.1 + 0.2 }}"),
            "(1,) () {'a': [1, 2]} 0.30000000000000004");
  EXPECT_EQ(render("{{ missing }}|{{ d.nope }}|{{ x[10] }}", kCtx), "||");
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(
      render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
      "3 -4 2 3.5 1024 0.5");
  EXPECT_EQ(render("{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 5.5 % 2 }} {{ -5.5 // 2 }}"),
            "64 4 1.5 -3.0");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ missing }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ (1,) * 2 }}"),
            "a1None ababab [1, 2] (1, 1)");
  EXPECT_EQ(render("{{ '%s=%05.1f|%-3d|%x' % ('k', 3.14159, 7, 255) }}"), "k=003.1|7  |ff");
}

TEST(JinjaExpr, LogicAndComparison) {
  EXPECT_EQ(render("{{ 'abc' is string and 3 }}{{ '' or 'x' }}{{ 0 and 1 }}{{ not 1 == 2 }}"),
            "3x0True");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ (1,) == [1] }}"),
            "TrueFalseTrueTrueFalse");
  EXPECT_EQ(render("{{ 'a' in 'cat' }}{{ 1 in x }}{{ 'b' in d }}{{ 4 not in x }}{{ 1 in missing }}",
                   kCtx),
            "TrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{{ missing == also_missing }}{{ missing == none }}"), "TrueFalse");
  EXPECT_EQ(
      render("{{ 1 if true else 2 }}|{{ 1 if false }}|{{ 1 if false else 2 if false else 3 }}"),
      "1||3");
}

TEST(JinjaExpr, AttributesItemsAndSlices) {
  EXPECT_EQ(render("{{ d.a }}{{ d['b'] }}{{ x.0 }}{{ x[-1] }}{{ s[1] }}", kCtx), "1213e");
  EXPECT_EQ(render("{{ x[1:] }}|{{ x[::-1] }}|{{ s[::-2] }}|{{ x[5:] }}|{{ s[-5:] }}", kCtx),
            "[2, 3]|[3, 2, 1]|drWolH|[]|World");
  EXPECT_EQ(render("{{ messages[0].role }}{{ messages[0]['content'] }}", kCtx), "userhi");
  // dict methods win over keys for attribute access, as in Python.
  EXPECT_EQ(render("{{ d.items() | list }}", kCtx), "[('a', 1), ('b', 2)]");
}

TEST(JinjaStatements, IfElifElse) {
  EXPECT_EQ(render("{% if x %}yes{% else %}no{% endif %}", kCtx), "yes");
  EXPECT_EQ(render("{% if [] %}a{% elif 0 %}b{% elif 'z' %}c{% else %}d{% endif %}"), "c");
}

TEST(JinjaStatements, ForLoops) {
  EXPECT_EQ(
      render("{% for i in x %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
             "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
             kCtx),
      "10TrueFalse332;21FalseFalse321;32FalseTrue310;");
  EXPECT_EQ(render("{% for i in x if i > 1 %}{{ i }}/{{ loop.length }} {% endfor %}", kCtx),
            "2/2 3/2 ");
  EXPECT_EQ(render("{% for i in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", kCtx), "a=1,b=2,");
  EXPECT_EQ(
      render("{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}", kCtx),
      "abab");
  EXPECT_EQ(render("{% for i in x %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", kCtx),
            "-2;1-3;2-;");
  EXPECT_EQ(
      render("{% for i in x %}{{ loop.cycle('a', 'b') }}{{ loop.changed(i > 1) }}{% endfor %}",
             kCtx),
      "aTruebTrueaFalse");
  EXPECT_EQ(render("{% for i in x %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}"
                   "{% if i == 3 %}{% break %}{% endif %}{% endfor %}",
                   kCtx),
            "13");
}

TEST(JinjaStatements, ScopingFollowsJinja) {
  // Assignments in a loop body do not leak, and each iteration starts from the outer value.
  EXPECT_EQ(
      render("{% set z = 1 %}{% for i in [1, 2] %}{{ z }}{% set z = z + 1 %}{{ z }},{% endfor %}"
             "|{{ z }}"),
      "12,12,|1");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% with a = 1 %}{{ a }}{% endwith %}{{ a }}"), "1");
  EXPECT_EQ(render("{% set a, b = 'xy' %}{{ b }}{{ a }}"), "yx");
}

TEST(JinjaStatements, SetBlocksAndFilterBlocks) {
  EXPECT_EQ(render("{% set t %}  a {{ s }}{% endset %}[{{ t }}]", kCtx), "[  a Hello World]");
  EXPECT_EQ(render("{% set t | trim | upper %}  a  {% endset %}[{{ t }}]"), "[A]");
  EXPECT_EQ(render("{% filter upper %}hi {{ s }}{% endfilter %}", kCtx), "HI HELLO WORLD");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(JinjaStatements, MacrosAndCallBlocks) {
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}"
                   "{{ m(1) }}|{{ m(1, 3, 4, z=5) }}"),
            "12(){}|13(4,){'z': 5}");
  EXPECT_EQ(render("{% macro m(a, b=a) %}{{ b }}{% endmacro %}{{ m(7) }}"), "7");
  EXPECT_EQ(render("{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}"), "1");
  EXPECT_EQ(render("{% macro m(a) %}<{{ caller() }}{{ a }}>{% endmacro %}"
                   "{% call m(1) %}inner{% endcall %}|{% call(v) m(2) %}[{{ v }}]{% endcall %}"),
            "<inner1>|<[]2>");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("{{ '  a  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}"),
            "a|a|ABab");
  EXPECT_EQ(render("{{ 'hello wORLD-foo(bar'|title }}|{{ 'aBC'|capitalize }}|{{ 'ß'|upper }}"),
            "Hello World-Foo(Bar|Abc|SS");
  EXPECT_EQ(render("{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}"), "bba|-a-b-c-");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}"),
            "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(
      render("{{ 'one two, three'|wordcount }}|{{ '<a href=\"x\">'|e }}|{{ 'ab'|center(6) }}"),
      "3|&lt;a href=&#34;x&#34;&gt;|  ab  ");
  EXPECT_EQ(render("{{ '%s-%s'|format(1, 'b') }}|{{ 5|string ~ 'x' }}|{{ 'x'|safe }}"), "1-b|5x|x");
}

TEST(JinjaFilters, Numbers) {
  EXPECT_EQ(render("{{ '42.7'|int }}|{{ 'x'|int(5) }}|{{ '0x1A'|int(0, 16) }}|{{ '3'|float }}"),
            "42|5|26|3.0");
  EXPECT_EQ(
      render("{{ -3|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 5|round }}|{{ 2.675|round(2) }}"),
      "3|2.0|4.0|5|2.67");
  EXPECT_EQ(render("{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(0, 'floor') }}|{{ [1, 2.5]|sum }}"),
            "3.0|2.0|3.5");
}

TEST(JinjaFilters, Sequences) {
  EXPECT_EQ(
      render("{{ x|join(', ') }}|{{ x|first }}|{{ x|last }}|{{ x|length }}|{{ 'héllo'|count }}",
             kCtx),
      "1, 2, 3|1|3|3|5");
  EXPECT_EQ(render("{{ 'abc'|list }}|{{ d|list }}|{{ x|reverse|list }}|{{ 'abc'|reverse }}", kCtx),
            "['a', 'b', 'c']|['a', 'b']|[3, 2, 1]|cba");
  EXPECT_EQ(render("{{ ['b', 'A', 'a', 'B']|sort }}|{{ ['b', 'A', 'a', 'B']|unique|list }}"
                   "|{{ ['b', 'A', 'a']|max }}|{{ [3, 1, 2]|min }}"),
            "['A', 'a', 'b', 'B']|['b', 'A']|b|1");
  EXPECT_EQ(render("{{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|list }}"
                   "|{{ [3, 1]|sort(reverse=true) }}"),
            "[1, 2]|[3, 1]");
  EXPECT_EQ(
      render(
          "{{ {'b': 1, 'A': 2}|dictsort }}|{{ d|items|list }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}",
          kCtx),
      "[('A', 2), ('b', 1)]|[('a', 1), ('b', 2)]|[[1, 2], [3, 4], [5]]");
  EXPECT_EQ(
      render("{{ x|select('odd')|list }}{{ x|reject('odd')|list }}"
             "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}"
             "{{ messages|rejectattr('role')|list }}{{ x|map('string')|join }}",
             kCtx),
      "[1, 3][2]['hi'][]123");
  EXPECT_EQ(render("{{ missing|default('d') }}|{{ ''|default('e', true) }}|{{ none|d('n') }}"),
            "d|e|None");
}

TEST(JinjaFilters, GeneratorsAreOneShot) {
  // As in Python, select/map return one-shot iterators that are always true.
  EXPECT_EQ(render("{% set g = [1, 2, 3]|select('odd') %}{{ g|first }}{% for i in g %}{{ i }}"
                   "{% endfor %}{% for i in g %}{{ i }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{{ 'yes' if [1]|select('even') else 'no' }}"), "yes");
  EXPECT_EQ(error_of("{{ [1]|select('odd')|length }}"),
            "chat template 1:22: TypeError: object of type 'generator' has no len()");
}

TEST(JinjaFilters, ToJsonIsJsonDumps) {
  EXPECT_EQ(render("{{ d|tojson }}", kCtx), R"({"a": 1, "b": 2})");
  EXPECT_EQ(render("{{ d|tojson(indent=2) }}", kCtx), "{\n  \"a\": 1,\n  \"b\": 2\n}");
  EXPECT_EQ(render("{{ [1.5, none, true, {}]|tojson(indent=0) }}"), "[\n1.5,\nnull,\ntrue,\n{}\n]");
  EXPECT_EQ(render("{{ 'é<\"\\n'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}"),
            R"("é<\"\n"|"\u00e9")");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [2]}|tojson(separators=(',', ':'), sort_keys=true) }}"),
            R"({"a":[2],"b":1})");
  // Key order is the caller's when the context keeps it.
  ChatTemplate t("{{ o|tojson }}");
  EXPECT_EQ(t.render_ordered(nlohmann::ordered_json::parse(R"({"o": {"z": 1, "a": 2}})")),
            R"({"z": 1, "a": 2})");
}

TEST(JinjaTests, TypesAndValues) {
  EXPECT_EQ(
      render("{{ x is sequence }}{{ 'a' is sequence }}{{ d is mapping }}{{ d is iterable }}"
             "{{ missing is iterable }}{{ 1 is number }}{{ true is number }}{{ true is integer }}",
             kCtx),
      "TrueTrueTrueTrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{{ 1.0 is float }}{{ none is none }}{{ x is callable }}{{ range is callable }}"
                   "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is lower }}",
                   kCtx),
            "TrueTrueFalseTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ missing is defined }}{{ missing is undefined }}{{ x is not defined }}"
                   "{{ true is boolean }}{{ false is false }}{{ 2 is eq 2 }}{{ 2 is equalto 3 }}"
                   "{{ 'upper' is filter }}{{ 2 is in x }}{{ 1 is sameas 1 }}",
                   kCtx),
            "FalseTrueFalseTrueTrueTrueFalseTrueTrueTrue");
}

TEST(JinjaMethods, StringDictList) {
  EXPECT_EQ(render("{{ '  a '.strip() }}|{{ 'xa'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}"
                   "|{{ ' a  b '.split() }}|{{ 'a b c'.rsplit(' ', 1) }}"),
            "a|a|['a', 'b', '', 'c']|['a', 'b']|['a b', 'c']");
  EXPECT_EQ(
      render("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'héllo'.find('l') }}"
             "{{ 'aaa'.count('a') }}{{ 'hello world'.title() }}{{ '-'.join(['a', 'b']) }}"),
      "TrueTrue23Hello Worlda-b");
  EXPECT_EQ(render("{{ '{} and {name}'.format(1, name='n') }}|{{ '{:>5}|{:.2f}'.format('a', 2) }}"),
            "1 and n|    a|2.00");
  EXPECT_EQ(render("{{ d.get('a') }}{{ d.get('z', 0) }}{{ d.keys()|list }}{{ d.values()|list }}"
                   "{{ x.index(2) }}{{ x.count(5) }}",
                   kCtx),
            "10['a', 'b'][1, 2]10");
}

TEST(JinjaGlobals, RangeNamespaceDictStrftime) {
  EXPECT_EQ(render("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}"),
            "[0, 1, 2][1, 3, 5][3, 2, 1]");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns }}"),
            "12<Namespace {'a': 1, 'b': 2}>");
  EXPECT_EQ(render("{{ dict(a=1, b=[2]) }}"), "{'a': 1, 'b': [2]}");
  TemplateOptions fixed;
  fixed.now_unix = 86400 * 365;
  std::string year = render("{{ strftime_now('%Y') }}", {}, fixed);
  EXPECT_TRUE(year == "1971" || year == "1970") << year;
}

TEST(JinjaApply, ContextVariables) {
  ChatTemplate t(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{{ add_generation_prompt }}{{ eos_token }}{{ tools is none }}{{ documents is none }}"
      "{{ custom }}");
  json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(t.apply(messages, true, "<s>", "</s>", {{"custom", 5}}),
            "<s>user:hi;True</s>TrueTrue5");
  EXPECT_EQ(t.apply(messages, false, "", "", {{"tools", {1}}}), "user:hi;FalseFalseTrue");
}

TEST(JinjaApply, JinjaLookingContentIsLiteral) {
  ChatTemplate t("{% for m in messages %}{{ m.content }}{% endfor %}");
  json messages = {{{"role", "user"}, {"content", "{{ x }} {% if y %} {# z #}"}}};
  EXPECT_EQ(t.apply(messages, false, "", ""), "{{ x }} {% if y %} {# z #}");
}

TEST(JinjaBuiltin, KnownNames) {
  for (const char* name : {"llama3", "chatml", "mistral", "gemma"}) {
    EXPECT_FALSE(builtin_chat_template(name).empty()) << name;
    EXPECT_NO_THROW(ChatTemplate{std::string(builtin_chat_template(name))}) << name;
  }
  EXPECT_TRUE(builtin_chat_template("nope").empty());
}

TEST(JinjaBuiltin, RenderConversations) {
  json conv = {{{"role", "system"}, {"content", "Be brief."}},
               {{"role", "user"}, {"content", "Hi"}},
               {{"role", "assistant"}, {"content", "Hello"}},
               {{"role", "user"}, {"content", "Bye"}}};
  auto apply = [&](const char* name, bool gen) {
    return ChatTemplate(std::string(builtin_chat_template(name))).apply(conv, gen, "<s>", "</s>");
  };
  EXPECT_EQ(apply("chatml", true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(apply("llama3", false),
            "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
  EXPECT_EQ(apply("mistral", true),
            "<s>[INST] Be brief.\n\nHi [/INST] Hello</s>[INST] Bye [/INST]");
  EXPECT_EQ(apply("gemma", true),
            "<s><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello"
            "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(JinjaBuiltin, BadAlternationRaises) {
  json conv = {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}};
  for (const char* name : {"mistral", "gemma"}) {
    ChatTemplate t{std::string(builtin_chat_template(name))};
    try {
      t.apply(conv, true, "<s>", "</s>");
      ADD_FAILURE() << name << " accepted two user turns in a row";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "raise_exception: Conversation roles must alternate user/assistant/user/"
                    "assistant/..."),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace pagoda
