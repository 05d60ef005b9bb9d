// The RAM guard (kv/cache.h): how much memory this process may still use, and the check that
// refuses a model + context that would not fit, before anything is reserved.
#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "common/error.h"
#include "kv/cache.h"

namespace minfer::kv {

namespace {

constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();

// The first whitespace-separated number in a file ("max" and anything unparsable: kUnknown).
uint64_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word)) return kUnknown;
  try {
    size_t used = 0;
    const unsigned long long v = std::stoull(word, &used);
    return used == word.size() ? static_cast<uint64_t>(v) : kUnknown;
  } catch (const std::exception&) {
    return kUnknown;
  }
}

uint64_t mem_available(const std::string& meminfo) {
  std::ifstream f(meminfo);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    uint64_t kib = 0;
    if (in >> kib) return kib * 1024;
  }
  return kUnknown;
}

// min over the cgroup directory and its ancestors of (limit - usage): a limit may sit on any
// ancestor. Limits at or above 2^60 are v1's way of saying "none".
uint64_t cgroup_headroom(const std::string& root, std::string path, const char* limit_file,
                         const char* usage_file) {
  uint64_t best = kUnknown;
  while (true) {
    const std::string dir = root + path;
    const uint64_t limit = read_number(dir + "/" + limit_file);
    if (limit != kUnknown && limit < (uint64_t{1} << 60)) {
      const uint64_t usage = read_number(dir + "/" + usage_file);
      const uint64_t room = usage == kUnknown ? limit : (limit > usage ? limit - usage : 0);
      best = std::min(best, room);
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? std::string() : path.substr(0, slash);
  }
  return best;
}

}  // namespace

uint64_t available_memory_bytes(const std::string& meminfo, const std::string& proc_cgroup,
                                const std::string& cgroup_root) {
  uint64_t best = mem_available(meminfo);
  std::ifstream f(proc_cgroup);
  std::string line;
  // Lines are "id:controllers:path": "0::/path" for v2, "4:memory:/path" for v1's memory
  // controller. A hybrid host mounts v2 at <root>/unified.
  while (std::getline(f, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controllers.empty()) {
      for (const char* sub : {"", "/unified"}) {
        best = std::min(best,
                        cgroup_headroom(cgroup_root + sub, path, "memory.max", "memory.current"));
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      best = std::min(best, cgroup_headroom(cgroup_root + "/memory", path, "memory.limit_in_bytes",
                                            "memory.usage_in_bytes"));
    }
  }
  return best == kUnknown ? 0 : best;
}

uint64_t available_memory_bytes() {
  return available_memory_bytes("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup");
}

void check_ram(const RamNeed& need, uint64_t available, bool overcommit) {
  if (overcommit || available == 0) return;
  auto add = [](uint64_t x, uint64_t y) { return x > kUnknown - y ? kUnknown : x + y; };
  const uint64_t total = add(add(add(need.weights, need.kv), need.compute), need.margin);
  if (total <= available) return;
  auto mib = [](uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  fail(ErrorKind::OutOfMemory,
       "not enough memory: weights {:.1f} MiB + KV cache {:.1f} MiB + compute {:.1f} MiB + "
       "margin {:.1f} MiB = {:.1f} MiB, but only {:.1f} MiB is available (MemAvailable or the "
       "cgroup limit, whichever is lower). Lower the context with -c, store K/V in fewer bytes "
       "with -ctk/-ctv (f16 or q8_0), or pass --kv-overcommit to reserve the KV cache anyway "
       "(its pages are committed only as tokens arrive, so a run that holds fewer tokens may "
       "still fit)",
       mib(need.weights), mib(need.kv), mib(need.compute), mib(need.margin), mib(total),
       mib(available));
}

}  // namespace minfer::kv
