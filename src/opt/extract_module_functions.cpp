// Module calls as model-local ONNX functions (torch.onnx's
// export_modules_as_functions). The nodes a selected module call made (its
// entry in the nodes' nn_module_stack) move into a function body; one call
// node takes their place in the main graph.
//
// Runs between folding and CSE (convert_program.cpp): CSE would merge equal
// nodes of different calls (the Unsqueeze of the rotary cos / sin in every
// decoder layer) and the first call would compute them for the others,
// which gives it a signature, so a function, of its own. What folding made
// of a module's constants lies in its body; the default passes then run on
// the main graph and on each body (optimize_function_bodies).
//
// Nested selected modules give nested functions (a Block's function calls
// its Linear's), extracted innermost first: a call node stands in its parent
// module's stack, so the parent's body holds the call.
//
// Per call: inputs are the values its nodes read from outside (graph inputs,
// weights, values of other nodes) in order of first read; outputs the values
// read outside it, in order of production. Weights stay initializers of the
// main graph and are passed at the call; constants made during conversion
// (owned bytes, never weights) become Constant nodes of the body, so every
// call of equal code shares one function. A call whose nodes are not
// contiguous in data flow (a node outside it reads one of its values and is
// read by it) stays inline.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"

namespace pt2onnx {

namespace {

struct StackEntry {
  std::string key, path, type;
};
using Stack = std::vector<StackEntry>;

Stack parse_stack(const std::string& s) {
  Stack out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t e = s.find(';', p);
    if (e == std::string::npos) e = s.size();
    std::string item = s.substr(p, e - p);
    size_t c1 = item.find(','), c2 = c1 == std::string::npos ? c1 : item.find(',', c1 + 1);
    if (c2 != std::string::npos)
      out.push_back({item.substr(0, c1), item.substr(c1 + 1, c2 - c1 - 1), item.substr(c2 + 1)});
    p = e + 1;
  }
  return out;
}

std::string join_stack(const Stack& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < s.size(); ++i)
    out += (i ? ";" : "") + s[i].key + "," + s[i].path + "," + s[i].type;
  return out;
}

// "pkg.mod.Block" -> ("pkg.mod", "Block"); a class defined in a function
// ("pkg.mod.make.<locals>.Block") -> ("pkg.mod", "Block"). The domain is
// the class's Python module, as torch.onnx names it.
std::pair<std::string, std::string> domain_and_name(const std::string& type) {
  std::vector<std::string> parts;
  size_t p = 0;
  while (true) {
    size_t e = type.find('.', p);
    parts.push_back(type.substr(p, e == std::string::npos ? std::string::npos : e - p));
    if (e == std::string::npos) break;
    p = e + 1;
  }
  std::string name = parts.back();
  size_t end = parts.size() - 1;
  for (size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i] == "<locals>") {
      end = i == 0 ? 0 : i - 1;
      break;
    }
  std::string domain;
  for (size_t i = 0; i < end; ++i) domain += (i ? "." : "") + parts[i];
  if (domain.empty()) domain = "pkg.pt2onnx.module";
  std::string clean;
  for (char c : name) clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return {domain, clean.empty() ? std::string("Module") : clean};
}

// The values a node reads: its inputs and what its nested graphs read from
// enclosing scopes.
std::vector<std::string> reads_of(const Node& n) {
  std::vector<std::string> r;
  for (auto& i : n.inputs)
    if (!i.empty()) r.push_back(i);
  for (const Graph* s : subgraphs(n))
    for (auto& v : outer_reads(*s)) r.push_back(v);
  return r;
}

std::string type_key(const ValueType* t) {
  if (!t) return "?";
  std::string s = std::to_string(static_cast<int>(t->dtype));
  if (!t->shape) return s + "[*]";
  s += "[";
  for (auto& d : *t->shape)
    s += (d.is_static() ? std::to_string(d.value) : d.sym.empty() ? std::string("?") : d.sym) + ",";
  return s + "]";
}

