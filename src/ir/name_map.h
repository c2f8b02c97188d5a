// NameMap: a map from value names to T, for the per-value tables every
// converter and pass looks up by name (Graph::types: Graph::type_of was the
// top pt2onnx symbol of bench/node_scaling.md). The subset of
// std::unordered_map's interface they use (operator[], find, count, at,
// erase, iteration over {first, second}), over a NameSet: a lookup is one
// probe of a flat table, and the entries lie in one deque instead of a heap
// node (and key string) per value.
// References to entries stay valid as others are added (a deque's
// push_back), as the passes expect of a node-based map. An erased name keeps
// its slot (names are never removed from a NameSet), marked absent.
// Iteration is in the order names were first added.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/name_set.h"

namespace pt2onnx {

template <class Type>
class NameMap {
 public:
  struct Entry {
    std::string_view first;  // the name, in names_
    Type second;
  };

  template <class Table, class E>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = E*;
    using reference = E&;
    Iter() = default;
    Iter(Table* t, size_t i) : t_(t), i_(i) { skip(); }
    E& operator*() const { return t_->entries_[i_]; }
    E* operator->() const { return &t_->entries_[i_]; }
    Iter& operator++() {
      ++i_;
      skip();
      return *this;
    }
    Iter operator++(int) {
      Iter r = *this;
      ++*this;
      return r;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    template <class T = Table, std::enable_if_t<!std::is_const_v<T>, int> = 0>
    operator Iter<const T, const E>() const {
      return {t_, i_};
    }

   private:
    void skip() {
      while (t_ && i_ < t_->entries_.size() && !t_->present_[i_]) ++i_;
    }
    Table* t_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iter<NameMap, Entry>;
  using const_iterator = Iter<const NameMap, const Entry>;

  NameMap() = default;
  NameMap(const NameMap& o)
      : names_(o.names_), entries_(o.entries_), present_(o.present_), live_(o.live_) {
    relink();
  }
  NameMap& operator=(const NameMap& o) {
    if (this != &o) {
      names_ = o.names_;
      entries_ = o.entries_;
      present_ = o.present_;
      live_ = o.live_;
      relink();
    }
    return *this;
  }
  NameMap(NameMap&&) noexcept = default;
  NameMap& operator=(NameMap&&) noexcept = default;

  // The entry of `name`, added (default type) when absent.
  Type& operator[](std::string_view name) { return emplace(name, Type{}).first->second; }
  // Adds `name` -> `value` when absent (as std::unordered_map::emplace): the
  // entry and whether it was added.
  template <class V>
  std::pair<iterator, bool> emplace(std::string_view name, V&& value) {
    auto [id, added] = names_.insert(name);
    if (added) {
      entries_.push_back(Entry{names_.name(id), Type(std::forward<V>(value))});
      present_.push_back(1);
    } else if (!present_[id]) {
      entries_[id].second = Type(std::forward<V>(value));
      present_[id] = 1;
    } else {
      return {iterator(this, id), false};
    }
    ++live_;
    return {iterator(this, id), true};
  }
  iterator find(std::string_view name) {
    uint32_t id = names_.find(name);
    return id != NameSet::kNone && present_[id] ? iterator(this, id) : end();
  }
  const_iterator find(std::string_view name) const {
    uint32_t id = names_.find(name);
    return id != NameSet::kNone && present_[id] ? const_iterator(this, id) : end();
  }
  // The type of `name`, or nullptr.
  const Type* get(std::string_view name) const {
    uint32_t id = names_.find(name);
    return id != NameSet::kNone && present_[id] ? &entries_[id].second : nullptr;
  }
  // The type of `name`, which must be present (std::out_of_range otherwise).
  const Type& at(std::string_view name) const {
    const Type* t = get(name);
    if (!t) throw std::out_of_range("no type for value '" + std::string(name) + "'");
    return *t;
  }
  Type& at(std::string_view name) {
    return const_cast<Type&>(static_cast<const NameMap&>(*this).at(name));
  }
  size_t count(std::string_view name) const { return get(name) ? 1 : 0; }
  size_t erase(std::string_view name) {
    uint32_t id = names_.find(name);
    if (id == NameSet::kNone || !present_[id]) return 0;
    present_[id] = 0;
    entries_[id].second = Type{};
    --live_;
    return 1;
  }
  size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }
  void reserve(size_t n) { names_.reserve(n); }
  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, entries_.size()); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, entries_.size()); }

 private:
  // After a copy: the names point into this table's own NameSet (a copy adds
  // the names in id order, so the ids are the same).
  void relink() {
    for (size_t id = 0; id < entries_.size(); ++id)
      entries_[id].first = names_.name(static_cast<uint32_t>(id));
  }
  NameSet names_;
  std::deque<Entry> entries_;     // by name id
  std::vector<uint8_t> present_;  // by name id: 0 once erased
  size_t live_ = 0;
};

}  // namespace pt2onnx
