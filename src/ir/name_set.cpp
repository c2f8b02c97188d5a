#include "ir/name_set.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace pt2onnx {

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // arena chunk: 1 MiB

}  // namespace

NameSet::NameSet(const NameSet& o) {
  reserve(o.size());
  for (const Entry& e : o.entries_) insert(e.name);
}

NameSet& NameSet::operator=(const NameSet& o) {
  if (this != &o) {
    NameSet copy(o);
    *this = std::move(copy);
  }
  return *this;
}

size_t NameSet::hash_of(std::string_view s) { return std::hash<std::string_view>{}(s); }

// Fibonacci hashing: the table's bits come from all of the hash's.
size_t NameSet::slot_of(size_t hash) const {
  return static_cast<size_t>((static_cast<uint64_t>(hash) * 0x9e3779b97f4a7c15ULL) >> 20) &
         (slots_.size() - 1);
}

void NameSet::reserve(size_t n) {
  entries_.reserve(n);
  size_t want = 16;
  while (want < 2 * n) want *= 2;  // at most half full
  if (want > slots_.size()) rehash(want);
}

void NameSet::rehash(size_t slots) {
  slots_.assign(slots, 0);
  const size_t mask = slots - 1;
  for (size_t id = 0; id < entries_.size(); ++id) {
    size_t s = slot_of(entries_[id].hash);
    while (slots_[s]) s = (s + 1) & mask;
    slots_[s] = static_cast<uint32_t>(id + 1);
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
  if (2 * (entries_.size() + 1) > slots_.size()) rehash(std::max<size_t>(16, 2 * slots_.size()));
  const size_t h = hash_of(name);
  const size_t mask = slots_.size() - 1;
  size_t s = slot_of(h);
  for (; slots_[s]; s = (s + 1) & mask) {
    const Entry& e = entries_[slots_[s] - 1];
    if (e.hash == h && e.name == name) return {slots_[s] - 1, false};
  }
  entries_.push_back(Entry{keep(name), h});
  slots_[s] = static_cast<uint32_t>(entries_.size());
  return {static_cast<uint32_t>(entries_.size() - 1), true};
}

uint32_t NameSet::find(std::string_view name) const {
  if (slots_.empty()) return kNone;
  const size_t h = hash_of(name);
  const size_t mask = slots_.size() - 1;
  for (size_t s = slot_of(h); slots_[s]; s = (s + 1) & mask) {
    const Entry& e = entries_[slots_[s] - 1];
    if (e.hash == h && e.name == name) return slots_[s] - 1;
  }
  return kNone;
}

}  // namespace pt2onnx
