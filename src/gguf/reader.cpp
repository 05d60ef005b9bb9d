// GGUF reader: header parsing and validation. See gguf.h for the contract and docs/GGUF.md for
// the rules. Every length or count read from the file is checked against the bytes that remain
// BEFORE anything is reserved, so a lying header costs at most O(file size) memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <type_traits>

#include "common/error.h"
#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/impl.h"

namespace minfer::gguf {
namespace detail {
namespace {

// Minimum stored size of one KV pair: key length (8) + one key byte + value type (4) + one
// value byte; of one tensor info: name length (8) + one name byte + n_dims (4) + one dim (8)
// + type (4) + offset (8). Used to reject counts the file cannot possibly hold.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

class Parser {
 public:
  Parser(const std::string& name, const uint8_t* data, uint64_t size)
      : name_(name), p_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename... Args>
  [[noreturn]] void bad(uint64_t at, fmt::format_string<Args...> f, Args&&... args) const {
    fail(ErrorKind::InvalidFile, "{}: at byte {}: {}", name_, at,
         fmt::format(f, std::forward<Args>(args)...));
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      bad(pos_, "truncated: {} needs {} bytes but only {} remain", what, n, remaining());
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringBytes)
      bad(at, "{}: string length {} exceeds the limit of {} bytes", what, len, kMaxStringBytes);
    if (len > remaining())
      bad(at, "{}: string length {} runs past the end of the file ({} bytes remain)", what, len,
          remaining());
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  Value read_value(uint32_t type_id, const std::string& key, uint64_t type_at);

 private:
  void read_scalar_into(ValueType t, Value& v, std::string_view what);
  void read_array(Value& v, const std::string& key);

