#include "ir/name_set.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace pt2onnx {

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // arena chunk: 1 MiB

}  // namespace

NameSet::NameSet(const NameSet& o) {
  reserve(o.size());
  for (std::string_view name : o.entries_) insert(name);
}

NameSet& NameSet::operator=(const NameSet& o) {
  if (this != &o) {
    NameSet copy(o);
    *this = std::move(copy);
  }
  return *this;
}

uint32_t NameSet::hash_of(std::string_view s) {
  const uint64_t h = std::hash<std::string_view>{}(s);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// Fibonacci hashing: the slot's bits come from all of the hash's. Only
// called with slots (every table has 16 or more once anything is added).
size_t NameSet::slot_of(uint32_t hash) const {
  return static_cast<uint32_t>(hash * 0x9e3779b9U) >> shift_;
}

void NameSet::reserve(size_t n) {
  entries_.reserve(n);
  size_t want = 16;
  // At most three quarters full: a probe past another name reads the next
  // slot of the same cache line, not another entry (half full took 4% more
  // peak memory at 200k nodes and was no faster, bench/node_scaling.md).
  while (want * 3 < 4 * n) want *= 2;
  if (want > slots_.size()) rehash(want);
}

void NameSet::rehash(size_t slots) {
  if (slots > (size_t{1} << 32)) throw std::length_error("NameSet: over 3 * 2^30 names");
  std::vector<uint64_t> old(slots, 0);
  old.swap(slots_);
  shift_ = 32 - static_cast<unsigned>(std::countr_zero(slots));
  const size_t mask = slots - 1;
  for (uint64_t e : old) {
    if (!e) continue;
    size_t s = slot_of(static_cast<uint32_t>(e >> 32));
    while (slots_[s]) s = (s + 1) & mask;
    slots_[s] = e;
  }
}

std::string_view NameSet::keep(std::string_view s) {
  if (s.empty()) return {};
  if (left_ < s.size()) {
    const size_t size = std::max(kChunk, s.size());
    chunks_.push_back(std::make_unique<char[]>(size));
    next_ = chunks_.back().get();
    left_ = size;
  }
  std::memcpy(next_, s.data(), s.size());
  std::string_view kept(next_, s.size());
  next_ += s.size();
  left_ -= s.size();
  return kept;
}

std::pair<uint32_t, bool> NameSet::insert(std::string_view name) {
  if (4 * (entries_.size() + 1) > 3 * slots_.size())
    rehash(std::max<size_t>(16, 2 * slots_.size()));
  const uint32_t h = hash_of(name);
  const uint64_t tag = static_cast<uint64_t>(h) << 32;
  const size_t mask = slots_.size() - 1;
  size_t s = slot_of(h);
  for (uint64_t e; (e = slots_[s]); s = (s + 1) & mask) {
    if ((e & ~uint64_t{0xffffffff}) != tag) continue;
    const auto id = static_cast<uint32_t>(e) - 1;
    if (entries_[id] == name) return {id, false};
  }
  entries_.push_back(keep(name));
  slots_[s] = tag | static_cast<uint32_t>(entries_.size());
  return {static_cast<uint32_t>(entries_.size() - 1), true};
}

uint32_t NameSet::find(std::string_view name) const {
  if (slots_.empty()) return kNone;
  const uint32_t h = hash_of(name);
  const uint64_t tag = static_cast<uint64_t>(h) << 32;
  const size_t mask = slots_.size() - 1;
  for (size_t s = slot_of(h); const uint64_t e = slots_[s]; s = (s + 1) & mask) {
    if ((e & ~uint64_t{0xffffffff}) != tag) continue;
    const auto id = static_cast<uint32_t>(e) - 1;
    if (entries_[id] == name) return id;
  }
  return kNone;
}

}  // namespace pt2onnx
