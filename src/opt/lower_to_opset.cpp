// Opsets 11 and 12, which torch.onnx scripts still ask for (opset_version=11):
// the model is converted and optimized at opset 13, the lowest the converters
// emit, and this pass, last, rewrites the operators whose form changed at 12
// or 13 into the older one. Each rule below is the ONNX change it undoes:
//
//   13: Squeeze / Unsqueeze / ReduceSum axes and Split's split became inputs
//       (11/12: attributes, so the values must be constants here);
//   13: Softmax / LogSoftmax / Hardmax work on one axis (11/12: on the input
//       coerced to 2-D at `axis`, default 1): the last axis is the same
//       computation; another axis gets a Transpose on each side;
//   13: Resize's roi and scales became optional (11/12: present, empty);
//   13: per-axis QuantizeLinear / DequantizeLinear; bfloat16 everywhere;
//   12: Einsum, Celu, GreaterOrEqual, LessOrEqual, the two loss operators,
//       ArgMax/ArgMin select_last_index, GatherND batch_dims, Constant's
//       value_float(s) / value_int(s), Clip / Min / Max on integers, Pow with
//       integer types, Dropout's ratio and training_mode inputs (11: ratio
//       attribute).
// What has no older form is collected and reported at once, naming each node
// and where it came from; nothing is written then.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "opt/passes.h"
#include "pt2onnx/error.h"

namespace pt2onnx {

namespace {

class Lowering {
 public:
  Lowering(Graph& main, int opset) : main_(main), opset_(opset) { collect(main); }

  void run() {
    lower_graph(main_);
    for (auto& f : main_.functions) {
      lower_nodes(f.nodes, nullptr);
      f.opset_imports[""] = opset_;
    }
    consts_.clear();
    for (auto& init : added_) main_.initializers.push_back(std::move(init));
    if (!problems_.empty()) {
      std::string msg = std::to_string(problems_.size()) + " node" +
                        (problems_.size() > 1 ? "s have" : " has") + " no form at opset " +
                        std::to_string(opset_) + " (export at opset 13 or later):";
      for (auto& p : problems_) msg += "\n  " + p;
      throw Error(msg);
    }
  }

 private:
  Graph& main_;
  int opset_;
  // Every scope's constants: pointers into the graphs' initializers, which
  // therefore grow only at the end (added_).
  std::unordered_map<std::string, const TensorData*> consts_;
  std::vector<Initializer> added_;
  std::vector<std::string> problems_;
  int fresh_ = 0;

  void collect(Graph& g) {
    for (auto& init : g.initializers) consts_[init.name] = &init.data;
    for (auto& n : g.nodes) {
      if (n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1)
        if (const Attr* a = n.attr("value"); a && a->kind == Attr::Kind::Tensor && a->t)
          consts_[n.outputs[0]] = a->t.get();
      for (Graph* sub : subgraphs(n)) collect(*sub);
    }
  }

  std::optional<std::vector<int64_t>> ints(const std::string& v) const {
    auto it = consts_.find(v);
    if (it == consts_.end()) return std::nullopt;
    const TensorData& t = *it->second;
    if (t.dims.size() > 1 || !t.is_contiguous()) return std::nullopt;
    std::vector<int64_t> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (t.dtype == DType::Int64) {
        std::memcpy(&out[i], t.bytes() + 8 * i, 8);
      } else if (t.dtype == DType::Int32) {
        int32_t x;
        std::memcpy(&x, t.bytes() + 4 * i, 4);
        out[i] = x;
      } else {
        return std::nullopt;
      }
    }
    return out;
  }

  std::string fresh(const std::string& base) { return base + "_opset" + std::to_string(++fresh_); }

  void problem(const Node& n, const std::string& why) {
    std::string where = n.fx_node().empty() ? "" : " (from " + n.fx_node() + ")";
    problems_.push_back(n.op_type + " '" + n.name + "'" + where + ": " + why);
  }

  static DType type_in(const Graph* g, const std::string& v) {
    if (!g) return DType::Undefined;
    const ValueType* t = g->type_of(v);
    return t ? t->dtype : DType::Undefined;
  }
  static std::optional<size_t> rank_in(const Graph* g, const std::string& v) {
    if (!g) return std::nullopt;
    const ValueType* t = g->type_of(v);
    if (!t || !t->shape) return std::nullopt;
    return t->shape->size();
  }
  static bool is_int(DType t) {
    return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64 ||
           t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
  }

