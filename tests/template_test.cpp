// minfer-test-libs: minfer_template minfer_common
// The Jinja interpreter (src/template): every real chat template of
// ../shared/chat-templates against Python Jinja2's reference renderings (byte for byte, or a
// refusal where the reference refused), then the language pieces one by one, errors with
// their line and column, sandbox limits, and a differential check against python3-jinja2 when
// it is installed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "template/template.h"

namespace minfer::tmpl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path corpus_dir() {
  return fs::path(MINFER_SHARED_DIR) / "chat-templates";
}

// ---- the 44 real templates x 8 conversations ---------------------------------------------

TEST(TemplateCorpus, EveryTemplateMatchesJinja2) {
  const fs::path dir = corpus_dir();
  if (!fs::exists(dir / "cases.json")) GTEST_SKIP() << dir << " is absent (MINFER_SHARED_DIR)";
  const Json cases = Json::parse(read_file(dir / "cases.json"));
  std::vector<fs::path> templates;
  for (const auto& e : fs::directory_iterator(dir / "templates")) templates.push_back(e.path());
  std::sort(templates.begin(), templates.end());
  int total = 0, passed = 0;
  for (const fs::path& tp : templates) {
    const std::string name = tp.stem().string();
    std::optional<Template> t;
    try {
      t = Template::parse(read_file(tp));
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": parse failed: " << e.what();
      total += static_cast<int>(cases.size());
      continue;
    }
    for (const Json& c : cases) {
      const std::string case_name = c["name"].get<std::string>();
      const fs::path expected = dir / "expected" / name / (case_name + ".expected");
      const fs::path refused = dir / "expected" / name / (case_name + ".error");
      ++total;
      std::string out;
      std::string error;
      try {
        out = t->render(c["context"]);
      } catch (const TemplateError& e) {
        error = e.what();
      }
      if (fs::exists(refused)) {
        EXPECT_FALSE(error.empty()) << name << "/" << case_name << ": Jinja2 refused ("
                                    << read_file(refused) << ") but we rendered:\n"
                                    << out;
        passed += !error.empty();
      } else {
        const std::string want = read_file(expected);
        EXPECT_EQ(error, "") << name << "/" << case_name;
        EXPECT_EQ(out, want) << name << "/" << case_name;
        passed += error.empty() && out == want;
      }
    }
  }
  std::printf("chat-template corpus: %d of %d renderings match Jinja2\n", passed, total);
  EXPECT_EQ(total, 352);
}

// ---- language pieces (expected strings come from Python Jinja2 3.1 in HF's configuration) --

const Json& unit_context() {
  static const Json ctx =
      Json::parse(R"({"xs": [1, 2, 3], "d": {"b": 2, "a": 1}, "s": "Hello World", "n": null})");
  return ctx;
}

std::string render(std::string_view src, const Json& ctx = unit_context()) {
  return Template::parse(src).render(ctx);
}

TemplateError render_error(std::string_view src, const Json& ctx = unit_context()) {
  try {
    render(src, ctx);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error from: " << src;
  return TemplateError(TemplateErrorKind::Type, "none");
}

TEST(TemplateLanguage, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|"
                   "{% endfor %}"),
            "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}-"
                   "{{ loop.cycle('a','b') }};{% endfor %}"),
            "-2-a;1-3-b;2--a;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in xs if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "1/2 3/2 ");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "1");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}{{ d|dictsort }}"),
            "b=2,a=1,[('a', 1), ('b', 2)]");
  // A `set` inside a loop lives for one iteration (Jinja2 scoping).
  EXPECT_EQ(render("{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]"
                   "{% endfor %}{{ y }}"),
            "[][5][]");
}

TEST(TemplateLanguage, SetNamespaceMacroCallFilterBlocks) {
  EXPECT_EQ(render("{% set ns = namespace(total=0) %}{% for x in xs %}"
                   "{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}"),
            "6");
  EXPECT_EQ(render("{% set x %}a{{ 1 + 1 }}b{% endset %}{{ x }}|"
                   "{% set y | upper %}abc{% endset %}{{ y }}"),
            "a2b|ABC");
  EXPECT_EQ(render("{% macro m(a, b=2, c=\"z\") %}{{ a }}{{ b }}{{ c }}{% endmacro %}"
                   "{{ m(1) }}{{ m(1, c=\"q\") }}{{ m(a=5, b=6) }}"),
            "12z12q56z");
  EXPECT_EQ(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}inner{% endcall %}"),
            "[inner]");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}"
                   "{% filter upper %}shout {{ s }}{% endfilter %}"
                   "{% generation %}g{% endgeneration %}{% raw %}{{ not parsed }}{% endraw %}"),
            "3SHOUT HELLO WORLDg{{ not parsed }}");
}