  const std::string& name_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

void Parser::read_scalar_into(ValueType t, Value& v, std::string_view what) {
  if (t == ValueType::String) {
    v.scalar = read_string(what);
    return;
  }
  if (t == ValueType::Bool) {
    const uint64_t at = pos_;
    const uint8_t b = read<uint8_t>(what);
    if (b > 1) bad(at, "{}: bool value {} is neither 0 nor 1", what, b);
    v.scalar = b != 0;
    return;
  }
  // Numbers widen to the Value's three scalar kinds: u64, i64 and double.
  const bool fixed = detail::visit_scalar_type(t, [&](auto zero) {
    using T = decltype(zero);
    const T x = read<T>(what);
    if constexpr (std::is_floating_point_v<T>) {
      v.scalar = static_cast<double>(x);
    } else if constexpr (std::is_signed_v<T>) {
      v.scalar = static_cast<int64_t>(x);
    } else {
      v.scalar = static_cast<uint64_t>(x);
    }
  });
  MINFER_ASSERT(fixed, "arrays are handled by read_array");
}

Value Parser::read_value(uint32_t type_id, const std::string& key, uint64_t type_at) {
  if (!detail::is_known_type(type_id))
    bad(type_at, "key '{}': unknown value type {}", key, type_id);
  Value v;
  v.type = static_cast<ValueType>(type_id);
  if (v.type == ValueType::Array) {
    read_array(v, key);
  } else {
    read_scalar_into(v.type, v, key);
  }
  return v;
}

void Parser::read_array(Value& v, const std::string& key) {
  const uint64_t type_at = pos_;
  const uint32_t et = read<uint32_t>(key);
  if (et == static_cast<uint32_t>(ValueType::Array))
    bad(type_at, "key '{}': nested arrays are not supported", key);
  if (!detail::is_known_type(et)) bad(type_at, "key '{}': unknown array element type {}", key, et);
  v.array_type = static_cast<ValueType>(et);
  const uint64_t count_at = pos_;
  const uint64_t n = read<uint64_t>(key);
  // Stored bytes: fixed-size elements exactly, strings at least their 8-byte length each.
  const uint64_t stored = et == static_cast<uint32_t>(ValueType::String) ? 8 : scalar_size(et);
  if (n > remaining() / stored)
    bad(count_at,
        "key '{}': array of {} {} elements runs past the end of the file ({} bytes remain)", key, n,
        value_type_name(v.array_type), remaining());
  // Decoded elements are 8 bytes (int64/double) or a std::string header; cap the total.
  const uint64_t decoded = v.array_type == ValueType::String ? sizeof(std::string) : 8;
  if (n > kMaxArrayBytes / decoded)
    bad(count_at, "key '{}': array length {} exceeds the limit of {} decoded bytes", key, n,
        kMaxArrayBytes);
  if (v.array_type == ValueType::String) {
    v.strings.reserve(n);
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; ++i) {
      v.strings.push_back(read_string(key));
      total += v.strings.back().size();
      if (total > kMaxArrayBytes)
        bad(pos_, "key '{}': string array exceeds the limit of {} bytes", key, kMaxArrayBytes);
    }
  } else if (detail::is_float(v.array_type)) {
    v.floats.reserve(n);
    Value tmp;
    for (uint64_t i = 0; i < n; ++i) {
      read_scalar_into(v.array_type, tmp, key);
      v.floats.push_back(std::get<double>(tmp.scalar));
    }
  } else {
    v.ints.reserve(n);
    Value tmp;
    for (uint64_t i = 0; i < n; ++i) {
      read_scalar_into(v.array_type, tmp, key);
      if (auto* u = std::get_if<uint64_t>(&tmp.scalar)) {
        v.ints.push_back(static_cast<int64_t>(*u));  // u64 stored bitwise, as documented
      } else if (auto* s = std::get_if<int64_t>(&tmp.scalar)) {
        v.ints.push_back(*s);
      } else {
        v.ints.push_back(std::get<bool>(tmp.scalar) ? 1 : 0);
      }
    }
  }
}

uint64_t parse_alignment(const Parser& ps, const detail::FileState& f) {
  const auto it = f.kv_index.find("general.alignment");
  if (it == f.kv_index.end()) return detail::kDefaultAlignment;
  const Value& v = f.kv[it->second].second;
  if (!detail::is_integer(v.type))
    fail(ErrorKind::InvalidFile, "{}: key 'general.alignment': expected an integer, found {}",
         f.path, value_type_name(v.type));
  uint64_t a = 0;
  if (auto* u = std::get_if<uint64_t>(&v.scalar)) a = *u;
  if (auto* s = std::get_if<int64_t>(&v.scalar)) {
    if (*s <= 0)
      fail(ErrorKind::InvalidFile, "{}: key 'general.alignment': value {} must be positive", f.path,
           *s);
    a = static_cast<uint64_t>(*s);
  }
  if (a == 0 || (a & (a - 1)) != 0 || a < kMinAlignment || a > kMaxAlignment)
    fail(ErrorKind::InvalidFile,
         "{}: key 'general.alignment': value {} must be a power of two between {} and {}", f.path,
         a, kMinAlignment, kMaxAlignment);
  (void)ps;
  return a;
}

void parse_kvs(Parser& ps, detail::FileState& f, uint64_t n_kv) {
  f.kv.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = ps.pos();
    std::string key = ps.read_string(fmt::format("key of metadata entry {}", i));
    if (key.empty()) ps.bad(key_at, "metadata entry {} has an empty key", i);
    if (f.kv_index.count(key)) ps.bad(key_at, "duplicate metadata key '{}'", key);
    const uint64_t type_at = ps.pos();
    const uint32_t type_id = ps.read<uint32_t>(key);
    Value v = ps.read_value(type_id, key, type_at);
    f.kv_index.emplace(key, f.kv.size());
    f.kv.emplace_back(std::move(key), std::move(v));
  }
}

void parse_tensor_infos(Parser& ps, detail::FileState& f, uint64_t n_tensors) {
  f.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = ps.pos();
    TensorInfo t;
    t.name = ps.read_string(fmt::format("name of tensor {}", i));
    if (t.name.empty()) ps.bad(at, "tensor {} has an empty name", i);
    if (f.tensor_index.count(t.name)) ps.bad(at, "duplicate tensor name '{}'", t.name);
    const uint64_t dims_at = ps.pos();
    const uint32_t n_dims = ps.read<uint32_t>(t.name);
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxDims))
      ps.bad(dims_at, "tensor '{}': n_dims {} is not between 1 and {}", t.name, n_dims, kMaxDims);
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = ps.pos();
      const uint64_t ne = ps.read<uint64_t>(t.name);
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        ps.bad(ne_at, "tensor '{}': dimension {} is negative ({})", t.name, d,
               static_cast<int64_t>(ne));
      t.ne[d] = static_cast<int64_t>(ne);
    }
    const uint64_t type_at = ps.pos();
    const uint32_t type_id = ps.read<uint32_t>(t.name);
    const TypeTraits* tr = type_traits(type_id);
    if (tr == nullptr) ps.bad(type_at, "tensor '{}': unknown tensor type {}", t.name, type_id);
    t.type = tr->type;
    t.offset = ps.read<uint64_t>(t.name);
    f.tensor_index.emplace(t.name, f.tensors.size());
    f.tensors.push_back(std::move(t));
  }
}

