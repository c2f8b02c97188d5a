#include "convert/custom_converters.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

#include "archive/mapped_file.h"
#include "convert/fallback.h"
#include "onnx/model_reader.h"

namespace pt2onnx {

std::string normalize_target(std::string_view target) {
  std::string t(target);
  const std::string prefix = "torch.ops.";
  if (t.rfind(prefix, 0) == 0) t = t.substr(prefix.size());
  if (auto p = t.find("::"); p != std::string::npos) t = t.substr(0, p) + "." + t.substr(p + 2);
  // "ns.op" names the default overload.
  if (std::count(t.begin(), t.end(), '.') == 1) t += ".default";
  return prefix + t;
}

namespace {

// Tensor attributes (and nested graphs' initializers) copied out of the bytes
// they were read from.
TensorData owned_copy(const TensorData& t) {
  if (t.owned || !t.data) return t;
  std::vector<uint8_t> b(t.bytes(), t.bytes() + t.nbytes());
  return TensorData::from_bytes(t.dtype, t.dims, std::move(b));
}

void own_tensors(std::vector<Node>& nodes) {
  for (auto& n : nodes)
    for (auto& a : n.attrs) {
      if (a.t) a.t = std::make_shared<TensorData>(owned_copy(*a.t));
      if (a.g) {
        for (auto& init : a.g->initializers) init.data = owned_copy(init.data);
        own_tensors(a.g->nodes);
      }
    }
}

}  // namespace

CustomConverters::CustomConverters(const Options& opt) : opsets_(opt.custom_opsets) {
  for (auto& cf : opt.custom_functions) {
    std::string target = normalize_target(cf.target);
    Function f = read_function(cf.function_proto, "the custom converter for " + target);
    if (!functions_.emplace(target, std::move(f)).second)
      throw Error("two custom converters for " + target);
  }
  for (auto& path : opt.custom_function_files) {
    MappedFile file(path);
    std::string_view bytes(reinterpret_cast<const char*>(file.data()), file.size());
    ReadModel m = read_model(bytes, path);
    for (auto& [domain, version] : m.opset_imports)
      if (!domain.empty() && domain != "ai.onnx") opsets_.emplace(domain, version);
    if (m.graph.functions.empty()) throw Error(path + ": the file has no functions");
    for (auto& f : m.graph.functions) {
      if (f.domain.empty() && f.name.rfind("torch.ops.", 0) != 0)
        throw Error(path + ": function '" + f.name +
                    "' has no domain; its domain and name name the op it converts "
                    "(domain 'mylib', name 'foo' converts mylib::foo)");
      std::string target =
          normalize_target(f.name.rfind("torch.ops.", 0) == 0 ? f.name : f.domain + "." + f.name);
      own_tensors(f.nodes);  // the body must not keep views on `file`
      if (!functions_.emplace(target, f).second)
        throw Error(path + ": two custom converters for " + target);
    }
  }
  for (auto& [target, fn] : opt.converters) {
    if (!fn) throw Error("the C++ converter for " + target + " is null");
    std::string t = normalize_target(target);
    if (functions_.count(t) || !cpp_.emplace(t, fn).second)
      throw Error("two custom converters for " + t);
  }
}

bool CustomConverters::convert(Ctx& c) const {
  if (auto it = cpp_.find(c.node.target); it != cpp_.end()) {
    it->second(c);
    return true;
  }
  if (auto it = functions_.find(c.node.target); it != functions_.end()) {
    instantiate(c, it->second);
    return true;
  }
  return false;
}

int64_t CustomConverters::domain_version(const Function& f, const std::string& domain) const {
  if (auto it = opsets_.find(domain); it != opsets_.end()) return it->second;
  if (auto it = f.opset_imports.find(domain); it != f.opset_imports.end()) return it->second;
  return 1;  // as torch.onnx: a custom domain named nowhere is version 1
}

namespace {

// Copies a function body's nodes into the builder's current scope.
class Instantiation {
 public:
  Instantiation(Ctx& c, const Function& f, std::unordered_map<std::string, Attr> attrs,
                std::function<int64_t(const std::string&)> version)
      : c_(c), f_(f), attrs_(std::move(attrs)), version_(std::move(version)) {}

  // function value -> graph value
  std::unordered_map<std::string, std::string> names;

  std::string value(const std::string& v, const std::string& where) const {
    if (v.empty()) return v;
    auto it = names.find(v);
    if (it == names.end())
      c_.fail("custom function '" + f_.name + "': " + where + " reads '" + v +
              "', which is neither an input of the function nor an output of an earlier node");
    return it->second;
  }