TEST(TemplateLanguage, StringMethods) {
  EXPECT_EQ(render("{{ s.split() }}{{ s.split('o', 1) }}{{ s.rsplit('o', 1) }}"
                   "{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.lower() }}{{ s.upper() }}"
                   "{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}"),
            "['Hello', 'World']['Hell', ' World']['Hello W', 'rld']x|hi|hello worldHELLO WORLD"
            "Hello WorldHello");
  EXPECT_EQ(render("{{ s.startswith('He') }}{{ s.endswith(('x','ld')) }}{{ s.find('o') }}"
                   "{{ s.count('o') }}{{ s.replace('o','0') }}"
                   "{{ '{}-{:>4}-{name}'.format(1, 'ab', name='n') }}"),
            "TrueTrue42Hell0 W0rld1-  ab-n");
  EXPECT_EQ(render("{{ '%s=%d %05.2f %-4s|' % ('k', 3, 3.14159, 'ab') }}{{ '%(a)s' % {'a': 1} }}"
                   "{{ '%s'|format('f') }}{{ strftime_now('%Y-%m-%d %A %B') }}"),
            "k=3 03.14 ab  |1f2026-11-29 Sunday November");
}

TEST(TemplateLanguage, Filters) {
  EXPECT_EQ(render("{{ xs|first }}{{ xs|last }}{{ xs|length }}{{ xs|join('-') }}{{ xs|sum }}"
                   "{{ xs|min }}{{ xs|max }}{{ xs|reverse|list }}{{ [3,1,2]|sort(reverse=true) }}"),
            "1331-2-3613[3, 2, 1][3, 2, 1]");
  EXPECT_EQ(render("{{ [{'a':2},{'a':1}]|sort(attribute='a') }}"
                   "{{ [{'a':2},{'b':1}]|map(attribute='a')|list }}"
                   "{{ xs|select('odd')|list }}{{ xs|reject('odd')|list }}"),
            "[{'a': 1}, {'a': 2}][2, Undefined][1, 3][2]");
  EXPECT_EQ(render("{{ [1,2,2,3,1]|unique|list }}{{ xs|batch(2)|list }}{{ 2.5|round }}"
                   "{{ 2.567|round(2) }}{{ -3|abs }}{{ '3'|int + 1 }}{{ '2.5'|float }}"),
            "[1, 2, 3][[1, 2], [3]]2.02.57342.5");
  EXPECT_EQ(render("{{ n|default('dflt') }}{{ undefined_var|default('u') }}"
                   "{{ ''|default('e', true) }}{{ xs|tojson }}{{ d|tojson(indent=2) }}"
                   "{{ 'é\"\\n'|tojson }}"),
            "Noneue[1, 2, 3]{\n  \"b\": 2,\n  \"a\": 1\n}\"é\\\"\\n\"");
  EXPECT_EQ(render("{{ 'a\\nb\\n'|indent(2) }}|{{ 'a\\n\\nb'|indent(2, true, true) }}|"
                   "{{ 'one two  three'|wordcount }}"),
            "a\n  b\n|  a\n  \n  b|3");
  EXPECT_EQ(render("{{ xs|map('string')|join(',') }}{{ [' a ', 'b ']|map('trim')|list }}"),
            "1,2,3['a', 'b']");
  // Markup: a str added to a safe string is escaped, as markupsafe does.
  EXPECT_EQ(render("{{ '<b>'|safe + '<i>' }}{{ '<'|e }}"), "<b>&lt;i&gt;&lt;");
}

