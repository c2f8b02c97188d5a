// The ExportedProgram reader, written once for any document that looks like
// torch's serialized program: the JSON text of a .pt2 archive or
// models/model.json (simdjson, reader.cpp) and the tree of torch's schema
// dataclasses the Python API hands over without writing JSON
// (src/python/program_object.cpp). One reader means one meaning: both routes
// fill the same schema::Program, and the test suite checks they write the
// same ONNX bytes.
//
// A Doc provides the types Elem (any value), Obj and Arr, and:
//   bool object(Elem, Obj&), array(Elem, Arr&), string(Elem, string_view&),
//        int64(Elem, int64_t&), uint64(Elem, uint64_t&), number(Elem, double&),
//        boolean(Elem, bool&)          (false: not of that kind)
//   optional<Elem> at(Obj, key)        (nullopt: absent or null)
//   size_t size(Obj); pair<string_view, Elem> first(Obj)
//   elements(Arr) / items(Obj): ranges of Elem / of {key, value} pairs
//   string type_name(Elem), value_text(Elem)   (for messages)
#pragma once
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "pt2onnx/error.h"
#include "schema/program.h"
#include "schema/treespec.h"

namespace pt2onnx::schema::detail {

// A JSON path for messages ("$.graph_module.graph.nodes[3] (torch.ops.aten.add.Tensor)
// .inputs[0].arg"), rendered only when a message needs it: each level lives on
// the stack and points to its parent. Reading used to build every value's
// path as a string on the way down, ~40 of the ~250 allocations per node
// (bench/node_scaling.md). A Path must not outlive the one it extends.
class Path {
 public:
  Path(const char* root) : a_(root) {}  // a literal is a root path
  Path(const char* root, std::string_view name) : a_(root), b_(name) {}
  Path(const Path& parent, std::string_view a, std::string_view b = {}, std::string_view c = {})
      : parent_(&parent), a_(a), b_(b), c_(c) {}
  Path(const Path& parent, std::string_view a, size_t index)
      : parent_(&parent), a_(a), index_(index), indexed_(true) {}
  std::string str() const {
    std::string s = parent_ ? parent_->str() : std::string();
    s.append(a_).append(b_).append(c_);
    if (indexed_) s += "[" + std::to_string(index_) + "]";
    return s;
  }

 private:
  const Path* parent_ = nullptr;
  std::string_view a_, b_, c_;
  size_t index_ = 0;
  bool indexed_ = false;
};

template <class Doc>
class Reader {
 public:
  using Elem = typename Doc::Elem;
  using Obj = typename Doc::Obj;
  using Arr = typename Doc::Arr;
  Reader(const Doc& doc, std::string source) : doc_(doc), source_(std::move(source)) {}

  [[noreturn]] void fail(const Path& path, const std::string& why) const {
    throw Error(source_ + ": " + path.str() + ": " + why);
  }

