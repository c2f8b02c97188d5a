// Calls of model-local functions written as their bodies again (export's
// inline=True): formal inputs / outputs become the call's values, the body's
// own values get fresh names (<call node>/<name>), calls inside bodies are
// inlined too, and the functions are dropped. Attribute references of a body
// (Attr::ref) take the caller's attribute, else the function's default.
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "opt/passes.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

class Inliner {
 public:
  explicit Inliner(Graph& g) : g_(g) {
    for (auto& f : g.functions) fns_.emplace(std::make_pair(f.domain, f.name), &f);
    collect(g);
    for (auto& i : g.initializers)
      if (i.data.owned && i.data.is_contiguous()) constants_.emplace(content_key(i.data), i.name);
  }

  size_t run() {
    g_.nodes = expand(std::move(g_.nodes), 0);
    return inlined_;
  }

 private:
  // Node names and values alike (not g.types: entries of values passes
  // removed would push names off their plain-export spelling).
  void collect(const Graph& g) {
    for (auto& i : g.inputs) fresh.take(i.name);
    for (auto& i : g.initializers) fresh.take(i.name);
    for (auto& n : g.nodes) {
      fresh.take(n.name);
      for (auto& o : n.outputs) fresh.take(o);
      for (const Graph* s : subgraphs(n)) collect(*s);
    }
  }

  // Gives every value a nested graph defines a fresh name (each inlined copy
  // of a body must define its own) and applies `ren` to what it reads.
  void rename_graph(Graph& s, std::unordered_map<std::string, std::string>& ren,
                    const std::string& prefix) {
    auto def = [&](std::string& v) {
      if (v.empty()) return;
      std::string to = fresh(prefix + v);
      ren[v] = to;
      v = to;
    };
    auto use = [&](std::string& v) {
      auto it = ren.find(v);
      if (it != ren.end()) v = it->second;
    };
    for (auto& i : s.inputs) def(i.name);
    for (auto& i : s.initializers) def(i.name);
    NameMap<ValueType> types;
    for (auto& n : s.nodes) {
      for (auto& i : n.inputs) use(i);
      deep_copy_subgraphs(n, ren, prefix);
      for (auto& o : n.outputs) {
        std::string old = o;
        def(o);
        if (auto* t = s.type_of(old)) types[o] = *t;
      }
      n.name = fresh(prefix + n.name);
    }
    for (auto& o : s.outputs) use(o.name);
    for (auto& i : s.inputs) types[i.name] = i.type;
    s.types = std::move(types);
  }

  void deep_copy_subgraphs(Node& n, std::unordered_map<std::string, std::string>& ren,
                           const std::string& prefix) {
    for (auto& a : n.attrs)
      if (a.kind == Attr::Kind::Graph && a.g) {
        auto copy = std::make_shared<Graph>(*a.g);
        rename_graph(*copy, ren, prefix);
        copy->nodes = expand(std::move(copy->nodes), 1);
        a.g = std::move(copy);
      }
  }

  std::vector<Node> expand(std::vector<Node> nodes, int depth) {
    std::vector<Node> out;
    out.reserve(nodes.size());
    for (auto& n : nodes) {
      auto it = fns_.find({n.domain, n.op_type});
      if (it == fns_.end()) {
        if (depth == 0) deep_inline_subgraphs(n);
        out.push_back(std::move(n));
        continue;
      }
      const Function& f = *it->second;
      if (n.inputs.size() > f.inputs.size() || n.outputs.size() > f.outputs.size())
        throw Error("call '" + n.name + "' of function " + f.domain + "::" + f.name + " passes " +
                    std::to_string(n.inputs.size()) + " inputs / " +
                    std::to_string(n.outputs.size()) + " outputs; it has " +
                    std::to_string(f.inputs.size()) + " / " + std::to_string(f.outputs.size()));
      ++inlined_;
      std::string prefix = n.name + "/";
      std::unordered_map<std::string, std::string> ren;
      for (size_t i = 0; i < f.inputs.size(); ++i)
        ren[f.inputs[i]] = i < n.inputs.size() ? n.inputs[i] : std::string();
      std::unordered_map<std::string, std::string> outs;
      for (size_t i = 0; i < n.outputs.size(); ++i) outs[f.outputs[i]] = n.outputs[i];
      std::vector<Node> body;
      for (const Node& b : f.nodes) {
        if (depth == 0 && hoist_constant(b, outs, ren)) continue;
        Node c = b;
        for (auto& i : c.inputs) {
          auto r = ren.find(i);
          if (r != ren.end()) i = r->second;
        }
        deep_copy_subgraphs(c, ren, prefix);
        for (auto& o : c.outputs) {
          if (o.empty()) continue;
          auto r = outs.find(o);
          std::string to = r != outs.end() ? r->second : fresh(prefix + o);
          if (depth == 0 && r == outs.end())
            if (const ValueType* t = g_.type_of(o)) {
              ValueType copy = *t;
              g_.types[to] = std::move(copy);
            }
          ren[o] = to;
          o = to;
        }
        resolve_refs(c, n, f);
        c.name = fresh(prefix + c.name);
        if (c.module_path().empty() && !n.module_path().empty())
          c.edit_origin().module_path = n.module_path();
        body.push_back(std::move(c));
      }
      // Calls inside the body (nested functions).
      for (auto& c : expand(std::move(body), depth)) out.push_back(std::move(c));
    }
    return out;
  }

