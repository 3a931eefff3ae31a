// The chat template interpreter's failures: exact error messages with line:column, the render
// limits (steps, output size, recursion), the sandbox (no mutation, no dunder access) and hostile
// input (deep nesting, unterminated tags, huge loops, random bytes), plus concurrent renders.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "template/chat_template.h"
#include "unit/jinja_test_util.h"

namespace pagoda {
namespace {

using nlohmann::json;

std::string error_of(const std::string& src, const json& ctx = json::object(),
                     TemplateLimits limits = {}) {
  return test::jinja_error_of(src, ctx, limits);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

TEST(JinjaErrors, SyntaxErrorsNamePositionAndProblem) {
  EXPECT_EQ(error_of("{{ x"), "chat template 1:1: syntax error: unclosed '{{': missing '}}'");
  EXPECT_EQ(error_of("{% if x %}"),
            "chat template 1:11: syntax error: unexpected end of template: the 'if' tag at 1:4 was "
            "never closed (expected 'elif', 'else' or 'endif')");
  EXPECT_EQ(error_of("{% for x in y %}{% endif %}"),
            "chat template 1:20: syntax error: unexpected tag 'endif': the innermost open block "
            "is 'for' at 1:4, which expects 'endfor' or 'else'");
  EXPECT_EQ(error_of("{% endif %}"),
            "chat template 1:4: syntax error: unexpected tag 'endif': no open block expects it");
  EXPECT_EQ(error_of("a\n  {% foo %}"), "chat template 2:6: syntax error: unknown tag 'foo'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "chat template 1:4: syntax error: unterminated string literal");
  EXPECT_EQ(error_of("{# never closed"),
            "chat template 1:1: syntax error: missing end of comment tag ('#}')");
  EXPECT_EQ(error_of("{{ (1 }}"), "chat template 1:7: syntax error: unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{{ a + }}"),
            "chat template 1:8: syntax error: unexpected end of print statement '}}'");
  EXPECT_EQ(error_of("{{ x @ y }}"), "chat template 1:6: syntax error: unexpected character '@'");
  EXPECT_EQ(error_of("{% set 1 = 2 %}"),
            "chat template 1:8: syntax error: cannot assign to this expression");
  EXPECT_EQ(error_of("{% break %}"),
            "chat template 1:4: syntax error: 'break' outside of a for loop");
  EXPECT_EQ(error_of("{% macro m(a=1, b) %}{% endmacro %}"),
            "chat template 1:18: syntax error: non-default argument follows default argument");
  EXPECT_EQ(error_of("{{ 99999999999999999999 }}"),
            "chat template 1:4: syntax error: integer literal too large");
  EXPECT_EQ(error_of("{% raw %}abc"),
            "chat template 1:1: syntax error: missing end of raw directive ({% endraw %})");
}

TEST(JinjaErrors, NoFileAccessTags) {
  for (const char* tag : {"include 'x'", "import 'x' as y", "from 'x' import y", "extends 'x'"}) {
    std::string err = error_of(std::string("{% ") + tag + " %}");
    EXPECT_NE(err.find("is not supported: templates cannot load other templates"),
              std::string::npos)
        << err;
  }
}

TEST(JinjaErrors, RuntimeErrorsNameWhatFailed) {
  EXPECT_EQ(error_of("line1\n  {{ thing.attr }}"), "chat template 2:12: 'thing' is undefined");
  EXPECT_EQ(error_of("{{ foo() }}"), "chat template 1:7: 'foo' is undefined");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            "chat template 1:8: TypeError: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ 1 / 0 }}"), "chat template 1:6: ZeroDivisionError: division by zero");
  EXPECT_EQ(error_of("{{ [1]|nofilter }}"), "chat template 1:8: no filter named 'nofilter'");
  EXPECT_EQ(error_of("{{ 1 is notatest }}"), "chat template 1:9: no test named 'notatest'");
  EXPECT_EQ(error_of("{{ 'a'.nomethod() }}"),
            "chat template 1:16: 'str object' has no attribute 'nomethod'");
  EXPECT_EQ(error_of("{{ 1 < 'a' }}"),
            "chat template 1:4: TypeError: '<' not supported between instances of 'int' and 'str'");
  EXPECT_EQ(error_of("{% set ns = 5 %}{% set ns.a = 1 %}"),
            "chat template 1:20: cannot assign attribute on non-namespace object");
  EXPECT_EQ(error_of("{% set a, b = [1] %}"),
            "chat template 1:4: ValueError: not enough values to unpack (expected 2, got 1)");
  EXPECT_EQ(error_of("{{ missing|tojson }}"),
            "chat template 1:12: TypeError: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "chat template 1:35: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(error_of("{{ range(1000000) }}"),
            "chat template 1:9: OverflowError: Range too big. The sandbox blocks ranges larger "
            "than MAX_RANGE (100000).");
}

TEST(JinjaErrors, RaiseExceptionCarriesTheMessage) {
  EXPECT_EQ(error_of("{% for m in messages %}\n{{ raise_exception('Bad role: ' ~ m.role) }}"
                     "{% endfor %}",
                     {{"messages", {{{"role", "tool"}}}}}),
            "chat template 2:19: raise_exception: Bad role: tool");
}

TEST(JinjaErrors, SandboxRefusesMutationAndInternals) {
  EXPECT_EQ(error_of("{% set x = [] %}{{ x.append(1) }}"),
            "chat template 1:28: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(error_of("{{ {'a': 1}.pop('a') }}"),
            "chat template 1:16: access to attribute 'pop' of 'dict' object is unsafe.");
  EXPECT_EQ(error_of("{{ x.__class__.__mro__ }}", {{"x", {1}}}),
            "chat template 1:16: access to attribute '__class__' of 'list' object is unsafe.");
  // Printing an unsafe attribute (without using it) prints nothing, as in jinja2.
  EXPECT_EQ(ChatTemplate("{{ x.append }}|").render({{"x", {1}}}), "|");
}

TEST(JinjaLimits, Steps) {
  TemplateLimits limits;
  limits.max_steps = 1000;
  EXPECT_EQ(error_of("{% for i in range(100000) %}{% endfor %}", {}, limits),
            "chat template 1:18: evaluation step limit exceeded (max_steps=1000)");
  EXPECT_EQ(error_of("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", {},
                     limits),
            "(no error)");
  EXPECT_EQ(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                     "{% endfor %}"),
            "chat template 1:32: evaluation step limit exceeded (max_steps=1000000)");
}

TEST(JinjaLimits, OutputSize) {
  TemplateLimits limits;
  limits.max_output_bytes = 100;
  EXPECT_EQ(error_of("{% for i in range(1000) %}0123456789{% endfor %}", {}, limits),
            "chat template 1:27: output size limit exceeded (max_output_bytes=100)");
  EXPECT_EQ(error_of("{{ 'ab' * 1000 }}", {}, limits),
            "chat template 1:9: string result exceeds the output limit (max_output_bytes=100)");
  EXPECT_EQ(
      error_of("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
      "chat template 1:70: string result exceeds the output limit (max_output_bytes=4194304)");
}

TEST(JinjaLimits, RecursionDepth) {
  TemplateLimits limits;
  limits.max_depth = 10;
  EXPECT_EQ(error_of("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", {}, limits),
            "chat template 1:21: recursion depth limit exceeded (max_depth=10)");
  EXPECT_EQ(error_of(repeat("{% if true %}", 11) + repeat("{% endif %}", 11), {}, limits),
            "chat template 1:134: syntax error: blocks nested too deeply (more than 10 levels)");
  EXPECT_EQ(error_of("{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                     "{{ f(5) }}",
                     {}, limits),
            "(no error)");
}

TEST(JinjaHostile, DeepNestingIsRefusedNotCrashed) {
  const std::string nested_parens = "{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}";
  EXPECT_NE(error_of(nested_parens).find("expression nested too deeply"), std::string::npos);
  for (const std::string& src :
       {"{{ " + repeat("[", 50000) + repeat("]", 50000) + " }}",
        "{{ 1" + repeat(" + 1", 50000) + " }}", "{{ 1" + repeat("|abs", 50000) + " }}",
        "{{ " + repeat("not ", 50000) + "1 }}", "{{ " + repeat("-", 50000) + "1 }}",
        "{{ x" + repeat(".a", 50000) + " }}",
        "{{ " + repeat("(1 if 1 else ", 50000) + "1" + repeat(")", 50000) + " }}"}) {
    EXPECT_NE(error_of(src).find("nested too deeply"), std::string::npos) << src.substr(0, 40);
  }
  EXPECT_NE(error_of(repeat("{% for x in y %}", 50000)).find("blocks nested too deeply"),
            std::string::npos);
}

TEST(JinjaHostile, CyclesAndDeepValues) {
  EXPECT_EQ(error_of("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}"
                     "{% set ns.v = [ns.v] %}{% endfor %}"),
            "chat template 1:71: value nested too deeply (more than 200)");
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}"),
            "chat template 1:49: value nested too deeply (more than 200)");
  EXPECT_EQ(error_of("{% for i in [1, 2] %}{% set l = loop %}{{ l.changed(l) }}{% endfor %}"),
            "(no error)");
}

