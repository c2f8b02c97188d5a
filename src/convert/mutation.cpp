#include "convert/mutation.h"

#include <functional>
#include <map>
#include <numeric>

#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

using schema::ArgKind;
using schema::Argument;
using schema::NamedArgument;

const std::string kAten = "torch.ops.aten.";

std::string op_name(const std::string& target) {
  if (target.rfind(kAten, 0) != 0) return {};
  auto dot = target.find('.', kAten.size());
  return target.substr(kAten.size(),
                       dot == std::string::npos ? std::string::npos : dot - kAten.size());
}

enum class ViewKind {
  None,
  Same,
  Reshape,
  Permute,
  Slice,
  Narrow,
  Select,
  Diagonal,
  AsStrided,
  Split,
  SplitSizes,
  Unbind,
  Chunk,
  Expand,
  Other
};

ViewKind view_kind(const std::string& target) {
  static const std::map<std::string, ViewKind> kinds = {
      {"alias", ViewKind::Same},
      {"detach", ViewKind::Same},
      {"contiguous", ViewKind::Same},
      {"view", ViewKind::Reshape},
      {"_unsafe_view", ViewKind::Reshape},
      {"_reshape_alias", ViewKind::Reshape},
      {"reshape", ViewKind::Reshape},
      {"view_as", ViewKind::Reshape},
      {"reshape_as", ViewKind::Reshape},
      {"unsqueeze", ViewKind::Reshape},
      {"squeeze", ViewKind::Reshape},
      {"flatten", ViewKind::Reshape},
      {"unflatten", ViewKind::Reshape},
      {"transpose", ViewKind::Permute},
      {"swapaxes", ViewKind::Permute},
      {"swapdims", ViewKind::Permute},
      {"t", ViewKind::Permute},
      {"permute", ViewKind::Permute},
      {"numpy_T", ViewKind::Permute},
      {"slice", ViewKind::Slice},
      {"narrow", ViewKind::Narrow},
      {"select", ViewKind::Select},
      {"diagonal", ViewKind::Diagonal},
      {"as_strided", ViewKind::AsStrided},
      {"split", ViewKind::Split},
      {"split_with_sizes", ViewKind::SplitSizes},
      {"unbind", ViewKind::Unbind},
      {"chunk", ViewKind::Chunk},
      {"expand", ViewKind::Expand},
      {"expand_as", ViewKind::Expand},
      {"unfold", ViewKind::Other},
      {"movedim", ViewKind::Other},
      {"mT", ViewKind::Other},
      {"mH", ViewKind::Other},
      {"adjoint", ViewKind::Other},
      {"real", ViewKind::Other},
      {"imag", ViewKind::Other},
      {"view_as_real", ViewKind::Other},
      {"view_as_complex", ViewKind::Other},
  };
  auto it = kinds.find(op_name(target));
  return it == kinds.end() ? ViewKind::None : it->second;
}

// The tensor a node mutates (in-place) or views: its `self`, else its first
// tensor argument.
std::string self_arg(const schema::Node& n) {
  if (const Argument* a = n.input("self"); a && a->kind == ArgKind::Tensor) return a->name;
  for (auto& in : n.inputs)
    if (in.arg.kind == ArgKind::Tensor) return in.arg.name;
  return {};
}

std::vector<std::string> tensor_outputs(const schema::Node& n) {
  std::vector<std::string> r;
  for (auto& o : n.outputs) {
    if (o.kind == ArgKind::Tensor) r.push_back(o.name);
    if (o.kind == ArgKind::Tensors || o.kind == ArgKind::OptionalTensors)
      r.insert(r.end(), o.names.begin(), o.names.end());
  }
  return r;
}

NamedArgument tensor_arg(const std::string& name, const std::string& fx) {
  NamedArgument a;
  a.name = name;
  a.arg.kind = ArgKind::Tensor;
  a.arg.variant = "as_tensor";
  a.arg.name = fx;
  return a;
}

NamedArgument int_arg(const std::string& name, int64_t v) {
  NamedArgument a;
  a.name = name;
  a.arg.kind = ArgKind::Int;
  a.arg.variant = "as_int";
  a.arg.i = v;
  return a;
}

// The view node's argument `from`, renamed `to` (absent stays absent: the
// scatter op then uses the same default).
void copy_arg(const schema::Node& n, const char* from, const char* to,
              std::vector<NamedArgument>& out) {
  for (auto& in : n.inputs)
    if (in.name == from) {
      NamedArgument a = in;
      a.name = to;
      out.push_back(a);
    }
}

}  // namespace

