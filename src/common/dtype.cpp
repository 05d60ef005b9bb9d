#include "common/dtype.h"

#include <array>
#include <cctype>

#include "common/error.h"

namespace minfer {
namespace {

constexpr std::array<TypeTraits, 20> kTraits = {{
    {GgmlType::F32, "f32", 1, 4, false, true},      {GgmlType::F16, "f16", 1, 2, false, true},
    {GgmlType::Q4_0, "q4_0", 32, 18, true, true},   {GgmlType::Q4_1, "q4_1", 32, 20, true, false},
    {GgmlType::Q5_0, "q5_0", 32, 22, true, true},   {GgmlType::Q5_1, "q5_1", 32, 24, true, false},
    {GgmlType::Q8_0, "q8_0", 32, 34, true, true},   {GgmlType::Q8_1, "q8_1", 32, 36, true, false},
    {GgmlType::Q2_K, "q2_K", 256, 84, true, false}, {GgmlType::Q3_K, "q3_K", 256, 110, true, false},
    {GgmlType::Q4_K, "q4_K", 256, 144, true, true}, {GgmlType::Q5_K, "q5_K", 256, 176, true, true},
    {GgmlType::Q6_K, "q6_K", 256, 210, true, true}, {GgmlType::Q8_K, "q8_K", 256, 292, true, false},
    {GgmlType::I8, "i8", 1, 1, false, false},       {GgmlType::I16, "i16", 1, 2, false, false},
    {GgmlType::I32, "i32", 1, 4, false, true},      {GgmlType::I64, "i64", 1, 8, false, false},
    {GgmlType::F64, "f64", 1, 8, false, false},     {GgmlType::BF16, "bf16", 1, 2, false, true},
}};

}  // namespace

const TypeTraits* type_traits(uint32_t id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const TypeTraits& type_traits(GgmlType t) {
  const TypeTraits* tr = type_traits(static_cast<uint32_t>(t));
  MINFER_ASSERT(tr != nullptr, "unknown GgmlType");
  return *tr;
}

std::string_view type_name(GgmlType t) {
  return type_traits(t).name;
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const auto& t : kTraits) {
    if (t.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i)
      eq = std::tolower((unsigned char)t.name[i]) == std::tolower((unsigned char)name[i]);
    if (eq) return t.type;
  }
  return std::nullopt;
}

size_t row_size(GgmlType t, int64_t n) {
  const TypeTraits& tr = type_traits(t);
  MINFER_ASSERT(n % tr.block_size == 0, "row length not a multiple of the block size");
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace minfer
