#include "grammar/matcher.h"

#include <algorithm>

#include "common/error.h"

namespace minfer::grammar {

namespace {

void sort_unique(Matcher::Set& s) {
  if (s.size() < 2) return;
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, size_t compact_nodes)
    : g_(std::move(grammar)), compact_nodes_(compact_nodes) {
  MINFER_ASSERT(g_ && g_->root < g_->alts.size());
  reset();
}

void Matcher::reset() {
  nodes_.assign(1, Node{0, 0});
  index_.clear();
  closure_.assign(1, Memo{});
  after_.assign(1, Memo{});
  memo_data_.clear();
  sets_.clear();
  set_index_.clear();
  byte_next_.clear();
  cp_next_.clear();
  set_.clear();
  for (uint32_t a : g_->alts[g_->root]) expand(a, 0, set_);
  sort_unique(set_);
  partial_ = {};
}

uint32_t Matcher::intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  auto [it, fresh] = index_.emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, parent});
    closure_.push_back({});
    after_.push_back({});
  }
  return it->second;
}

// The stacks whose tops are character elements reached from `pos` over `parent`. Terminates
// because the parser refused left recursion: every descent into a rule either consumes a
// character element first or pops toward the (finite) bottom of the stack.
void Matcher::expand(uint32_t pos, uint32_t parent, Set& out) {
  const Element& e = g_->elems[pos];
  switch (e.kind) {
    case ElemKind::End:
      closure_of(parent, out);
      return;
    case ElemKind::Chars:
      out.push_back(intern(pos, parent));
      return;
    case ElemKind::Rule: {
      // Tail position: nothing follows the reference here, so push no continuation.
      const uint32_t cont =
          g_->elems[pos + 1].kind == ElemKind::End ? parent : intern(pos + 1, parent);
      for (uint32_t a : g_->alts[e.first]) expand(a, cont, out);
      return;
    }
  }
}

void Matcher::closure_of(uint32_t id, Set& out) {
  if (id == 0 || g_->elems[nodes_[id].pos].kind == ElemKind::Chars) {
    out.push_back(id);
    return;
  }
  if (closure_[id].off == kNone) {
    Set tmp;
    expand(nodes_[id].pos, nodes_[id].parent, tmp);
    sort_unique(tmp);
    closure_[id] = {static_cast<uint32_t>(memo_data_.size()), static_cast<uint32_t>(tmp.size())};
    memo_data_.insert(memo_data_.end(), tmp.begin(), tmp.end());
  }
  const Memo m = closure_[id];
  out.insert(out.end(), memo_data_.begin() + m.off, memo_data_.begin() + m.off + m.len);
}

std::span<const uint32_t> Matcher::after(uint32_t id) {
  if (after_[id].off == kNone) {
    Set tmp;
    expand(nodes_[id].pos + 1, nodes_[id].parent, tmp);
    sort_unique(tmp);
    after_[id] = {static_cast<uint32_t>(memo_data_.size()), static_cast<uint32_t>(tmp.size())};
    memo_data_.insert(memo_data_.end(), tmp.begin(), tmp.end());
  }
  return {memo_data_.data() + after_[id].off, after_[id].len};
}

void Matcher::advance(const Set& in, uint32_t cp, Set& out) {
  out.clear();
  for (uint32_t id : in) {
    if (id == 0 || !g_->matches(g_->elems[nodes_[id].pos], cp)) continue;
    const auto s = after(id);
    out.insert(out.end(), s.begin(), s.end());
  }
  sort_unique(out);
}

namespace {

// The smallest code point a sequence with `len` continuation bytes may encode.
constexpr uint32_t kMinCodePoint[4] = {0, 0x80, 0x800, 0x10000};

}  // namespace

bool Matcher::feasible(const Set& in, Partial p) const {
  const uint32_t lo = std::max(p.value << (6 * p.remain), kMinCodePoint[p.len]);
  const uint32_t hi =
      std::min((p.value << (6 * p.remain)) | ((1u << (6 * p.remain)) - 1), uint32_t{0x10FFFF});
  if (lo > hi) return false;  // an overlong start, or beyond U+10FFFF
  for (uint32_t id : in)
    if (id != 0 && g_->may_match(g_->elems[nodes_[id].pos], lo, hi)) return true;
  return false;
}