TEST(JinjaHostile, UnterminatedAndBrokenTags) {
  for (const char* src :
       {"{{", "{%", "{#", "{{ 'x' }", "{% if %}", "{% for %}", "{% set %}", "{{ x[ }}", "{{ {1: }}",
        "{% macro %}", "{% call %}", "{%- raw -%}", "{{ 'a\\", "{% if x %}{% elif %}", "{{ ) }}",
        "{{ x.0.0. }}", "{% filter %}x{% endfilter %}", "{% with %}", "{{ f(**) }}"}) {
    std::string err = error_of(src);
    EXPECT_EQ(err.rfind("chat template", 0), 0u) << src << " -> " << err;
  }
}

TEST(JinjaHostile, RandomBytesNeverCrash) {
  const std::string alphabet = "{}%#-+()[]'\"\\|.,:~*/=<> \n\taxyz019_ifelsendforinsetmacro";
  std::mt19937 rng(12345);
  TemplateLimits limits;
  limits.max_steps = 20000;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string src;
    int n = static_cast<int>(rng() % 60);
    for (int k = 0; k < n; ++k) {
      src.push_back(rng() % 20 == 0 ? static_cast<char>(rng() % 256)
                                    : alphabet[rng() % alphabet.size()]);
    }
    try {
      ChatTemplate(src, limits).render({{"x", {1, 2}}, {"y", "s"}});
    } catch (const Error&) {
    }
  }
}

TEST(JinjaConcurrency, OneTemplateManyThreads) {
  ChatTemplate t(std::string(builtin_chat_template("chatml")));
  json messages = {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U"}}};
  const std::string expected = t.apply(messages, true, "", "");
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) ok[k] += t.apply(messages, true, "", "") == expected ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(ok[k], 200);
}

}  // namespace
}  // namespace pagoda
