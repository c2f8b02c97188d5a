#include "convert/inline_wrappers.h"

#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

using schema::ArgKind;
using schema::Argument;
using schema::Graph;
using schema::Node;

const char* const kSetGrad = "torch.ops.higher_order.wrap_with_set_grad_enabled";
const char* const kAutocast = "torch.ops.higher_order.wrap_with_autocast";
const char* const kWithEffects = "torch.ops.higher_order.with_effects";

using Renames = std::unordered_map<std::string, std::string>;

// Every value name an argument refers to (a graph argument's name is the
// submodule's, not a value).
void rename_arg(Argument& a, const Renames& m) {
  auto sub = [&](std::string& n) {
    auto it = m.find(n);
    if (it != m.end()) n = it->second;
  };
  if (a.kind != ArgKind::Graph && !a.name.empty()) sub(a.name);
  for (auto& n : a.names)
    if (!n.empty()) sub(n);
  for (auto& s : a.symints)
    if (!s.name.empty()) sub(s.name);
}

void rename_node(Node& n, const Renames& m) {
  for (auto& in : n.inputs) rename_arg(in.arg, m);
  for (auto& out : n.outputs) rename_arg(out, m);
}

// The names a node defines (its outputs).
void defined_names(const Node& n, const std::function<void(const std::string&)>& f) {
  for (auto& o : n.outputs) {
    if (o.kind != ArgKind::Graph && !o.name.empty()) f(o.name);
    for (auto& x : o.names)
      if (!x.empty()) f(x);
    for (auto& s : o.symints)
      if (!s.name.empty()) f(s.name);
  }
}

// The single name of a graph input / output argument (tensor or sym int).
std::string value_name(const Argument& a) {
  if (!a.name.empty() && a.kind != ArgKind::Graph) return a.name;
  if (a.symints.size() == 1) return a.symints[0].name;
  return {};
}

std::optional<DType> first_float_output(const Node& n, const Graph& g) {
  for (auto& o : n.outputs) {
    std::vector<std::string> names = o.names;
    if (!o.name.empty()) names.push_back(o.name);
    for (auto& x : names) {
      auto it = g.tensor_values.find(x);
      if (it != g.tensor_values.end() && is_floating(it->second.dtype)) return it->second.dtype;
    }
  }
  return std::nullopt;
}

class Inliner {
 public:
  // Flattens the wrappers of `g` (recursively); metadata of spliced values
  // moves into `g`. Returns the aliases made (wrapper output -> value), which
  // the caller applies to whatever else refers to g's values.
  Renames flatten(Graph& g) {
    Renames alias;
    std::vector<Node> out;
    out.reserve(g.nodes.size());
    for (auto& n : g.nodes) {
      rename_node(n, alias);
      if (!is_wrapper_target(n.target)) {
        out.push_back(std::move(n));
        continue;
      }
      if (n.target == kWithEffects) {
        out.push_back(unwrap_effects(n, alias));
        continue;
      }
      splice(n, g, out, alias);
    }
    g.nodes = std::move(out);
    for (auto& o : g.outputs) rename_arg(o, alias);
    return alias;
  }

 private:
  // with_effects(token, op, *args) -> (token, *op's results): the token only
  // orders side effects, which an ONNX graph does not have. The node becomes
  // `op` itself; its token output is the token it was given.
  static Node unwrap_effects(const Node& w, Renames& alias) {
    if (w.inputs.size() < 2 || w.inputs[1].arg.variant != "as_operator" || w.outputs.empty())
      throw Error("node '" + w.name + "' (" + w.target + ") is not with_effects(token, op, ...)");
    Node n = w;
    n.target = w.inputs[1].arg.s;
    std::string token_in = value_name(w.inputs[0].arg), token_out = value_name(w.outputs[0]);
    n.inputs.erase(n.inputs.begin(), n.inputs.begin() + 2);
    n.outputs.erase(n.outputs.begin());
    if (!token_out.empty() && !token_in.empty()) alias[token_out] = token_in;
    return n;
  }

