// A PQ-tree over buffer indices (Booth and Lueker, 1976), for the nested search
// (offset_planner_nested.cpp): it represents a set of orders of its leaves, and `reduce`
// restricts it to the orders in which a given set is consecutive, by the usual templates applied
// bottom-up from the pertinent subtree (written for the small trees of that search: every
// reduction walks the whole tree). Also: replacing a consecutive block by a new P-node, reading
// one order, and a depth-first search over the orders of a block for one that keeps
// alignments. Internal to the planner, not a public API.
//
// Ownership: values; nodes live in a pool and are abandoned, not freed, when a reduction
// rebuilds them (`copy` compacts). Thread safety: none (one call's state). Cost: reduce, replace
// and copy O(tree size); arrange bounded by its step budget. Failure: reduce returns false when
// no represented order has the set consecutive (the tree is then unusable).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "planner/offset_planner_detail.h"

namespace minfer::planner_detail {

// A PQ-tree over buffer indices. Nodes live in a pool and are abandoned, not freed, when a
// reduction rebuilds them; `copy` compacts the reachable tree.
class PQTree {
 public:
  enum class Kind : uint8_t { Leaf, P, Q };
  struct Node {
    Kind kind = Kind::Leaf;
    uint32_t leaf = 0;
    std::vector<int> ch;
  };
  // Where a consecutive set sits after a reduction: the whole of `node` (lo < 0), or the
  // children [lo, hi) of the Q-node `node`.
  struct Part {
    int node = -1;
    int lo = -1, hi = -1;
  };

  explicit PQTree(size_t n_buffers) : mark_(n_buffers, 0) {}

  bool empty() const { return root_ < 0; }

  // The same tree in a fresh, compact pool.
  PQTree copy() const {
    PQTree t(0);
    if (root_ >= 0) t.root_ = t.clone(*this, root_);
    return t;
  }
  // The mark array (per buffer) is shared state of reductions; copies get it lent.
  void lend_marks(std::vector<uint32_t>& marks, uint32_t& epoch) {
    ext_mark_ = &marks;
    ext_epoch_ = &epoch;
  }

  // Makes `set` (non-empty, all leaves of the tree) consecutive in every order the tree
  // represents; false when no order has it consecutive (the tree is then unusable).
  bool reduce(const std::vector<uint32_t>& set, Part& part) {
    std::vector<uint32_t>& mark = marks();
    const uint32_t ep = ++epoch();
    for (uint32_t b : set) mark[b] = ep;
    cnt_.assign(nodes_.size(), 0);
    leaves_.assign(nodes_.size(), 0);
    count(root_, mark, ep);
    const int want = static_cast<int>(set.size());
    if (cnt_[static_cast<size_t>(root_)] != want) return false;
    int r = root_;
    for (bool down = true; down;) {
      down = false;
      for (int c : nodes_[static_cast<size_t>(r)].ch) {
        if (cnt_[static_cast<size_t>(c)] == want) {
          r = c;
          down = true;
          break;
        }
      }
    }
    if (label(r) == 2) {
      part = {r, -1, -1};
      return true;
    }
    return nodes_[static_cast<size_t>(r)].kind == Kind::P ? root_p(r, part) : root_q(r, part);
  }

  // Replaces the part found by `reduce` with a block of `born` in any order (removes it when
  // `born` is empty, which is only valid for the whole tree).
  void replace(const Part& part, const std::vector<uint32_t>& born) {
    const int x = block(born);
    if (part.lo < 0) {
      if (x < 0) {
        MINFER_ASSERT(part.node == root_, "nested search: removing part of the tree");
        root_ = -1;
      } else {
        nodes_[static_cast<size_t>(part.node)] = nodes_[static_cast<size_t>(x)];
      }
      return;
    }
    std::vector<int>& ch = nodes_[static_cast<size_t>(part.node)].ch;
    MINFER_ASSERT(x >= 0, "nested search: removing a range of a Q-node");
    ch.erase(ch.begin() + part.lo, ch.begin() + part.hi);
    ch.insert(ch.begin() + part.lo, x);
    if (ch.size() == 1) {
      const Node only = nodes_[static_cast<size_t>(ch[0])];
      nodes_[static_cast<size_t>(part.node)] = only;
    }
  }

  // Starts an empty tree with a block of `born`.
  void plant(const std::vector<uint32_t>& born) { root_ = block(born); }

