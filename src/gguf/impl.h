// Internal to src/gguf: the state behind gguf::File.
// Ownership: FileState borrows the bytes at `base`; File::Impl owns the mapping (unmapped in its
// destructor). Thread safety: immutable once parse_file returns (File's contract). Failure:
// parse_file throws Error(InvalidFile) naming the file, field and value. Cost: parse_file is
// O(header size) plus map inserts for the keys and tensor names.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"

namespace minfer::gguf {

namespace detail {
// Everything parsed from a file; File::Impl adds ownership of the mapping.
struct FileState {
  std::string path;
  const uint8_t* base = nullptr;  // file image (mapping or caller's memory)
  uint64_t size = 0;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> kv;
  std::map<std::string, size_t, std::less<>> kv_index;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;
};

// Parses and validates f.base[0, f.size); throws Error(InvalidFile).
void parse_file(FileState& f);
}  // namespace detail

struct File::Impl : detail::FileState {
  void* map = nullptr;  // owned mapping, if any (the file, or anonymous memory with --no-mmap)
  size_t map_size = 0;
  bool file_backed = false;  // map is a mapping of the file (release_pages may drop pages)
  bool locked = false;       // mlock succeeded: munlock before unmapping
  int fd = -1;               // file_backed: kept open for read_mapped (pread), closed by ~Impl
  std::string lock_error;
  ~Impl();
};

}  // namespace minfer::gguf