  // The node's attribute with references resolved; nullopt when the
  // reference names an attribute the call does not set (ONNX: omitted).
  std::optional<Attr> resolve(const Attr& a, const std::string& where) {
    if (a.kind == Attr::Kind::Graph && a.g) {
      Attr r = a;
      r.g = std::make_shared<Graph>(subgraph(*a.g, where + " attribute " + a.name));
      return r;
    }
    if (a.ref.empty()) return a;
    auto it = attrs_.find(a.ref);
    if (it == attrs_.end()) return std::nullopt;
    Attr r = it->second;
    r.name = a.name;
    if (r.kind == a.kind) return r;
    // A float argument given as an int, a float list as ints.
    if (a.kind == Attr::Kind::Float && r.kind == Attr::Kind::Int)
      return Attr::Float(a.name, float(r.i));
    if (a.kind == Attr::Kind::Floats && r.kind == Attr::Kind::Ints)
      return Attr::Floats(a.name, std::vector<float>(r.ints.begin(), r.ints.end()));
    if (a.kind == Attr::Kind::Ints && r.kind == Attr::Kind::Int) return Attr::Ints(a.name, {r.i});
    c_.fail("custom function '" + f_.name + "': " + where + " attribute '" + a.name +
            "' refers to argument '" + a.ref + "', whose value does not have the attribute's type");
  }

  std::vector<std::string> emit(const Node& n, const std::string& where) {
    std::vector<std::string> inputs;
    for (auto& in : n.inputs) inputs.push_back(value(in, where));
    std::vector<Attr> attrs;
    for (auto& a : n.attrs)
      if (auto r = resolve(a, where)) attrs.push_back(std::move(*r));
    const std::string domain = n.domain == "ai.onnx" ? "" : n.domain;
    if (!domain.empty()) c_.b.use_domain(domain, version_(domain));
    auto outs = c_.b.add_node(n.op_type, inputs, n.outputs.size(), std::move(attrs), {}, domain);
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) names[n.outputs[k]] = outs[k];
    return outs;
  }

 private:
  // A graph attribute of a body node (If / Loop / Scan): fresh names for the
  // values it defines, the instantiation's names for what it reads outside.
  Graph subgraph(const Graph& g, const std::string& where) {
    Graph r;
    r.name = c_.b.fresh_name(g.name.empty() ? "body" : g.name);
    auto fresh = [&](const std::string& v) {
      std::string n = c_.b.fresh_name(v.empty() ? "v" : v);
      names[v] = n;
      if (auto t = g.type_of(v)) r.types[n] = *t;
      return n;
    };
    for (auto& in : g.inputs) r.inputs.push_back({fresh(in.name), in.type});
    for (auto& init : g.initializers) r.initializers.push_back({fresh(init.name), init.data});
    for (auto& n : g.nodes) {
      Node m = n;
      for (auto& in : m.inputs) in = value(in, where);
      m.attrs.clear();
      for (auto& a : n.attrs)
        if (auto x = resolve(a, where)) m.attrs.push_back(std::move(*x));
      for (auto& o : m.outputs)
        if (!o.empty()) o = fresh(o);
      if (m.domain == "ai.onnx") m.domain.clear();
      if (!m.domain.empty()) c_.b.use_domain(m.domain, version_(m.domain));
      r.nodes.push_back(std::move(m));
    }
    for (auto& o : g.outputs) r.outputs.push_back({value(o.name, where), o.type});
    return r;
  }

  Ctx& c_;
  const Function& f_;
  std::unordered_map<std::string, Attr> attrs_;
  std::function<int64_t(const std::string&)> version_;
};

}  // namespace

void CustomConverters::instantiate(Ctx& c, const Function& f) const {
  CallArgs call = call_args(c, "a call of custom function '" + f.name + "'");
  if (call.inputs.size() > f.inputs.size())
    c.fail("the custom function '" + f.name + "' has " + std::to_string(f.inputs.size()) +
           " inputs but the node passes " + std::to_string(call.inputs.size()) +
           " tensors (its tensor arguments in schema order)");
  if (f.outputs.size() < c.n_outputs())
    c.fail("the custom function '" + f.name + "' has " + std::to_string(f.outputs.size()) +
           " outputs but the op returns " + std::to_string(c.n_outputs()));
  // The node's arguments win over the function's defaults.
  std::unordered_map<std::string, Attr> attrs;
  for (auto& a : f.attribute_defaults) attrs[a.name] = a;
  for (auto& a : call.attrs) attrs[a.name] = a;

  Instantiation inst(c, f, std::move(attrs),
                     [&](const std::string& domain) { return domain_version(f, domain); });
  std::unordered_set<std::string> bound_inputs;
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    inst.names[f.inputs[i]] = i < call.inputs.size() ? call.inputs[i] : "";
    if (i < call.inputs.size()) bound_inputs.insert(call.inputs[i]);
  }
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const Node& n = f.nodes[i];
    inst.emit(n, "node " + std::to_string(i) + " (" + n.op_type + ")");
  }
  for (size_t i = 0; i < c.n_outputs(); ++i) {
    if (c.out_name(i).empty()) continue;
    std::string v = inst.value(f.outputs[i], "output " + std::to_string(i));
    if (v.empty())
      c.fail("custom function '" + f.name + "': output " + std::to_string(i) + " is empty");
    // An input returned as is still needs a node of its own to carry the output's name.
    if (bound_inputs.count(v)) v = c.b.op("Identity", {v});
    // Custom-domain results have no inferred type: torch's metadata gives it.
    if (c.find_meta(c.out_name(i)) && c.b.type(v).dtype == DType::Undefined)
      c.b.set_type(v, c.out_type(i));
    c.set_output(i, v);
  }
}

}  // namespace pt2onnx
