// GGUF v3 writer. The header is serialised in memory; tensor bytes are produced by each
// tensor's FillFn straight into a writable mapping of PATH.tmp (space reserved up front with
// posix_fallocate, so a full disk is an Error, not a SIGBUS), then PATH.tmp is renamed to PATH.
// Where the filesystem cannot preallocate, tensors are filled into a buffer and pwrite()n.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <type_traits>

#include "common/error.h"
#include "gguf/format.h"
#include "gguf/gguf.h"

namespace minfer::gguf {
namespace {

class Bytes {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

int64_t scalar_as_int(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) return static_cast<int64_t>(*u);
  if (const auto* s = std::get_if<int64_t>(&v.scalar)) return *s;
  if (const auto* d = std::get_if<double>(&v.scalar)) return static_cast<int64_t>(*d);
  if (const auto* b = std::get_if<bool>(&v.scalar)) return *b ? 1 : 0;
  fail(ErrorKind::InvalidArgument, "gguf writer: a string value where a number was expected");
}

double scalar_as_double(const Value& v) {
  if (const auto* d = std::get_if<double>(&v.scalar)) return *d;
  return static_cast<double>(scalar_as_int(v));
}

// Writes one element of type `t`; integers are stored bitwise (u64 kept as its bit pattern).
void put_number(Bytes& b, ValueType t, int64_t i, double d) {
  if (t == ValueType::Bool) {
    b.put<uint8_t>(i != 0 ? 1 : 0);
    return;
  }
  const bool fixed = detail::visit_scalar_type(t, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_floating_point_v<T>) {
      b.put<T>(static_cast<T>(d));
    } else {
      b.put<T>(static_cast<T>(i));
    }
  });
  MINFER_ASSERT(fixed, "not a number type");
}

void put_value(Bytes& b, const std::string& key, const Value& v) {
  b.put<uint32_t>(static_cast<uint32_t>(v.type));
  if (v.type == ValueType::String) {
    const auto* s = std::get_if<std::string>(&v.scalar);
    if (s == nullptr)
      fail(ErrorKind::InvalidArgument, "gguf writer: key '{}' is not a string", key);
    b.put_string(*s);
    return;
  }
  if (v.type != ValueType::Array) {
    if (!detail::is_known_type(static_cast<uint32_t>(v.type)))
      fail(ErrorKind::InvalidArgument, "gguf writer: key '{}' has an unknown type", key);
    put_number(b, v.type, scalar_as_int(v), scalar_as_double(v));
    return;
  }
  if (v.array_type == ValueType::Array || !detail::is_known_type(uint32_t(v.array_type)))
    fail(ErrorKind::InvalidArgument, "gguf writer: key '{}': bad array element type", key);
  b.put<uint32_t>(static_cast<uint32_t>(v.array_type));
  b.put<uint64_t>(v.array_size());
  if (v.array_type == ValueType::String) {
    for (const auto& s : v.strings) b.put_string(s);
  } else if (detail::is_float(v.array_type)) {
    for (double d : v.floats) put_number(b, v.array_type, 0, d);
  } else {
    for (int64_t i : v.ints) put_number(b, v.array_type, i, 0.0);
  }
}

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

struct Layout {
  std::vector<uint8_t> header;  // everything before the data section, padded
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
};

}  // namespace

void Writer::set(std::string key, Value v) {
  if (key.empty()) fail(ErrorKind::InvalidArgument, "gguf writer: empty metadata key");
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, FillFn fill) {
  if (name.empty()) fail(ErrorKind::InvalidArgument, "gguf writer: empty tensor name");
  for (const auto& t : tensors_)
    if (t.name == name)
      fail(ErrorKind::InvalidArgument, "gguf writer: duplicate tensor '{}'", name);
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims))
    fail(ErrorKind::InvalidArgument, "gguf writer: tensor '{}' has {} dims (1..{})", name,
         ne.size(), kMaxDims);
  for (int64_t d : ne)
    if (d < 0) fail(ErrorKind::InvalidArgument, "gguf writer: tensor '{}' has dim {}", name, d);
  const TypeTraits& tr = type_traits(type);
  if (ne[0] % tr.block_size != 0)
    fail(ErrorKind::InvalidArgument, "gguf writer: tensor '{}': ne[0]={} not a multiple of {}",
         name, ne[0], tr.block_size);
  tensors_.push_back({std::move(name), type, std::move(ne), std::move(fill)});
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                        std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const std::string n = name;
  add_tensor(std::move(name), type, std::move(ne), [shared, n](uint8_t* dst, uint64_t size) {
    if (size != shared->size())
      fail(ErrorKind::InvalidArgument, "gguf writer: tensor '{}' has {} bytes, its shape needs {}",
           n, shared->size(), size);
    std::memcpy(dst, shared->data(), size);
  });
}