  // An order of `part` (mirrored when `flip`) that the tree allows and in which every leaf's
  // offset, `base` plus the sizes before it, is a multiple of its alignment; depth-first over
  // the P-nodes' permutations and the Q-nodes' two directions, at most `budget` steps (spent
  // steps are subtracted). Appends to `out`; false when none was found.
  // `rot` rotates the order in which P-nodes' children are tried (0: as stored), so that
  // repeated read-backs choose differently.
  bool arrange(const Part& part, bool flip, uint64_t base, const Problem& p, uint64_t& budget,
               std::vector<uint32_t>& out, uint32_t rot = 0) {
    rot_ = rot;
    std::vector<Task> stack;
    if (part.lo < 0) {
      stack.push_back({part.node, {}});
    } else {
      const std::vector<int>& ch = nodes_[static_cast<size_t>(part.node)].ch;
      for (int i = part.lo; i < part.hi; ++i) stack.push_back({ch[static_cast<size_t>(i)], {}});
      if (!flip) std::reverse(stack.begin(), stack.end());  // the back is placed first
    }
    return place(stack, base, flip, p, budget, out);
  }

  // One order the tree represents (P-nodes in stored order, Q-nodes forward).
  void frontier(std::vector<uint32_t>& out) const {
    out.clear();
    if (root_ >= 0) walk(root_, out);
  }

 private:
  std::vector<uint32_t>& marks() { return ext_mark_ ? *ext_mark_ : mark_; }
  uint32_t& epoch() { return ext_epoch_ ? *ext_epoch_ : epoch_; }

  int add(Kind k, uint32_t leaf, std::vector<int> ch) {
    nodes_.push_back({k, leaf, std::move(ch)});
    return static_cast<int>(nodes_.size() - 1);
  }
  int clone(const PQTree& from, int v) {
    const Node& nd = from.nodes_[static_cast<size_t>(v)];
    std::vector<int> ch;
    ch.reserve(nd.ch.size());
    for (int c : nd.ch) ch.push_back(clone(from, c));
    return add(nd.kind, nd.leaf, std::move(ch));
  }
  int block(const std::vector<uint32_t>& born) {
    if (born.empty()) return -1;
    std::vector<int> ch;
    for (uint32_t b : born) ch.push_back(add(Kind::Leaf, b, {}));
    return ch.size() == 1 ? ch[0] : add(Kind::P, 0, std::move(ch));
  }
  int group(const std::vector<int>& list) {
    if (list.empty()) return -1;
    return list.size() == 1 ? list[0] : add(Kind::P, 0, list);
  }
  void count(int v, const std::vector<uint32_t>& mark, uint32_t ep) {
    const Node& nd = nodes_[static_cast<size_t>(v)];
    int c = 0, l = 0;
    if (nd.kind == Kind::Leaf) {
      c = mark[nd.leaf] == ep;
      l = 1;
    } else {
      for (int k : nd.ch) {
        count(k, mark, ep);
        c += cnt_[static_cast<size_t>(k)];
        l += leaves_[static_cast<size_t>(k)];
      }
    }
    cnt_[static_cast<size_t>(v)] = c;
    leaves_[static_cast<size_t>(v)] = l;
  }
  // 0 empty, 1 partial, 2 full. Nodes made by a reduction are never labelled.
  int label(int v) const {
    const int c = cnt_[static_cast<size_t>(v)];
    return c == 0 ? 0 : c == leaves_[static_cast<size_t>(v)] ? 2 : 1;
  }
  void split(int v, std::vector<int>& e, std::vector<int>& f, std::vector<int>& pa) const {
    for (int c : nodes_[static_cast<size_t>(v)].ch) {
      const int l = label(c);
      (l == 0 ? e : l == 2 ? f : pa).push_back(c);
    }
  }
  // A Q-node's children labels fit "empty*, at most one partial, full*" read forwards.
  bool q_fits(const std::vector<int>& ch) const {
    size_t i = 0;
    while (i < ch.size() && label(ch[i]) == 0) ++i;
    if (i < ch.size() && label(ch[i]) == 1) ++i;
    while (i < ch.size() && label(ch[i]) == 2) ++i;
    return i == ch.size();
  }