TEST(TemplateLanguage, TestsAndOperators) {
  EXPECT_EQ(render("{{ 1 is number }}{{ 1.0 is float }}{{ 1 is integer }}{{ true is boolean }}"
                   "{{ none is none }}{{ d is mapping }}{{ xs is sequence }}{{ s is iterable }}"
                   "{{ 4 is divisibleby 2 }}{{ 3 is even }}{{ 1 is in xs }}{{ 1 is eq 1 }}"
                   "{{ 1 is ne 2 }}{{ undefined_var is undefined }}{{ xs is callable }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' in 'cat' }}"
                   "{{ 4 not in xs }}{{ 'b' in d }}{{ not xs }}{{ xs and 'y' }}{{ none or 'z' }}"),
            "TrueFalseTrueTrueTrueTrueTrueFalseyz");
  EXPECT_EQ(render("{{ 7 // 2 }}{{ 7 % 3 }}{{ 2 ** 10 }}{{ 7 / 2 }}{{ -7 // 2 }}{{ -7 % 3 }}"
                   "{{ 2 ** -1 }}"),
            "3110243.5-420.5");
  EXPECT_EQ(render("{{ xs[1:] }}{{ xs[::-1] }}{{ xs[-1] }}{{ s[0:5] }}{{ s[-5:] }}"
                   "{{ 'héllo'[1:3] }}{{ 'héllo'|length }}{{ d.a }}{{ d['b'] }}{{ (1, 2) }}"
                   "{{ {'k': [1, 'v', none, true, 1.5]} }}"),
            "[2, 3][3, 2, 1]3HelloWorldél512(1, 2){'k': [1, 'v', None, True, 1.5]}");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ undefined_var ~ 2.0 }}{{ 1 if xs else 2 }}"
                   "{{ 'x' if false }}|{{ 1e3 }}{{ 0.1 + 0.2 }}{{ 1e16 }}{{ 1e-5 }}"),
            "a1None2.01|1000.00.300000000000000041e+161e-05");
}

TEST(TemplateLanguage, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("<\n  {% if true %}\n    x\n  {% endif %}\n>"), "<\n    x\n>");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  // `+` keeps what lstrip/trim would drop; expressions are never lstripped.
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render("  {{ 'x' }}\n"), "  x");  // and one trailing newline goes
  EXPECT_EQ(render("a {# comment #}\nb\n  {# indented #}\nc"), "a b\nc");
  EXPECT_EQ(render("{{ 'a' }} {% if true %}b{% endif %}"), "a b");
  EXPECT_EQ(render("x\r\ny"), "x\ny");
}

TEST(TemplateErrors, SyntaxErrorsNameLineAndColumn) {
  try {
    Template::parse("line one\n{% if x %}\n  {{ x + }}\n{% endif %}");
    FAIL() << "expected a syntax error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.template_kind(), TemplateErrorKind::Syntax);
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFile);
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 10);  // the '}}' where an operand should be
    EXPECT_NE(std::string(e.what()).find("line 3, column 10"), std::string::npos) << e.what();
  }
  for (const char* bad : {"{% if x %}", "{% for %}", "{{ x ", "{% frobnicate %}", "{# open",
                          "{{ 'unterminated }}", "{% endif %}", "{{ (1 }}", "{% break %}",
                          "{% macro m(a=1, b) %}{% endmacro %}", "{% set 1 = 2 %}"}) {
    EXPECT_THROW(Template::parse(bad), TemplateError) << bad;
  }
  EXPECT_EQ(render_error("{% include 'x.jinja' %}").template_kind(),
            TemplateErrorKind::Unsupported);
}

