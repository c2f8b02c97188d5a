#include "ir/check_structure.h"

#include <cstdlib>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "ir/name_set.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

// One model or one function body: the scopes open while walking it, and the
// domains its nodes use (checked against its imports at the end).
class Checker {
 public:
  Checker(std::string after, std::string where, bool names = true)
      : after_(std::move(after)), where_(std::move(where)), names_(names) {}

  // Walks `g` as a nested scope of whatever is open; `inputs` of a function
  // body stand in for graph inputs.
  void graph(const Graph& g) {
    scopes_.emplace_back();
    scopes_.back().reserve(g.inputs.size() + g.initializers.size() + 2 * g.nodes.size());
    graph_names_.push_back(g.name);
    node_names_.emplace_back();
    node_names_.back().reserve(g.nodes.size());
    for (auto& i : g.inputs) define(i.name, nullptr, "graph input");
    for (auto& i : g.initializers) define(i.name, nullptr, "initializer");
    nodes(g.nodes);
    for (auto& o : g.outputs)
      if (!visible(o.name))
        fail(nullptr, "graph output '" + o.name +
                          "' is not produced by any node, input or "
                          "initializer");
    node_names_.pop_back();
    graph_names_.pop_back();
    scopes_.pop_back();
  }

  void function(const Function& f) {
    scopes_.emplace_back();
    graph_names_.push_back("function " + (f.domain.empty() ? "" : f.domain + ".") + f.name);
    node_names_.emplace_back();
    attributes_ = std::unordered_set<std::string_view>(f.attributes.begin(), f.attributes.end());
    in_function_ = true;
    for (auto& i : f.inputs) define(i, nullptr, "function input");
    nodes(f.nodes);
    for (auto& o : f.outputs)
      if (!visible(o)) fail(nullptr, "function output '" + o + "' is not produced in its body");
    node_names_.pop_back();
    graph_names_.pop_back();
    scopes_.pop_back();
  }

  const std::unordered_set<std::string>& domains() const { return domains_; }
  const Node* first_user(const std::string& domain) const {
    for (auto& [d, n] : first_users_)
      if (d == domain) return n;
    return nullptr;
  }

  [[noreturn]] void fail(const Node* n, const std::string& what) const {
    std::string msg =
        "internal error after " + after_ + ": the model breaks ONNX's rules in " + where_;
    if (!graph_names_.empty()) msg += ", graph '" + graph_names_.back() + "'";
    if (n) {
      msg += ", at node '" + n->name + "' (" + (n->domain.empty() ? "" : n->domain + "::") +
             n->op_type;
      if (!n->fx_node().empty()) msg += ", from FX node " + n->fx_node();
      if (!n->fx_target().empty()) msg += " " + n->fx_target();
      msg += ")";
    }
    throw Error(msg + ": " + what +
                "; please report it with this message (PT2ONNX_CHECK_EACH_PASS=1 in the "
                "environment names the pass that broke the graph)");
  }

 private:
  void nodes(const std::vector<Node>& ns) {
    for (auto& n : ns) {
      if (names_ && !n.name.empty() && !node_names_.back().insert(n.name).second)
        fail(&n, "two nodes are named '" + n.name + "'");
      for (auto& in : n.inputs)
        if (!in.empty() && !visible(in))
          fail(&n, "input '" + in +
                       "' is not produced before the node (nor a graph input, "
                       "initializer or outer value)");
      if (domains_.insert(n.domain).second) first_users_.emplace_back(n.domain, &n);
      for (auto& a : n.attrs) {
        if (!a.ref.empty()) {
          if (!in_function_)
            fail(&n, "attribute '" + a.name + "' refers to '" + a.ref + "' outside a function");
          if (!attributes_.count(a.ref))
            fail(&n, "attribute '" + a.name + "' refers to '" + a.ref +
                         "', which the function does not declare");
        }
        if (a.kind == Attr::Kind::Graph) {
          if (!a.g) fail(&n, "graph attribute '" + a.name + "' is empty");
          graph(*a.g);
        }
      }
      for (auto& o : n.outputs) define(o, &n, "node output");
    }
  }

  bool visible(std::string_view v) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (s->contains(v)) return true;
    return false;
  }

  void define(const std::string& v, const Node* n, const char* as) {
    if (v.empty()) return;  // an omitted optional output
    if (visible(v))
      fail(n, std::string("value '") + v + "' is defined twice (again as a " + as +
                  "): ONNX values are assigned once, across nested graphs too");
    scopes_.back().insert(v);
  }

  std::string after_, where_;
  bool names_ = true;
  // The values defined and node names taken in each open scope (NameSet: a lookup per node
  // input in a graph of ~300k values was a std::unordered_set's, bench/node_scaling.md).
  std::vector<NameSet> scopes_;
  std::vector<std::string> graph_names_;
  std::vector<NameSet> node_names_;
  std::unordered_set<std::string_view> attributes_;
  bool in_function_ = false;
  std::unordered_set<std::string> domains_;
  std::vector<std::pair<std::string, const Node*>> first_users_;
};

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

}  // namespace

void check_values(const Graph& g, const std::string& after) {
  Checker(after, "the main graph", false).graph(g);
}

namespace {

// An environment switch: set, and neither empty nor "0".
bool env_switch(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}

}  // namespace

bool check_each_pass() {
  static const bool on = env_switch("PT2ONNX_CHECK_EACH_PASS");
  return on;
}

bool print_pass_times() {
  static const bool on = env_switch("PT2ONNX_PASS_TIMES");
  return on;
}

void check_structure(const Graph& g, int opset, const std::string& after) {
  Checker model(after, "the main graph");
  model.graph(g);
  auto model_version = [&](const std::string& d) -> int64_t {
    if (is_default_domain(d)) return opset;
    auto it = g.domain_versions.find(d);
    return it == g.domain_versions.end() ? -1 : it->second;
  };
  for (auto& d : model.domains())
    if (model_version(d) < 0)
      model.fail(model.first_user(d),
                 "domain '" + d + "' is used but the model does not import it (opset_import)");

  std::unordered_set<std::string> function_names;
  for (auto& f : g.functions) {
    Checker body(after, "function " + (f.domain.empty() ? "" : f.domain + ".") + f.name);
    if (!function_names.insert(f.domain + "\n" + f.name).second)
      body.fail(nullptr, "two model-local functions have this domain and name");
    if (model_version(f.domain) < 0)
      body.fail(nullptr, "the function's domain '" + f.domain +
                             "' is not imported by the model (opset_import)");
    body.function(f);
    for (auto& d : body.domains()) {
      auto it = f.opset_imports.find(d);
      if (it == f.opset_imports.end() && is_default_domain(d))
        it = f.opset_imports.find(d.empty() ? "ai.onnx" : "");
      if (it == f.opset_imports.end())
        body.fail(body.first_user(d), "domain '" + (d.empty() ? "ai.onnx" : d) +
                                          "' is used but the function does not import it");
    }
    for (auto& [d, v] : f.opset_imports) {
      int64_t mv = model_version(d);
      if (mv >= 0 && mv != v)
        body.fail(nullptr, "the function imports domain '" + (d.empty() ? "ai.onnx" : d) +
                               "' at version " + std::to_string(v) + ", the model at " +
                               std::to_string(mv));
    }
  }
}

}  // namespace pt2onnx