  // A partial node below the pertinent root, rebuilt as a Q-node whose children read empty
  // first, then full; `n_empty`: how many lead. -1 when impossible.
  int make_partial(int v, size_t& n_empty) {
    std::vector<int> seq;
    if (nodes_[static_cast<size_t>(v)].kind == Kind::P) {
      std::vector<int> e, f, pa;
      split(v, e, f, pa);
      if (pa.size() > 1) return -1;
      if (!e.empty()) seq.push_back(group(e));
      n_empty = seq.size();
      if (!pa.empty()) {
        size_t ne = 0;
        const int q = make_partial(pa[0], ne);
        if (q < 0) return -1;
        n_empty += ne;
        const std::vector<int> qc = nodes_[static_cast<size_t>(q)].ch;
        seq.insert(seq.end(), qc.begin(), qc.end());
      }
      if (!f.empty()) seq.push_back(group(f));
      return add(Kind::Q, 0, std::move(seq));
    }
    std::vector<int> ch = nodes_[static_cast<size_t>(v)].ch;
    if (!q_fits(ch)) {
      std::reverse(ch.begin(), ch.end());
      if (!q_fits(ch)) return -1;
    }
    n_empty = 0;
    for (int c : ch) {
      const int l = label(c);
      if (l == 1) {
        size_t ne = 0;
        const int q = make_partial(c, ne);
        if (q < 0) return -1;
        n_empty += ne;
        const std::vector<int> qc = nodes_[static_cast<size_t>(q)].ch;
        seq.insert(seq.end(), qc.begin(), qc.end());
      } else {
        n_empty += l == 0;
        seq.push_back(c);
      }
    }
    nodes_[static_cast<size_t>(v)].ch = seq;
    return v;
  }

  // The pertinent root is a P-node (not full): the full children, and the full ends of up to
  // two partial ones, become one consecutive run.
  bool root_p(int r, Part& part) {
    std::vector<int> e, f, pa;
    split(r, e, f, pa);
    if (pa.size() > 2) return false;
    if (pa.empty()) {
      const int g = group(f);
      e.push_back(g);
      nodes_[static_cast<size_t>(r)].ch = e;
      part = {g, -1, -1};
      return true;
    }
    std::vector<int> seq;
    size_t ne = 0;
    const int q1 = make_partial(pa[0], ne);
    if (q1 < 0) return false;
    const std::vector<int> c1 = nodes_[static_cast<size_t>(q1)].ch;
    seq.insert(seq.end(), c1.begin(), c1.end());
    const int lo = static_cast<int>(ne);
    if (!f.empty()) seq.push_back(group(f));
    int hi = static_cast<int>(seq.size());
    if (pa.size() == 2) {
      size_t ne2 = 0;
      const int q2 = make_partial(pa[1], ne2);
      if (q2 < 0) return false;
      const std::vector<int> c2 = nodes_[static_cast<size_t>(q2)].ch;
      seq.insert(seq.end(), c2.rbegin(), c2.rend());
      hi = static_cast<int>(seq.size() - ne2);
    }
    if (e.empty()) {
      nodes_[static_cast<size_t>(r)] = {Kind::Q, 0, std::move(seq)};
      part = {r, lo, hi};
    } else {
      const int z = add(Kind::Q, 0, std::move(seq));
      e.push_back(z);
      nodes_[static_cast<size_t>(r)].ch = e;
      part = {z, lo, hi};
    }
    return true;
  }

  // The pertinent root is a Q-node: its non-empty children must be consecutive, full inside,
  // partial ones only at the two ends (their full sides turned inwards).
  bool root_q(int r, Part& part) {
    const std::vector<int> ch = nodes_[static_cast<size_t>(r)].ch;
    size_t a = 0, b = ch.size();
    while (a < ch.size() && label(ch[a]) == 0) ++a;
    while (b > a && label(ch[b - 1]) == 0) --b;
    if (b - a < 2) return false;  // cannot happen: a single child holding the set is deeper
    for (size_t i = a + 1; i + 1 < b; ++i) {
      if (label(ch[i]) != 2) return false;
    }
    std::vector<int> seq(ch.begin(), ch.begin() + static_cast<ptrdiff_t>(a));
    int lo = static_cast<int>(seq.size());
    if (label(ch[a]) == 1) {
      size_t ne = 0;
      const int q = make_partial(ch[a], ne);
      if (q < 0) return false;
      const std::vector<int> qc = nodes_[static_cast<size_t>(q)].ch;
      seq.insert(seq.end(), qc.begin(), qc.end());
      lo += static_cast<int>(ne);
    } else {
      seq.push_back(ch[a]);
    }
    for (size_t i = a + 1; i + 1 < b; ++i) seq.push_back(ch[i]);
    int hi = 0;
    if (label(ch[b - 1]) == 1) {
      size_t ne = 0;
      const int q = make_partial(ch[b - 1], ne);
      if (q < 0) return false;
      const std::vector<int> qc = nodes_[static_cast<size_t>(q)].ch;
      seq.insert(seq.end(), qc.rbegin(), qc.rend());
      hi = static_cast<int>(seq.size() - ne);
    } else {
      seq.push_back(ch[b - 1]);
      hi = static_cast<int>(seq.size());
    }
    seq.insert(seq.end(), ch.begin() + static_cast<ptrdiff_t>(b), ch.end());
    nodes_[static_cast<size_t>(r)].ch = std::move(seq);
    part = {r, lo, hi};
    return true;
  }

