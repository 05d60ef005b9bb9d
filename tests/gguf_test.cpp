// minfer-test-libs: minfer_gguf minfer_common
// GGUF reader/writer: round trips, typed accessors, and one hand-made broken file per rule.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"

namespace minfer::gguf {
namespace {

// Raw little-endian byte builder for hand-made (often broken) files.
struct Raw {
  std::vector<uint8_t> b;
  template <typename T>
  Raw& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Raw& u8(uint8_t v) { return put(v); }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  Raw& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Raw& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t off) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(off);
  }
  Raw& pad(size_t a) {
    b.resize((b.size() + a - 1) / a * a, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

File parse(const std::vector<uint8_t>& bytes) {
  return File::from_memory(bytes.data(), bytes.size(), "test.gguf");
}

// Asserts a clean InvalidFile error whose message names the file and contains `needle`.
void expect_invalid(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    parse(bytes);
    ADD_FAILURE() << "accepted a broken file; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFile) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
  }
}

// A valid file exercising every value type, two tensors, and custom alignment.
Writer sample_writer() {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  Value v;
  v.type = ValueType::U8;
  v.scalar = uint64_t{200};
  w.set("t.u8", v);
  v.type = ValueType::I8;
  v.scalar = int64_t{-5};
  w.set("t.i8", v);
  v.type = ValueType::U16;
  v.scalar = uint64_t{65535};
  w.set("t.u16", v);
  v.type = ValueType::I16;
  v.scalar = int64_t{-32768};
  w.set("t.i16", v);
  w.set("t.u32", Value::u32(4000000000u));
  w.set("t.i32", Value::i32(-7));
  w.set("t.u64", Value::u64(1ull << 40));
  v.type = ValueType::I64;
  v.scalar = int64_t{-(1ll << 40)};
  w.set("t.i64", v);
  w.set("t.f32", Value::f32(0.25f));
  v.type = ValueType::F64;
  v.scalar = 1e-300;
  w.set("t.f64", v);
  w.set("t.bool", Value::boolean(true));
  w.set("t.strs", Value::string_array({"a", "", "hello"}));
  w.set("t.f32s", Value::f32_array({1.5f, -2.0f}));
  w.set("t.i32s", Value::i32_array({1, -2, 3}));
  Value u8s;
  u8s.type = ValueType::Array;
  u8s.array_type = ValueType::U8;
  u8s.ints = {0, 255};
  w.set("t.u8s", u8s);
  std::vector<uint8_t> a(8 * 4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  w.add_tensor("a", GgmlType::F32, {8}, a);
  w.add_tensor("b", GgmlType::Q8_0, {32, 2}, [](uint8_t* dst, uint64_t n) {
    ASSERT_EQ(n, 68u);
    for (uint64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(i * 3);
  });
  return w;
}

TEST(GgufRoundTrip, EveryValueTypeAndTensors) {
  const auto bytes = sample_writer().to_bytes();
  File f = parse(bytes);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");  // insertion order
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -5);
  EXPECT_EQ(f.get_int("t.u16"), 65535);
  EXPECT_EQ(f.get_int("t.i16"), -32768);
  EXPECT_EQ(f.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(f.get_int("t.i32"), -7);
  EXPECT_EQ(f.get_int("t.u64"), 1ll << 40);
  EXPECT_EQ(f.get_int("t.i64"), -(1ll << 40));
  EXPECT_EQ(f.get_float("t.f32"), 0.25);
  EXPECT_EQ(f.get_float("t.f64"), 1e-300);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_string_array("t.strs"), (std::vector<std::string>{"a", "", "hello"}));
  EXPECT_EQ(f.get_float_array("t.f32s"), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.get_int_array("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_int_array("t.u8s"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.find("t.u8s")->array_size(), 2u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorInfo* a = f.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->n_dims, 1);
  EXPECT_EQ(a->ne[0], 8);
  EXPECT_EQ(a->n_bytes, 32u);
  EXPECT_EQ(a->data[5], 5);
  const TensorInfo* b = f.find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::Q8_0);
  EXPECT_EQ(b->n_elements(), 64);
  EXPECT_EQ(b->n_bytes, 68u);
  EXPECT_EQ(b->offset, 32u);  // a's 32 bytes, already aligned
  EXPECT_EQ(b->data[10], 30);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.find_tensor("zzz"), nullptr);
}

TEST(GgufRoundTrip, CustomAlignmentAndReplaceKeepsOrder) {
  Writer w = sample_writer();
  w.set("general.alignment", Value::u32(256));
  w.set("general.architecture", Value::string("qwen2"));  // replaced in place
  const auto bytes = w.to_bytes();
  File f = parse(bytes);
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.data_offset() % 256, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, 256u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
}

TEST(GgufRoundTrip, WriteToDiskRenamesTmp) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("minfer_gguf_test_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  sample_writer().write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  {
    File f = File::open(path);
    EXPECT_EQ(f.path(), path);
    EXPECT_EQ(f.file_size(), std::filesystem::file_size(path));
    EXPECT_EQ(f.find_tensor("b")->data[10], 30);
    EXPECT_EQ(f.get_int("t.u8"), 200);
  }
  std::filesystem::remove(path);
}

// release_pages only drops residency: the bytes read the same afterwards, from a mapped file,
// a --no-mmap read, an --mlock-ed mapping
// (pages come back from the page cache) and from memory (where it must do nothing at all: on
// anonymous memory MADV_DONTNEED would zero the bytes).
TEST(GgufRoundTrip, ReleasedPagesReadTheSame) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("minfer_gguf_release_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  Writer w;
  const int64_t n = 5 * 4096 + 123;  // several pages, not page-aligned
  w.add_tensor("big", GgmlType::F32, {n}, [](uint8_t* dst, uint64_t bytes) {
    for (uint64_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(i * 7 + 3);
  });
  w.write(path);
  auto check = [&](const File& f) {
    const TensorInfo* t = f.find_tensor("big");
    ASSERT_NE(t, nullptr);
    const std::vector<uint8_t> before(t->data, t->data + t->n_bytes);
    f.release_pages(t->data, t->n_bytes);
    f.release_pages(t->data - 1, 0);                // empty range
    f.release_pages(before.data(), before.size());  // not inside the mapping: ignored
    EXPECT_TRUE(std::equal(before.begin(), before.end(), t->data));
    EXPECT_EQ(t->data[4097], static_cast<uint8_t>(4097 * 7 + 3));
    // read_mapped: the file's bytes by pread for a mapping (released pages included), false
    // (nothing copied) for anything else and for ranges reaching outside the mapping.
    std::vector<uint8_t> got(before.size(), 0);
    const bool read = f.read_mapped(t->data, got.data(), got.size());
    EXPECT_EQ(read, f.mapped());
    if (read) {
      EXPECT_EQ(got, before);
    }
    std::vector<uint8_t> part(100, 0);
    if (f.mapped()) {
      EXPECT_TRUE(f.read_mapped(t->data + 4000, part.data(), part.size()));
      EXPECT_TRUE(std::equal(part.begin(), part.end(), before.begin() + 4000));
      const uint8_t* map = t->data - f.data_offset() - t->offset;
      const uint8_t* end = map + f.file_size();
      EXPECT_TRUE(f.read_mapped(end - 10, part.data(), 10));
      EXPECT_FALSE(f.read_mapped(end - 10, part.data(), 11));
    }
    EXPECT_FALSE(f.read_mapped(before.data(), part.data(), part.size()));
  };
  {
    File f = File::open(path);
    EXPECT_TRUE(f.mapped());
    check(f);
  }
  {
    // --no-mmap: the bytes were read into anonymous memory, where releasing must not zero them.
    uint64_t last_done = 0;
    OpenParams op;
    op.mmap = false;
    op.progress_user = &last_done;
    op.progress = [](uint64_t done, uint64_t, void* u) { *static_cast<uint64_t*>(u) = done; };
    File f = File::open(path, op);
    EXPECT_FALSE(f.mapped());
    EXPECT_EQ(last_done, f.file_size());
    check(f);
  }
  {
    // mmap + prefetch: paged in at open with progress up to the whole file; still a mapping.
    uint64_t last_done = 0, calls = 0;
    std::pair<uint64_t*, uint64_t*> seen{&last_done, &calls};
    OpenParams op;
    op.prefetch = true;
    op.progress_user = &seen;
    op.progress = [](uint64_t done, uint64_t, void* u) {
      auto* s = static_cast<std::pair<uint64_t*, uint64_t*>*>(u);
      *s->first = done;
      ++*s->second;
    };
    File f = File::open(path, op);
    EXPECT_TRUE(f.mapped());
    EXPECT_EQ(last_done, f.file_size());
    EXPECT_GE(calls, 1u);
    check(f);
  }
  {
    // --mlock: locked, or the reason it was refused (RLIMIT_MEMLOCK); never an exception.
    OpenParams op;
    op.mlock = true;
    File f = File::open(path, op);
    if (!f.lock_error().empty()) {
      EXPECT_NE(f.lock_error().find("mlock"), std::string::npos);
    }
    check(f);
  }
  const auto bytes = w.to_bytes();
  File m = parse(bytes);
  EXPECT_FALSE(m.mapped());
  check(m);
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, FailedFillLeavesNoFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("minfer_gguf_fail_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  Writer w;
  w.add_tensor("x", GgmlType::F32, {4},
               [](uint8_t*, uint64_t) { throw Error(ErrorKind::Internal, "boom"); });
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufWriter, RejectsBadTensors) {
  Writer w;
  EXPECT_THROW(w.add_tensor("x", GgmlType::Q8_0, {33}, std::vector<uint8_t>{}), Error);
  EXPECT_THROW(w.add_tensor("x", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>{}), Error);
  w.add_tensor("x", GgmlType::F32, {1}, std::vector<uint8_t>(4));
  EXPECT_THROW(w.add_tensor("x", GgmlType::F32, {1}, std::vector<uint8_t>(4)), Error);
  EXPECT_THROW(w.set("", Value::u32(1)), Error);
}

TEST(GgufAccessors, ErrorsNameFileKeyExpectedAndActual) {
  const auto bytes = sample_writer().to_bytes();
  File f = parse(bytes);
  try {
    f.get_int("general.architecture");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFile);
    EXPECT_NE(m.find("test.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("general.architecture"), std::string::npos) << m;
    EXPECT_NE(m.find("integer"), std::string::npos) << m;
    EXPECT_NE(m.find("string"), std::string::npos) << m;
  }
  try {
    f.get_string_array("t.f32s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found array of f32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get_float("t.u32"), Error);
  EXPECT_THROW(f.get_bool("t.u8"), Error);
  EXPECT_THROW(f.get_u32("t.i32"), Error);  // -7 does not fit
  EXPECT_THROW(f.get_u32("t.u64"), Error);  // 2^40 does not fit
  EXPECT_THROW(f.get_string("missing.key"), Error);
  EXPECT_EQ(f.get_int_or("missing.key", 42), 42);
  EXPECT_EQ(f.get_float_or("missing.key", 1.5), 1.5);
  EXPECT_EQ(f.get_string_or("missing.key", "x"), "x");
  EXPECT_TRUE(f.get_bool_or("missing.key", true));
  EXPECT_THROW(f.get_int_or("t.f32", 1), Error);  // present with the wrong type: not a fallback
}

TEST(GgufAccessors, U64AboveI64IsAnError) {
  Writer w;
  w.set("big", Value::u64(~0ull));
  const auto bytes = w.to_bytes();
  File f = parse(bytes);
  EXPECT_THROW(f.get_int("big"), Error);
}

// ---- broken files: one per rule ----

TEST(GgufBroken, BadMagic) {
  Raw r;
  r.u32(0x46554746).u32(3).u64(0).u64(0);
  expect_invalid(r.b, "bad magic");
}

TEST(GgufBroken, EmptyAndTinyFiles) {
  expect_invalid({}, "truncated");
  expect_invalid({'G', 'G'}, "truncated");
}

TEST(GgufBroken, Version1Rejected) {
  Raw r;
  r.header(1, 0, 0);
  expect_invalid(r.b, "version 1 is not supported");
}

TEST(GgufBroken, UnsupportedVersions) {
  Raw r;
  r.header(4, 0, 0);
  expect_invalid(r.b, "unsupported GGUF version 4");
  Raw be;
  be.header(0x03000000, 0, 0);
  expect_invalid(be.b, "big-endian");
}

TEST(GgufBroken, Version2Accepted) {
  Raw r;
  r.header(2, 0, 1).kv_u32("a.b", 7);
  File f = parse(r.b);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_u32("a.b"), 7u);
}

TEST(GgufBroken, CountsLargerThanTheFile) {
  Raw kv;
  kv.header(3, 0, 1ull << 60).kv_u32("a", 1);
  expect_invalid(kv.b, "metadata count 1152921504606846976 is larger than the file");
  Raw t;
  t.header(3, 1000, 0).tensor("a", {8}, 0, 0);
  expect_invalid(t.b, "tensor count 1000 is larger than the file");
}

TEST(GgufBroken, StringLengthPastEndOrOverLimit) {
  Raw r;
  r.header(3, 0, 1).u64(100).zeros(20);
  expect_invalid(r.b, "string length 100 runs past the end");
  Raw big;
  big.header(3, 0, 1).u64((1ull << 30) + 1).zeros(16);
  expect_invalid(big.b, "exceeds the limit");
  Raw val;
  val.header(3, 0, 1).str("k").u32(8).u64(1ull << 40).zeros(8);
  expect_invalid(val.b, "string length 1099511627776 exceeds the limit");
}

TEST(GgufBroken, ArrayLengthPastEnd) {
  Raw r;
  r.header(3, 0, 1).str("arr").u32(9).u32(4).u64(1000).u32(1);
  expect_invalid(r.b, "array of 1000 u32 elements runs past the end");
  Raw s;
  s.header(3, 0, 1).str("arr").u32(9).u32(8).u64(1ull << 62).zeros(16);
  expect_invalid(s.b, "runs past the end");
}

TEST(GgufBroken, ArrayOverDecodedLimit) {
  // 2^27 + 1 u8 elements are 128 MiB on disk but would decode past 1 GiB of int64s. The image
  // is untouched anonymous memory (zero pages), so the test costs no real memory.
  const size_t n = (1u << 27) + 1;
  Raw head;
  head.header(3, 0, 1).str("big").u32(9).u32(0).u64(n);
  const size_t size = head.b.size() + n;
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  std::memcpy(m, head.b.data(), head.b.size());
  try {
    File::from_memory(static_cast<uint8_t*>(m), size, "test.gguf");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  }
  munmap(m, size);
}

TEST(GgufBroken, NestedArray) {
  Raw r;
  r.header(3, 0, 1).str("arr").u32(9).u32(9).u64(1).u32(4).u64(1).u32(1);
  expect_invalid(r.b, "nested arrays");
}

TEST(GgufBroken, UnknownValueTypes) {
  Raw r;
  r.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_invalid(r.b, "unknown value type 13");
  Raw a;
  a.header(3, 0, 1).str("k").u32(9).u32(77).u64(1).u32(0);
  expect_invalid(a.b, "unknown array element type 77");
}

TEST(GgufBroken, BadBool) {
  Raw r;
  r.header(3, 0, 1).str("k").u32(7).u8(2);
  expect_invalid(r.b, "bool value 2");
}

TEST(GgufBroken, EmptyAndDuplicateKeys) {
  Raw e;
  e.header(3, 0, 1).kv_u32("", 1);
  expect_invalid(e.b, "empty key");
  Raw d;
  d.header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  expect_invalid(d.b, "duplicate metadata key 'a.b'");
}

TEST(GgufBroken, DuplicateAndEmptyTensorNames) {
  Raw d;
  d.header(3, 2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).zeros(64);
  expect_invalid(d.b, "duplicate tensor name 'w'");
  Raw e;
  e.header(3, 1, 0).tensor("", {8}, 0, 0).pad(32).zeros(32);
  expect_invalid(e.b, "empty name");
}

TEST(GgufBroken, DimensionCount) {
  Raw five;
  five.header(3, 1, 0).tensor("w", {1, 1, 1, 1, 8}, 0, 0).pad(32).zeros(32);
  expect_invalid(five.b, "n_dims 5 is not between 1 and 4");
  Raw zero;
  zero.header(3, 1, 0).tensor("w", {}, 0, 0).zeros(64);
  expect_invalid(zero.b, "n_dims 0");
}

TEST(GgufBroken, NegativeAndOverflowingDimensions) {
  Raw neg;
  neg.header(3, 1, 0).tensor("w", {8, ~0ull}, 0, 0).pad(32).zeros(32);
  expect_invalid(neg.b, "dimension 1 is negative (-1)");
  Raw ovf;
  ovf.header(3, 1, 0).tensor("w", {1ull << 32, 1ull << 32}, 0, 0).pad(32).zeros(32);
  expect_invalid(ovf.b, "element count overflows");
  // 2^62 f64 elements fit in int64, their 2^65 bytes do not fit in u64.
  Raw bytes;
  bytes.header(3, 1, 0).tensor("w", {1ull << 31, 1ull << 31}, 28, 0).pad(32).zeros(32);
  expect_invalid(bytes.b, "byte count overflows");
}

TEST(GgufBroken, UnknownTensorType) {
  Raw r;
  r.header(3, 1, 0).tensor("w", {32}, 99, 0).pad(32).zeros(64);
  expect_invalid(r.b, "unknown tensor type 99");
}

TEST(GgufTypes, KnownButUnsupportedTypeLoadsFlagged) {
  // q4_1 (id 3): 20-byte blocks of 32. Loads; traits say minfer cannot compute with it.
  Raw r;
  r.header(3, 1, 0).tensor("w", {32}, 3, 0).pad(32).zeros(32);
  File f = parse(r.b);
  const TensorInfo* t = f.find_tensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, GgmlType::Q4_1);
  EXPECT_EQ(t->n_bytes, 20u);
  EXPECT_FALSE(type_traits(t->type).supported);
}

TEST(GgufBroken, RowLengthNotAMultipleOfTheBlock) {
  Raw r;
  r.header(3, 1, 0).tensor("w", {33}, 8, 0).pad(32).zeros(64);
  expect_invalid(r.b, "ne[0]=33 is not a multiple of the q8_0 block size 32");
}

TEST(GgufBroken, DataMisalignedOrPastTheEnd) {
  Raw mis;
  mis.header(3, 1, 0).tensor("w", {8}, 0, 4).pad(32).zeros(64);
  expect_invalid(mis.b, "data offset 4 is not a multiple of the alignment 32");
  Raw end;
  end.header(3, 1, 0).tensor("w", {8}, 0, 32).pad(32).zeros(32);
  expect_invalid(end.b, "runs past the end of the file");
  Raw huge;
  huge.header(3, 1, 0).tensor("w", {8}, 0, ~0ull - 31).pad(32).zeros(32);
  expect_invalid(huge.b, "runs past the end of the file");
}

TEST(GgufBroken, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, (1u << 21)}) {
    Raw r;
    r.header(3, 0, 1).kv_u32("general.alignment", a);
    expect_invalid(r.b, "general.alignment");
  }
  Raw s;
  s.header(3, 0, 1).str("general.alignment").u32(8).str("x");
  expect_invalid(s.b, "expected an integer, found string");
  Raw ok;
  ok.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, 0, 0).pad(64).zeros(32);
  EXPECT_EQ(parse(ok.b).alignment(), 64u);
}

// Issue #15: alignment 1, 2 or 4 is a legal power of two, but puts f32 rows on addresses the
// kernels read through float pointers (UBSan: misaligned load in the matmul). Refused.
TEST(GgufBroken, AlignmentBelowTheKernelsNeedIsRefused) {
  for (uint32_t a : {1u, 2u, 4u}) {
    Writer w;
    w.set("general.alignment", Value::u32(a));
    w.add_tensor("x", GgmlType::F16, {3}, std::vector<uint8_t>(6));
    w.add_tensor("y", GgmlType::F32, {4}, std::vector<uint8_t>(16));
    expect_invalid(w.to_bytes(), "general.alignment': value " + std::to_string(a));
  }
  Writer w;
  w.set("general.alignment", Value::u32(8));
  w.add_tensor("x", GgmlType::F16, {3}, std::vector<uint8_t>(6));
  w.add_tensor("y", GgmlType::F32, {4}, std::vector<uint8_t>(16));
  const auto bytes = w.to_bytes();
  EXPECT_EQ(parse(bytes).find_tensor("y")->offset, 8u);
}

// Issue #15: two tensors whose data ranges share bytes were accepted silently.
TEST(GgufBroken, OverlappingTensorDataIsRefused) {
  Raw same;
  same.header(3, 2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 0).pad(32).zeros(32);
  expect_invalid(same.b, "overlaps tensor 'a'");
  Raw partial;  // a is [0, 64), b starts at 32
  partial.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(64);
  expect_invalid(partial.b, "tensor 'b': data [32, +32 bytes) overlaps tensor 'a' [0, +64 bytes)");
  Raw empty;  // a 0-element tensor owns no bytes: sharing its offset is fine
  empty.header(3, 2, 0).tensor("a", {0}, 0, 0).tensor("b", {8}, 0, 0).pad(32).zeros(32);
  EXPECT_EQ(parse(empty.b).tensors().size(), 2u);
  Raw adjacent;
  adjacent.header(3, 2, 0).tensor("b", {8}, 0, 32).tensor("a", {8}, 0, 0).pad(32).zeros(64);
  EXPECT_EQ(parse(adjacent.b).tensors().size(), 2u);
}

// Cut a valid file at every length up to the end of its last tensor's data: each prefix must
// fail cleanly (an Error, never a crash). Only the zero padding after the last tensor may go.
TEST(GgufBroken, TruncationAtEveryByte) {
  const auto bytes = sample_writer().to_bytes();
  const File whole = parse(bytes);
  const TensorInfo& last = whole.tensors().back();
  const size_t end = whole.data_offset() + last.offset + last.n_bytes;
  ASSERT_LT(end, bytes.size());
  ASSERT_NO_THROW(File::from_memory(bytes.data(), end, "trailing-padding-cut.gguf"));
  for (size_t len = 0; len < end; ++len) {
    // Copy so ASan sees reads past `len` as out of bounds.
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
    try {
      File::from_memory(cut.data(), cut.size(), "cut.gguf");
      ADD_FAILURE() << "a file cut at " << len << " of " << bytes.size() << " bytes was accepted";
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::InvalidFile) << e.what();
    }
  }
}

// Random byte mutations of a valid file: each parse either succeeds or throws a clean
// InvalidFile error (ASan/UBSan builds turn any out-of-bounds read or overflow into a failure).
TEST(GgufBroken, RandomMutationsNeverCrash) {
  const auto bytes = sample_writer().to_bytes();
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> m = bytes;
    const int n_flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n_flips; ++k) {
      const size_t at = rng() % m.size();
      // Often write an extreme value over a whole 8-byte field, else a random byte.
      if (rng() % 3 == 0 && at + 8 <= m.size()) {
        const uint64_t v = (rng() % 2) ? ~0ull - (rng() % 4) : (1ull << (rng() % 64));
        std::memcpy(m.data() + at, &v, 8);
      } else {
        m[at] = static_cast<uint8_t>(rng());
      }
    }
    try {
      File f = File::from_memory(m.data(), m.size(), "mut.gguf");
      for (const auto& t : f.tensors()) ASSERT_LE(t.data + t.n_bytes, m.data() + m.size());
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::InvalidFile) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

TEST(GgufOpen, MissingFileIsIoError) {
  try {
    File::open("/nonexistent/minfer.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/minfer.gguf"), std::string::npos);
  }
}