  static void drop_attr(Node& n, std::string_view name) {
    std::erase_if(n.attrs, [&](const Attr& a) { return a.name == name; });
  }
  static Attr* find_attr(Node& n, std::string_view name) {
    for (auto& a : n.attrs)
      if (a.name == name) return &a;
    return nullptr;
  }

  // An input that became an attribute (axes, split): the constant's values.
  bool input_to_attr(Node& n, size_t input, const char* attr) {
    if (n.inputs.size() <= input || n.inputs[input].empty()) {
      if (n.inputs.size() > input) n.inputs.resize(input);
      return true;
    }
    auto v = ints(n.inputs[input]);
    if (!v) {
      problem(n, std::string(attr) + " is computed at run time; before opset 13 it is an " +
                     "attribute, a constant");
      return false;
    }
    n.inputs.resize(input);
    n.attrs.push_back(Attr::Ints(attr, *v));
    return true;
  }

  std::string empty_float() {
    if (empty_float_.empty()) {
      empty_float_ = fresh("empty_float");
      added_.push_back({empty_float_, TensorData::from_vector<float>(DType::Float, {0}, {})});
    }
    return empty_float_;
  }
  std::string empty_float_;

  void lower_graph(Graph& g) {
    for (auto& n : g.nodes)
      for (Graph* sub : subgraphs(n)) lower_graph(*sub);
    lower_nodes(g.nodes, &g);
    for (auto& init : g.initializers)
      if (init.data.dtype == DType::BFloat16)
        problems_.push_back("initializer '" + init.name + "': bfloat16 needs opset 13");
  }

  void lower_nodes(std::vector<Node>& nodes, Graph* g) {
    std::vector<Node> out;
    out.reserve(nodes.size());
    for (auto& n : nodes) {
      if (!n.domain.empty() && n.domain != "ai.onnx") {
        out.push_back(std::move(n));
        continue;
      }
      for (auto& v : n.outputs)
        if (type_in(g, v) == DType::BFloat16) {
          problem(n, "bfloat16 needs opset 13");
          break;
        }
      lower(n, g, out);
    }
    nodes = std::move(out);
  }

  void lower(Node& n, Graph* g, std::vector<Node>& out) {
    const std::string& op = n.op_type;
    const bool eleven = opset_ < 12;
    if (op == "Squeeze" || op == "Unsqueeze") {
      input_to_attr(n, 1, "axes");
    } else if (op == "ReduceSum") {
      const Attr* noop = n.attr("noop_with_empty_axes");
      bool no_axes = n.inputs.size() < 2 || n.inputs[1].empty();
      if (!no_axes) {
        auto v = ints(n.inputs[1]);
        if (v && v->empty()) no_axes = true;
      }
      if (no_axes && noop && noop->i == 1) {
        n.op_type = "Identity";
        n.inputs.resize(1);
        n.attrs.clear();
      } else {
        drop_attr(n, "noop_with_empty_axes");
        input_to_attr(n, 1, "axes");
      }
    } else if (op == "Split") {
      input_to_attr(n, 1, "split");
    } else if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
      auto rank = rank_in(g, n.inputs[0]);
      Attr* axis_attr = find_attr(n, "axis");
      int64_t axis = axis_attr ? axis_attr->i : -1;
      if (!rank) {
        problem(n, "the input's rank is unknown (needed to say the axis the older way)");
      } else {
        auto r = static_cast<int64_t>(*rank);
        if (axis < 0) axis += r;
        drop_attr(n, "axis");
        n.attrs.push_back(Attr::Int("axis", std::max<int64_t>(r - 1, 0)));
        if (axis != r - 1 && r > 1) {
          // Coerced to 2-D at the axis, the last one is the only per-axis case:
          // move the axis last and back.
          std::vector<int64_t> perm(static_cast<size_t>(r));
          for (int64_t i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
          std::swap(perm[static_cast<size_t>(axis)], perm[static_cast<size_t>(r - 1)]);
          std::string in = fresh(n.inputs[0] + "_last"), res = fresh(n.outputs[0] + "_last");
          Node t1 = n, t2 = n;
          t1.op_type = t2.op_type = "Transpose";
          t1.attrs = t2.attrs = {Attr::Ints("perm", perm)};
          t1.inputs = {n.inputs[0]};
          t1.outputs = {in};
          t1.name = fresh(n.name);
          t2.inputs = {res};
          t2.outputs = n.outputs;
          t2.name = fresh(n.name);
          n.inputs = {in};
          n.outputs = {res};
          out.push_back(std::move(t1));
          out.push_back(std::move(n));
          out.push_back(std::move(t2));
          return;
        }
      }
    } else if (op == "Resize") {
      // roi and scales: optional from 13, present (possibly empty) before.
      for (size_t i = 1; i < std::min<size_t>(n.inputs.size(), 3); ++i)
        if (n.inputs[i].empty()) n.inputs[i] = empty_float();
      if (n.inputs.size() < 3) n.inputs.resize(3, empty_float());
    } else if (op == "QuantizeLinear" || op == "DequantizeLinear") {
      auto scale_rank = n.inputs.size() > 1 ? rank_in(g, n.inputs[1]) : std::nullopt;
      if (n.attr("axis") && scale_rank && *scale_rank > 0)
        problem(n, "per-axis quantization needs opset 13");
      drop_attr(n, "axis");
    } else if (eleven) {
      lower_to_11(n, g, out);
      return;
    }
    out.push_back(std::move(n));
  }