  // A node still to place, or (v < 0) the children of a P-node still to order.
  struct Task {
    int v;
    std::vector<int> rest;
  };
  bool place(std::vector<Task>& stack, uint64_t at, bool flip, const Problem& p,
             uint64_t& budget, std::vector<uint32_t>& out) {
    if (stack.empty()) return true;
    if (budget == 0) return false;
    --budget;
    Task t = std::move(stack.back());
    stack.pop_back();
    bool ok = false;
    if (t.v < 0 && t.rest.size() == 1) {
      stack.push_back({t.rest[0], {}});
      ok = place(stack, at, flip, p, budget, out);
      if (!ok) stack.pop_back();
    } else if (t.v < 0) {
      // Any child first; of leaves alike in size and alignment only the first.
      const size_t n = t.rest.size();
      for (size_t i = 0; i < n && !ok && budget > 0; ++i) {
        if (rot_ != 0 && i == 0) {
          std::rotate(t.rest.begin(), t.rest.begin() + static_cast<ptrdiff_t>(rot_ % n),
                      t.rest.end());
        }
        const Node& c = nodes_[static_cast<size_t>(t.rest[i])];
        bool twin = false;
        for (size_t j = 0; j < i && !twin && c.kind == Kind::Leaf; ++j) {
          const Node& d = nodes_[static_cast<size_t>(t.rest[j])];
          twin = d.kind == Kind::Leaf && p.size[d.leaf] == p.size[c.leaf] &&
                 p.align[d.leaf] == p.align[c.leaf];
        }
        if (twin) continue;
        std::vector<int> others = t.rest;
        others.erase(others.begin() + static_cast<ptrdiff_t>(i));
        stack.push_back({-1, std::move(others)});
        stack.push_back({t.rest[i], {}});
        ok = place(stack, at, flip, p, budget, out);
        if (!ok) stack.resize(stack.size() - 2);
      }
    } else {
      const Node& nd = nodes_[static_cast<size_t>(t.v)];
      if (nd.kind == Kind::Leaf) {
        if (at % p.align[nd.leaf] == 0) {
          out.push_back(nd.leaf);
          ok = place(stack, at + p.size[nd.leaf], flip, p, budget, out);
          if (!ok) out.pop_back();
        }
      } else if (nd.kind == Kind::P) {
        stack.push_back({-1, nd.ch});
        ok = place(stack, at, flip, p, budget, out);
        if (!ok) stack.pop_back();
      } else {
        // Both directions: inside the block a Q-node may turn (mirrored first when flipped).
        for (int dir = 0; dir < 2 && !ok; ++dir) {
          const size_t mark = stack.size();
          const bool backwards = (dir == 0) == flip;
          const std::vector<int>& ch = nodes_[static_cast<size_t>(t.v)].ch;
          for (size_t i = 0; i < ch.size(); ++i) {
            stack.push_back({ch[backwards ? i : ch.size() - 1 - i], {}});
          }
          ok = place(stack, at, flip, p, budget, out);
          if (!ok) stack.resize(mark);
        }
      }
    }
    if (!ok) stack.push_back(std::move(t));
    return ok;
  }

  void walk(int v, std::vector<uint32_t>& out) const {
    const Node& nd = nodes_[static_cast<size_t>(v)];
    if (nd.kind == Kind::Leaf) {
      out.push_back(nd.leaf);
      return;
    }
    for (int c : nd.ch) walk(c, out);
  }

  std::vector<Node> nodes_;
  int root_ = -1;
  std::vector<uint32_t> mark_;
  uint32_t epoch_ = 0;
  std::vector<uint32_t>* ext_mark_ = nullptr;
  uint32_t* ext_epoch_ = nullptr;
  std::vector<int> cnt_, leaves_;
  uint32_t rot_ = 0;
};

}  // namespace minfer::planner_detail
