// Shared by the fuzz targets whose parsers take UTF-8 text by contract (tool calls, reasoning):
// inputs outside that contract are skipped rather than reported.
// Ownership: a plain function. Thread safety: pure. Failure: none (false for invalid UTF-8).
// Cost: one JSON string dump of the input.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace minfer::fuzz {

inline bool valid_utf8(std::string_view s) {
  const nlohmann::json j = s;  // a JSON string: dump() checks the encoding
  try {
    (void)j.dump();
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
  return true;
}

}  // namespace minfer::fuzz
