// `minfer info -m FILE`: a GGUF file's header, metadata (arrays abbreviated) and tensor table.
// A bad file throws minfer::Error (InvalidFile) from the reader; main() prints it, exit 1. A
// well-formed file minfer cannot run (unknown architecture, unimplemented metadata or tensors)
// is still printed, with a last "runnable: no: <why>" line (exit 0).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>

#include "commands.h"
#include "common/dtype.h"
#include "common/error.h"
#include "engine_cli.h"
#include "gguf/gguf.h"
#include "model/support.h"

namespace minfer::app {
namespace {

using gguf::Value;
using gguf::ValueType;

// Printable, single-line, at most `max` characters (long strings are elided).
std::string quote(const std::string& s, size_t max) {
  std::string out = "\"";
  size_t shown = 0;
  for (unsigned char c : s) {
    if (shown++ >= max) {
      out += fmt::format("...\" ({} bytes)", s.size());
      return out;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string scalar_text(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v.scalar)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v.scalar)) return fmt::format("{:g}", *d);
  if (const auto* b = std::get_if<bool>(&v.scalar)) return *b ? "true" : "false";
  return quote(std::get<std::string>(v.scalar), 80);
}

std::string value_text(const Value& v, size_t n_items) {
  if (v.type != ValueType::Array) return scalar_text(v);
  const size_t n = v.array_size();
  std::string out = "[";
  for (size_t i = 0; i < n && i < n_items; ++i) {
    if (i) out += ", ";
    if (v.array_type == ValueType::String) {
      out += quote(v.strings[i], 24);
    } else if (v.array_type == ValueType::F32 || v.array_type == ValueType::F64) {
      out += fmt::format("{:g}", v.floats[i]);
    } else if (v.array_type == ValueType::U64) {
      out += std::to_string(static_cast<uint64_t>(v.ints[i]));
    } else {
      out += std::to_string(v.ints[i]);
    }
  }
  if (n > n_items) out += ", ...";
  return out + "]";
}

std::string type_text(const Value& v) {
  if (v.type != ValueType::Array) return std::string(gguf::value_type_name(v.type));
  return fmt::format("{}[{}]", gguf::value_type_name(v.array_type), v.array_size());
}

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

}  // namespace

int cmd_info(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's header, metadata and tensor table", "minfer info"};
  std::string path;
  size_t n_items = 5;
  bool no_tensors = false;
  // The file by -m or as the positional argument, one of the two: neither is "required" to
  // CLI11, whose help would then mark both.
  std::string positional;
  auto* m_opt = app.add_option("-m,--model", path, "GGUF file (or give it as FILE)");
  auto* file_opt = app.add_option("file", positional, "GGUF file (or give it with -m)");
  file_opt->excludes(m_opt);
  app.add_option("--items", n_items, "array items shown per metadata key")->capture_default_str();
  app.add_flag("--no-tensors", no_tensors, "omit the tensor table");
  if (auto status = parse_command_line(app, argc, argv)) return *status;
  if (file_opt->count() > 0) path = positional;
  if (path.empty())
    fail(ErrorKind::InvalidArgument, "give the GGUF file: minfer info FILE or -m FILE");

  const gguf::File f = gguf::File::open(path);
  std::printf("file:        %s\n", f.path().c_str());
  std::printf("gguf:        version %u, alignment %llu, data at byte %llu, %llu bytes\n",
              f.version(), static_cast<unsigned long long>(f.alignment()),
              static_cast<unsigned long long>(f.data_offset()),
              static_cast<unsigned long long>(f.file_size()));

  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  size_t key_w = 0;
  for (const auto& [k, v] : f.metadata()) key_w = std::max(key_w, k.size());
  for (const auto& [k, v] : f.metadata())
    std::printf("  %-*s  %-16s %s\n", static_cast<int>(key_w), k.c_str(), type_text(v).c_str(),
                value_text(v, n_items).c_str());

  const auto& ts = f.tensors();
  uint64_t total_bytes = 0, total_elems = 0;
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // name -> (count, bytes)
  for (const auto& t : ts) {
    total_bytes += t.n_bytes;
    total_elems += static_cast<uint64_t>(t.n_elements());
    auto& e = by_type[std::string(type_name(t.type))];
    e.first++;
    e.second += t.n_bytes;
  }
  if (!no_tensors && !ts.empty()) {
    size_t name_w = 4;
    for (const auto& t : ts) name_w = std::max(name_w, t.name.size());
    std::printf("\ntensors (%zu):\n", ts.size());
    std::printf("  %5s  %-*s  %-5s %-22s %12s %12s\n", "#", static_cast<int>(name_w), "name",
                "type", "shape", "bytes", "offset");
    for (size_t i = 0; i < ts.size(); ++i) {
      const auto& t = ts[i];
      const bool sup = type_traits(t.type).supported;
      std::printf("  %5zu  %-*s  %-5s %-22s %12llu %12llu%s\n", i, static_cast<int>(name_w),
                  t.name.c_str(), std::string(type_name(t.type)).c_str(), shape_text(t).c_str(),
                  static_cast<unsigned long long>(t.n_bytes),
                  static_cast<unsigned long long>(t.offset), sup ? "" : "  (unsupported type)");
    }
  }
  std::printf("\ntotal:       %zu tensors, %llu elements, %llu bytes (%.2f MiB)\n", ts.size(),
              static_cast<unsigned long long>(total_elems),
              static_cast<unsigned long long>(total_bytes), total_bytes / 1048576.0);
  for (const auto& [name, e] : by_type)
    std::printf("  %-6s %4d tensors %14llu bytes\n", name.c_str(), e.first,
                static_cast<unsigned long long>(e.second));
  // The same checks run / chat / serve make when they load the file (model/support.h), so
  // `info` says whether those would refuse it, and why.
  const std::string why = unsupported_reason(f);
  std::printf("\nrunnable:    %s\n", why.empty() ? "yes" : ("no: " + why).c_str());
  return 0;
}

}  // namespace minfer::app
