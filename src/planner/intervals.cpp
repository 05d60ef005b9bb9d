// MiniMalloc-style interval CSV I/O (see intervals.h).
#include "planner/intervals.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "common/error.h"

namespace minfer {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    out.push_back(
        trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

enum class Column { Id, Lower, Upper, Size, Alignment, Offset };

// The header line: known column names, starting with id,lower,upper,size.
std::vector<Column> parse_header(const std::vector<std::string_view>& fields,
                                 std::string_view source, size_t line_no) {
  static constexpr std::pair<std::string_view, Column> kKnown[] = {
      {"id", Column::Id},     {"lower", Column::Lower},         {"upper", Column::Upper},
      {"size", Column::Size}, {"alignment", Column::Alignment}, {"offset", Column::Offset}};
  std::vector<Column> columns;
  for (std::string_view f : fields) {
    auto it = std::find_if(std::begin(kKnown), std::end(kKnown),
                           [&](const auto& k) { return k.first == f; });
    if (it == std::end(kKnown)) {
      fail(ErrorKind::InvalidFile, "{}:{}: unknown column '{}' in header", source, line_no, f);
    }
    columns.push_back(it->second);
  }
  if (columns.size() < 4 || columns[0] != Column::Id || columns[1] != Column::Lower ||
      columns[2] != Column::Upper || columns[3] != Column::Size) {
    fail(ErrorKind::InvalidFile, "{}:{}: header must start with id,lower,upper,size", source,
         line_no);
  }
  return columns;
}

// One data line: every field an integer, sizes >= 0, alignments >= 1, lower < upper.
PlanBuffer parse_row(const std::vector<std::string_view>& fields,
                     const std::vector<Column>& columns, std::string_view source, size_t line_no) {
  if (fields.size() != columns.size()) {
    fail(ErrorKind::InvalidFile, "{}:{}: expected {} fields, got {}", source, line_no,
         columns.size(), fields.size());
  }
  PlanBuffer b;
  for (size_t c = 0; c < fields.size(); ++c) {
    int64_t v = 0;
    const char* first = fields[c].data();
    const char* last = first + fields[c].size();
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (fields[c].empty() || ec != std::errc() || ptr != last) {
      static constexpr const char* kNames[] = {"id",   "lower",     "upper",
                                               "size", "alignment", "offset"};
      fail(ErrorKind::InvalidFile, "{}:{}: field '{}' is not an integer: '{}'", source, line_no,
           kNames[static_cast<int>(columns[c])], fields[c]);
    }
    switch (columns[c]) {
      case Column::Id:
        b.id = v;
        break;
      case Column::Lower:
        b.lower = v;
        break;
      case Column::Upper:
        b.upper = v;
        break;
      case Column::Size:
        if (v < 0) fail(ErrorKind::InvalidFile, "{}:{}: negative size {}", source, line_no, v);
        b.size = static_cast<uint64_t>(v);
        break;
      case Column::Alignment:
        if (v < 1) fail(ErrorKind::InvalidFile, "{}:{}: alignment {} < 1", source, line_no, v);
        b.alignment = static_cast<uint64_t>(v);
        break;
      case Column::Offset:
        break;  // a previous solution's offsets: ignored
    }
  }
  if (b.upper <= b.lower) {
    fail(ErrorKind::InvalidFile, "{}:{}: upper {} <= lower {}", source, line_no, b.upper, b.lower);
  }
  return b;
}

}  // namespace

std::vector<PlanBuffer> parse_intervals_csv(std::string_view text, std::string_view source) {
  std::vector<PlanBuffer> out;
  std::vector<Column> columns;
  std::unordered_map<int64_t, size_t> first_line;  // id -> line it was defined on
  size_t line_no = 0, pos = 0;
  uint64_t total = 0;  // sizes + padding so far; < 2^61 (each term <= 2^60 + 2^40)
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (trim(line).empty()) continue;
    if (columns.empty()) {
      columns = parse_header(split(line), source, line_no);
      continue;
    }
    const PlanBuffer b = parse_row(split(line), columns, source, line_no);
    auto [it, inserted] = first_line.emplace(b.id, line_no);
    if (!inserted) {
      fail(ErrorKind::InvalidFile, "{}:{}: duplicate id {} (first on line {})", source, line_no,
           b.id, it->second);
    }
    // The planner's limits, checked here too so the error names the line (plan_offsets can
    // only name the id): past them some height or offset sum could wrap 64 bits.
    if (b.size > kMaxPlanBytes || b.alignment > kMaxPlanAlignment)
      fail(ErrorKind::InvalidFile, "{}:{}: size {} / alignment {} too large (limits 2^60 / 2^40)",
           source, line_no, b.size, b.alignment);
    if (b.size > 0) total += b.size + (b.alignment - 1);
    if (total > kMaxPlanBytes)
      fail(ErrorKind::InvalidFile,
           "{}:{}: sizes (with alignment padding) up to this line add up to {} bytes, over the "
           "planner's limit of 2^60 ({})",
           source, line_no, total, kMaxPlanBytes);
    out.push_back(b);
  }
  if (columns.empty()) fail(ErrorKind::InvalidFile, "{}: empty file (no header)", source);
  return out;
}

std::vector<PlanBuffer> read_intervals_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_intervals_csv(ss.str(), path);
}

std::string format_solution_csv(std::span<const PlanBuffer> buffers,
                                std::span<const uint64_t> offsets) {
  MINFER_ASSERT(buffers.size() == offsets.size());
  std::string out = "id,lower,upper,size,offset\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const PlanBuffer& b = buffers[i];
    out += fmt::format("{},{},{},{},{}\n", b.id, b.lower, b.upper, b.size, offsets[i]);
  }
  return out;
}

void write_solution_csv(const std::string& path, std::span<const PlanBuffer> buffers,
                        std::span<const uint64_t> offsets) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::Io, "cannot write '{}'", path);
  out << format_solution_csv(buffers, offsets);
  if (!out) fail(ErrorKind::Io, "write to '{}' failed", path);
}

}  // namespace minfer