std::string functional_target(const std::string& target) {
  std::string name = op_name(target);
  if (name.size() < 2) return {};
  std::string overload = target.substr(kAten.size() + name.size());
  static const std::map<std::string, std::string> dunder = {
      {"__iand__", "__and__"},       {"__ior__", "__or__"},         {"__ixor__", "__xor__"},
      {"__ilshift__", "__lshift__"}, {"__irshift__", "__rshift__"},
  };
  if (auto it = dunder.find(name); it != dunder.end()) return kAten + it->second + overload;
  if (name.back() != '_' || name.rfind("__", 0) == 0) return {};
  return kAten + name.substr(0, name.size() - 1) + overload;
}

ConvertFn find_converter(const std::string& target, int opset) {
  if (ConvertFn f = registry().find(target, opset)) return f;
  std::string fn = functional_target(target);
  if (fn.empty()) return nullptr;
  if (ConvertFn f = registry().find(fn, opset)) return f;
  // Overload names that differ between the in-place op and its functional
  // twin: floor_divide_.Tensor / floor_divide.default, ldexp_.default /
  // ldexp.Tensor, pow_.Tensor / pow.Tensor_Tensor, transpose_ / transpose.int.
  static const std::map<std::string, std::vector<std::string>> renamed = {
      {".Tensor", {".default", ".Tensor_Tensor"}},
      {".Scalar", {".Tensor_Scalar"}},
      {".default", {".Tensor", ".int", ".dim"}},
  };
  std::string name = kAten + op_name(fn);
  auto it = renamed.find(fn.substr(name.size()));
  if (it == renamed.end()) return nullptr;
  for (auto& o : it->second)
    if (ConvertFn f = registry().find(name + o, opset)) return f;
  return nullptr;
}

void AliasTracker::link(const std::string& view, Parent p) {
  if (view.empty() || p.base.empty() || view == p.base) return;
  children_[p.base].push_back(view);
  parent_[view] = std::move(p);
}

void AliasTracker::after_node(const schema::Node& n) {
  ViewKind k = view_kind(n.target);
  if (k == ViewKind::None) return;
  std::string base = self_arg(n);
  auto outs = tensor_outputs(n);
  for (size_t i = 0; i < outs.size(); ++i) link(outs[i], Parent{base, &n, i});
}

std::string AliasTracker::run_synthetic(const std::string& target, const schema::Node& like,
                                        std::vector<NamedArgument> args,
                                        const std::string& base_fx) {
  ConvertFn fn = find_converter(target, b_.opset());
  if (!fn)
    throw Error("writing the mutation back through '" + like.name + "' (" + like.target +
                ") needs " + target + ", which does not convert at opset " +
                std::to_string(b_.opset()));
  schema::Node s;
  s.target = target;
  s.name = like.name + ".write_back";
  s.stack_trace = like.stack_trace;
  s.nn_module_stack = like.nn_module_stack;
  s.inputs = std::move(args);
  std::string fx = b_.fresh_name(base_fx + "_updated_" + std::to_string(synthetic_++));
  Argument o;
  o.kind = ArgKind::Tensor;
  o.variant = "as_tensor";
  o.name = fx;
  s.outputs.push_back(o);
  Ctx probe(b_, prog_, s, env_);
  const schema::TensorMeta* meta = probe.find_meta(base_fx);
  if (!meta) throw Error("internal: no metadata for mutated base '" + base_fx + "'");
  env_.extra_meta[fx] = *meta;
  Ctx c(b_, prog_, s, env_);
  fn(c);
  return env_.values.at(fx);
}

