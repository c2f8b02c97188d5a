#include "convert/convert_graph.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "convert/context.h"
#include "convert/custom_converters.h"
#include "convert/fallback.h"
#include "convert/inline_wrappers.h"
#include "convert/mutation.h"
#include "convert/registry.h"
#include "schema/treespec.h"

namespace pt2onnx {

std::vector<UnsupportedOp> find_unsupported(const schema::Program& prog, int opset,
                                            const CustomConverters* custom) {
  std::map<std::string, UnsupportedOp> missing;
  const Registry& reg = registry();
  // The graphs of higher-order ops (cond branches, loop bodies) included.
  std::vector<const schema::Graph*> graphs{&prog.graph};
  while (!graphs.empty()) {
    const schema::Graph* g = graphs.back();
    graphs.pop_back();
    for (auto& n : g->nodes) {
      for (auto& in : n.inputs)
        if (in.arg.kind == schema::ArgKind::Graph && in.arg.graph)
          graphs.push_back(in.arg.graph.get());
      // Wrappers nested in a graph argument are inlined when it converts.
      if (converts(n.target, opset) || is_wrapper_target(n.target)) continue;
      if (custom && custom->handles(n.target)) continue;
      UnsupportedOp& m = missing[n.target];
      if (m.count++ == 0) {
        m.target = n.target;
        m.where = n.source_line();
        std::string mp = n.module_path();
        if (!mp.empty()) m.where = "module '" + mp + "'" + (m.where.empty() ? "" : ", " + m.where);
        if (m.where.empty()) m.where = "node '" + n.name + "'";
        m.converts_from = reg.min_opset(n.target);
      }
    }
  }
  std::vector<UnsupportedOp> out;
  for (auto& [t, m] : missing) out.push_back(std::move(m));
  return out;
}

namespace {

using schema::ArgKind;
using schema::InputSpec;
using schema::OutputSpec;

// Every unsupported target, counted, with its first source location: an
// error naming them all, unless they fall back to custom-domain nodes.
void check_supported(const schema::Program& prog, const Options& opt,
                     const CustomConverters& custom) {
  if (opt.fallback == Options::Fallback::CustomDomain) return;
  auto missing = find_unsupported(prog, opt.opset, &custom);
  if (missing.empty()) return;
  std::ostringstream os;
  os << missing.size() << " operator" << (missing.size() > 1 ? "s are" : " is")
     << " not supported at opset " << opt.opset << ":";
  for (auto& m : missing) {
    os << "\n  " << m.target << " (" << m.count << " node" << (m.count > 1 ? "s" : "")
       << "), first at " << m.where;
    if (m.converts_from > opt.opset) os << " [converts from opset " << m.converts_from << "]";
  }
  os << "\nNo file was written. Rewrite these ops in the model, give them a converter "
        "(custom_translation_table=), or export with fallback=\"custom_domain\" to keep them as "
        "pkg.torch.ops nodes.";
  throw Error(os.str());
}

std::string describe_node(const schema::Node& n, const GraphBuilder& b, const Env& env) {
  std::ostringstream os;
  os << "cannot convert node '" << n.name << "' (" << n.target << ")";
  std::string mp = n.module_path();
  if (!mp.empty()) os << " in module '" << mp << "'";
  std::string src = n.source_line();
  if (!src.empty()) os << "\n  at " << src;
  for (auto& in : n.inputs) {
    if (in.arg.kind != ArgKind::Tensor) continue;
    auto it = env.values.find(in.arg.name);
    if (it == env.values.end() || !b.has_type(it->second)) continue;
    const ValueType& t = b.type(it->second);
    os << "\n  input " << in.name << " = '" << it->second << "': " << dtype_name(t.dtype);
    if (t.shape) {
      os << "[";
      for (size_t i = 0; i < t.shape->size(); ++i) {
        const Dim& d = (*t.shape)[i];
        os << (i ? ", " : "")
           << (d.is_static()   ? std::to_string(d.value)
               : d.sym.empty() ? "?"
                               : d.sym);
      }
      os << "]";
    }
  }
  os << "\n  (" << b.graph().nodes.size() << " ONNX nodes emitted so far)";
  return os.str();
}

void check_weight(const std::string& fqn, const WeightView& w, const schema::TensorMeta& m,
                  const Ctx& ctx) {
  DType t = dtype_from_torch_name(w.dtype);
  auto bad = [&](const std::string& why) { throw Error("weight '" + fqn + "': " + why); };
  if (t != m.dtype)
    bad("dtype is " + w.dtype + " but the program records " + std::string(dtype_name(m.dtype)));
  if (w.sizes.size() != m.sizes.size()) bad("rank differs from the program's metadata");
  for (size_t i = 0; i < w.sizes.size(); ++i) {
    Dim d = ctx.meta_dim(m.sizes[i]);
    if (!d.is_static() || d.value != w.sizes[i])
      bad("size " + std::to_string(w.sizes[i]) + " at dim " + std::to_string(i) +
          " differs from the program's metadata");
  }
  // The furthest element any stride reaches must be readable.
  auto need = strided_span_bytes(w.sizes, w.strides, dtype_size(t));
  if (!need) bad("sizes / strides are negative or overflow");
  if (*need > w.available_bytes)
    bad("needs " + std::to_string(*need) + " bytes but only " + std::to_string(w.available_bytes) +
        " are available (weight data shorter than its metadata)");
  if (*need > 0 && !w.data) bad("no data");
}

// A tensor-subclass weight (torchao's quantized tensors): the graph reads its
// inner tensors with export.access_subclass_inner_tensor, and the weights
// hold them as `fqn.attr` (python/pt2onnx/_export.py). Each becomes an
// initializer of that name, found by the access converter (convert/subclass.cpp)
// under the key subclass_inner_key(placeholder, attr). False: none given.
bool add_inner_tensors(GraphBuilder& b, Env& env, const InputSpec& spec, const Weights& weights) {
  const std::string prefix = spec.target + ".";
  std::map<std::string, const WeightView*> inner;  // sorted: initializers in a stable order
  for (const auto& [name, v] : weights)
    if (name.compare(0, prefix.size(), prefix) == 0 &&
        name.find('.', prefix.size()) == std::string::npos)  // nested subclasses: not read here
      inner.emplace(name, &v);
  for (const auto& [name, vp] : inner) {
    const std::string attr = name.substr(prefix.size());
    const WeightView& v = *vp;
    TensorData d;
    d.dtype = dtype_from_torch_name(v.dtype);
    d.dims = v.sizes;
    d.strides = v.strides;
    d.data = static_cast<const uint8_t*>(v.data);
    d.src_fd = v.source_fd;
    d.src_offset = v.source_offset;
    auto need = strided_span_bytes(v.sizes, v.strides, dtype_size(d.dtype));
    if (d.dtype == DType::Undefined || !need || *need > v.available_bytes || (*need > 0 && !v.data))
      throw Error("weight '" + name + "': unreadable inner tensor of a tensor subclass");
    env.cache[subclass_inner_key(spec.arg_name, attr)] = b.initializer(name, std::move(d));
  }
  return !inner.empty();
}

// Every node of prog.graph through its converter, into the builder's current scope.
void convert_nodes(GraphBuilder& b, const schema::Program& prog, Env& env) {
  AliasTracker aliases(b, prog, env);
  for (auto& n : prog.graph.nodes) {
    if (is_ignored_target(n.target)) continue;
    b.set_origin(n.name, n.target, n.module_path(), n.nn_module_stack);
    Ctx ctx(b, prog, n, env);
    try {
      if (env.custom && env.custom->convert(ctx)) {
      } else if (ConvertFn fn = find_converter(n.target, b.opset()))
        fn(ctx);
      else if (env.fallback)
        emit_custom_domain_node(ctx);
      else
        throw Error("no converter for " + n.target + " at opset " + std::to_string(b.opset()));
      if (functional_target(n.target).empty())
        aliases.after_node(n);
      else
        aliases.after_inplace(n);
      for (size_t i = 0; i < ctx.n_outputs(); ++i) {
        const std::string& o = ctx.out_name(i);
        if (!env.values.count(o) && o.find("_unused_") == std::string::npos &&
            prog.graph.tensor_values.count(o))
          throw Error("internal: converter did not produce output " + std::to_string(i));
      }
    } catch (const Error& e) {
      throw Error(describe_node(n, b, env) + "\n  cause: " + e.what());
    } catch (const std::exception& e) {
      // A converter's bug on input it did not expect (a missing map entry on
      // crafted metadata, ...): still an Error that names the node.
      throw Error(describe_node(n, b, env) + "\n  cause: internal error (" + e.what() +
                  "): please report it with this message");
    }
  }
}

// The ONNX name of each user-facing input spec (user and constant inputs,
// the leaves of in_spec), by index into prog.input_specs: the pytree path
// under the forward argument (schema/treespec.h), or the placeholder's name
// when the program has no usable spec.
std::map<size_t, std::string> input_leaf_names(const schema::Program& prog) {
  std::vector<size_t> leaves;
  for (size_t i = 0; i < prog.input_specs.size(); ++i)
    if (prog.input_specs[i].kind == InputSpec::Kind::UserInput ||
        prog.input_specs[i].kind == InputSpec::Kind::ConstantInput)
      leaves.push_back(i);
  std::map<size_t, std::string> r;
  std::vector<std::string> names;
  if (prog.in_spec) names = schema::input_leaf_names(*prog.in_spec, prog.forward_arg_names);
  for (size_t k = 0; k < leaves.size(); ++k)
    r[leaves[k]] = names.size() == leaves.size() ? names[k] : prog.input_specs[leaves[k]].arg_name;
  return r;
}

// The ONNX name of each user output spec (the leaves of out_spec, None ones
// included), by index into prog.output_specs.
std::map<size_t, std::string> output_leaf_names(const schema::Program& prog) {
  std::vector<size_t> leaves;
  std::vector<std::string> fx;
  for (size_t i = 0; i < prog.output_specs.size(); ++i)
    if (prog.output_specs[i].kind == OutputSpec::Kind::UserOutput) {
      leaves.push_back(i);
      const auto& a = prog.output_specs[i].arg;
      fx.push_back(a.kind == ArgKind::SymInt && a.symints.size() == 1 ? a.symints[0].name : a.name);
    }
  std::map<size_t, std::string> r;
  std::vector<std::string> names;
  if (prog.out_spec) names = schema::output_leaf_names(*prog.out_spec, fx);
  for (size_t k = 0; k < leaves.size(); ++k)
    r[leaves[k]] = names.size() == leaves.size() ? names[k] : fx[k];
  return r;
}

}  // namespace

std::vector<std::string> convert_nested(Ctx& outer, const schema::Graph& g,
                                        const std::vector<std::string>& inputs) {
  if (g.inputs.size() != inputs.size())
    outer.fail("its graph argument takes " + std::to_string(g.inputs.size()) + " inputs but " +
               std::to_string(inputs.size()) + " are given");
  // The nested graph seen as a program of its own: its metadata, its names
  // (which may repeat names of the enclosing graph: torch.export scopes them).
  schema::Program sub;
  sub.graph = g;
  sub.range_constraints = outer.prog.range_constraints;
  if (has_wrappers(sub)) inline_wrappers(sub);
  Env env;
  env.symbol_names = outer.env.symbol_names;
  env.cache = outer.env.cache;  // values of enclosing scopes stay readable
  env.fallback = outer.env.fallback;
  env.custom = outer.env.custom;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const schema::Argument& a = g.inputs[i];
    if (a.kind == ArgKind::Tensor)
      env.values[a.name] = inputs[i];
    else if (a.kind == ArgKind::SymInt && !a.symints.empty() && !a.symints[0].name.empty())
      env.values[a.symints[0].name] = inputs[i];
    else
      outer.fail("input " + std::to_string(i) + " of its graph argument is " + a.variant +
                 "; only tensors and SymInts are supported there");
  }
  // FX names repeat across graphs, so values of nested graphs keep fresh
  // names; FX names stay reserved for the values of the outermost graph.
  env.nested = true;
  convert_nodes(outer.b, sub, env);
  outer.b.set_origin(outer.node.name, outer.node.target, outer.node.module_path(),
                     outer.node.nn_module_stack);
  std::vector<std::string> out;
  for (auto& o : sub.graph.outputs) {
    std::string fx = o.kind == ArgKind::SymInt && !o.symints.empty() ? o.symints[0].name : o.name;
    auto it = env.values.find(fx);
    if (fx.empty() || it == env.values.end())
      outer.fail("an output of its graph argument is " + o.variant +
                 ", which ONNX control flow cannot return");
    out.push_back(it->second);
  }
  return out;
}

