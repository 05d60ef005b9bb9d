// minfer-test-libs: minfer_template minfer_common
// The Jinja interpreter (src/template): every real chat template of
// ../shared/chat-templates against Python Jinja2's reference renderings (byte for byte, or a
// refusal where the reference refused), then the language pieces one by one, errors with
// their line and column, sandbox limits, and a differential check against python3-jinja2 when
// it is installed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

fs::path corpus_dir() { return fs::path(MINFER_SHARED_DIR) / "chat-templates"; }

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

}  // namespace
}  // namespace minfer::tmpl
