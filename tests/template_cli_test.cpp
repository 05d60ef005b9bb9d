// minfer-test-libs: minfer_common
// `minfer template` and the chat-template flags of `minfer chat` from the command line: the
// rendering on stdout byte for byte (no newline added), a refused conversation on stderr with
// exit status 1, and chat on stories260K (which has no template) as before unless a template is
// given by name or file.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;

using Result = minfer::test::CliResult;

// Runs `minfer ARGS` (with `input` on stdin), capturing stdout and stderr separately.
Result run(const std::string& args, const std::string& input = "") {
  const fs::path in_file =
      fs::temp_directory_path() / ("minfer_tcli_in_" + std::to_string(::getpid()));
  std::ofstream(in_file, std::ios::binary) << input;
  Result r = minfer::test::run_captured(
      std::string(MINFER_BINARY) + " " + args + " <" + in_file.string(), "tcli");
  fs::remove(in_file);
  return r;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const fs::path kCorpus = fs::path(MINFER_SHARED_DIR) / "chat-templates";

// Every template with a plain conversation and with one most templates refuse.
TEST(TemplateCli, RendersTheCorpusLikeJinja2) {
  if (!fs::exists(kCorpus / "cases.json")) GTEST_SKIP() << kCorpus << " is absent";
  const auto cases = nlohmann::ordered_json::parse(read_file(kCorpus / "cases.json"));
  const fs::path dir = fs::temp_directory_path() / ("minfer_tcli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int checked = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    if (name != "basic" && name != "alternation_broken") continue;
    const fs::path ctx = dir / (name + ".json");
    std::ofstream(ctx, std::ios::binary) << c["context"].dump();
    for (const auto& e : fs::directory_iterator(kCorpus / "templates")) {
      const std::string t = e.path().stem().string();
      const Result r =
          run("template --template-file " + e.path().string() + " --context " + ctx.string());
      const fs::path expected = kCorpus / "expected" / t / (name + ".expected");
      if (fs::exists(expected)) {
        EXPECT_EQ(r.status, 0) << t << "/" << name << ": " << r.err;
        EXPECT_EQ(r.out, read_file(expected)) << t << "/" << name;
      } else {
        EXPECT_EQ(r.status, 1) << t << "/" << name;
        EXPECT_TRUE(r.out.empty()) << t << "/" << name;
        EXPECT_NE(r.err.find("minfer template: error: template"), std::string::npos) << r.err;
      }
      ++checked;
    }
  }
  fs::remove_all(dir);
  EXPECT_EQ(checked, 88);
}

TEST(TemplateCli, RefusalIsTheTemplatesOwnMessage) {
  if (!fs::exists(kCorpus / "cases.json")) GTEST_SKIP() << kCorpus << " is absent";
  const fs::path ctx =
      fs::temp_directory_path() / ("minfer_tcli_ctx_" + std::to_string(::getpid()));
  std::ofstream(ctx) << R"({"messages": [{"role": "system", "content": "s"},
                            {"role": "user", "content": "u"}], "add_generation_prompt": true,
                            "bos_token": "<bos>", "eos_token": "<eos>"})";
  const Result r = run("template --template-file " +
                       (kCorpus / "templates/google-gemma-2-2b-it.jinja").string() + " --context " +
                       ctx.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("System role not supported"), std::string::npos) << r.err;
  const Result named = run("template --chat-template chatml --context " + ctx.string());
  EXPECT_EQ(named.status, 0) << named.err;
  EXPECT_EQ(named.out,
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_NE(run("template --context " + ctx.string()).status, 0);
  EXPECT_NE(run("template --chat-template chatml --context /nonexistent.json").status, 0);
  fs::remove(ctx);
}

// A directory given as a template or context file is an error naming the flag's file (it read
// as an empty text: `template --template-file DIR` printed nothing and exited 0, chat said
// "basic_filebuf::underflow error").
TEST(TemplateCli, DirectoryForAFileIsNamed) {
  const fs::path ctx =
      fs::temp_directory_path() / ("minfer_tcli_dirctx_" + std::to_string(::getpid()));
  std::ofstream(ctx) << R"({"messages": [{"role": "user", "content": "u"}]})";
  const std::string dir = fs::temp_directory_path().string();
  const Result tmpl = run("template --template-file " + dir + " --context " + ctx.string());
  EXPECT_EQ(tmpl.status, 1);
  EXPECT_NE(tmpl.err.find("template file '" + dir + "' is not a regular file"), std::string::npos)
      << tmpl.err;
  const Result context = run("template --chat-template chatml --context " + dir);
  EXPECT_EQ(context.status, 1);
  EXPECT_NE(context.err.find("context file '" + dir + "' is not a regular file"), std::string::npos)
      << context.err;
  fs::remove(ctx);
  const fs::path model = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  const Result chat = run("chat -m " + model.string() + " --chat-template-file " + dir, "Hi\n");
  EXPECT_EQ(chat.status, 1);
  EXPECT_NE(chat.err.find("chat template file '" + dir + "' is not a regular file"),
            std::string::npos)
      << chat.err;
  const Result serve = run("serve -m " + model.string() + " --api-key-file " + dir);
  EXPECT_EQ(serve.status, 1);
  EXPECT_NE(serve.err.find("--api-key-file '" + dir + "' is not a regular file"), std::string::npos)
      << serve.err;
}

