// minfer-test-libs: minfer_common
// Enforces the layer table in docs/ARCHITECTURE.md on the source tree, reading the table from
// the doc itself so the doc and the check cannot drift:
//   * every `#include "<layer>/..."` in src/<layer>/ names the layer itself or one reachable
//     from it through the table's "depends on" column (transitively: CMake links layers PUBLIC,
//     so a transitive dependency's headers are on the include path and its symbols link);
//   * each src/<layer>/CMakeLists.txt links (transitively) exactly what the table allows;
//   * the table lists every folder under src/ that holds files, and nothing that is missing;
//   * the table is acyclic.
// The checker is plain functions over strings, so the tests at the top run it on in-memory
// violating examples (it must be able to fail); the tests at the bottom run it on the repo.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace minfer::layering {
namespace {

namespace fs = std::filesystem;

using Graph = std::map<std::string, std::set<std::string>>;  // layer -> direct dependencies

struct Row {
  std::string layer;
  std::string folder;
  std::vector<std::string> deps;  // raw tokens: a layer, "backend/*", "everything" or "—"
};

struct Table {
  std::vector<Row> rows;
  Graph graph;                      // resolved direct dependencies
  std::vector<std::string> errors;  // malformed table
};

std::string strip(std::string s) {
  auto junk = [](char c) { return c == ' ' || c == '\t' || c == '`' || c == '\r'; };
  while (!s.empty() && junk(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && junk(s[i])) ++i;
  return s.substr(i);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(strip(cur));
  return out;
}

// Parses the first markdown table whose header has columns "layer", "folder", "depends on".
Table parse_table(const std::string& markdown) {
  Table t;
  std::istringstream in(markdown);
  std::string line;
  int col_layer = -1, col_folder = -1, col_deps = -1;
  bool in_table = false;
  while (std::getline(in, line)) {
    line = strip(line);
    if (line.empty() || line[0] != '|') {
      if (in_table) break;  // the table ended
      continue;
    }
    auto cells = split(line.substr(1), '|');
    if (!in_table) {
      for (int i = 0; i < static_cast<int>(cells.size()); ++i) {
        if (cells[i] == "layer") col_layer = i;
        if (cells[i] == "folder") col_folder = i;
        if (cells[i] == "depends on") col_deps = i;
      }
      if (col_layer >= 0 && col_folder >= 0 && col_deps >= 0) in_table = true;
      continue;
    }
    if (cells.empty() || cells[0].rfind("---", 0) == 0) continue;  // separator row
    int need = std::max({col_layer, col_folder, col_deps});
    if (static_cast<int>(cells.size()) <= need) {
      t.errors.push_back("table row has too few cells: " + line);
      continue;
    }
    Row r{cells[col_layer], cells[col_folder], split(cells[col_deps], ',')};
    t.rows.push_back(r);
  }
  if (!in_table) t.errors.push_back("no table with columns 'layer | folder | depends on'");

  std::set<std::string> names;
  for (const auto& r : t.rows) names.insert(r.layer);
  for (const auto& r : t.rows) {
    auto& deps = t.graph[r.layer];
    for (const auto& d : r.deps) {
      if (d.empty() || d == "—" || d == "-") continue;
      if (d == "everything") {
        for (const auto& n : names)
          if (n != r.layer) deps.insert(n);
      } else if (d.size() > 2 && d.substr(d.size() - 2) == "/*") {
        std::string prefix = d.substr(0, d.size() - 1);  // keep the '/'
        bool any = false;
        for (const auto& n : names)
          if (n.rfind(prefix, 0) == 0) deps.insert(n), any = true;
        if (!any) t.errors.push_back("layer '" + r.layer + "': '" + d + "' matches no layer");
      } else if (names.count(d)) {
        deps.insert(d);
      } else {
        t.errors.push_back("layer '" + r.layer + "' depends on unknown layer '" + d + "'");
      }
    }
  }
  return t;
}

std::set<std::string> closure(const Graph& g, const std::string& layer) {
  std::set<std::string> seen;
  std::vector<std::string> todo{layer};
  while (!todo.empty()) {
    auto cur = todo.back();
    todo.pop_back();
    auto it = g.find(cur);
    if (it == g.end()) continue;
    for (const auto& d : it->second)
      if (seen.insert(d).second) todo.push_back(d);
  }
  return seen;
}

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "(nothing)" : out;
}

// Layers in the graph that reach themselves (a cycle), as messages.
std::vector<std::string> check_acyclic(const Graph& g) {
  std::vector<std::string> errs;
  for (const auto& [layer, deps] : g)
    if (closure(g, layer).count(layer))
      errs.push_back("layer '" + layer + "' depends on itself through the table (a cycle)");
  return errs;
}

// The layer an include path names: the longest layer L with path starting "L/".
std::string layer_of_path(const std::string& path, const Graph& g) {
  std::string best;
  for (const auto& [layer, deps] : g)
    if (path.rfind(layer + "/", 0) == 0 && layer.size() > best.size()) best = layer;
  return best;
}

// Checks one source file of `layer`. Quoted includes without a '/' are same-folder includes.
// Angle-bracket includes are checked only when they name a layer (<fmt/...> is not ours).
std::vector<std::string> check_includes(const std::string& layer, const std::string& file,
                                        const std::string& text, const Graph& g) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<std::string> errs;
  auto allowed = closure(g, layer);
  allowed.insert(layer);
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::smatch m;
    if (!std::regex_search(line, m, kInclude)) continue;
    bool quoted = m[1] == "\"";
    std::string path = m[2];
    std::string where = file + ":" + std::to_string(lineno) + ": #include " +
                        (quoted ? "\"" : "<") + path + (quoted ? "\"" : ">");
    if (path.find('/') == std::string::npos) continue;
    std::string target = layer_of_path(path, g);
    if (target.empty()) {
      if (quoted)
        errs.push_back(where +
                       " names no layer of docs/ARCHITECTURE.md (use <...> for "
                       "third-party headers)");
      continue;
    }
    if (!allowed.count(target))
      errs.push_back(where + " breaks the layer rule: '" + layer + "' may include only " +
                     join(allowed) + " (docs/ARCHITECTURE.md), not '" + target + "'");
  }
  return errs;
}