// Element and byte counts with checked arithmetic; data range and alignment.
void validate_tensor(const detail::FileState& f, TensorInfo& t) {
  const TypeTraits& tr = type_traits(t.type);
  uint64_t n_el = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    if (__builtin_mul_overflow(n_el, static_cast<uint64_t>(t.ne[d]), &n_el) ||
        n_el > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(ErrorKind::InvalidFile,
           "{}: tensor '{}': element count overflows (shape [{}, {}, {}, {}])", f.path, t.name,
           t.ne[0], t.ne[1], t.ne[2], t.ne[3]);
  }
  if (t.ne[0] % tr.block_size != 0)
    fail(ErrorKind::InvalidFile,
         "{}: tensor '{}': row length ne[0]={} is not a multiple of the {} block size {}", f.path,
         t.name, t.ne[0], tr.name, tr.block_size);
  uint64_t bytes = static_cast<uint64_t>(t.ne[0] / tr.block_size) * tr.type_size;
  for (int d = 1; d < kMaxDims; ++d) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(t.ne[d]), &bytes))
      fail(ErrorKind::InvalidFile, "{}: tensor '{}': byte count overflows", f.path, t.name);
  }
  t.n_bytes = bytes;
  if (t.offset % f.alignment != 0)
    fail(ErrorKind::InvalidFile,
         "{}: tensor '{}': data offset {} is not a multiple of the alignment {}", f.path, t.name,
         t.offset, f.alignment);
  uint64_t end = 0;
  if (__builtin_add_overflow(f.data_offset, t.offset, &end) ||
      __builtin_add_overflow(end, bytes, &end) || end > f.size)
    fail(ErrorKind::InvalidFile,
         "{}: tensor '{}': data [{} + {}, +{} bytes) runs past the end of the file ({} bytes)",
         f.path, t.name, f.data_offset, t.offset, bytes, f.size);
  t.data = f.base + f.data_offset + t.offset;
  // A mapping is page-aligned; an in-memory image (from_memory) might not be, and then every
  // offset would be misaligned for the kernels however the file is laid out.
  if (reinterpret_cast<uintptr_t>(t.data) % kMinAlignment != 0)
    fail(ErrorKind::InvalidArgument,
         "{}: tensor '{}': data address is not {}-byte aligned (the in-memory image must start "
         "on an {}-byte boundary)",
         f.path, t.name, kMinAlignment, kMinAlignment);
}

// Two tensors sharing bytes would let a write through one (or a fused copy) alias the other,
// and no writer produces it: reject it, naming both tensors. Empty tensors own no bytes.
void check_overlaps(const detail::FileState& f) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(f.tensors.size());
  for (const TensorInfo& t : f.tensors)
    if (t.n_bytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset < b->offset || (a->offset == b->offset && a->name < b->name);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (b.offset < a.offset + a.n_bytes)  // no overflow: validate_tensor bounded both ends
      fail(ErrorKind::InvalidFile,
           "{}: tensor '{}': data [{}, +{} bytes) overlaps tensor '{}' [{}, +{} bytes)", f.path,
           b.name, b.offset, b.n_bytes, a.name, a.offset, a.n_bytes);
  }
}

}  // namespace