  static std::string content_key(const TensorData& t) {
    std::string k = std::to_string(static_cast<int>(t.dtype)) + "<";
    for (auto d : t.dims) k += std::to_string(d) + ",";
    k += ">";
    k.append(reinterpret_cast<const char*>(t.bytes()), t.nbytes());
    return k;
  }

  // A Constant of a body inlined into the main graph becomes an initializer
  // again (one per content, as the builder and CSE make them), so inlining
  // gives the graph the plain export writes.
  bool hoist_constant(const Node& b, const std::unordered_map<std::string, std::string>& outs,
                      std::unordered_map<std::string, std::string>& ren) {
    if (b.op_type != "Constant" || !b.domain.empty() || b.outputs.size() != 1 ||
        b.attrs.size() != 1 || b.attrs[0].name != "value" ||
        b.attrs[0].kind != Attr::Kind::Tensor || !b.attrs[0].t || !b.attrs[0].t->is_contiguous() ||
        outs.count(b.outputs[0]))
      return false;
    const TensorData& t = *b.attrs[0].t;
    std::string key = content_key(t);
    auto it = constants_.find(key);
    if (it == constants_.end()) {
      std::string name = fresh(b.outputs[0]);
      g_.initializers.push_back(Initializer{name, t});
      g_.types[name] = static_type(t.dtype, t.dims);
      it = constants_.emplace(std::move(key), name).first;
    }
    ren[b.outputs[0]] = it->second;
    return true;
  }

  void deep_inline_subgraphs(Node& n) {
    for (Graph* s : subgraphs(n)) s->nodes = expand(std::move(s->nodes), 1);
  }

  static void resolve_refs(Node& c, const Node& call, const Function& f) {
    std::vector<Attr> attrs;
    for (auto& a : c.attrs) {
      if (a.ref.empty()) {
        attrs.push_back(a);
        continue;
      }
      const Attr* given = call.attr(a.ref);
      if (!given)
        for (auto& d : f.attribute_defaults)
          if (d.name == a.ref) given = &d;
      if (!given) continue;  // an optional attribute the caller left out
      Attr r = *given;
      r.name = a.name;
      attrs.push_back(std::move(r));
    }
    c.attrs = std::move(attrs);
  }

  Graph& g_;
  std::map<std::pair<std::string, std::string>, const Function*> fns_;
  FreshNames fresh;
  std::unordered_map<std::string, std::string> constants_;  // content -> initializer
  size_t inlined_ = 0;
};

}  // namespace

size_t inline_functions(Graph& g) {
  if (g.functions.empty()) return 0;
  size_t n = Inliner(g).run();
  std::unordered_set<std::string> domains;
  for (auto& f : g.functions) domains.insert(f.domain);
  g.functions.clear();
  // Domains only functions used go from the model's opset_import.
  std::unordered_set<std::string> used;
  std::vector<const Graph*> graphs{&g};
  while (!graphs.empty()) {
    const Graph* x = graphs.back();
    graphs.pop_back();
    for (auto& node : x->nodes) {
      used.insert(node.domain);
      for (const Graph* s : subgraphs(node)) graphs.push_back(s);
    }
  }
  for (auto& d : domains)
    if (!used.count(d)) g.domain_versions.erase(d);
  return n;
}

}  // namespace pt2onnx