std::string AliasTracker::write_back(const std::string& view, const Parent& p,
                                     const std::string& value) {
  if (!p.node) return value;  // the same tensor under another name
  const schema::Node& n = *p.node;
  const std::string base_val = env_.values.at(p.base);
  Ctx c(b_, prog_, n, env_);
  auto fail = [&](const std::string& why) -> std::string {
    throw Error("in-place update of '" + view + "', a view of '" + p.base + "' made by node '" +
                n.name + "' (" + n.target + "), cannot be expressed: " + why);
    return std::string();
  };
  const schema::TensorMeta* bm = c.find_meta(p.base);
  if (!bm) fail("no metadata for the base tensor");
  ValueType bt = c.meta_type(*bm);
  std::vector<NamedArgument> args{tensor_arg("self", p.base), tensor_arg("src", "")};
  // The scatter ops read `src` through env: bind a private FX name to the value.
  std::string src_fx = b_.fresh_name(view + "_src");
  env_.values[src_fx] = value;
  args[1].arg.name = src_fx;
  switch (view_kind(n.target)) {
    case ViewKind::Same:
      return value;
    case ViewKind::Reshape:
      if (c.dtype(value) != bm->dtype) fail("the view reinterprets the dtype");
      return b_.op("Reshape", {value, b_.op("Shape", {base_val})}, {}, bt);
    case ViewKind::Permute: {
      size_t r = c.rank(base_val);
      std::vector<int64_t> perm(r);
      std::iota(perm.begin(), perm.end(), 0);
      std::string name = op_name(n.target);
      if (name == "permute") {
        auto dims = c.ints("dims", {});
        if (dims.size() != r) fail("permutation rank differs");
        for (size_t i = 0; i < r; ++i)
          perm[static_cast<size_t>(Ctx::norm_axis(dims[i], r))] = static_cast<int64_t>(i);
      } else if (name == "t" || name == "numpy_T") {
        std::reverse(perm.begin(), perm.end());
      } else {
        int64_t d0 = Ctx::norm_axis(c.i("dim0"), r), d1 = Ctx::norm_axis(c.i("dim1"), r);
        std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
      }
      if (r < 2) return value;
      return b_.op("Transpose", {value}, {Attr::Ints("perm", perm)}, bt);
    }
    case ViewKind::Slice:
      for (const char* a : {"dim", "start", "end", "step"}) copy_arg(n, a, a, args);
      return run_synthetic(kAten + "slice_scatter.default", n, args, p.base);
    case ViewKind::Narrow: {
      int64_t start = c.i("start"), length = c.i("length");
      copy_arg(n, "dim", "dim", args);
      args.push_back(int_arg("start", start));
      args.push_back(int_arg("end", start + length));
      return run_synthetic(kAten + "slice_scatter.default", n, args, p.base);
    }
    case ViewKind::Select:
      for (const char* a : {"dim", "index"}) copy_arg(n, a, a, args);
      return run_synthetic(kAten + "select_scatter.default", n, args, p.base);
    case ViewKind::Diagonal:
      for (const char* a : {"offset", "dim1", "dim2"}) copy_arg(n, a, a, args);
      return run_synthetic(kAten + "diagonal_scatter.default", n, args, p.base);
    case ViewKind::AsStrided:
      for (const char* a : {"size", "stride", "storage_offset"}) copy_arg(n, a, a, args);
      return run_synthetic(kAten + "as_strided_scatter.default", n, args, p.base);
    case ViewKind::Unbind:
      copy_arg(n, "dim", "dim", args);
      args.push_back(int_arg("index", static_cast<int64_t>(p.out_index)));
      return run_synthetic(kAten + "select_scatter.default", n, args, p.base);
    case ViewKind::Split:
    case ViewKind::SplitSizes:
    case ViewKind::Chunk: {
      int64_t dim = c.i("dim", 0);
      auto bshape = bt.shape;
      if (!bshape) fail("base rank unknown");
      size_t r = bshape->size();
      const Dim& d = (*bshape)[static_cast<size_t>(Ctx::norm_axis(dim, r))];
      std::vector<int64_t> sizes;
      ViewKind k = view_kind(n.target);
      if (k == ViewKind::SplitSizes) {
        sizes = c.ints("split_sizes", {});
      } else {
        if (!d.is_static()) fail("split of a symbolic dim");
        int64_t each = k == ViewKind::Split
                           ? c.i("split_size")
                           : (d.value + c.i("chunks") - 1) / std::max<int64_t>(c.i("chunks"), 1);
        for (int64_t at = 0; at < d.value; at += std::max<int64_t>(each, 1))
          sizes.push_back(std::min(each, d.value - at));
      }
      if (p.out_index >= sizes.size()) fail("split output out of range");
      int64_t start = std::accumulate(sizes.begin(), sizes.begin() + static_cast<long>(p.out_index),
                                      int64_t{0});
      args.push_back(int_arg("dim", dim));
      args.push_back(int_arg("start", start));
      args.push_back(int_arg("end", start + sizes[p.out_index]));
      return run_synthetic(kAten + "slice_scatter.default", n, args, p.base);
    }
    case ViewKind::Expand:
      return fail("several elements of an expanded view share one memory location");
    case ViewKind::Other:
    case ViewKind::None:
      break;
  }
  return fail("no write-back is known for this view op");
}