TEST(GgufReal, SharedModelAndVocabsLoad) {
  const std::filesystem::path shared = MINFER_SHARED_DIR;
  const auto model = shared / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model << " (../shared absent)";
  File f = File::open(model.string());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_GT(f.tensors().size(), 0u);
  EXPECT_NE(f.find_tensor("token_embd.weight"), nullptr);
  EXPECT_GT(f.get_u32("llama.block_count"), 0u);
  int n_vocab = 0;
  for (const auto& e : std::filesystem::directory_iterator(shared / "vocab")) {
    if (e.path().extension() != ".gguf") continue;
    File v = File::open(e.path().string());
    EXPECT_GT(v.get_string_array("tokenizer.ggml.tokens").size(), 0u) << e.path();
    ++n_vocab;
  }
  EXPECT_GT(n_vocab, 0);
}

// ---- `minfer info` on the command line ----

struct RunResult {
  int status = -1;
  std::string output;
};

RunResult run_command(const std::string& cmd) {
  RunResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("minfer_info_" + tag + "_" + std::to_string(getpid()) + ".gguf"))
      .string();
}

TEST(InfoCli, BrokenFileExitsNonZeroWithMessage) {
  if (!std::filesystem::exists(MINFER_BINARY)) GTEST_SKIP() << "minfer binary not built";
  Raw r;
  r.header(3, 1, 0).tensor("w", {33}, 8, 0).pad(32).zeros(64);
  const std::string path = temp_path("broken");
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fwrite(r.b.data(), 1, r.b.size(), f);
  fclose(f);
  const RunResult res = run_command(std::string(MINFER_BINARY) + " info -m " + path);
  std::filesystem::remove(path);
  EXPECT_NE(res.status, 0) << res.output;
  EXPECT_NE(res.output.find(path), std::string::npos) << res.output;
  EXPECT_NE(res.output.find("not a multiple of the q8_0 block size"), std::string::npos)
      << res.output;
  const RunResult missing = run_command(std::string(MINFER_BINARY) + " info -m /nonexistent.gguf");
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.output.find("cannot open"), std::string::npos) << missing.output;
}

TEST(InfoCli, PrintsMetadataAndTensorTable) {
  if (!std::filesystem::exists(MINFER_BINARY)) GTEST_SKIP() << "minfer binary not built";
  const std::string path = temp_path("ok");
  sample_writer().write(path);
  const RunResult res = run_command(std::string(MINFER_BINARY) + " info -m " + path);
  std::filesystem::remove(path);
  EXPECT_EQ(res.status, 0) << res.output;
  for (const char* want : {"version 3", "general.architecture", "\"llama\"", "string[3]", "q8_0",
                           "[32, 2]", "2 tensors"})
    EXPECT_NE(res.output.find(want), std::string::npos) << want << "\n" << res.output;
}

}  // namespace
}  // namespace minfer::gguf