TEST(TemplateErrors, RuntimeErrorsAreTyped) {
  const TemplateError raised = render_error("ok\n{{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(raised.template_kind(), TemplateErrorKind::Raised);
  EXPECT_EQ(raised.message(), "Roles must alternate");
  EXPECT_EQ(raised.line(), 2);
  EXPECT_EQ(render_error("{{ undefined_var.attr }}").template_kind(), TemplateErrorKind::Undefined);
  EXPECT_EQ(render_error("{{ undefined_var.attr }}").message(), "'undefined_var' is undefined");
  EXPECT_EQ(render_error("{{ d.missing.x }}").message(),
            "'dict object' has no attribute 'missing'");
  EXPECT_EQ(render_error("{{ xs.append(4) }}").template_kind(), TemplateErrorKind::Security);
  EXPECT_EQ(render_error("{{ -xs|length }}").template_kind(), TemplateErrorKind::Type);
  EXPECT_EQ(render_error("{{ 1 < 'a' }}").template_kind(), TemplateErrorKind::Type);
  EXPECT_EQ(render_error("{{ xs|select('odd')|tojson }}").message(),
            "Object of type generator is not JSON serializable");
  EXPECT_EQ(render_error("{{ xs|no_such_filter }}").template_kind(),
            TemplateErrorKind::Unsupported);
  // Undefined is printable, iterable and falsy; only using it as a value fails.
  EXPECT_EQ(render("[{{ nope }}]{% for x in nope %}x{% endfor %}{{ nope is defined }}"), "[]False");
  // A mutable sandbox (plain Jinja2) allows list.append.
  TemplateOptions plain;
  plain.immutable = false;
  EXPECT_EQ(Template::parse("{% set l = [] %}{% set _ = l.append(1) %}{{ l }}", plain)
                .render(unit_context()),
            "[1]");
}

TEST(TemplateErrors, SandboxLimits) {
  TemplateOptions o;
  o.limits.max_loop_iterations = 1000;
  auto limit_kind = [&](std::string_view src, const TemplateOptions& opts) {
    try {
      Template::parse(src, opts).render(unit_context());
    } catch (const TemplateError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << src;
      return e.template_kind();
    }
    return TemplateErrorKind::Syntax;
  };
  EXPECT_EQ(limit_kind("{% for i in range(2000) %}{% endfor %}", o), TemplateErrorKind::Limit);
  o.limits.max_output_bytes = 1000;
  EXPECT_EQ(limit_kind("{% for i in range(500) %}xyz{% endfor %}", o), TemplateErrorKind::Limit);
  EXPECT_EQ(limit_kind("{{ 'ab' * 100000 }}", o), TemplateErrorKind::Limit);
  EXPECT_EQ(limit_kind("{% set ns = namespace(s='ab') %}{% for i in range(20) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                       o),
            TemplateErrorKind::Limit);
  o.limits.max_call_depth = 20;
  EXPECT_EQ(limit_kind("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", o),
            TemplateErrorKind::Limit);
  o.limits.max_depth = 60;
  EXPECT_EQ(limit_kind("{% macro f(n) %}{% if true %}{% if true %}{{ f(n + 1) }}{% endif %}"
                       "{% endif %}{% endmacro %}{{ f(0) }}",
                       o),
            TemplateErrorKind::Limit);
  // Shared sub-lists make printed text exponentially larger than the value itself.
  TemplateOptions wide;
  wide.limits.max_output_bytes = 1 << 16;
  for (const char* print : {"{{ ns.l }}", "{{ ns.l|tojson }}", "{{ ns.l|join }}"}) {
    EXPECT_EQ(limit_kind(std::string("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                                     "{% set ns.l = [ns.l, ns.l] %}{% endfor %}") +
                             print,
                         wide),
              TemplateErrorKind::Limit)
        << print;
  }
  EXPECT_EQ(limit_kind("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                       "{% set ns.l = ns.l + ns.l %}{% endfor %}",
                       wide),
            TemplateErrorKind::Limit);
  TemplateOptions shallow;
  shallow.max_nesting = 50;
  EXPECT_THROW(
      Template::parse("{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}", shallow),
      TemplateError);
  EXPECT_THROW(Template::parse("{{ 1" + std::string(10000, '+') + " }}", shallow), TemplateError);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100; ++i) chain += " + 1";
  EXPECT_THROW(Template::parse(chain + " }}", shallow), TemplateError);
}

TEST(TemplateApi, CompiledTemplateIsReusableAndJsonFlavoursAgree) {
  const Template t = Template::parse(
      "{% for m in messages %}{{ m.role }}:{{ m.content }};"
      "{% endfor %}{{ tools|tojson }}");
  const Json a = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                                "tools": {"z": 1, "a": 2}})");
  EXPECT_EQ(t.render(a), "user:hi;{\"z\": 1, \"a\": 2}");
  EXPECT_EQ(t.render(a), t.render(a));
  // nlohmann::json sorts object members; ordered_json keeps them.
  EXPECT_EQ(t.render(nlohmann::json::parse(a.dump())), "user:hi;{\"a\": 2, \"z\": 1}");
  EXPECT_EQ(render_chat_template("{{ bos_token }}x", Json{{"bos_token", "<s>"}}), "<s>x");
}

// One parsed template, rendered from several threads at once (the server's use).
TEST(TemplateApi, ConcurrentRendersOfOneTemplate) {
  const Template t = Template::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content|upper }}{{ loop.index }}{% endfor %}{{ ns.n }}{{ range(3)|list }}");
  Json ctx;
  for (int i = 0; i < 50; ++i) ctx["messages"].push_back({{"content", std::to_string(i) + " m"}});
  const std::string want = t.render(ctx);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) ok[k] += t.render(ctx) == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 200);
}

// ---- differential check against python3-jinja2 (skipped when it is not installed) --------