// A canonical text of a body: values named by order of first appearance,
// so bodies equal up to value names give equal texts.
class Canon {
 public:
  std::string text;
  void value(const std::string& v) {
    if (v.empty()) {
      text += "_ ";
      return;
    }
    auto [it, added] = ids_.emplace(v, ids_.size());
    text += "%" + std::to_string(it->second) + " ";
  }
  void tensor(const TensorData& t) {
    text += std::to_string(static_cast<int>(t.dtype)) + "<";
    for (auto d : t.dims) text += std::to_string(d) + ",";
    text += ">";
    if (t.is_contiguous()) {
      text.append(reinterpret_cast<const char*>(t.bytes()), t.nbytes());
    } else {
      auto c = t.contiguous_copy();
      text.append(reinterpret_cast<const char*>(c.data()), c.size());
    }
  }
  void attr(const Attr& a) {
    text += "@" + a.name + ":" + std::to_string(static_cast<int>(a.kind)) + ":";
    if (!a.ref.empty()) {
      text += "ref " + a.ref;
      return;
    }
    switch (a.kind) {
      case Attr::Kind::Float: {
        uint32_t bits;
        std::memcpy(&bits, &a.f, sizeof bits);
        text += std::to_string(bits);
        break;
      }
      case Attr::Kind::Int:
        text += std::to_string(a.i);
        break;
      case Attr::Kind::String:
        text += std::to_string(a.s.size()) + ":" + a.s;
        break;
      case Attr::Kind::Floats:
        for (float f : a.floats) {
          uint32_t bits;
          std::memcpy(&bits, &f, sizeof bits);
          text += std::to_string(bits) + ",";
        }
        break;
      case Attr::Kind::Ints:
        for (auto i : a.ints) text += std::to_string(i) + ",";
        break;
      case Attr::Kind::Strings:
        for (auto& s : a.strings) text += std::to_string(s.size()) + ":" + s + ",";
        break;
      case Attr::Kind::Tensor:
        tensor(*a.t);
        break;
      case Attr::Kind::Graph:
        graph(*a.g);
        break;
    }
    text += ";";
  }
  void node(const Node& n) {
    text += n.domain + "::" + n.op_type + "(";
    for (auto& i : n.inputs) value(i);
    text += ")(";
    for (auto& a : n.attrs) attr(a);
    text += ")->";
    for (auto& o : n.outputs) value(o);
    text += "\n";
  }
  void graph(const Graph& g) {
    text += "{";
    for (auto& i : g.inputs) {
      value(i.name);
      text += type_key(&i.type) + " ";
    }
    for (auto& init : g.initializers) {
      value(init.name);
      tensor(init.data);
    }
    for (auto& n : g.nodes) node(n);
    text += "=>";
    for (auto& o : g.outputs) value(o.name);
    text += "}";
  }

 private:
  std::unordered_map<std::string, size_t> ids_;
};

class Extractor {
 public:
  Extractor(Graph& g, const ModuleSelection& sel, int opset) : g_(g), sel_(sel), opset_(opset) {
    for (auto& f : g_.functions) taken_.insert({f.domain, f.name});
    for (auto& n : g_.nodes) node_names_.insert(n.name);
    for (size_t i = 0; i < g_.initializers.size(); ++i)
      init_index_.emplace(g_.initializers[i].name, i);
  }

  size_t run() {
    // Deepest selected module call first.
    size_t depth = 0;
    for (auto& n : g_.nodes) {
      const Stack& s = stack_of(n);
      for (size_t d = 1; d < s.size(); ++d)
        if (selected(s[d])) depth = std::max(depth, d);
    }
    size_t calls = 0;
    reads_ = count_reads();
    for (; depth >= 1; --depth) {
      // The calls at this depth with their nodes, in order of first node.
      std::vector<std::pair<StackEntry, std::vector<size_t>>> groups;
      std::unordered_map<std::string, size_t> index;
      for (size_t i = 0; i < g_.nodes.size(); ++i) {
        const Stack& s = stack_of(g_.nodes[i]);
        if (s.size() <= depth || !selected(s[depth])) continue;
        auto [it, added] = index.emplace(s[depth].key, groups.size());
        if (added) groups.push_back({s[depth], {}});
        groups[it->second].second.push_back(i);
      }
      // Calls whose node ranges do not overlap are replaced in one sweep;
      // the others (rare: CSE or mutation write-backs interleave them) one
      // at a time.
      std::vector<char> overlaps(groups.size(), 0);
      std::vector<size_t> open;
      for (size_t k = 0; k < groups.size(); ++k) {
        size_t first = groups[k].second.front();
        std::erase_if(open, [&](size_t j) { return groups[j].second.back() < first; });
        for (size_t j : open) overlaps[j] = overlaps[k] = 1;
        open.push_back(k);
      }
      std::vector<Plan> plans;
      for (size_t k = 0; k < groups.size(); ++k)
        if (!overlaps[k])
          if (auto p = plan(depth, groups[k].first, groups[k].second))
            plans.push_back(std::move(*p));
      calls += plans.size();
      apply(plans);
      for (size_t k = 0; k < groups.size(); ++k) {
        if (!overlaps[k]) continue;
        std::vector<size_t> members;
        for (size_t i = 0; i < g_.nodes.size(); ++i) {
          const Stack& s = stack_of(g_.nodes[i]);
          if (s.size() > depth && s[depth].key == groups[k].first.key) members.push_back(i);
        }
        std::vector<Plan> one;
        if (auto p = plan(depth, groups[k].first, members)) one.push_back(std::move(*p));
        calls += one.size();
        apply(one);
      }
    }
    drop_embedded_initializers();
    return calls;
  }

