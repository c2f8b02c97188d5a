// NameSet: a set of value or node names that only grows, for the name tables
// every graph build and pass keeps (GraphBuilder's taken names, FreshNames,
// GraphIndex). Written here rather than taken from a library: the sets hold
// every name of a graph (~300k at 200k FX nodes) and were the top of the
// profile (bench/node_scaling.md) as std::unordered_set<std::string>, which
// allocates a node per name, and a second block per name over 15 characters,
// and chases both on every lookup. Here each name is copied once into an
// arena of large chunks and found through an open-addressing table of ids
// (linear probing). Each slot holds the id and 32 bits of the name's hash, so
// a probe past another name, and the search that ends an insert of a new
// one, stay within the slot table: only a hash match reads the entry and its
// characters (with the hash beside the entry instead, each probe was a cache
// miss of its own at 200k nodes, bench/node_scaling.md). Names are never
// removed, so ids are stable and dense: callers index their own per-name data
// by them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace pt2onnx {

class NameSet {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  NameSet() = default;
  explicit NameSet(size_t expected) { reserve(expected); }
  NameSet(const NameSet& o);
  NameSet& operator=(const NameSet& o);
  NameSet(NameSet&&) noexcept = default;
  NameSet& operator=(NameSet&&) noexcept = default;

  // Room for `n` names without growing the table.
  void reserve(size_t n);
  // Adds `name` when absent. Returns its id (0, 1, ... in the order names
  // were added) and whether it was added now.
  std::pair<uint32_t, bool> insert(std::string_view name);
  // The id of `name`, or kNone.
  uint32_t find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != kNone; }
  size_t size() const { return entries_.size(); }
  std::string_view name(uint32_t id) const { return entries_[id]; }

 private:
  // A slot: (32 bits of the name's hash) << 32 | (id + 1); 0 = empty.
  static uint32_t hash_of(std::string_view s);
  size_t slot_of(uint32_t hash) const;
  void rehash(size_t slots);
  std::string_view keep(std::string_view s);

  std::vector<std::string_view> entries_;  // by id; the characters in chunks_
  std::vector<uint64_t> slots_;            // size 0 or a power of two
  unsigned shift_ = 32;                    // 32 - log2(slots_.size()), set by rehash()
  std::vector<std::unique_ptr<char[]>> chunks_;
  char* next_ = nullptr;
  size_t left_ = 0;
};

}  // namespace pt2onnx