bool is_ignored_target(const std::string& target) {
  static const std::set<std::string> ignored{
      "torch.ops.aten._assert_scalar.default",
      "torch.ops.aten._assert_tensor_metadata.default",
      "torch.ops.aten.sym_constrain_range_for_size.default",
      "torch.ops.aten.sym_constrain_range.default",
      "torch.ops.aten._assert_async.msg",
      // linalg's runtime check for singular / non-positive-definite input
      // (run_decompositions() splits it off under with_effects); the ONNX
      // ops give inf / NaN there, as the training-IR form's export does.
      "torch.ops.aten._linalg_check_errors.default",
  };
  return ignored.count(target) > 0;
}

bool converts(const std::string& target, int opset) {
  return is_ignored_target(target) || find_converter(target, opset) != nullptr;
}

Graph convert_graph(const schema::Program& program, const Weights& weights, const Options& opt) {
  // Grad-mode / autocast wrappers are spliced into a copy of the program.
  std::optional<schema::Program> inlined;
  if (has_wrappers(program)) {
    inlined = program;
    inline_wrappers(*inlined);
  }
  const schema::Program& prog = inlined ? *inlined : program;
  const CustomConverters custom(opt);
  check_supported(prog, opt, custom);
  GraphBuilder b(opt.opset);
  Env env;
  env.fallback = opt.fallback == Options::Fallback::CustomDomain;
  env.custom = &custom;
  schema::Node no_node;
  Ctx top(b, prog, no_node, env);

  const std::map<size_t, std::string> in_leaf_names = input_leaf_names(prog);
  const std::map<size_t, std::string> out_leaf_names = output_leaf_names(prog);

  // dim_param names: a named axis maps its (single) free symbol to the name.
  // Every name must find its input (by placeholder or by flattened input
  // name) and axis (either sign): a dropped one would silently give a static
  // model.
  for (auto& [input, axes] : opt.input_dim_names) {
    const InputSpec* spec = nullptr;
    for (size_t i = 0; i < prog.input_specs.size(); ++i) {
      auto& sp = prog.input_specs[i];
      if (sp.kind == InputSpec::Kind::UserInput &&
          (sp.arg_name == input || in_leaf_names.at(i) == input))
        spec = &sp;
    }
    auto meta = prog.graph.tensor_values.find(spec ? spec->arg_name : input);
    if (!spec || meta == prog.graph.tensor_values.end()) {
      std::string known;
      for (size_t i = 0; i < prog.input_specs.size(); ++i)
        if (prog.input_specs[i].kind == InputSpec::Kind::UserInput)
          known += (known.empty() ? "" : ", ") + std::string("'") + in_leaf_names.at(i) + "'";
      throw Error("dynamic axes name the input '" + input +
                  "', which the program does not have (its inputs: " +
                  (known.empty() ? std::string("none") : known) + ")");
    }
    const auto rank = static_cast<int64_t>(meta->second.sizes.size());
    for (auto& [given, name] : axes) {
      int64_t axis = given < 0 ? given + rank : given;
      if (axis < 0 || axis >= rank)
        throw Error(
            "dynamic axis " + std::to_string(given) + " of input '" + input +
            "' is out of range for its rank " + std::to_string(rank) +
            (rank ? " (valid: " + std::to_string(-rank) + ".." + std::to_string(rank - 1) + ")"
                  : std::string(" (a scalar has no axes)")));
      const auto& s = meta->second.sizes[static_cast<size_t>(axis)];
      if (!s.expr) continue;
      std::set<std::string> syms;
      std::vector<const schema::SymExpr*> stack{s.expr.get()};
      while (!stack.empty()) {
        const schema::SymExpr* e = stack.back();
        stack.pop_back();
        if (e->is_symbol()) syms.insert(e->text);
        for (auto& a : e->args) stack.push_back(a.get());
      }
      if (syms.size() == 1) env.symbol_names.emplace(*syms.begin(), name);
    }
  }

  // An int input (a SymInt) names its symbol: dims computed from it read
  // `n`, `2*n`, not torch's `s86`. Dim names given by the user come first.
  for (size_t i = 0, k = 0; i < prog.input_specs.size(); ++i) {
    const InputSpec& sp = prog.input_specs[i];
    if (sp.kind != InputSpec::Kind::UserInput) continue;
    size_t index = k++;
    if (sp.arg.kind != ArgKind::SymInt || sp.arg.symints.size() != 1) continue;
    auto v = prog.graph.sym_int_values.find(sp.arg.symints[0].name);
    if (v == prog.graph.sym_int_values.end() || !v->second.expr || !v->second.expr->is_symbol())
      continue;
    env.symbol_names.emplace(v->second.expr->text, index < opt.input_names.size()
                                                       ? opt.input_names[index]
                                                       : in_leaf_names.at(i));
  }

  for (auto& n : prog.graph.nodes)
    for (auto& o : n.outputs) {
      if (!o.name.empty()) b.reserve_name(o.name);
      for (auto& x : o.names) b.reserve_name(x);
      for (auto& s : o.symints) b.reserve_name(s.name);
    }

  // ---- inputs: weights become initializers, user inputs graph inputs
  size_t user_index = 0;
  std::map<size_t, std::string> buffer_values;  // input spec index -> the buffer's initializer
  std::vector<GraphIO> weight_inputs;           // export_params=false: after the user inputs
  auto weight_name = [&](const std::string& target) {
    auto it = opt.weight_names.find(target);
    return it == opt.weight_names.end() ? target : it->second;
  };
  for (size_t spec_index = 0; spec_index < prog.input_specs.size(); ++spec_index) {
    const InputSpec& spec = prog.input_specs[spec_index];
    switch (spec.kind) {
      case InputSpec::Kind::Parameter:
      case InputSpec::Kind::Buffer:
      case InputSpec::Kind::TensorConstant: {
        auto meta = prog.graph.tensor_values.find(spec.arg_name);
        if (meta == prog.graph.tensor_values.end())
          throw Error("program has no metadata for placeholder '" + spec.arg_name + "'");
        if (!opt.export_params && spec.kind != InputSpec::Kind::TensorConstant) {
          // torch.onnx's export_params=False: the caller feeds the weights.
          std::string name = weight_name(spec.target);
          if (b.name_taken(name)) name = b.fresh_name(name);
          b.reserve_name(name);
          weight_inputs.push_back({name, top.meta_type(meta->second)});
          env.values[spec.arg_name] = name;
          if (spec.kind == InputSpec::Kind::Buffer) buffer_values[spec_index] = name;
          break;
        }
        auto w = weights.find(spec.target);
        if (w == weights.end() && add_inner_tensors(b, env, spec, weights)) break;
        if (w == weights.end())
          throw Error("weight '" + spec.target + "' (placeholder '" + spec.arg_name +
                      "') is missing from the weights given to the converter");
        check_weight(spec.target, w->second, meta->second, top);
        TensorData d;
        d.dtype = meta->second.dtype;
        d.dims = w->second.sizes;
        d.strides = w->second.strides;
        d.data = static_cast<const uint8_t*>(w->second.data);
        d.src_fd = w->second.source_fd;
        d.src_offset = w->second.source_offset;
        if (!w->second.stored_dtype.empty()) {
          d.stored = dtype_from_torch_name(w->second.stored_dtype);
          if (d.stored == d.dtype) d.stored = DType::Undefined;
        }
        if (is_complex(d.dtype)) {
          // Complex weights are carried as [..., 2] real components.
          d.dtype = complex_component(d.dtype);
          if (d.strides.empty()) {
            d.dims.push_back(2);
          } else {
            for (auto& s : d.strides) s *= 2;
            d.dims.push_back(2);
            d.strides.push_back(1);
          }
        }
        env.values[spec.arg_name] = b.initializer(weight_name(spec.target), std::move(d));
        if (spec.kind == InputSpec::Kind::Buffer)
          buffer_values[spec_index] = env.values[spec.arg_name];
        break;
      }
      case InputSpec::Kind::UserInput: {
        // A SymInt input (an int argument torch.export keeps dynamic) is a
        // 0-d int64 graph input; the graph reads it as a SymInt (1-D int64).
        bool symint = spec.arg.kind == ArgKind::SymInt && spec.arg.symints.size() == 1 &&
                      !spec.arg.symints[0].name.empty();
        if (spec.arg.kind != ArgKind::Tensor && !symint)
          throw Error("user input " + std::to_string(user_index) + " ('" + spec.arg_name +
                      "') is " + spec.arg.variant +
                      "; only tensor and int inputs become ONNX inputs");
        std::string fx = symint ? spec.arg.symints[0].name : spec.arg_name;
        ValueType type{DType::Int64, Shape{}};
        if (!symint) {
          auto meta = prog.graph.tensor_values.find(fx);
          if (meta == prog.graph.tensor_values.end())
            throw Error("program has no metadata for input '" + fx + "'");
          type = top.meta_type(meta->second);
        }
        bool given = user_index < opt.input_names.size();
        std::string name = given ? opt.input_names[user_index] : in_leaf_names.at(spec_index);
        if (b.name_taken(name) && name != fx) {
          if (given)
            throw Error("input name '" + name + "' clashes with another value of the graph");
          name = b.fresh_name(name);
        }
        b.add_input(name, type);
        env.values[fx] = symint ? b.op("Reshape", {name, b.const_i64({1})}) : name;
        ++user_index;
        break;
      }
      case InputSpec::Kind::ConstantInput:
        break;  // inlined by torch.export into the nodes that use it
      case InputSpec::Kind::Token:
        break;  // orders side effects (with_effects, unwrapped): no ONNX value
      case InputSpec::Kind::CustomObj:
        throw Error("input '" + spec.arg_name +
                    "' is a custom object, which ONNX cannot represent");
    }
  }
  if (user_index < opt.input_names.size())
    throw Error("input_names has " + std::to_string(opt.input_names.size()) +
                " names but the model has " + std::to_string(user_index) + " tensor inputs");
  for (auto& io : weight_inputs) b.add_input(io.name, io.type);

  // ---- nodes
  convert_nodes(b, prog, env);
  b.set_origin("", "", "");

  // ---- outputs
  std::set<std::string> output_set;
  size_t out_index = 0;
  std::set<std::string> graph_inputs;
  for (auto& gi : b.graph().inputs) graph_inputs.insert(gi.name);
  // An Identity whose output is `name` (an output that cannot be its producer's value).
  auto identity_to = [&](const std::string& value, const std::string& name, const ValueType& t) {
    b.add_node("Identity", {value}, 0);
    b.graph().nodes.back().outputs.push_back(name);
    b.set_type(name, t);
  };
  // User outputs in order, then the buffers and user inputs the program
  // mutates (run_decompositions() names them in the signature), as
  // "<buffer or input>_updated" outputs: ONNX graphs have no state.
  auto emit = [&](const OutputSpec& spec, size_t spec_index, bool user) {
    const auto& a = spec.arg;
    if (user && a.kind == ArgKind::None) return;  // a None in the returned structure
    std::string value;
    ValueType t;
    if (user && (a.kind == ArgKind::Int || (a.kind == ArgKind::SymInt && a.symints.size() == 1 &&
                                            (a.symints[0].value || !a.symints[0].name.empty())))) {
      // An int forward returns (a size, n + 1): a 0-d int64 output.
      std::string one;
      if (a.kind == ArgKind::Int) {
        one = b.const_i64({a.i});
      } else if (a.symints[0].value) {
        one = b.const_i64({*a.symints[0].value});
      } else {
        auto it = env.values.find(a.symints[0].name);
        if (it == env.values.end())
          throw Error("output '" + a.symints[0].name + "' was never produced");
        one = it->second;
      }
      value = b.op("Reshape", {one, b.const_i64({})});
      t = ValueType{DType::Int64, Shape{}};
    } else if (user && (a.kind == ArgKind::Float || a.kind == ArgKind::SymFloat ||
                        a.kind == ArgKind::Bool || a.kind == ArgKind::SymBool)) {
      // A Python float / bool forward returns (x.sum().item(), a SymFloat /
      // SymBool): a 0-d output, float64 (a Python float is a double, as the
      // graph computes SymFloats) or bool.
      bool is_bool = a.kind == ArgKind::Bool || a.kind == ArgKind::SymBool;
      DType dt = is_bool ? DType::Bool : DType::Double;
      std::string one;
      if (a.name.empty()) {
        one = b.scalar(dt, is_bool ? (a.b ? 1.0 : 0.0) : a.f);
      } else {
        auto it = env.values.find(a.name);
        if (it == env.values.end()) throw Error("output '" + a.name + "' was never produced");
        one = it->second;
        if (b.type(one).dtype != dt)
          one = b.op("Cast", {one}, {Attr::Int("to", static_cast<int64_t>(dt))});
      }
      value = b.op("Reshape", {one, b.const_i64({})});
      t = ValueType{dt, Shape{}};
    } else {
      if (a.kind != ArgKind::Tensor)
        throw Error("output " + std::to_string(out_index) + " is " + a.variant +
                    "; ONNX outputs must be tensors or numbers (return tensors from forward)");
      auto it = env.values.find(a.name);
      if (it == env.values.end()) throw Error("output '" + a.name + "' was never produced");
      value = it->second;
      auto meta = prog.graph.tensor_values.find(a.name);
      if (meta == prog.graph.tensor_values.end())
        throw Error("output '" + a.name + "' has no tensor metadata (graph.tensor_values)");
      t = declared_type(top.meta_type(meta->second), b.has_type(value) ? &b.type(value) : nullptr);
    }
    std::string name = !user                                 ? spec.target + "_updated"
                       : out_index < opt.output_names.size() ? opt.output_names[out_index]
                                                             : out_leaf_names.at(spec_index);
    if (!user && b.is_used(name)) name = b.fresh_name(name);
    auto dn = user ? opt.output_dim_names.find(static_cast<int64_t>(out_index))
                   : opt.output_dim_names.end();
    if (dn != opt.output_dim_names.end() && t.shape)
      for (auto& [given, dname] : dn->second) {
        const auto rank = static_cast<int64_t>(t.shape->size());
        int64_t axis = given < 0 ? given + rank : given;
        if (axis < 0 || axis >= rank)
          throw Error("dynamic axis " + std::to_string(given) + " of output '" + name +
                      "' (output " + std::to_string(out_index) + ") is out of range for its rank " +
                      std::to_string(rank));
        if (!(*t.shape)[static_cast<size_t>(axis)].is_static())
          (*t.shape)[static_cast<size_t>(axis)] = Dim::symbol(dname);
      }
    if (value != name) {
      // A value the output no longer is (the FX name's value before an
      // in-place op rebound it) may hold the name: it moves aside.
      bool freed = b.is_used(name) && b.has_type(name) && !b.is_initializer(name) &&
                   !graph_inputs.count(name) && !output_set.count(name);
      if (freed) {
        std::string moved = b.fresh_name(name + "_stale");
        b.rename_everywhere(name, moved);
        for (auto& [k, v] : env.values)
          if (v == name) v = moved;
      }
      bool movable = !b.is_initializer(value) && !graph_inputs.count(value) &&
                     !output_set.count(value) && (freed || !b.is_used(name));
      if (movable) {
        b.rename_everywhere(value, name);
        for (auto& [k, v] : env.values)
          if (v == value) v = name;
      } else {
        if (b.is_used(name) && !freed) {
          if (!user || out_index < opt.output_names.size())
            throw Error("output name '" + name + "' clashes with another value of the graph");
          name = b.fresh_name(name);  // a derived name (a dict key) taken by an input / weight
        }
        b.claim_name(name);
        identity_to(value, name, t);
      }
    } else if (output_set.count(name) || graph_inputs.count(name)) {
      // The same value returned twice, or an input returned as is: give it its own name.
      name = b.fresh_name(name + "_out");
      identity_to(value, name, t);
    }
    b.set_type(name, t);
    b.add_output(name, t);
    output_set.insert(name);
    if (user) ++out_index;
  };
  for (size_t i = 0; i < prog.output_specs.size(); ++i)
    if (prog.output_specs[i].kind == OutputSpec::Kind::UserOutput)
      emit(prog.output_specs[i], i, true);
  std::set<std::string> mutated;  // buffers the signature names as mutated
  for (size_t i = 0; i < prog.output_specs.size(); ++i)
    if (prog.output_specs[i].kind == OutputSpec::Kind::BufferMutation ||
        prog.output_specs[i].kind == OutputSpec::Kind::UserInputMutation) {
      emit(prog.output_specs[i], i, false);
      mutated.insert(prog.output_specs[i].target);
    }
  // TrainingMode::Training: the buffers updated in place (torch.export's
  // training IR leaves batch norm's running statistics and
  // num_batches_tracked as in-place updates, not signature mutations) are
  // outputs too, in the order of the program's inputs.
  if (opt.training == TrainingMode::Training)
    for (auto& [spec_index, initial] : buffer_values) {
      const InputSpec& in = prog.input_specs[spec_index];
      if (mutated.count(in.target) || env.values.at(in.arg_name) == initial) continue;
      OutputSpec spec;
      spec.kind = OutputSpec::Kind::BufferMutation;
      spec.target = in.target;
      spec.arg.kind = ArgKind::Tensor;
      spec.arg.variant = "as_tensor";
      spec.arg.name = in.arg_name;
      emit(spec, spec_index, false);
    }
  if (out_index < opt.output_names.size())
    throw Error("output_names has " + std::to_string(opt.output_names.size()) +
                " names but the model has " + std::to_string(out_index) + " outputs");
  for (auto& [index, axes] : opt.output_dim_names)
    if (index < 0 || index >= static_cast<int64_t>(out_index))
      throw Error("dynamic axes name output " + std::to_string(index) + " but the model has " +
                  std::to_string(out_index) + " outputs");
  return b.take();
}

std::vector<std::string> supported_targets(int opset) {
  std::vector<std::string> r;
  for (auto& t : registry().targets())
    if (registry().find(t, opset)) r.push_back(t);
  return r;
}

}  // namespace pt2onnx