 private:
  const Stack& stack_of(const Node& n) {
    static const Stack empty;
    const auto& stack = n.module_stack();
    if (!stack) return empty;
    auto it = stacks_.find(stack.get());
    if (it == stacks_.end()) {
      keep_.push_back(stack);
      it = stacks_.emplace(stack.get(), parse_stack(*stack)).first;
    }
    return it->second;
  }

  bool selected(const StackEntry& e) const {
    if (e.path.empty()) return false;  // the root module: the whole graph
    if (sel_.all) return true;
    for (auto& c : sel_.classes) {
      if (e.type == c) return true;
      if (e.type.size() > c.size() && e.type.compare(e.type.size() - c.size(), c.size(), c) == 0 &&
          e.type[e.type.size() - c.size() - 1] == '.')
        return true;
    }
    return false;
  }

  // Reads of each value across the graph (nested graphs' outer reads and the
  // graph outputs included).
  std::unordered_map<std::string, size_t> count_reads() const {
    std::unordered_map<std::string, size_t> c;
    for (auto& n : g_.nodes)
      for (auto& r : reads_of(n)) ++c[r];
    for (auto& o : g_.outputs) ++c[o.name];
    return c;
  }

  bool embeddable(const std::string& v) const {
    auto it = init_index_.find(v);
    if (it == init_index_.end()) return false;
    const TensorData& t = g_.initializers[it->second].data;
    return t.owned != nullptr && t.nbytes() <= kMaxEmbeddedBytes;
  }

  // One call replaced: its node range, which of those nodes are its own and
  // which outside ones move after the call node.
  struct Plan {
    size_t first = 0, last = 0;
    std::vector<char> is_member, moved;
    Node call;
  };

  // The function and call node of one module call (nodes `members`, in
  // order); nullopt when it stays inline.
  std::optional<Plan> plan(size_t depth, const StackEntry& e, const std::vector<size_t>& members) {
    std::vector<Node>& nodes = g_.nodes;
    if (members.empty()) return std::nullopt;
    const size_t first = members.front(), last = members.back();
    std::vector<char> is_member(last - first + 1, 0);
    for (size_t m : members) is_member[m - first] = 1;

    // Outside nodes between its first and last node that depend on it move
    // after the call; if one of its nodes depends on such a node, the call
    // cannot be one node.
    std::unordered_set<std::string> produced, tainted;
    std::vector<char> moved(last - first + 1, 0);
    for (size_t i = first; i <= last; ++i) {
      const Node& n = nodes[i];
      auto reads = reads_of(n);
      if (is_member[i - first]) {
        for (auto& r : reads)
          if (tainted.count(r)) return std::nullopt;
        for (auto& o : n.outputs)
          if (!o.empty()) produced.insert(o);
      } else {
        bool dep = false;
        for (auto& r : reads) dep = dep || produced.count(r) || tainted.count(r);
        if (dep) {
          moved[i - first] = 1;
          for (auto& o : n.outputs) tainted.insert(o);
        }
      }
    }

    // Inputs (first read first), embedded constants, outputs.
    std::vector<std::string> inputs, constants;
    std::unordered_set<std::string> seen;
    std::unordered_map<std::string, size_t> member_reads;
    for (size_t m : members)
      for (auto& r : reads_of(nodes[m])) {
        ++member_reads[r];
        if (produced.count(r) || !seen.insert(r).second) continue;
        (embeddable(r) ? constants : inputs).push_back(r);
      }
    std::vector<std::string> outputs;
    for (size_t m : members)
      for (auto& o : nodes[m].outputs)
        if (!o.empty() && reads_[o] > member_reads[o]) outputs.push_back(o);
    if (outputs.empty()) return std::nullopt;  // nothing of it is used
    // Read counts once the call stands for its nodes.
    for (auto& [v, k] : member_reads) reads_[v] -= k;
    for (auto& i : inputs) ++reads_[i];

    // The body, and its canonical text (the class, the signature's types).
    std::vector<Node> body;
    for (auto& c : constants) {
      Node k;
      k.op_type = "Constant";
      k.name = c;
      k.outputs = {c};
      k.attrs.push_back(Attr::Tensor("value", g_.initializers[init_index_.at(c)].data));
      body.push_back(std::move(k));
    }
    for (size_t m : members) body.push_back(nodes[m]);
    Canon canon;
    canon.text = e.type + "\n";
    for (auto& i : inputs) {
      canon.value(i);
      canon.text += type_key(g_.type_of(i)) + " ";
    }
    canon.text += "\n";
    for (auto& n : body) canon.node(n);
    for (auto& o : outputs) {
      canon.value(o);
      canon.text += type_key(g_.type_of(o)) + " ";
    }

    auto [domain, base] = domain_and_name(e.type);
    auto found = by_text_.find(canon.text);
    std::string fname;
    if (found != by_text_.end()) {
      fname = found->second;
    } else {
      fname = base;
      for (int k = 1; taken_.count({domain, fname}); ++k) fname = base + "_" + std::to_string(k);
      taken_.insert({domain, fname});
      by_text_.emplace(std::move(canon.text), fname);
      Function f;
      f.domain = domain;
      f.name = fname;
      f.inputs = inputs;
      f.outputs = outputs;
      f.doc = "torch module " + e.type;
      f.opset_imports[""] = opset_;
      for (auto& n : body)
        if (!n.domain.empty()) {
          auto v = g_.domain_versions.find(n.domain);
          f.opset_imports[n.domain] = v == g_.domain_versions.end() ? 1 : v->second;
        }
      f.nodes = std::move(body);
      g_.functions.push_back(std::move(f));
      g_.domain_versions.emplace(domain, 1);
    }

    Node call;
    call.op_type = fname;
    call.domain = domain;
    size_t at = e.key.rfind('@');
    std::string cname = e.path + (at == std::string::npos ? "" : e.key.substr(at));
    call.name = cname;
    for (int k = 1; node_names_.count(call.name); ++k) call.name = cname + "_" + std::to_string(k);
    node_names_.insert(call.name);
    call.inputs = inputs;
    call.outputs = outputs;
    Origin& origin = call.edit_origin();
    origin.module_path = e.path;
    origin.fx_target = e.type;
    const Stack& own = stack_of(nodes[first]);
    std::string parent = join_stack(own, depth);
    if (!parent.empty()) origin.module_stack = std::make_shared<const std::string>(parent);
    for (auto& c : constants) embedded_.insert(c);

    return Plan{first, last, std::move(is_member), std::move(moved), std::move(call)};
  }