void AliasTracker::check_fresh(const schema::Node& n, const std::string& view,
                               const std::string& base) const {
  auto it = stale_.find(view);
  if (it == stale_.end()) return;
  throw Error("in-place node '" + n.name + "' (" + n.target + ") changes '" + view +
              "', which shares its data with '" + base + "', but in-place view op '" + it->second +
              ") changed the shape of one of them after the view was made; " +
              "the update cannot be carried across");
}

void AliasTracker::refresh(const schema::Node& n, const std::string& root,
                           const std::unordered_set<std::string>& chain) {
  std::unordered_set<const schema::Node*> rerun;
  std::function<void(const std::string&)> visit = [&](const std::string& v) {
    auto it = children_.find(v);
    if (it == children_.end()) return;
    for (const std::string& child : it->second) {
      const Parent& p = parent_.at(child);
      check_fresh(n, child, v);
      if (!chain.count(child)) {
        if (!p.node) {
          env_.values[child] = env_.values.at(p.base);
        } else if (rerun.insert(p.node).second) {
          Ctx c(b_, prog_, *p.node, env_);
          ConvertFn fn = find_converter(p.node->target, b_.opset());
          if (!fn) throw Error("internal: view '" + p.node->name + "' has no converter");
          fn(c);
        }
      }
      visit(child);
    }
  };
  visit(root);
}

void AliasTracker::after_inplace(const schema::Node& n) {
  std::string self = self_arg(n);
  if (self.empty()) throw Error("in-place node '" + n.name + "' has no tensor argument");
  auto outs = tensor_outputs(n);
  std::string value;
  if (!outs.empty() && env_.values.count(outs[0])) value = env_.values.at(outs[0]);
  if (value.empty())
    throw Error("internal: in-place node '" + n.name + "' produced no value for '" + self + "'");
  if (view_kind(functional_target(n.target)) != ViewKind::None) {
    // unsqueeze_, transpose_, ...: the tensor's metadata changes, not its
    // data. Every FX name of the same tensor object (the results of earlier
    // in-place ops on it) sees the new shape; a real view of it (or a tensor
    // it views) keeps its own shape but still shares the data. That link can
    // no longer be followed by write-back / refresh (they assume the shape
    // the view was made from), so it is marked stale: a later mutation that
    // would have to cross it fails then (most such views, e.g. the target of
    // `mask[:, 0] = 0` before `mask.unsqueeze_(2)`, are never used again).
    std::vector<std::string> same{self};
    std::unordered_set<std::string> seen{self};
    for (size_t k = 0; k < same.size(); ++k) {
      std::string v = same[k];
      std::vector<std::pair<std::string, const schema::Node*>> links;
      if (auto p = parent_.find(v); p != parent_.end())
        links.emplace_back(p->second.base, p->second.node);
      if (auto ch = children_.find(v); ch != children_.end())
        for (auto& child : ch->second) links.emplace_back(child, parent_.at(child).node);
      for (auto& [other, via] : links) {
        if (via) {
          // `other` is either v's base (v's own link is stale) or a view of v.
          bool is_base =
              parent_.count(v) && parent_.at(v).base == other && parent_.at(v).node == via;
          stale_.emplace(is_base ? v : other, n.name + "' (" + n.target);
          continue;
        }
        if (seen.insert(other).second) same.push_back(other);
      }
    }
    for (auto& v : same) env_.values[v] = value;
    if (!outs.empty()) link(outs[0], Parent{self, nullptr, 0});
    return;
  }
  std::unordered_set<std::string> chain{self};
  env_.values[self] = value;
  if (!outs.empty()) {
    chain.insert(outs[0]);
    link(outs[0], Parent{self, nullptr, 0});  // the result is the mutated tensor itself
  }
  std::string cur = self;
  std::string val = value;
  for (size_t guard = 0; parent_.count(cur); ++guard) {
    if (guard > parent_.size()) throw Error("internal: alias cycle at '" + cur + "'");
    Parent p = parent_.at(cur);
    check_fresh(n, cur, p.base);
    val = write_back(cur, p, val);
    env_.values[p.base] = val;
    cur = p.base;
    chain.insert(cur);
  }
  refresh(n, cur, chain);
}

namespace {

// copy(self, src): copy_'s functional form; src is broadcast to self's shape
// and cast to self's dtype.
void copy(Ctx& c) {
  std::string self = c.tensor("self");
  std::string src = c.cast(c.tensor("src"), c.out_dtype());
  c.set_output(0, c.b.op("Expand", {src, c.b.op("Shape", {self})}, {}, c.out_type(0)));
}

}  // namespace

void register_mutation(Registry& r) { r.add(kAten + "copy.default", copy); }

}  // namespace pt2onnx