void parse_file(FileState& f) {
  Parser ps(f.path, f.base, f.size);
  const uint32_t magic = ps.read<uint32_t>("magic");
  if (magic != detail::kMagic)
    ps.bad(0, "bad magic 0x{:08x} (expected 0x{:08x}, \"GGUF\"); not a GGUF file", magic,
           detail::kMagic);
  const uint32_t version = ps.read<uint32_t>("version");
  if (version == 1)
    ps.bad(4, "GGUF version 1 is not supported (32-bit counts); only versions 2 and 3 are");
  if (version != 2 && version != 3) {
    // A byte-swapped small number means a big-endian file.
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3)
      ps.bad(4, "big-endian GGUF (version {} byte-swapped) is not supported", swapped);
    ps.bad(4, "unsupported GGUF version {} (supported: 2, 3)", version);
  }
  f.version = version;
  const uint64_t n_tensors = ps.read<uint64_t>("tensor count");
  const uint64_t n_kv = ps.read<uint64_t>("metadata count");
  if (n_tensors > ps.remaining() / kMinTensorInfoBytes)
    ps.bad(8, "tensor count {} is larger than the file could hold ({} bytes remain)", n_tensors,
           ps.remaining());
  if (n_kv > ps.remaining() / kMinKvBytes)
    ps.bad(16, "metadata count {} is larger than the file could hold ({} bytes remain)", n_kv,
           ps.remaining());
  parse_kvs(ps, f, n_kv);
  f.alignment = parse_alignment(ps, f);
  if (n_tensors > ps.remaining() / kMinTensorInfoBytes)
    ps.bad(8, "tensor count {} is larger than the file could hold ({} bytes remain after metadata)",
           n_tensors, ps.remaining());
  parse_tensor_infos(ps, f, n_tensors);
  // The data section starts at the next multiple of the alignment. A file without tensors
  // (vocabulary-only) may end before that padding.
  f.data_offset = (ps.pos() + f.alignment - 1) / f.alignment * f.alignment;
  if (!f.tensors.empty() && f.data_offset > f.size)
    ps.bad(ps.pos(), "truncated: data section would start at byte {} but the file has {} bytes",
           f.data_offset, f.size);
  for (TensorInfo& t : f.tensors) validate_tensor(f, t);
  check_overlaps(f);
}

}  // namespace detail

