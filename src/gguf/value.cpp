// gguf::Value helpers: type names, constructors, array size.
#include <utility>

#include "gguf/gguf.h"

namespace minfer::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::Bool:
      return "bool";
    case ValueType::String:
      return "string";
    case ValueType::Array:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "unknown";
}

size_t Value::array_size() const {
  if (type != ValueType::Array) return 0;
  switch (array_type) {
    case ValueType::String:
      return strings.size();
    case ValueType::F32:
    case ValueType::F64:
      return floats.size();
    default:
      return ints.size();
  }
}

namespace {

Value make_scalar(ValueType t, decltype(Value::scalar) s) {
  Value r;
  r.type = t;
  r.scalar = std::move(s);
  return r;
}

Value make_array(ValueType element) {
  Value r;
  r.type = ValueType::Array;
  r.array_type = element;
  return r;
}

}  // namespace

Value Value::u32(uint32_t v) {
  return make_scalar(ValueType::U32, uint64_t{v});
}
Value Value::i32(int32_t v) {
  return make_scalar(ValueType::I32, int64_t{v});
}
Value Value::u64(uint64_t v) {
  return make_scalar(ValueType::U64, v);
}
Value Value::f32(float v) {
  return make_scalar(ValueType::F32, double{v});
}
Value Value::boolean(bool v) {
  return make_scalar(ValueType::Bool, v);
}
Value Value::string(std::string v) {
  return make_scalar(ValueType::String, std::move(v));
}

Value Value::string_array(std::vector<std::string> v) {
  Value r = make_array(ValueType::String);
  r.strings = std::move(v);
  return r;
}

Value Value::f32_array(std::vector<float> v) {
  Value r = make_array(ValueType::F32);
  r.floats.assign(v.begin(), v.end());
  return r;
}

Value Value::i32_array(std::vector<int32_t> v) {
  Value r = make_array(ValueType::I32);
  r.ints.assign(v.begin(), v.end());
  return r;
}

}  // namespace minfer::gguf