// CMake target of a layer: minfer_ + folder with '/' -> '_' (backend/cpu -> minfer_backend_cpu).
std::string target_of(const std::string& layer) {
  std::string t = "minfer_" + layer;
  std::replace(t.begin(), t.end(), '/', '_');
  return t;
}

// Direct minfer_* dependencies a layer's CMakeLists.txt declares, through
// minfer_add_layer(<target> deps...) or target_link_libraries(<target> [PUBLIC] deps...).
// Non-minfer dependencies (fmt, PCRE2, ...) are ignored; an unknown minfer_* target is an error.
std::set<std::string> parse_cmake_deps(const std::string& layer, const std::string& cmake,
                                       const Graph& g, std::vector<std::string>* errs) {
  std::string text;  // drop comments
  std::istringstream in(cmake);
  std::string line;
  while (std::getline(in, line)) text += line.substr(0, line.find('#')) + " ";
  std::map<std::string, std::string> layer_by_target;
  for (const auto& [l, deps] : g) layer_by_target[target_of(l)] = l;

  std::string self = target_of(layer);
  std::set<std::string> deps;
  bool found = false;
  static const std::regex kCall(R"((minfer_add_layer|target_link_libraries)\s*\(([^)]*)\))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kCall);
       it != std::sregex_iterator(); ++it) {
    std::istringstream args((*it)[2].str());
    std::string first, tok;
    args >> first;
    if (first != self) continue;
    found = true;
    while (args >> tok) {
      if (tok.rfind("minfer_", 0) != 0) continue;
      auto l = layer_by_target.find(tok);
      if (l == layer_by_target.end())
        errs->push_back("src/" + layer + "/CMakeLists.txt links '" + tok +
                        "', which is no layer in docs/ARCHITECTURE.md");
      else
        deps.insert(l->second);
    }
  }
  if (!found)
    errs->push_back("src/" + layer + "/CMakeLists.txt declares no minfer_add_layer(" + self +
                    " ...) or target_link_libraries(" + self + " ...)");
  return deps;
}