Step Matcher::step(const Set& in, Partial p, uint8_t b, Partial& np, Set& out) {
  if (p.remain == 0) {
    if (b < 0x80) {
      np = {};
      advance(in, b, out);
      return out.empty() ? Step::Dead : Step::New;
    }
    if ((b & 0xE0) == 0xC0) {
      np = {uint32_t(b & 0x1F), 1, 1};
    } else if ((b & 0xF0) == 0xE0) {
      np = {uint32_t(b & 0x0F), 2, 2};
    } else if ((b & 0xF8) == 0xF0) {
      np = {uint32_t(b & 0x07), 3, 3};
    } else {
      return Step::Dead;  // a continuation byte or 0xF8..0xFF cannot start a character
    }
    return feasible(in, np) ? Step::Same : Step::Dead;
  }
  if ((b & 0xC0) != 0x80) return Step::Dead;
  np = {(p.value << 6) | (b & 0x3Fu), uint8_t(p.remain - 1), p.len};
  if (np.remain > 0) return feasible(in, np) ? Step::Same : Step::Dead;
  const uint32_t cp = np.value;
  if (cp < kMinCodePoint[p.len] || cp > 0x10FFFF) return Step::Dead;  // overlong / too big
  np = {};
  advance(in, cp, out);
  return out.empty() ? Step::Dead : Step::New;
}

bool Matcher::run(std::string_view bytes, bool commit) {
  const Set* cur = &set_;
  Partial p = partial_;
  int which = 0;
  for (char c : bytes) {
    Partial np;
    const Step s = step(*cur, p, static_cast<uint8_t>(c), np, tmp_[which]);
    if (s == Step::Dead) return false;
    if (s == Step::New) {
      cur = &tmp_[which];
      which ^= 1;
    }
    p = np;
  }
  if (commit) {
    if (cur != &set_) set_ = *cur;
    partial_ = p;
    if (nodes_.size() > compact_nodes_) compact();
  }
  return true;
}

bool Matcher::accept(std::string_view bytes) {
  return run(bytes, true);
}
bool Matcher::check(std::string_view bytes) {
  return run(bytes, false);
}

uint32_t Matcher::set_id(const Set& s) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : s) h = (h ^ x) * 1099511628211ull;
  std::vector<uint32_t>& ids = set_index_[h];
  for (uint32_t id : ids)
    if (sets_[id] == s) return id;
  const auto id = static_cast<uint32_t>(sets_.size());
  sets_.push_back(s);
  byte_next_.emplace_back();
  byte_next_.back().fill(kUnknown);
  ids.push_back(id);
  return id;
}

int32_t Matcher::step_set(uint32_t sid, Partial p, uint8_t b, Partial& np) {
  if (p.remain == 0) {
    // A byte that starts a character: its outcome depends on the set alone.
    int32_t next = byte_next_[sid][b];
    if (next == kUnknown) {
      const Step s = step(sets_[sid], p, b, np, step_out_);
      next = s == Step::Dead   ? kDeadSet
             : s == Step::Same ? static_cast<int32_t>(sid)
                               : static_cast<int32_t>(set_id(step_out_));
      byte_next_[sid][b] = next;
    }
    np = {};
    if (next != kDeadSet && b >= 0x80) {
      const int n = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : 3;
      np = {uint32_t(b & (0x3F >> n)), uint8_t(n), uint8_t(n)};
    }
    return next;
  }
  if (p.remain == 1 && (b & 0xC0) == 0x80) {
    // The byte that finishes a multi-byte character.
    const uint32_t cp = (p.value << 6) | (b & 0x3Fu);
    const uint64_t key = (uint64_t{sid} << 23) | (uint64_t{p.len} << 21) | cp;
    np = {};
    if (auto it = cp_next_.find(key); it != cp_next_.end()) return it->second;
    const Step s = step(sets_[sid], p, b, np, step_out_);
    const int32_t next = s == Step::Dead ? kDeadSet : static_cast<int32_t>(set_id(step_out_));
    cp_next_.emplace(key, next);
    return next;
  }
  const Step s = step(sets_[sid], p, b, np, step_out_);
  if (s == Step::Dead) return kDeadSet;
  return s == Step::Same ? static_cast<int32_t>(sid) : static_cast<int32_t>(set_id(step_out_));
}

void Matcher::trim_set_cache() {
  if (sets_.size() <= kMaxCachedSets && cp_next_.size() <= kMaxCachedCodePoints) return;
  sets_.clear();
  set_index_.clear();
  byte_next_.clear();
  cp_next_.clear();
}

// Rebuilds the pool with only the live stacks (the current set's chains); memos restart.
void Matcher::compact() {
  std::vector<Node> old;
  old.swap(nodes_);
  nodes_.assign(1, Node{0, 0});
  index_.clear();
  closure_.assign(1, Memo{});
  after_.assign(1, Memo{});
  memo_data_.clear();
  sets_.clear();  // they name old node ids
  set_index_.clear();
  byte_next_.clear();
  cp_next_.clear();
  std::unordered_map<uint32_t, uint32_t> remap{{0u, 0u}};
  std::vector<uint32_t> chain;
  for (uint32_t& id : set_) {
    chain.clear();
    for (uint32_t x = id; !remap.count(x); x = old[x].parent) chain.push_back(x);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      remap[*it] = intern(old[*it].pos, remap.at(old[*it].parent));
    id = remap.at(id);
  }
  sort_unique(set_);
}

}  // namespace minfer::grammar
