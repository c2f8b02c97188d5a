// A structural scan of JSON text: strings skipped at memchr speed (most of a
// program's bytes are its stack traces), nesting counted, nothing built.
// It checks only the structure it walks through (members, commas, colons);
// the pieces it returns are parsed, and so validated, by simdjson.
#include "schema/json_split.h"

#include <cstdint>
#include <cstring>

namespace pt2onnx::schema {

namespace {

class Scan {
 public:
  explicit Scan(std::string_view s) : p_(s.data()), e_(s.data() + s.size()) {}
  const char* at() const { return p_; }

  // Skips whitespace; false at the end of the text.
  bool ws() {
    while (p_ < e_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    return p_ < e_;
  }
  bool is(char c) { return ws() && *p_ == c; }

  // At '"': past the closing quote. `escaped`: whether it held a backslash.
  bool string(bool* escaped = nullptr) {
    const char* start = ++p_;
    for (;;) {
      const auto* q = static_cast<const char*>(std::memchr(p_, '"', static_cast<size_t>(e_ - p_)));
      if (!q) return false;
      const char* k = q;
      while (k > start && k[-1] == '\\') --k;
      p_ = q + 1;
      if ((q - k) % 2 == 0) {
        if (escaped) *escaped = std::memchr(start, '\\', static_cast<size_t>(q - start));
        return true;
      }
    }
  }

  // Past one value of any kind.
  bool value() {
    if (!ws()) return false;
    if (*p_ == '"') return string();
    if (*p_ == '{' || *p_ == '[') {
      int64_t depth = 0;
      while (p_ < e_) {
        const char c = *p_;
        if (c == '"') {
          if (!string()) return false;
          continue;
        }
        if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (--depth == 0) {
            ++p_;
            return true;
          }
        }
        ++p_;
      }
      return false;
    }
    const char* b = p_;  // a number or literal: up to the next delimiter
    while (p_ < e_ && *p_ != ',' && *p_ != '}' && *p_ != ']' && *p_ != ' ' && *p_ != '\n' &&
           *p_ != '\r' && *p_ != '\t')
      ++p_;
    return p_ > b;
  }

  // At '{' or '[': `item()` for each member or element (the scan at it),
  // then past `close`.
  template <class F>
  bool items(char close, F&& item) {
    ++p_;
    if (!ws()) return false;
    if (*p_ == close) {
      ++p_;
      return true;
    }
    for (;;) {
      if (!ws() || !item() || !ws()) return false;
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ != close) return false;
      ++p_;
      return true;
    }
  }

  // At '{': `member(key, key_escaped)` for each member, with the scan at its
  // value, which it must pass (value() or a walk of its own).
  template <class F>
  bool members(F&& member) {
    return items('}', [&] {
      if (*p_ != '"') return false;
      const char* kb = p_ + 1;
      bool escaped = false;
      if (!string(&escaped)) return false;
      std::string_view key(kb, static_cast<size_t>(p_ - 1 - kb));
      if (!is(':')) return false;
      ++p_;
      return ws() && member(key, escaped);
    });
  }

  // At '[': `element()` for each element, with the scan at it.
  template <class F>
  bool elements(F&& element) {
    return items(']', element);
  }

 private:
  const char* p_;
  const char* e_;
};

}  // namespace

std::optional<ProgramSplit> split_program(std::string_view json) {
  Scan s(json);
  ProgramSplit out;
  // Where the two values lie in `json`, to be cut out of the skeleton.
  std::string_view nodes_text, values_text;
  int graph_modules = 0, graphs = 0, node_lists = 0, value_maps = 0;

  auto graph = [&](std::string_view key, bool escaped) {
    if (escaped) return false;
    const char* b = s.at();
    if (key == "nodes") {
      if (++node_lists > 1 || !s.is('[')) return false;
      bool ok = s.elements([&] {
        const char* nb = s.at();
        if (!s.value()) return false;
        out.nodes.emplace_back(nb, static_cast<size_t>(s.at() - nb));
        return true;
      });
      nodes_text = std::string_view(b, static_cast<size_t>(s.at() - b));
      return ok;
    }
    if (key == "tensor_values") {
      if (++value_maps > 1 || !s.is('{')) return false;
      bool ok = s.members([&](std::string_view k, bool k_escaped) {
        if (k_escaped) return false;
        const char* vb = s.at();
        if (!s.value()) return false;
        out.tensor_values.emplace_back(k, std::string_view(vb, static_cast<size_t>(s.at() - vb)));
        return true;
      });
      values_text = std::string_view(b, static_cast<size_t>(s.at() - b));
      return ok;
    }
    return s.value();
  };
  auto graph_module = [&](std::string_view key, bool escaped) {
    if (escaped) return false;
    if (key != "graph") return s.value();
    return ++graphs == 1 && s.is('{') && s.members(graph);
  };
  auto root = [&](std::string_view key, bool escaped) {
    if (escaped) return false;
    if (key != "graph_module") return s.value();
    return ++graph_modules == 1 && s.is('{') && s.members(graph_module);
  };
  if (!s.is('{') || !s.members(root)) return std::nullopt;
  if (node_lists != 1 || value_maps != 1) return std::nullopt;

  // The skeleton: the text with the two values emptied, in file order.
  std::pair<std::string_view, const char*> cuts[] = {{nodes_text, "[]"}, {values_text, "{}"}};
  if (cuts[1].first.data() < cuts[0].first.data()) std::swap(cuts[0], cuts[1]);
  const char* from = json.data();
  out.skeleton.reserve(json.size() - nodes_text.size() - values_text.size() + 4);
  for (auto& [cut, empty] : cuts) {
    out.skeleton.append(from, static_cast<size_t>(cut.data() - from));
    out.skeleton.append(empty);
    from = cut.data() + cut.size();
  }
  out.skeleton.append(from, static_cast<size_t>(json.data() + json.size() - from));
  return out;
}

}  // namespace pt2onnx::schema
