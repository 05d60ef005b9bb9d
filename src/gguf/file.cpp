// gguf::File: lifetime and typed metadata accessors.
#include <limits>

#include "common/error.h"
#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/impl.h"

namespace minfer::gguf {
namespace {

std::string describe(const Value& v) {
  if (v.type != ValueType::Array) return std::string(value_type_name(v.type));
  return fmt::format("array of {}", value_type_name(v.array_type));
}

[[noreturn]] void wrong_type(const std::string& path, std::string_view key,
                             std::string_view expected, const Value& v) {
  fail(ErrorKind::InvalidFile, "{}: key '{}': expected {}, found {}", path, key, expected,
       describe(v));
}

}  // namespace

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

const std::string& File::path() const {
  return impl_->path;
}
uint32_t File::version() const {
  return impl_->version;
}
uint64_t File::alignment() const {
  return impl_->alignment;
}
uint64_t File::file_size() const {
  return impl_->size;
}
uint64_t File::data_offset() const {
  return impl_->data_offset;
}

const std::vector<std::pair<std::string, Value>>& File::metadata() const {
  return impl_->kv;
}

const Value* File::find(std::string_view key) const {
  const auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kv[it->second].second;
}

namespace {

const Value& require(const File& f, std::string_view key, std::string_view expected) {
  const Value* v = f.find(key);
  if (v == nullptr)
    fail(ErrorKind::InvalidFile, "{}: missing key '{}' (expected {})", f.path(), key, expected);
  return *v;
}

}  // namespace

int64_t File::get_int(std::string_view key) const {
  const Value& v = require(*this, key, "an integer");
  if (!detail::is_integer(v.type)) wrong_type(path(), key, "an integer", v);
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(ErrorKind::InvalidFile, "{}: key '{}': value {} does not fit in i64", path(), key, *u);
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v.scalar);
}

int64_t File::get_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

uint32_t File::get_u32(std::string_view key) const {
  const int64_t v = get_int(key);
  if (v < 0 || v > static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
    fail(ErrorKind::InvalidFile, "{}: key '{}': value {} does not fit in u32", path(), key, v);
  return static_cast<uint32_t>(v);
}

double File::get_float(std::string_view key) const {
  const Value& v = require(*this, key, "f32 or f64");
  if (!detail::is_float(v.type)) wrong_type(path(), key, "f32 or f64", v);
  return std::get<double>(v.scalar);
}

double File::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool File::get_bool(std::string_view key) const {
  const Value& v = require(*this, key, "bool");
  if (v.type != ValueType::Bool) wrong_type(path(), key, "bool", v);
  return std::get<bool>(v.scalar);
}

bool File::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

const std::string& File::get_string(std::string_view key) const {
  const Value& v = require(*this, key, "string");
  if (v.type != ValueType::String) wrong_type(path(), key, "string", v);
  return std::get<std::string>(v.scalar);
}

std::string File::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const std::vector<std::string>& File::get_string_array(std::string_view key) const {
  const Value& v = require(*this, key, "array of string");
  if (v.type != ValueType::Array || v.array_type != ValueType::String)
    wrong_type(path(), key, "array of string", v);
  return v.strings;
}

const std::vector<double>& File::get_float_array(std::string_view key) const {
  const Value& v = require(*this, key, "array of f32 or f64");
  if (v.type != ValueType::Array || !detail::is_float(v.array_type))
    wrong_type(path(), key, "array of f32 or f64", v);
  return v.floats;
}

const std::vector<int64_t>& File::get_int_array(std::string_view key) const {
  const Value& v = require(*this, key, "array of integers");
  if (v.type != ValueType::Array ||
      !(detail::is_integer(v.array_type) || v.array_type == ValueType::Bool))
    wrong_type(path(), key, "array of integers", v);
  return v.ints;
}

const std::vector<TensorInfo>& File::tensors() const {
  return impl_->tensors;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

}  // namespace minfer::gguf
