#include "backend/cpu/profile.h"

namespace minfer::cpu {

std::string op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::MatMul:
      return "matmul";
    case OpKind::Logits:
      return "logits matmul";
    case OpKind::Attention:
      return "attention";
    case OpKind::Norm:
      return "norms";
    case OpKind::Rope:
      return "rope (+qkv bias, K/V store)";
    case OpKind::KvStore:
      return "kv store";
    case OpKind::GetRows:
      return "embedding rows";
    case OpKind::Elementwise:
      return "elementwise";
    case OpKind::Count:
      break;
  }
  return "?";
}

OpKind op_kind_of(const Node& n) {
  switch (n.op) {
    case Op::MatMul:
      // "result_output": the head before gemma2's final soft-capping (named "logits" after it).
      return n.name == "logits" || n.name == "result_output" ? OpKind::Logits : OpKind::MatMul;
    case Op::Attention:
      return OpKind::Attention;
    case Op::RmsNorm:
      return OpKind::Norm;
    case Op::Rope:
    case Op::QkvBiasRopeStore:
      return OpKind::Rope;
    case Op::KvStore:
      return OpKind::KvStore;
    case Op::GetRows:
      return OpKind::GetRows;
    case Op::Add:
    case Op::Mul:
    case Op::Silu:
    case Op::SwiGlu:
    case Op::GeGlu:
    case Op::Scale:
    case Op::SoftCap:
      return OpKind::Elementwise;
    case Op::Input:
    case Op::Weight:
    case Op::View:
    case Op::Count:
      break;
  }
  return OpKind::Count;
}

uint64_t OpProfile::total_ns() const {
  uint64_t s = waits.total_ns();
  for (uint64_t x : ns) s += x;
  return s;
}

}  // namespace minfer::cpu
