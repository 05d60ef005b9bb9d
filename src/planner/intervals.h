// MiniMalloc-style interval CSV I/O for the offset planner.
//
// Input format: a header line `id,lower,upper,size` (optionally followed by an `alignment`
// column; an `offset` column, as in solution files, is accepted and ignored), then one buffer per
// line: integer id, half-open lifetime [lower, upper), size in bytes. Blank lines are skipped and
// CRLF line ends accepted. Output (solutions): `id,lower,upper,size,offset`.
//
// Failure: a malformed file throws Error(InvalidFile) whose message names the file and the
// 1-based line number: wrong header, wrong field count, a field that is not an integer, a
// negative size, upper <= lower, alignment < 1, a duplicate id. An unreadable file throws
// Error(Io). Ownership: returns values; nothing is kept. Thread safety: stateless.
// Cost: linear in the file size.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "planner/offset_planner.h"

namespace minfer {

// `source` names the text in error messages (usually the file path).
std::vector<PlanBuffer> parse_intervals_csv(std::string_view text, std::string_view source);
std::vector<PlanBuffer> read_intervals_csv(const std::string& path);

std::string format_solution_csv(std::span<const PlanBuffer> buffers,
                                std::span<const uint64_t> offsets);
void write_solution_csv(const std::string& path, std::span<const PlanBuffer> buffers,
                        std::span<const uint64_t> offsets);

}  // namespace minfer
