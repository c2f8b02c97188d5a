// A vector that costs one pointer while it is empty. An Argument of the
// program has six vectors and uses one at most (a list of ints, of tensor
// names, ...); as std::vectors they were 160 of its 304 bytes, kept for every
// argument of every node while the program is converted
// (bench/node_scaling.md). Reads see a std::vector (empty when unset);
// writes allocate it.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace pt2onnx::schema {

template <class T>
class LazyVec {
 public:
  using Vec = std::vector<T>;
  using value_type = T;
  using size_type = typename Vec::size_type;
  using iterator = typename Vec::iterator;
  using const_iterator = typename Vec::const_iterator;

  LazyVec() = default;
  LazyVec(Vec v) : v_(v.empty() ? nullptr : std::make_unique<Vec>(std::move(v))) {}
  LazyVec(std::initializer_list<T> l) : LazyVec(Vec(l)) {}
  LazyVec(const LazyVec& o) : v_(o.empty() ? nullptr : std::make_unique<Vec>(*o.v_)) {}
  LazyVec(LazyVec&&) noexcept = default;
  LazyVec& operator=(const LazyVec& o) {
    if (this != &o) v_ = o.empty() ? nullptr : std::make_unique<Vec>(*o.v_);
    return *this;
  }
  LazyVec& operator=(LazyVec&&) noexcept = default;
  LazyVec& operator=(Vec v) {
    v_ = v.empty() ? nullptr : std::make_unique<Vec>(std::move(v));
    return *this;
  }

  const Vec& get() const { return v_ ? *v_ : empty_vec(); }
  Vec& mut() {
    if (!v_) v_ = std::make_unique<Vec>();
    return *v_;
  }
  operator const Vec&() const { return get(); }

  size_type size() const { return v_ ? v_->size() : 0; }
  bool empty() const { return !v_ || v_->empty(); }
  const_iterator begin() const { return get().begin(); }
  const_iterator end() const { return get().end(); }
  // An unset vector iterates as empty (value-initialized iterators compare
  // equal) without being allocated.
  iterator begin() { return v_ ? v_->begin() : iterator(); }
  iterator end() { return v_ ? v_->end() : iterator(); }
  decltype(auto) operator[](size_type i) const { return get()[i]; }
  decltype(auto) operator[](size_type i) { return (*v_)[i]; }
  decltype(auto) at(size_type i) const { return get().at(i); }
  decltype(auto) front() const { return get().front(); }
  decltype(auto) back() const { return get().back(); }
  decltype(auto) back() { return mut().back(); }
  void push_back(const T& x) { mut().push_back(x); }
  void push_back(T&& x) { mut().push_back(std::move(x)); }
  template <class... A>
  decltype(auto) emplace_back(A&&... a) {
    return mut().emplace_back(std::forward<A>(a)...);
  }
  void clear() { v_.reset(); }
  void reserve(size_type n) { mut().reserve(n); }
  bool operator==(const LazyVec& o) const { return get() == o.get(); }
  bool operator==(const Vec& o) const { return get() == o; }

 private:
  static const Vec& empty_vec() {
    static const Vec e;
    return e;
  }
  std::unique_ptr<Vec> v_;
};

}  // namespace pt2onnx::schema