  std::optional<double> scalar(const std::string& v) const {
    auto it = consts_.find(v);
    if (it == consts_.end() || it->second->numel() != 1) return std::nullopt;
    return element_as_double(*it->second, 0);
  }

  std::string scalar_init(DType t, double v) {
    auto d = TensorData::scalar(t, v);
    if (!d) return {};
    std::string name = fresh("scalar");
    added_.push_back({name, std::move(*d)});
    return name;
  }

  void dropout_at_run_time(Node& n, double ratio, DType t, std::vector<Node>& out) {
    std::string r = scalar_init(t, ratio), scale = scalar_init(t, 1.0 / (1.0 - ratio));
    if (r.empty() || scale.empty() || ratio >= 1.0) {
      problem(n, "dropout at run time of this type or ratio needs opset 12");
      out.push_back(std::move(n));
      return;
    }
    auto add = [&](const char* op, std::vector<std::string> in, std::vector<Attr> attrs) {
      Node m = n;
      m.op_type = op;
      m.inputs = std::move(in);
      m.attrs = std::move(attrs);
      m.outputs = {fresh(n.outputs[0] + "_" + op)};
      m.name = fresh(n.name);
      out.push_back(m);
      return m.outputs[0];
    };
    std::string u = add("RandomUniformLike", {n.inputs[0]}, {});
    std::string dropped = add("Less", {u, r}, {});
    std::string keep = add("Not", {dropped}, {});
    // DType's values are ONNX's TensorProto element types.
    std::string keep_t = add("Cast", {keep}, {Attr::Int("to", static_cast<int64_t>(t))});
    std::string kept = add("Mul", {n.inputs[0], keep_t}, {});
    Node y = n;
    y.op_type = "Mul";
    y.attrs.clear();
    y.inputs = {kept, scale};
    y.outputs = {n.outputs[0]};
    y.name = fresh(n.name);
    out.push_back(std::move(y));
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
      Node mask = n;
      mask.op_type = "Identity";
      mask.attrs.clear();
      mask.inputs = {keep};
      mask.outputs = {n.outputs[1]};
      mask.name = fresh(n.name);
      out.push_back(std::move(mask));
    }
  }