// Compares transitive closures: CMake links PUBLIC, so what a layer can use is the closure.
std::vector<std::string> check_cmake_matches(const Graph& table, const Graph& cmake) {
  std::vector<std::string> errs;
  for (const auto& [layer, deps] : cmake) {
    auto want = closure(table, layer), have = closure(cmake, layer);
    for (const auto& x : have)
      if (!want.count(x))
        errs.push_back("src/" + layer + "/CMakeLists.txt links '" + x +
                       "' (directly or transitively) but docs/ARCHITECTURE.md does not let '" +
                       layer + "' depend on it");
    for (const auto& x : want)
      if (!have.count(x))
        errs.push_back("docs/ARCHITECTURE.md lets '" + layer + "' depend on '" + x + "' but src/" +
                       layer +
                       "/CMakeLists.txt does not link it (directly or "
                       "transitively)");
  }
  return errs;
}

// `folders`: every folder under src/ (relative, '/'-separated) that directly holds files.
std::vector<std::string> check_folders(const Table& t, const std::set<std::string>& folders) {
  std::vector<std::string> errs;
  std::set<std::string> listed;
  for (const auto& r : t.rows) {
    if (r.folder.rfind("src/", 0) != 0) continue;  // apps/... is outside src/
    listed.insert(r.folder.substr(4));
    if (r.folder != "src/" + r.layer)
      errs.push_back("layer '" + r.layer + "' has folder '" + r.folder + "'; expected 'src/" +
                     r.layer + "' (the include prefix is the folder)");
    if (!folders.count(r.folder.substr(4)))
      errs.push_back("docs/ARCHITECTURE.md lists '" + r.folder + "', which holds no files");
  }
  for (const auto& f : folders)
    if (!listed.count(f)) errs.push_back("src/" + f + " is not in docs/ARCHITECTURE.md's table");
  return errs;
}

std::string join_lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  " + s + "\n";
  return out;
}

// ---- the checker on in-memory examples ------------------------------------------------------