// HF transformers' environment, as the corpus README describes it.
constexpr const char* kJinja2Script = R"PY(
import json, sys
import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2 import nodes
class Generation(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()
def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env.globals["raise_exception"] = raise_exception
jobs = json.load(open(sys.argv[1], encoding="utf-8"))
outs = []
for src, ctx in jobs:
    try:
        outs.append(env.from_string(src).render(**ctx))
    except Exception:
        outs.append("ERROR")
json.dump(outs, open(sys.argv[2], "w", encoding="utf-8"))
)PY";

bool python_jinja2_available() {
  return std::system("python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
}

// Renders every (template, context) job in one python3 process; returns the outputs ("ERROR"
// where Jinja2 refused).
std::vector<std::string> run_jinja2(const Json& jobs) {
  const fs::path dir =
      fs::temp_directory_path() / ("minfer_template_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "render.py") << kJinja2Script;
  std::ofstream(dir / "jobs.json", std::ios::binary) << jobs.dump();
  const std::string cmd = "python3 " + (dir / "render.py").string() + " " +
                          (dir / "jobs.json").string() + " " + (dir / "out.json").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Json out = Json::parse(read_file(dir / "out.json"));
  fs::remove_all(dir);
  return out.get<std::vector<std::string>>();
}

TEST(TemplateDifferential, OwnTemplatesAgreeWithPythonJinja2) {
  if (!python_jinja2_available()) GTEST_SKIP() << "python3 with jinja2 is not installed";
  const char* templates[] = {
      // A ChatML template with a default system prompt, tools and tool calls.
      "{%- if messages[0].role != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n"
      "{% endif %}\n"
      "{%- for m in messages %}\n"
      "  {%- if m.role == 'assistant' and m.tool_calls is defined %}\n"
      "<|im_start|>assistant\n{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}"
      "</tool_call>{% if not loop.last %}\n{% endif %}{% endfor %}<|im_end|>\n"
      "  {%- else %}\n"
      "<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n"
      "  {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      // Whitespace control, namespaces, macros, filters and Python reprs all at once.
      "{% set ns = namespace(users=0, last='') %}\n"
      "{% macro show(m, idx=0) -%}\n"
      "  [{{ idx }}] {{ m.role|upper }}: {{ m.content if m.content is string else "
      "m.content|tojson(indent=1) }}\n"
      "{%- endmacro %}\n"
      "{% for m in messages %}\n"
      "    {% if m.role == 'user' %}{% set ns.users = ns.users + 1 %}{% endif %}\n"
      "  {{ show(m, loop.index) }}\n"
      "{% endfor %}\n"
      "users={{ ns.users }} roles={{ messages|map(attribute='role')|unique|list }}\n"
      "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(' | ') }}\n"
      "{{ (messages|length / 3)|round(2) }} {{ messages[-1].content[:5] }} {{ tools is defined }}\n"
      "{%- if messages|length > 3 %} long{% else %} short{% endif %}",
      // Refusal: alternation check with raise_exception.
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
      "{{ m.content }}{% endfor %}",
  };
  const Json conversations[] = {
      Json::parse(R"({"add_generation_prompt": true, "messages": [
          {"role": "user", "content": "  Hi there \u00e9 <b>&</b>  "},
          {"role": "assistant", "content": "Hello!"},
          {"role": "user", "content": "Weather in Paris?"}]})"),
      Json::parse(R"({"add_generation_prompt": false, "tools": [], "messages": [
          {"role": "system", "content": "Terse."},
          {"role": "user", "content": "2+2?"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
            "function": {"name": "calc", "arguments": {"expr": "2+2", "x": [1.5, null, true]}}}]},
          {"role": "tool", "content": [{"type": "text", "text": "4"}]},
          {"role": "assistant", "content": "4\n"}]})"),
      Json::parse(R"({"add_generation_prompt": true, "messages": [
          {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})"),
  };
  Json jobs = Json::array();
  std::vector<std::string> ours;
  for (const char* src : templates) {
    for (const Json& ctx : conversations) {
      jobs.push_back(Json::array({src, ctx}));
      try {
        ours.push_back(Template::parse(src).render(ctx));
      } catch (const TemplateError&) {
        ours.push_back("ERROR");
      }
    }
  }
  const std::vector<std::string> theirs = run_jinja2(jobs);
  ASSERT_EQ(theirs.size(), ours.size());
  int errors = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i], theirs[i]) << jobs[i].dump();
    errors += theirs[i] == "ERROR";
  }
  EXPECT_EQ(ours.size(), 9u);
  EXPECT_GE(errors, 1);  // the alternation check refuses the third conversation
}

}  // namespace
}  // namespace minfer::tmpl