  // Min / Max of n's inputs as Where(cmp(a, b), a, b), folded left: the
  // result keeps the name of n's output.
  void select_chain(Node& n, const char* cmp, std::vector<Node>& out) {
    std::string acc = n.inputs[0];
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      bool last = i + 1 == n.inputs.size();
      std::string test = fresh(n.outputs[0] + "_cmp");
      std::string res = last ? n.outputs[0] : fresh(n.outputs[0] + "_acc");
      Node c = n, w = n;
      c.op_type = cmp;
      c.attrs.clear();
      c.inputs = {acc, n.inputs[i]};
      c.outputs = {test};
      c.name = fresh(n.name);
      w.op_type = "Where";
      w.attrs.clear();
      w.inputs = {test, acc, n.inputs[i]};
      w.outputs = {res};
      w.name = fresh(n.name);
      out.push_back(std::move(c));
      out.push_back(std::move(w));
      acc = res;
    }
  }

  void lower_to_11(Node& n, Graph* g, std::vector<Node>& out) {
    const std::string& op = n.op_type;
    if (op == "GreaterOrEqual" || op == "LessOrEqual") {
      // a >= b as not (a < b) (NaN: true here, false in torch; as torch.onnx writes it).
      std::string inner = fresh(n.outputs[0] + "_not");
      Node cmp = n;
      cmp.op_type = op == "GreaterOrEqual" ? "Less" : "Greater";
      cmp.outputs = {inner};
      cmp.name = fresh(n.name);
      n.op_type = "Not";
      n.inputs = {inner};
      out.push_back(std::move(cmp));
    } else if (op == "Einsum" || op == "Celu" || op == "NegativeLogLikelihoodLoss" ||
               op == "SoftmaxCrossEntropyLoss") {
      problem(n, "introduced at opset 12");
    } else if (op == "ArgMax" || op == "ArgMin") {
      if (const Attr* a = n.attr("select_last_index"); a && a->i != 0)
        problem(n, "select_last_index (the last of equal values) needs opset 12");
      drop_attr(n, "select_last_index");
    } else if (op == "GatherND") {
      if (const Attr* a = n.attr("batch_dims"); a && a->i != 0)
        problem(n, "batch_dims needs opset 12");
      drop_attr(n, "batch_dims");
    } else if (op == "Constant") {
      if (const Attr* a = n.attr("value_float"))
        n.attrs = {Attr::Tensor("value", TensorData::from_vector<float>(DType::Float, {}, {a->f}))};
      else if (const Attr* fl = n.attr("value_floats"))
        n.attrs = {Attr::Tensor(
            "value", TensorData::from_vector<float>(
                         DType::Float, {static_cast<int64_t>(fl->floats.size())}, fl->floats))};
      else if (const Attr* i = n.attr("value_int"))
        n.attrs = {
            Attr::Tensor("value", TensorData::from_vector<int64_t>(DType::Int64, {}, {i->i}))};
      else if (const Attr* is = n.attr("value_ints"))
        n.attrs = {Attr::Tensor(
            "value", TensorData::from_vector<int64_t>(
                         DType::Int64, {static_cast<int64_t>(is->ints.size())}, is->ints))};
      for (const auto& a : n.attrs)
        if (!a.ref.empty()) problem(n, "an attribute reference in a Constant needs opset 12");
    } else if ((op == "Min" || op == "Max") && is_int(type_in(g, n.outputs[0]))) {
      // Integer Min / Max (opset 12) as pairwise selections: exact for int64.
      if (n.inputs.size() == 1) {
        n.op_type = "Identity";
      } else {
        select_chain(n, op == "Min" ? "Less" : "Greater", out);
        return;
      }
    } else if (op == "Clip" && is_int(type_in(g, n.outputs[0]))) {
      // Clip(x, lo, hi) on integers = Min(Max(x, lo), hi), as selections.
      std::string x = n.inputs[0];
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        Node mx = n;
        mx.inputs = {x, n.inputs[1]};
        mx.outputs = {fresh(n.outputs[0] + "_lo")};
        mx.name = fresh(n.name);
        x = mx.outputs[0];
        select_chain(mx, "Greater", out);
      }
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
        Node mn = n;
        mn.inputs = {x, n.inputs[2]};
        mn.name = fresh(n.name);
        select_chain(mn, "Less", out);
        return;
      }
      n.op_type = "Identity";
      n.inputs = {x};
      n.attrs.clear();
    } else if (op == "Pow") {
      for (auto& v : n.inputs)
        if (is_int(type_in(g, v))) problem(n, "integer inputs need opset 12");
    } else if (op == "Dropout") {
      double ratio = 0.5;
      if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        auto d = scalar(n.inputs[1]);
        if (!d) {
          problem(n, "a ratio computed at run time needs opset 12");
        } else {
          ratio = *d;
        }
      }
      std::optional<double> training = 0.0;
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) training = scalar(n.inputs[2]);
      if (!training) {
        problem(n, "training_mode computed at run time needs opset 12");
      } else if (*training != 0.0) {
        // Dropout at run time (opset 11 has no training mode): a uniform draw per
        // element, kept where >= ratio, scaled by 1 / (1 - ratio).
        dropout_at_run_time(n, ratio, type_in(g, n.inputs[0]), out);
        return;
      }
      n.attrs.push_back(Attr::Float("ratio", static_cast<float>(ratio)));
      n.inputs.resize(1);
    }
    out.push_back(std::move(n));
  }
};

}  // namespace

void lower_to_opset(Graph& g, int opset) {
  if (opset >= 13) return;
  Lowering(g, opset).run();
}

}  // namespace pt2onnx