// serve checks a template the user named before the port opens, as llama-server does: an unknown
// name, a file without Jinja tags (it was read as a built-in name) and a file that does not parse
// used to start a server whose every chat request was a 400.
TEST(TemplateCli, ServeRefusesABadChatTemplateBeforeListening) {
  const fs::path model = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  const fs::path plain =
      fs::temp_directory_path() / ("minfer_tcli_plain_" + std::to_string(::getpid()));
  const fs::path broken =
      fs::temp_directory_path() / ("minfer_tcli_broken_" + std::to_string(::getpid()));
  std::ofstream(plain) << "just words\n";
  std::ofstream(broken) << "{% if %}";
  const struct {
    std::string flag, says;
  } cases[] = {
      {"--chat-template bogus", "unknown chat template name 'bogus'"},
      {"--chat-template-file " + plain.string(), "holds no Jinja tags"},
      {"--chat-template-file " + broken.string(), "template syntax error at line 1"},
      {"--chat-template-kwargs '{enable_thinking: false}'",
       "--chat-template-kwargs '{enable_thinking: false}' is not valid JSON"},
      {"--chat-template-kwargs '[1]'", "--chat-template-kwargs '[1]' must be a JSON object"},
      {"--reasoning-format hidden",
       "--reasoning-format 'hidden': expected none, deepseek, deepseek-legacy or auto"},
  };
  for (const auto& c : cases) {
    // timeout: a server that starts anyway would never return.
    const Result r =
        minfer::test::run_captured("timeout 20 " + std::string(MINFER_BINARY) + " serve -m " +
                                       model.string() + " --port 0 " + c.flag + " </dev/null",
                                   "tcli_serve");
    EXPECT_EQ(r.status, 1) << c.flag << ": " << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << c.flag << ": " << r.out;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flag << ": " << r.err;
  }
  fs::remove(plain);
  fs::remove(broken);
}

// chat names a bad --chat-template / --chat-template-file before it loads the model (it used to
// load the weights and build the engine first).
TEST(TemplateCli, ChatChecksItsTemplateBeforeLoading) {
  const fs::path model = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  const fs::path broken =
      fs::temp_directory_path() / ("minfer_tcli_chatbad_" + std::to_string(::getpid()));
  std::ofstream(broken) << "{{ messages[0] ";
  for (const std::string& flag :
       {std::string("--chat-template bogus"), "--chat-template-file " + broken.string()}) {
    const Result r = run("chat -m " + model.string() + " " + flag, "Hi\n");
    EXPECT_EQ(r.status, 1) << flag << ": " << r.err;
    EXPECT_NE(r.err.find("minfer chat: error: "), std::string::npos) << flag << ": " << r.err;
    EXPECT_EQ(r.err.find("KV cache"), std::string::npos) << "loaded first: " << r.err;
  }
  fs::remove(broken);
}

// --chat-template-kwargs gives the template extra variables (as serve's flag does); text that is
// not a JSON object is refused before the model loads.
TEST(TemplateCli, ChatPassesTemplateKwargs) {
  const fs::path model = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  const fs::path tmpl =
      fs::temp_directory_path() / ("minfer_tcli_kwargs_" + std::to_string(::getpid()));
  std::ofstream(tmpl) << "{% if not think_off %}{{ raise_exception('think_off unset') }}"
                         "{% endif %}{% for m in messages %}{{ m.content }}\n{% endfor %}";
  const std::string base =
      "chat -m " + model.string() + " --chat-template-file " + tmpl.string() + " -n 4 --temp 0 ";
  const Result without = run(base, "Hi\n");
  EXPECT_EQ(without.status, 1);
  EXPECT_NE(without.err.find("think_off unset"), std::string::npos) << without.err;
  const Result with = run(base + "--chat-template-kwargs '{\"think_off\": true}'", "Hi\n");
  EXPECT_EQ(with.status, 0) << with.err;
  const Result bad = run(base + "--chat-template-kwargs '[true]'", "Hi\n");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("--chat-template-kwargs '[true]' must be a JSON object"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.err.find("KV cache"), std::string::npos) << "loaded first: " << bad.err;
  fs::remove(tmpl);
}

TEST(TemplateCli, ChatOnAModelWithoutTemplate) {
  const fs::path model = fs::path(MINFER_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  // As before the interpreter: no template and no --chat-template is an error naming the flag.
  const Result none = run("chat -m " + model.string() + " -n 4", "Hello\n");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("--chat-template"), std::string::npos) << none.err;
  const Result named =
      run("chat -m " + model.string() + " --chat-template chatml -n 6 --temp 0", "Hi\nMore\n");
  EXPECT_EQ(named.status, 0) << named.err;
  EXPECT_NE(named.err.find("chat template chatml"), std::string::npos) << named.err;
  EXPECT_EQ(std::count(named.out.begin(), named.out.end(), '\n'), 2) << named.out;
  const fs::path file = kCorpus / "templates" / "meta-llama-Llama-3.1-8B-Instruct.jinja";
  if (fs::exists(file)) {
    const Result from_file = run(
        "chat -m " + model.string() + " --chat-template-file " + file.string() + " -n 6 --temp 0",
        "Hi\n");
    EXPECT_EQ(from_file.status, 0) << from_file.err;
    EXPECT_NE(from_file.err.find(file.string()), std::string::npos) << from_file.err;
  }
}

}  // namespace