void File::release_pages(const void* p, size_t n) const {
  // Anonymous memory (--no-mmap) would come back as zeros: only a file mapping drops pages.
  if (impl_->map == nullptr || !impl_->file_backed || n == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const auto map_begin = reinterpret_cast<uintptr_t>(impl_->map);
  if (begin < map_begin || begin + n > map_begin + impl_->map_size) return;
  // Only pages wholly inside the range: a page shared with a neighbouring tensor stays.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + n) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool File::read_mapped(const void* p, void* dst, size_t n) const {
  if (impl_->map == nullptr || !impl_->file_backed || impl_->fd < 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const auto map_begin = reinterpret_cast<uintptr_t>(impl_->map);
  if (begin < map_begin || n > impl_->map_size || begin - map_begin > impl_->map_size - n)
    return false;
  auto* out = static_cast<uint8_t*>(dst);
  size_t got = 0;
  while (got < n) {
    const auto off = static_cast<off_t>(begin - map_begin + got);
    const ssize_t r = ::pread(impl_->fd, out + got, n - got, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      fail(ErrorKind::Io, "{}: read of {} bytes at offset {} failed: {}", impl_->path, n - got, off,
           r < 0 ? std::strerror(errno) : "the file shrank");
    got += static_cast<size_t>(r);
  }
  return true;
}

File::Impl::~Impl() {
  if (fd >= 0) ::close(fd);
  if (locked) munlock(map, map_size);
  if (map != nullptr) munmap(map, map_size);
}

bool File::mapped() const {
  return impl_->file_backed;
}

const std::string& File::lock_error() const {
  return impl_->lock_error;
}

namespace {

// --no-mmap: the whole file read into page-aligned anonymous memory (kernels need the same
// alignment a mapping gives). Returns MAP_FAILED with errno set when memory is short.
void* read_whole_file(int fd, const std::string& path, size_t size, const OpenParams& params) {
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return m;
  auto* dst = static_cast<uint8_t*>(m);
  size_t got = 0;
  constexpr size_t kChunk = size_t{64} << 20;  // progress granularity
  while (got < size) {
    const ssize_t n = ::pread(fd, dst + got, std::min(kChunk, size - got), static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      munmap(m, size);
      fail(ErrorKind::Io, "{}: read failed at byte {} of {}: {}", path, got, size,
           e ? std::strerror(e) : "the file shrank");
    }
    got += static_cast<size_t>(n);
    if (params.progress) params.progress(got, size, params.progress_user);
  }
  mprotect(m, size, PROT_READ);  // as read-only as the mapping would be
  return m;
}

// mmap + prefetch: touch one byte per page, a chunk at a time, each chunk announced with
// MADV_WILLNEED so the kernel reads ahead while the previous one is touched.
void prefetch_mapping(const void* m, size_t size, const OpenParams& params) {
  const auto* base = static_cast<const volatile uint8_t*>(m);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  constexpr size_t kChunk = size_t{64} << 20;  // progress granularity
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kChunk, size - done);
    madvise(const_cast<uint8_t*>(base + done), n, MADV_WILLNEED);
    uint8_t sink = 0;
    for (size_t off = 0; off < n; off += page) sink ^= base[done + off];
    (void)sink;
    done += n;
    if (params.progress) params.progress(done, size, params.progress_user);
  }
}

}  // namespace

File File::open(const std::string& path, const OpenParams& params) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  // O_NONBLOCK: a FIFO would otherwise block here until a writer comes; the S_ISREG check below
  // then refuses it. Regular files ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(ErrorKind::Io, "{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::InvalidFile, "{}: not a regular file", path);
  }
  if (st.st_size == 0) {
    ::close(fd);
    fail(ErrorKind::InvalidFile, "{}: empty file (0 bytes); not a GGUF file", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* m = MAP_FAILED;
  int e = 0;
  try {
    m = params.mmap ? mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0)
                    : read_whole_file(fd, path, size, params);
    e = errno;
  } catch (...) {
    ::close(fd);
    throw;
  }
  // A mapping keeps the file alive by itself; its fd stays open for read_mapped.
  if (m == MAP_FAILED || !params.mmap) ::close(fd);
  if (m == MAP_FAILED)
    fail(ErrorKind::Io, "{}: {} of {} bytes failed: {}", path,
         params.mmap ? "mmap" : "allocating memory for --no-mmap", size, std::strerror(e));
  impl->map = m;
  impl->map_size = size;
  impl->file_backed = params.mmap;
  if (params.mmap) impl->fd = fd;
  if (params.mlock) {
    if (::mlock(m, size) == 0) {
      impl->locked = true;
    } else {
      impl->lock_error =
          fmt::format("mlock of {} bytes failed: {} (see ulimit -l)", size, std::strerror(errno));
    }
  }
  impl->base = static_cast<const uint8_t*>(m);
  impl->size = size;
  detail::parse_file(*impl);  // on throw, ~Impl unmaps
  // After the parse: a file that is refused costs no full read.
  if (params.mmap && params.prefetch) prefetch_mapping(m, size, params);
  return File(std::move(impl));
}

File File::from_memory(const uint8_t* data, size_t size, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->base = data;
  impl->size = size;
  detail::parse_file(*impl);
  return File(std::move(impl));
}

}  // namespace minfer::gguf