  Obj obj(Elem e, const Path& path) const {
    Obj o;
    if (!doc_.object(e, o)) fail(path, "expected a JSON object, found " + doc_.type_name(e));
    return o;
  }
  Arr arr(Elem e, const Path& path) const {
    Arr a;
    if (!doc_.array(e, a)) fail(path, "expected a JSON array, found " + doc_.type_name(e));
    return a;
  }
  // Absent and null are the same: no value.
  std::optional<Elem> field(Obj o, std::string_view key) const { return doc_.at(o, key); }
  Elem req(Obj o, std::string_view key, const Path& path) const {
    auto e = field(o, key);
    if (!e) fail(path, "missing field '" + std::string(key) + "'");
    return *e;
  }
  std::string str(Elem e, const Path& path) const {
    std::string_view s;
    if (!doc_.string(e, s)) fail(path, "expected a string, found " + doc_.type_name(e));
    return std::string(s);
  }
  // A string many nodes repeat: one copy for all (SharedText).
  SharedText text(Elem e, const Path& path) const {
    std::string_view s;
    if (!doc_.string(e, s)) fail(path, "expected a string, found " + doc_.type_name(e));
    return texts_.get(s);
  }
  int64_t integer(Elem e, const Path& path) const {
    int64_t v;
    if (!doc_.int64(e, v)) {
      uint64_t u;
      if (doc_.uint64(e, u))
        fail(path, "integer " + std::to_string(u) + " does not fit in a 64-bit signed integer");
      fail(path, "expected an integer, found " + doc_.value_text(e));
    }
    return v;
  }
  // Fields that are C ints (versions, argument kinds) must not wrap.
  int int32(Elem e, const Path& path) const {
    int64_t v = integer(e, path);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(path, "integer " + std::to_string(v) + " out of range");
    return static_cast<int>(v);
  }
  double number(Elem e, const Path& path) const {
    std::string_view s;
    if (doc_.string(e, s)) {
      if (s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
      fail(path, "expected a number, found string '" + std::string(s) + "'");
    }
    double d;
    if (!doc_.number(e, d)) fail(path, "expected a number, found " + doc_.type_name(e));
    return d;
  }
  bool boolean(Elem e, const Path& path) const {
    bool b;
    if (!doc_.boolean(e, b)) fail(path, "expected a boolean, found " + doc_.type_name(e));
    return b;
  }
  // A union is an object with exactly one key.
  std::pair<std::string_view, Elem> union_of(Elem e, const Path& path) const {
    Obj o = obj(e, path);
    size_t n = doc_.size(o);
    if (n != 1)
      fail(path, "expected a single-key union object, found " + std::to_string(n) + " keys");
    return doc_.first(o);
  }

  SymSize sym_size(Elem e, const Path& path) const {
    auto [k, v] = union_of(e, path);
    SymSize s;
    if (k == "as_int") {
      s.value = integer(v, Path(path, ".as_int"));
    } else if (k == "as_expr") {
      Obj o = obj(v, Path(path, ".as_expr"));
      std::string es = str(req(o, "expr_str", path), Path(path, ".as_expr.expr_str"));
      try {
        s.expr = parse_sym_expr(es);
      } catch (const Error& err) {
        fail(Path(path, ".as_expr.expr_str"), err.what());
      }
      if (auto h = field(o, "hint")) {
        auto [hk, hv] = union_of(*h, Path(path, ".as_expr.hint"));
        if (hk == "as_int") s.hint = integer(hv, Path(path, ".as_expr.hint"));
      }
    } else {
      fail(path, "unknown SymInt variant '" + std::string(k) + "'");
    }
    return s;
  }

  // `keep_strides`: false for the graph's values, whose strides nothing
  // converts by (ONNX values have no layout): checked, not kept (~150 bytes a
  // value while the program is converted, bench/node_scaling.md). A weight's
  // (payload configs) are kept: its bytes are read by them.
  TensorMeta tensor_meta(Elem e, const Path& path, bool keep_strides = true) const {
    Obj o = obj(e, path);
    TensorMeta m;
    m.scalar_type = integer(req(o, "dtype", path), Path(path, ".dtype"));
    m.dtype = dtype_from_schema(m.scalar_type);
    if (m.dtype == DType::Undefined)
      fail(Path(path, ".dtype"), "unsupported scalar type " + std::to_string(m.scalar_type));
    size_t i = 0;
    for (Elem d : doc_.elements(arr(req(o, "sizes", path), Path(path, ".sizes")))) {
      Path dp(path, ".sizes", i++);
      const SymSize& sz = m.sizes.emplace_back(sym_size(d, dp));
      int64_t known = sz.value ? *sz.value : sz.expr->is_integer() ? sz.expr->value : 0;
      if (known < 0) fail(dp, "negative size " + std::to_string(known));
    }
    if (auto st = field(o, "strides")) {
      i = 0;
      for (Elem d : doc_.elements(arr(*st, Path(path, ".strides")))) {
        SymSize s = sym_size(d, Path(path, ".strides", i++));
        if (keep_strides) m.strides.push_back(std::move(s));
      }
    }
    if (auto so = field(o, "storage_offset"))
      m.storage_offset = sym_size(*so, path);
    else
      m.storage_offset.value = 0;
    return m;
  }

  std::string tensor_name(Elem e, const Path& path) const {
    return str(req(obj(e, path), "name", path), Path(path, ".name"));
  }

  SymIntArg sym_int_arg(Elem e, const Path& path) const {
    auto [k, v] = union_of(e, path);
    SymIntArg a;
    if (k == "as_int")
      a.value = integer(v, path);
    else if (k == "as_name")
      a.name = str(v, path);
    else
      fail(path, "unknown SymIntArgument variant '" + std::string(k) + "'");
    return a;
  }

  Argument argument(Elem e, const Path& path) const {
    auto [k, v] = union_of(e, path);
    Argument a;
    a.variant = std::string(k);
    Path p(path, ".", k);
    if (k == "as_none") {
      a.kind = ArgKind::None;
    } else if (k == "as_tensor") {
      a.kind = ArgKind::Tensor;
      a.name = tensor_name(v, p);
    } else if (k == "as_tensors") {
      a.kind = ArgKind::Tensors;
      for (Elem t : doc_.elements(arr(v, p))) a.names.push_back(tensor_name(t, p));
    } else if (k == "as_optional_tensor") {
      auto [ok, ov] = union_of(v, p);
      a.kind = ok == "as_none" ? ArgKind::None : ArgKind::Tensor;
      if (ok == "as_tensor") a.name = tensor_name(ov, p);
    } else if (k == "as_optional_tensors") {
      a.kind = ArgKind::OptionalTensors;
      for (Elem t : doc_.elements(arr(v, p))) {
        auto [ok, ov] = union_of(t, p);
        a.names.push_back(ok == "as_tensor" ? tensor_name(ov, p) : std::string());
      }
    } else if (k == "as_int") {
      a.kind = ArgKind::Int;
      a.i = integer(v, p);
    } else if (k == "as_ints") {
      a.kind = ArgKind::Ints;
      for (Elem x : doc_.elements(arr(v, p))) a.ints.push_back(integer(x, p));
    } else if (k == "as_float") {
      a.kind = ArgKind::Float;
      a.f = number(v, p);
    } else if (k == "as_floats") {
      a.kind = ArgKind::Floats;
      for (Elem x : doc_.elements(arr(v, p))) a.floats.push_back(number(x, p));
    } else if (k == "as_string") {
      a.kind = ArgKind::String;
      a.s = str(v, p);
    } else if (k == "as_strings") {
      a.kind = ArgKind::Strings;
      for (Elem x : doc_.elements(arr(v, p))) a.strings.push_back(str(x, p));
    } else if (k == "as_bool") {
      a.kind = ArgKind::Bool;
      a.b = boolean(v, p);
    } else if (k == "as_bools") {
      a.kind = ArgKind::Bools;
      for (Elem x : doc_.elements(arr(v, p))) a.bools.push_back(boolean(x, p));
    } else if (k == "as_sym_int") {
      a.kind = ArgKind::SymInt;
      a.symints.push_back(sym_int_arg(v, p));
    } else if (k == "as_sym_ints") {
      a.kind = ArgKind::SymInts;
      for (Elem x : doc_.elements(arr(v, p))) a.symints.push_back(sym_int_arg(x, p));
    } else if (k == "as_sym_bool" || k == "as_sym_float") {
      a.kind = k == "as_sym_bool" ? ArgKind::SymBool : ArgKind::SymFloat;
      auto [sk, sv] = union_of(v, p);
      if (sk == "as_name")
        a.name = str(sv, p);
      else if (sk == "as_bool")
        a.b = boolean(sv, p);
      else if (sk == "as_float")
        a.f = number(sv, p);
    } else if (k == "as_scalar_type") {
      a.kind = ArgKind::ScalarType;
      a.i = integer(v, p);
    } else if (k == "as_memory_format") {
      a.kind = ArgKind::MemoryFormat;
      a.i = integer(v, p);
    } else if (k == "as_layout") {
      a.kind = ArgKind::Layout;
      a.i = integer(v, p);
    } else if (k == "as_device") {
      a.kind = ArgKind::Device;
      a.s = str(req(obj(v, p), "type", p), Path(p, ".type"));
    } else if (k == "as_graph") {
      a.kind = ArgKind::Graph;
      Obj go = obj(v, p);
      if (auto nm = field(go, "name")) a.name = str(*nm, Path(p, ".name"));
      if (++depth_ > kMaxGraphDepth) fail(p, "subgraphs nested too deeply");
      a.graph = std::make_shared<Graph>(graph(req(go, "graph", p), Path(p, ".graph")));
      --depth_;
    } else if (k == "as_operator") {
      a.kind = ArgKind::Other;  // the op's target, e.g. torch.ops.aten.add.Tensor
      a.s = str(v, p);
    } else {
      // as_custom_obj, as_complex, ...: kept by variant name; a
      // converter that needs one reports it.
      a.kind = ArgKind::Other;
    }
    return a;
  }

  Node node(Elem e, const Path& path) const {
    Obj o = obj(e, path);
    Node n;
    n.target = str(req(o, "target", path), Path(path, ".target"));
    if (auto nm = field(o, "name")) n.name = str(*nm, Path(path, ".name"));
    Path where(path, " (", n.target, ")");
    size_t i = 0;
    for (Elem in : doc_.elements(arr(req(o, "inputs", where), Path(where, ".inputs")))) {
      Path p(where, ".inputs", i++);
      Obj io = obj(in, p);
      NamedArgument na;
      na.name = str(req(io, "name", p), Path(p, ".name"));
      na.arg = argument(req(io, "arg", p), Path(p, ".arg"));
      if (auto kd = field(io, "kind")) na.kind = int32(*kd, Path(p, ".kind"));
      n.inputs.push_back(std::move(na));
    }
    i = 0;
    for (Elem out : doc_.elements(arr(req(o, "outputs", where), Path(where, ".outputs"))))
      n.outputs.push_back(argument(out, Path(where, ".outputs", i++)));
    if (auto md = field(o, "metadata")) {
      Obj mo = obj(*md, Path(where, ".metadata"));
      if (auto st = field(mo, "stack_trace"))
        n.stack_trace = text(*st, Path(where, ".stack_trace"));
      if (auto ms = field(mo, "nn_module_stack"))
        n.nn_module_stack = text(*ms, Path(where, ".nn_module_stack"));
    }
    if (n.name.empty()) {
      // Older schemas have no node name: use the first output's name.
      for (auto& out : n.outputs) {
        if (!out.name.empty())
          n.name = out.name;
        else if (!out.names.empty())
          n.name = out.names[0];
        if (!n.name.empty()) break;
      }
    }
    return n;
  }

  Graph graph(Elem e, const Path& path) const {
    Obj o = obj(e, path);
    Graph g;
    size_t i = 0;
    for (Elem a : doc_.elements(arr(req(o, "inputs", path), Path(path, ".inputs"))))
      g.inputs.push_back(argument(a, Path(path, ".inputs", i++)));
    i = 0;
    for (Elem a : doc_.elements(arr(req(o, "outputs", path), Path(path, ".outputs"))))
      g.outputs.push_back(argument(a, Path(path, ".outputs", i++)));
    i = 0;
    for (Elem n : doc_.elements(arr(req(o, "nodes", path), Path(path, ".nodes"))))
      g.nodes.push_back(node(n, Path(path, ".nodes", i++)));
    for (auto [k, v] : doc_.items(obj(req(o, "tensor_values", path), Path(path, ".tensor_values"))))
      g.tensor_values.emplace(std::string(k),
                              tensor_meta(v, Path(path, ".tensor_values.", k), false));
    if (auto sv = field(o, "sym_int_values"))
      for (auto [k, v] : doc_.items(obj(*sv, Path(path, ".sym_int_values"))))
        g.sym_int_values.emplace(std::string(k), sym_size(v, Path(path, ".sym_int_values.", k)));
    return g;
  }

  void signature(Elem e, const Path& path, Program& p) const {
    Obj o = obj(e, path);
    size_t i = 0;
    for (Elem s : doc_.elements(arr(req(o, "input_specs", path), Path(path, ".input_specs")))) {
      Path sp(path, ".input_specs", i++);
      auto [k, v] = union_of(s, sp);
      Obj so = obj(v, sp);
      InputSpec in;
      if (k == "user_input") {
        in.kind = InputSpec::Kind::UserInput;
        in.arg = argument(req(so, "arg", sp), Path(sp, ".arg"));
        in.arg_name = in.arg.name;
      } else if (k == "parameter" || k == "buffer" || k == "tensor_constant") {
        in.kind = k == "parameter" ? InputSpec::Kind::Parameter
                  : k == "buffer"  ? InputSpec::Kind::Buffer
                                   : InputSpec::Kind::TensorConstant;
        in.arg_name = tensor_name(req(so, "arg", sp), Path(sp, ".arg"));
        std::string_view tk = k == "parameter" ? "parameter_name"
                              : k == "buffer"  ? "buffer_name"
                                               : "tensor_constant_name";
        in.target = str(req(so, tk, sp), Path(sp, ".", tk));
        if (auto pe = field(so, "persistent"))
          in.persistent = boolean(*pe, Path(sp, ".persistent"));
      } else if (k == "custom_obj") {
        in.kind = InputSpec::Kind::CustomObj;
        in.arg_name = str(req(obj(req(so, "arg", sp), sp), "name", sp), sp);
      } else if (k == "token") {
        in.kind = InputSpec::Kind::Token;
        in.arg_name = str(req(obj(req(so, "arg", sp), sp), "name", sp), sp);
      } else if (k == "constant_input") {
        in.kind = InputSpec::Kind::ConstantInput;
        in.arg_name = str(req(so, "name", sp), Path(sp, ".name"));
        in.arg = argument(req(so, "value", sp), Path(sp, ".value"));
      } else {
        fail(sp, "unknown input spec kind '" + std::string(k) + "'");
      }
      p.input_specs.push_back(std::move(in));
    }
    i = 0;
    for (Elem s : doc_.elements(arr(req(o, "output_specs", path), Path(path, ".output_specs")))) {
      Path sp(path, ".output_specs", i++);
      auto [k, v] = union_of(s, sp);
      Obj so = obj(v, sp);
      OutputSpec out;
      using K = OutputSpec::Kind;
      if (k == "user_output")
        out.kind = K::UserOutput;
      else if (k == "loss_output")
        out.kind = K::LossOutput;
      else if (k == "buffer_mutation")
        out.kind = K::BufferMutation;
      else if (k == "user_input_mutation")
        out.kind = K::UserInputMutation;
      else if (k == "gradient_to_parameter")
        out.kind = K::GradientToParameter;
      else if (k == "gradient_to_user_input")
        out.kind = K::GradientToUserInput;
      else if (k == "token")
        out.kind = K::Token;
      else if (k == "parameter_mutation")
        out.kind = K::ParameterMutation;
      else
        fail(sp, "unknown output spec kind '" + std::string(k) + "'");
      if (out.kind == K::UserOutput) {
        out.arg = argument(req(so, "arg", sp), Path(sp, ".arg"));
      } else {
        out.arg.kind = ArgKind::Tensor;
        out.arg.name = tensor_name(req(so, "arg", sp), Path(sp, ".arg"));
        for (std::string_view tk : {"buffer_name", "user_input_name", "parameter_name"})
          if (auto t = field(so, tk)) out.target = str(*t, sp);
      }
      p.output_specs.push_back(std::move(out));
    }
  }

  // The root entry (fqn "") of module_call_graph: forward's argument names
  // and the pytree specs of inputs and outputs (JSON strings holding JSON).
  void call_signature(Elem mcg, Program& p) const {
    size_t i = 0;
    const Path entries("$.graph_module.module_call_graph");
    for (Elem e : doc_.elements(arr(mcg, entries))) {
      Path ep(entries, "", i++);
      Obj eo = obj(e, ep);
      auto fqn = field(eo, "fqn");
      if (!fqn || !str(*fqn, Path(ep, ".fqn")).empty()) continue;
      auto sig = field(eo, "signature");
      if (!sig) return;
      Path sp(ep, ".signature");
      Obj so = obj(*sig, sp);
      if (auto names = field(so, "forward_arg_names"))
        for (Elem n : doc_.elements(arr(*names, Path(sp, ".forward_arg_names"))))
          p.forward_arg_names.push_back(str(n, Path(sp, ".forward_arg_names")));
      if (auto in = field(so, "in_spec"))
        p.in_spec = parse_treespec(str(*in, Path(sp, ".in_spec")),
                                   source_ + ": " + Path(sp, ".in_spec").str());
      if (auto out = field(so, "out_spec"))
        p.out_spec = parse_treespec(str(*out, Path(sp, ".out_spec")),
                                    source_ + ": " + Path(sp, ".out_spec").str());
      return;
    }
  }

  Program program(Elem root) const {
    Obj o = obj(root, "$");
    Program p;
    Obj sv = obj(req(o, "schema_version", "$"), "$.schema_version");
    p.schema_major = int32(req(sv, "major", "$.schema_version"), "$.schema_version.major");
    if (auto mi = field(sv, "minor")) p.schema_minor = int32(*mi, "$.schema_version.minor");
    if (auto tv = field(o, "torch_version")) p.torch_version = str(*tv, "$.torch_version");
    if (p.schema_major != kSchemaMajor)
      fail("$.schema_version.major",
           unsupported_major({p.schema_major, p.schema_minor, p.torch_version}));
    Obj gm = obj(req(o, "graph_module", "$"), "$.graph_module");
    p.graph = graph(req(gm, "graph", "$.graph_module"), "$.graph_module.graph");
    signature(req(gm, "signature", "$.graph_module"), "$.graph_module.signature", p);
    if (auto mcg = field(gm, "module_call_graph")) call_signature(*mcg, p);
    if (auto rc = field(o, "range_constraints")) {
      for (auto [k, v] : doc_.items(obj(*rc, "$.range_constraints"))) {
        Path rp("$.range_constraints.", k);
        Obj ro = obj(v, rp);
        RangeConstraint c;
        if (auto mn = field(ro, "min_val")) c.min = integer(*mn, Path(rp, ".min_val"));
        if (auto mx = field(ro, "max_val")) c.max = integer(*mx, Path(rp, ".max_val"));
        p.range_constraints.emplace(std::string(k), c);
      }
    }
    return p;
  }

 private:
  const Doc& doc_;
  std::string source_;
  // Subgraphs nest (a wrapper inside a wrapper); a hostile file must not
  // recurse the reader off the stack.
  static constexpr int kMaxGraphDepth = 64;
  mutable int depth_ = 0;
  mutable SharedText::Pool texts_;
};

}  // namespace pt2onnx::schema::detail