const char* kToyDoc = R"(# toy
| layer | folder | depends on | what |
|---|---|---|---|
| base | `src/base` | — | bottom |
| mid | `src/mid` | base | middle |
| be/x | `src/be/x` | mid | backend x |
| be/y | `src/be/y` | mid | backend y |
| top | `src/top` | be/* | top |
| app | `apps/app` | everything | the binary |

text after the table | with a pipe
)";

TEST(LayeringChecker, ParsesTableWithWildcardAndEverything) {
  Table t = parse_table(kToyDoc);
  ASSERT_TRUE(t.errors.empty()) << join_lines(t.errors);
  ASSERT_EQ(t.rows.size(), 6u);
  EXPECT_EQ(t.graph["base"], std::set<std::string>{});
  EXPECT_EQ(t.graph["top"], (std::set<std::string>{"be/x", "be/y"}));
  EXPECT_EQ(t.graph["app"].size(), 5u);
  EXPECT_EQ(closure(t.graph, "top"), (std::set<std::string>{"base", "mid", "be/x", "be/y"}));
  EXPECT_TRUE(check_acyclic(t.graph).empty());
}

TEST(LayeringChecker, RejectsUnknownDependencyAndCycle) {
  Table t = parse_table(
      "| layer | folder | depends on |\n|-|-|-|\n| a | src/a | b |\n"
      "| b | src/b | a, nope |\n");
  ASSERT_EQ(t.errors.size(), 1u);
  EXPECT_NE(t.errors[0].find("unknown layer 'nope'"), std::string::npos) << t.errors[0];
  EXPECT_EQ(check_acyclic(t.graph).size(), 2u);
  EXPECT_FALSE(parse_table("no table here").errors.empty());
}

TEST(LayeringChecker, FlagsUpwardIncludeNamingFileIncludeAndRule) {
  Table t = parse_table(kToyDoc);
  std::string src =
      "#include <vector>\n#include <fmt/format.h>\n#include \"local.h\"\n"
      "#include \"base/b.h\"\n#include \"mid/m.h\"\n  #  include \"be/x/k.h\"\n"
      "#include \"top/t.h\"\n#include \"nolayer/z.h\"\n";
  auto errs = check_includes("mid", "src/mid/m.cpp", src, t.graph);
  ASSERT_EQ(errs.size(), 3u) << join_lines(errs);
  EXPECT_NE(errs[0].find("src/mid/m.cpp:6: #include \"be/x/k.h\""), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find("'mid' may include only base, mid"), std::string::npos) << errs[0];
  EXPECT_NE(errs[1].find(":7: #include \"top/t.h\""), std::string::npos) << errs[1];
  EXPECT_NE(errs[2].find("names no layer"), std::string::npos) << errs[2];
  // Transitive: top may include base through be/* -> mid -> base.
  EXPECT_TRUE(check_includes("top", "t.cpp", "#include \"base/b.h\"\n", t.graph).empty());
  // Sibling backends may not include each other.
  EXPECT_EQ(check_includes("be/x", "x.cpp", "#include \"be/y/y.h\"\n", t.graph).size(), 1u);
}

TEST(LayeringChecker, FlagsCMakeDepsThatDisagreeWithTable) {
  Table t = parse_table(kToyDoc);
  std::vector<std::string> errs;
  Graph cmake;
  cmake["base"] = parse_cmake_deps("base",
                                   "add_library(minfer_base STATIC x)\n"
                                   "target_link_libraries(minfer_base PUBLIC fmt::fmt)\n",
                                   t.graph, &errs);
  cmake["mid"] = parse_cmake_deps("mid",
                                  "# minfer_add_layer(minfer_mid minfer_top)\n"
                                  "minfer_add_layer(minfer_mid minfer_base minfer_be_x)\n",
                                  t.graph, &errs);
  cmake["be/x"] = parse_cmake_deps("be/x",
                                   "minfer_add_layer(minfer_be_x minfer_mid\n"
                                   "  minfer_gone)\n",
                                   t.graph, &errs);
  cmake["be/y"] = parse_cmake_deps("be/y", "add_library(other)\n", t.graph, &errs);
  ASSERT_EQ(errs.size(), 2u) << join_lines(errs);
  EXPECT_NE(errs[0].find("links 'minfer_gone'"), std::string::npos) << errs[0];
  EXPECT_NE(errs[1].find("declares no minfer_add_layer(minfer_be_y"), std::string::npos);
  EXPECT_EQ(cmake["mid"], (std::set<std::string>{"base", "be/x"}));

  auto diff = check_cmake_matches(t.graph, cmake);
  // mid links be/x (not allowed); be/x then reaches itself via mid; be/y links nothing.
  std::string all = join_lines(diff);
  EXPECT_NE(all.find("src/mid/CMakeLists.txt links 'be/x'"), std::string::npos) << all;
  EXPECT_NE(all.find("lets 'be/y' depend on 'mid' but src/be/y/CMakeLists.txt does not link"),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("src/base/"), std::string::npos) << all;
}

TEST(LayeringChecker, FlagsFoldersMissingFromTableAndRowsWithoutFolder) {
  Table t = parse_table(kToyDoc);
  auto errs = check_folders(t, {"base", "mid", "be/x", "top", "extra"});
  ASSERT_EQ(errs.size(), 2u) << join_lines(errs);
  EXPECT_NE(errs[0].find("'src/be/y', which holds no files"), std::string::npos) << errs[0];
  EXPECT_NE(errs[1].find("src/extra is not in"), std::string::npos) << errs[1];
}

// ---- the repository -------------------------------------------------------------------------

fs::path repo_root() {
  return fs::path(MINFER_TEST_DATA_DIR).parent_path().parent_path();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class RepoLayering : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = repo_root();
    fs::path doc = root_ / "docs" / "ARCHITECTURE.md";
    ASSERT_TRUE(fs::exists(doc)) << doc << " missing (source dir derived from "
                                 << MINFER_TEST_DATA_DIR << ")";
    table_ = parse_table(read_text(doc));
    ASSERT_TRUE(table_.errors.empty()) << join_lines(table_.errors);
    for (const auto& r : table_.rows)
      if (r.folder.rfind("src/", 0) == 0) src_layers_.push_back(r.layer);
  }
  fs::path root_;
  Table table_;
  std::vector<std::string> src_layers_;
};

TEST_F(RepoLayering, TableIsAcyclicAndListsEveryLayerCMakeBuilds) {
  auto errs = check_acyclic(table_.graph);
  EXPECT_TRUE(errs.empty()) << join_lines(errs);
  // Top-level MINFER_LAYERS must be exactly the table's src/ layers.
  std::string top = read_text(root_ / "CMakeLists.txt");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(top, m, std::regex(R"(set\(MINFER_LAYERS([^)]*)\))")));
  std::istringstream in(m[1].str());
  std::set<std::string> built{std::istream_iterator<std::string>(in), {}};
  EXPECT_EQ(built, std::set<std::string>(src_layers_.begin(), src_layers_.end()))
      << "CMakeLists.txt MINFER_LAYERS and docs/ARCHITECTURE.md's table disagree";
}

TEST_F(RepoLayering, TableListsEveryFolderUnderSrc) {
  std::set<std::string> folders;
  for (const auto& e : fs::recursive_directory_iterator(root_ / "src"))
    if (e.is_regular_file())
      folders.insert(fs::relative(e.path().parent_path(), root_ / "src").generic_string());
  auto errs = check_folders(table_, folders);
  EXPECT_TRUE(errs.empty()) << join_lines(errs);
}

TEST_F(RepoLayering, CMakeDepsMatchTable) {
  std::vector<std::string> errs;
  Graph cmake;
  for (const auto& layer : src_layers_) {
    fs::path f = root_ / "src" / layer / "CMakeLists.txt";
    if (!fs::exists(f)) {
      errs.push_back(f.string() + " missing");
      continue;
    }
    cmake[layer] = parse_cmake_deps(layer, read_text(f), table_.graph, &errs);
  }
  auto diff = check_cmake_matches(table_.graph, cmake);
  errs.insert(errs.end(), diff.begin(), diff.end());
  EXPECT_TRUE(errs.empty()) << join_lines(errs);
}

TEST_F(RepoLayering, IncludesRespectTable) {
  std::vector<std::string> errs;
  size_t files = 0;
  for (const auto& layer : src_layers_) {
    fs::path dir = root_ / "src" / layer;
    if (!fs::is_directory(dir)) continue;  // TableListsEveryFolderUnderSrc reports it
    for (const auto& e : fs::directory_iterator(dir)) {
      auto ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".inc")) continue;
      ++files;
      auto rel = fs::relative(e.path(), root_).generic_string();
      auto v = check_includes(layer, rel, read_text(e.path()), table_.graph);
      errs.insert(errs.end(), v.begin(), v.end());
    }
  }
  EXPECT_GT(files, 0u);
  EXPECT_TRUE(errs.empty()) << errs.size() << " include(s) break the layer table:\n"
                            << join_lines(errs);
}

}  // namespace
}  // namespace minfer::layering