  // Replaces the calls of `plans` (in order, node ranges disjoint) in one sweep.
  void apply(std::vector<Plan>& plans) {
    if (plans.empty()) return;
    std::vector<Node>& nodes = g_.nodes;
    std::vector<Node> out;
    out.reserve(nodes.size());
    size_t i = 0;
    for (Plan& p : plans) {
      for (; i < p.first; ++i) out.push_back(std::move(nodes[i]));
      for (i = p.first; i <= p.last; ++i)
        if (!p.is_member[i - p.first] && !p.moved[i - p.first]) out.push_back(std::move(nodes[i]));
      out.push_back(std::move(p.call));
      for (i = p.first; i <= p.last; ++i)
        if (p.moved[i - p.first]) out.push_back(std::move(nodes[i]));
      i = p.last + 1;
    }
    for (; i < nodes.size(); ++i) out.push_back(std::move(nodes[i]));
    nodes = std::move(out);
  }

  // Constants now inside bodies that nothing in the main graph reads.
  void drop_embedded_initializers() {
    if (embedded_.empty()) return;
    auto& inits = g_.initializers;
    inits.erase(std::remove_if(inits.begin(), inits.end(),
                               [&](const Initializer& i) {
                                 auto r = reads_.find(i.name);
                                 return embedded_.count(i.name) &&
                                        (r == reads_.end() || !r->second);
                               }),
                inits.end());
  }

  static constexpr size_t kMaxEmbeddedBytes = 1 << 16;
  Graph& g_;
  const ModuleSelection& sel_;
  int opset_;
  std::unordered_map<const std::string*, Stack> stacks_;
  std::vector<std::shared_ptr<const std::string>> keep_;  // keeps stacks_'s keys alive
  std::set<std::pair<std::string, std::string>> taken_;
  std::unordered_set<std::string> node_names_;
  std::unordered_map<std::string, size_t> init_index_;
  std::unordered_map<std::string, std::string> by_text_;  // canonical body -> function name
  std::unordered_set<std::string> embedded_;
  std::unordered_map<std::string, size_t> reads_;  // reads of each value in the main graph
};

}  // namespace

size_t extract_module_functions(Graph& g, const ModuleSelection& selection, int opset) {
  if (!selection.all && selection.classes.empty()) return 0;
  return Extractor(g, selection, opset).run();
}

}  // namespace pt2onnx