namespace {

// `tensors`: Writer's pending tensors (a private type, hence the template), each with name, type
// and shape ne.
template <typename Tensors>
Layout make_layout(const std::vector<std::pair<std::string, Value>>& kv, const Tensors& tensors) {
  uint64_t alignment = detail::kDefaultAlignment;
  for (const auto& [k, v] : kv) {
    if (k != "general.alignment") continue;
    const int64_t a = scalar_as_int(v);
    if (a <= 0 || (a & (a - 1)) != 0 || static_cast<uint64_t>(a) > kMaxAlignment)
      fail(ErrorKind::InvalidArgument, "gguf writer: general.alignment {} is invalid", a);
    alignment = static_cast<uint64_t>(a);
  }
  Layout L;
  Bytes b;
  b.put<uint32_t>(detail::kMagic);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors.size());
  b.put<uint64_t>(kv.size());
  for (const auto& [k, v] : kv) {
    b.put_string(k);
    put_value(b, k, v);
  }
  uint64_t off = 0;
  for (const auto& t : tensors) {
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    uint64_t rows = 1;
    for (size_t d = 0; d < t.ne.size(); ++d) {
      b.put<uint64_t>(static_cast<uint64_t>(t.ne[d]));
      if (d > 0) rows *= static_cast<uint64_t>(t.ne[d]);
    }
    b.put<uint32_t>(static_cast<uint32_t>(t.type));
    b.put<uint64_t>(off);
    const uint64_t bytes = row_size(t.type, t.ne[0]) * rows;
    L.offsets.push_back(off);
    L.sizes.push_back(bytes);
    off = align_up(off + bytes, alignment);
  }
  b.out.resize(align_up(b.out.size(), alignment), 0);
  L.header = std::move(b.out);
  L.total = L.header.size() + off;
  return L;
}

}  // namespace

std::vector<uint8_t> Writer::to_bytes() const {
  const Layout L = make_layout(kv_, tensors_);
  std::vector<uint8_t> out(L.total, 0);
  std::memcpy(out.data(), L.header.data(), L.header.size());
  for (size_t i = 0; i < tensors_.size(); ++i)
    tensors_[i].fill(out.data() + L.header.size() + L.offsets[i], L.sizes[i]);
  return out;
}

namespace {

// Owns PATH.tmp until commit(); removes it on failure.
class TmpFile {
 public:
  explicit TmpFile(const std::string& path) : path_(path), tmp_(path + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(ErrorKind::Io, "{}: cannot create: {}", tmp_, std::strerror(errno));
  }
  ~TmpFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& tmp() const { return tmp_; }
  // No fsync: the rename makes the file appear whole to other processes, which is the
  // guarantee we give; durability across a power loss is not worth seconds per model.
  void commit() {
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail(ErrorKind::Io, "{}: cannot flush: {}", tmp_, std::strerror(errno));
    }
    fd_ = -1;
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail(ErrorKind::Io, "{}: cannot rename to {}: {}", tmp_, path_, std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

void pwrite_all(const TmpFile& f, const uint8_t* p, uint64_t n, uint64_t off) {
  while (n > 0) {
    const ssize_t w = ::pwrite(f.fd(), p, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(ErrorKind::Io, "{}: write failed: {}", f.tmp(), std::strerror(errno));
    p += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
}

}  // namespace

void Writer::write(const std::string& path) const {
  const Layout L = make_layout(kv_, tensors_);
  TmpFile f(path);
  const int rc = ::posix_fallocate(f.fd(), 0, static_cast<off_t>(L.total));
  if (rc == 0) {
    void* m = ::mmap(nullptr, L.total, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd(), 0);
    if (m == MAP_FAILED) fail(ErrorKind::Io, "{}: mmap failed: {}", f.tmp(), std::strerror(errno));
    auto* base = static_cast<uint8_t*>(m);
    struct Unmap {
      void* m;
      size_t n;
      ~Unmap() { ::munmap(m, n); }
    } unmap{m, L.total};
    std::memcpy(base, L.header.data(), L.header.size());
    for (size_t i = 0; i < tensors_.size(); ++i)
      tensors_[i].fill(base + L.header.size() + L.offsets[i], L.sizes[i]);
  } else if (rc == EINVAL || rc == EOPNOTSUPP) {
    // No preallocation on this filesystem: fill each tensor into a buffer and write it.
    if (::ftruncate(f.fd(), static_cast<off_t>(L.total)) != 0)
      fail(ErrorKind::Io, "{}: cannot size file: {}", f.tmp(), std::strerror(errno));
    pwrite_all(f, L.header.data(), L.header.size(), 0);
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      buf.assign(L.sizes[i], 0);
      tensors_[i].fill(buf.data(), L.sizes[i]);
      pwrite_all(f, buf.data(), buf.size(), L.header.size() + L.offsets[i]);
    }
  } else {
    fail(ErrorKind::Io, "{}: cannot reserve {} bytes: {}", f.tmp(), L.total, std::strerror(rc));
  }
  f.commit();
}

}  // namespace minfer::gguf