  void splice(const Node& w, Graph& parent, std::vector<Node>& out, Renames& alias) {
    size_t gi = w.inputs.size();
    for (size_t i = 0; i < w.inputs.size(); ++i)
      if (w.inputs[i].arg.kind == ArgKind::Graph) gi = i;
    if (gi == w.inputs.size() || !w.inputs[gi].arg.graph)
      throw Error("node '" + w.name + "' (" + w.target + ") has no subgraph");
    Graph sub = *w.inputs[gi].arg.graph;  // a copy: the program's graph stays as read
    flatten(sub);                         // nested wrappers first

    bool autocast = false;
    if (w.target == kAutocast) {
      // (device_type, dtype, enabled, cache_enabled, graph, *args)
      if (gi >= 3 && w.inputs[2].arg.kind == ArgKind::Bool) autocast = w.inputs[2].arg.b;
    }

    Renames m;
    size_t n_args = w.inputs.size() - gi - 1;
    if (sub.inputs.size() != n_args)
      throw Error("node '" + w.name + "': subgraph takes " + std::to_string(sub.inputs.size()) +
                  " inputs but is given " + std::to_string(n_args));
    std::set<std::string> sub_inputs;
    for (size_t i = 0; i < n_args; ++i) {
      std::string inner = value_name(sub.inputs[i]);
      std::string outer = value_name(w.inputs[gi + 1 + i].arg);
      if (inner.empty()) continue;
      if (outer.empty())
        throw Error("node '" + w.name + "': subgraph input " + std::to_string(i) +
                    " is given a constant; only tensors and sym ints are supported");
      m[inner] = outer;
      sub_inputs.insert(inner);
    }
    // Values defined inside get the wrapper's name as prefix (unique in the
    // parent); the subgraph's results take the wrapper's output names.
    const std::string prefix = w.name + ".";
    for (auto& n : sub.nodes) defined_names(n, [&](const std::string& x) { m[x] = prefix + x; });
    std::vector<std::string> wrapper_outs;
    for (auto& o : w.outputs) {
      if (!o.names.empty())
        for (auto& x : o.names) wrapper_outs.push_back(x);
      else
        wrapper_outs.push_back(value_name(o));
    }
    if (wrapper_outs.size() != sub.outputs.size())
      throw Error("node '" + w.name + "' has " + std::to_string(wrapper_outs.size()) +
                  " outputs but its subgraph returns " + std::to_string(sub.outputs.size()));
    std::set<std::string> claimed;
    for (size_t i = 0; i < wrapper_outs.size(); ++i) {
      const std::string& wo = wrapper_outs[i];
      std::string so = value_name(sub.outputs[i]);
      if (wo.empty() || so.empty()) continue;
      if (!sub_inputs.count(so) && claimed.insert(so).second)
        m[so] = wo;  // the producing node writes the wrapper's output directly
      else
        alias[wo] = m.count(so) ? m[so] : so;  // an input returned as is, or twice
    }
    // Metadata of the values defined inside moves to the parent (the
    // wrapper's own outputs keep the parent's metadata).
    for (auto& [name, v] : sub.tensor_values) {
      const std::string k(name);
      if (!sub_inputs.count(k) && m.count(k)) parent.tensor_values.emplace(m[k], v);
    }
    for (auto& [name, v] : sub.sym_int_values) {
      const std::string k(name);
      if (!sub_inputs.count(k) && m.count(k)) parent.sym_int_values.emplace(m[k], v);
    }

    std::map<std::pair<std::string, DType>, std::string> casts;
    for (auto& n : sub.nodes) {
      rename_node(n, m);
      if (autocast) add_autocast_casts(n, parent, out, casts);
      out.push_back(std::move(n));
    }
  }

  // Autocast runs an op in the dtype its result has (lower precision for
  // matmul-like ops, float32 for precision-sensitive ones): floating tensor
  // inputs of another dtype get an explicit cast to it.
  void add_autocast_casts(Node& n, Graph& g, std::vector<Node>& out,
                          std::map<std::pair<std::string, DType>, std::string>& casts) {
    auto d = first_float_output(n, g);
    if (!d) return;
    for (auto& in : n.inputs) {
      if (in.arg.kind != ArgKind::Tensor) continue;
      auto meta = g.tensor_values.find(in.arg.name);
      if (meta == g.tensor_values.end() || !is_floating(meta->second.dtype) ||
          meta->second.dtype == *d)
        continue;
      auto key = std::make_pair(in.arg.name, *d);
      auto it = casts.find(key);
      if (it == casts.end()) {
        std::string name = n.name + ".autocast." + std::to_string(casts.size());
        schema::TensorMeta cm = meta->second;
        cm.dtype = *d;
        g.tensor_values.emplace(name, cm);
        Node c;
        c.target = "torch.ops.aten._to_copy.default";
        c.name = name;
        c.stack_trace = n.stack_trace;
        c.nn_module_stack = n.nn_module_stack;
        schema::NamedArgument self;
        self.name = "self";
        self.arg.kind = ArgKind::Tensor;
        self.arg.variant = "as_tensor";
        self.arg.name = in.arg.name;
        c.inputs.push_back(self);
        Argument o;
        o.kind = ArgKind::Tensor;
        o.variant = "as_tensor";
        o.name = name;
        c.outputs.push_back(o);
        out.push_back(std::move(c));
        it = casts.emplace(key, name).first;
      }
      in.arg.name = it->second;
    }
  }
};

bool graph_has_wrappers(const Graph& g) {
  for (auto& n : g.nodes) {
    if (is_wrapper_target(n.target)) return true;
  }
  return false;
}

}  // namespace

bool is_wrapper_target(const std::string& target) {
  return target == kSetGrad || target == kAutocast || target == kWithEffects;
}

bool has_wrappers(const schema::Program& p) { return graph_has_wrappers(p.graph); }

void inline_wrappers(schema::Program& p) {
  Inliner in;
  Renames alias = in.flatten(p.graph);
  for (auto& s : p.output_specs) rename_arg(s.arg, alias);
}

}  // namespace pt2onnx
