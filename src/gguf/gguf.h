// GGUF (v2 and v3) reader and writer.
//
// Reader: File::open memory-maps the file read-only and validates everything before any
// allocation whose size comes from the file: counts, string/array lengths, tensor shapes
// (checked arithmetic), types, alignment and data ranges. A bad file throws
// minfer::Error(ErrorKind::InvalidFile) whose message names the file, the field (key or
// tensor name, byte offset) and the offending value. Never a crash, never a huge allocation
// because a header lies.
//
// Ownership: File owns the mapping; TensorInfo::data points into it and is valid while the
// File lives. File is movable, not copyable.
// Thread safety: a File is immutable after open; concurrent reads are safe.
// Cost: open is O(header size); tensor data is paged in lazily by the OS.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/dtype.h"

namespace minfer::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view value_type_name(ValueType t);

// Limits a hostile header cannot exceed (documented, not hidden: see docs/GGUF.md).
constexpr uint64_t kMaxStringBytes = 1ull << 30;  // 1 GiB
constexpr uint64_t kMaxArrayBytes = 1ull << 30;   // 1 GiB of decoded elements
constexpr uint64_t kMaxAlignment = 1ull << 20;    // 1 MiB
// The kernels read f32 rows (and the type table has 8-byte i64/f64) through typed pointers:
// tensor data must sit on at least this boundary, so smaller general.alignment values (legal
// powers of two in the format, but never written by llama.cpp) are refused instead of handing
// the kernels misaligned rows.
constexpr uint64_t kMinAlignment = 8;
constexpr int kMaxDims = 4;

struct Value {
  // Scalars: exactly one alternative is set according to `type`.
  // Arrays: `type == Array`, `array_type` is the element type and exactly one vector is used.
  ValueType type = ValueType::U32;
  ValueType array_type = ValueType::U32;
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  std::vector<int64_t> ints;         // integer and bool arrays (u64 stored bitwise)
  std::vector<double> floats;        // f32 / f64 arrays
  std::vector<std::string> strings;  // string arrays

  size_t array_size() const;  // 0 for scalars

  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value string_array(std::vector<std::string> v);
  static Value f32_array(std::vector<float> v);
  static Value i32_array(std::vector<int32_t> v);
};

struct TensorInfo {
  std::string name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the row length (contiguous)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// How File::open brings the bytes in (llama.cpp's --no-mmap and --mlock).
struct OpenParams {
  // true: map the file (pages come in on first touch, shared with the page cache). false: read
  // the whole file into anonymous memory up front (--no-mmap: no page faults later, the file
  // may change or vanish afterwards).
  bool mmap = true;
  // mlock the bytes so they are never paged out (--mlock). Failing to lock (RLIMIT_MEMLOCK) is
  // not an error: File::lock_error() says why, for the caller to report.
  bool mlock = false;
  // mmap mode: fault every page of the file in at open, in order (llama.cpp maps with
  // MAP_POPULATE), so the first forward pass does not stall on page faults and a large load
  // can show its progress. Costs one sequential read of the file; leave it off when the
  // caller repacks the weights and releases the pages as it goes (the peak RSS would then
  // hold the whole file next to the packed copy).
  bool prefetch = false;
  // Called as bytes arrive: --no-mmap reads, and mmap with prefetch.
  void (*progress)(uint64_t done, uint64_t total, void* user) = nullptr;
  void* progress_user = nullptr;
};

class File {
 public:
  static File open(const std::string& path, const OpenParams& params = {});  // throws Error
  // Parse an in-memory image (tests; the bytes must outlive the File).
  static File from_memory(const uint8_t* data, size_t size, std::string name);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t file_size() const;
  uint64_t data_offset() const;  // absolute offset of the data section

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const;
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors. A missing key or a wrong type throws Error(InvalidFile) naming the file,
  // the key, the expected and the actual type. Integer accessors accept any integer type
  // whose value fits; float accessors accept f32 and f64.
  int64_t get_int(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  uint32_t get_u32(std::string_view key) const;  // range-checked
  double get_float(std::string_view key) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  const std::string& get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  const std::vector<double>& get_float_array(std::string_view key) const;
  const std::vector<int64_t>& get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;

  // Says that the mapped bytes [p, p + n) will not be read again soon: the whole pages inside
  // the range leave this process's resident set (madvise MADV_DONTNEED on the read-only private
  // file mapping). They stay in the page cache and come back on the next read, so the data is
  // never lost or changed. A no-op for a File made by from_memory (its bytes are not a file
  // mapping) and for ranges outside the mapping. Cost: one system call.
  void release_pages(const void* p, size_t n) const;

  // Copies the mapped bytes [p, p + n) to dst with pread from the file, not through the
  // mapping: for bytes whose pages release_pages dropped, a page fault to bring them back
  // costs far more than the read (a fault on a released page took 0.1-0.6 ms on the
  // development VM, a 1 KB pread 4 us) and would put the page back in the resident set.
  // False (nothing copied) when the File is not a file mapping or the range lies outside it.
  // Error(Io) when the read fails. Thread safe (pread). Cost: one system call.
  bool read_mapped(const void* p, void* dst, size_t n) const;

  // True when the bytes are a file mapping (File::open without --no-mmap).
  bool mapped() const;
  // OpenParams::mlock: empty when the bytes are locked (or no lock was asked), else the reason.
  const std::string& lock_error() const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes GGUF v3. Metadata keeps insertion order; tensors are laid out in insertion order,
// each aligned to `general.alignment` (default 32). write() goes to PATH.tmp then renames,
// so a failed write never leaves a half file under the final name.
class Writer {
 public:
  void set(std::string key, Value v);  // replaces an existing key in place
  // Tensor whose bytes are produced on demand (the generator streams big models).
  using FillFn = std::function<void(uint8_t* dst, uint64_t n_bytes)>;
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, FillFn fill);
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                  std::vector<uint8_t> bytes);
  void write(const std::string& path) const;  // throws Error(Io / InvalidArgument)
  std::vector<uint8_t> to_bytes() const;      // the whole file image (tests)

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    FillFn fill;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace minfer::gguf
