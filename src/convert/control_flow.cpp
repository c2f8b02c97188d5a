// Control flow: torch's higher-order ops to ONNX ops with nested graphs.
//   torch.cond          -> If    (branches read the operands from the enclosing scope)
//   while_loop          -> Loop  (condition evaluated before the loop and at the end of the body)
//   while_loop_stack_output -> Loop with scan outputs, and an If for zero iterations
//   scan                -> Scan  (carried state + slices along dim 0; ys stacked)
//   map (map_impl)      -> Scan  (no state: each slice mapped, results stacked)
//   switch (torch >= 2.14) -> nested If on the index (index < 1, < 2, ...)
//   flex_gemm (torch >= 2.14) -> its body graph inlined (the GEMM + epilogue)
//   invoke_subgraph (kept by torch 2.12's export) -> its subgraph inlined
// torch.export closes every graph argument over its inputs (captured tensors
// are passed as operands / additional inputs); ONNX bodies instead read those
// from the enclosing scope by name, so they are bound, not passed.
#include <algorithm>
#include <functional>
#include <unordered_set>

#include "convert/context.h"
#include "convert/convert_graph.h"
#include "convert/registry.h"

namespace pt2onnx {

namespace {

using schema::ArgKind;
using schema::Argument;

const Argument& positional(Ctx& c, size_t i, const char* what) {
  if (i >= c.node.inputs.size()) c.fail(std::string("missing argument: ") + what);
  return c.node.inputs[i].arg;
}

const schema::Graph& graph_arg(Ctx& c, size_t i, const char* what) {
  const Argument& a = positional(c, i, what);
  if (a.kind != ArgKind::Graph || !a.graph)
    c.fail(std::string(what) + " is " + a.variant + ", expected a graph");
  return *a.graph;
}

std::string value_of(Ctx& c, const std::string& fx) {
  auto it = c.env.values.find(fx);
  if (it == c.env.values.end()) c.fail("undefined value '" + fx + "'");
  return it->second;
}

// A list of operands (tensors; SymInts as 1-element int64 values).
std::vector<std::string> operand_list(Ctx& c, size_t i, const char* what) {
  const Argument& a = positional(c, i, what);
  std::vector<std::string> r;
  switch (a.kind) {
    case ArgKind::None:
      break;
    case ArgKind::Tensors:
      for (auto& n : a.names) {
        if (n.empty()) c.fail(std::string(what) + " contains None");
        r.push_back(value_of(c, n));
      }
      break;
    case ArgKind::Tensor:
      r.push_back(value_of(c, a.name));
      break;
    case ArgKind::SymInts:
    case ArgKind::SymInt:
      for (auto& s : a.symints) r.push_back(c.symint_value(s));
      break;
    default:
      c.fail(std::string(what) + " is " + a.variant + "; only tensors and SymInts are supported");
  }
  return r;
}

// A bool value of one element from a predicate (tensor of any type, SymBool).
std::string predicate(Ctx& c, const Argument& a) {
  std::string v;
  if (a.kind == ArgKind::Tensor || a.kind == ArgKind::SymBool)
    v = value_of(c, a.name);
  else
    c.fail("the predicate is " + a.variant + ", expected a tensor or a SymBool");
  return c.cast(v, DType::Bool);
}

// Closes the current scope with `outs` as its outputs. A graph output must
// be a value the graph computes, once: inputs, enclosing-scope values and
// repeated values pass through an Identity.
Graph close_scope(Ctx& c, const std::vector<std::string>& outs) {
  std::unordered_set<std::string> produced, listed;
  for (auto& n : c.b.graph().nodes)
    for (auto& o : n.outputs) produced.insert(o);
  for (auto v : outs) {
    if (!produced.count(v) || !listed.insert(v).second) v = c.b.op("Identity", {v});
    listed.insert(v);
    c.b.add_output(v, c.b.type(v));
  }
  return c.b.end_subgraph();
}

// A scope input of the type of placeholder `i` of `g` (its torch metadata).
std::string scope_input(Ctx& c, const schema::Graph& g, size_t i, const std::string& base) {
  const Argument& a = g.inputs.at(i);
  ValueType t;
  if (a.kind == ArgKind::Tensor) {
    auto it = g.tensor_values.find(a.name);
    if (it == g.tensor_values.end()) c.fail("no metadata for graph input '" + a.name + "'");
    t = c.meta_type(it->second);
  } else {
    t = ValueType{DType::Int64, Shape{Dim::of(1)}};  // a SymInt: 1-element int64
  }
  std::string name = c.b.fresh_name(base);
  c.b.add_input(name, t);
  return name;
}

// A scope input typed like one slice (dim 0 removed) of `xs`.
std::string slice_input(Ctx& c, const std::string& xs, const std::string& base) {
  ValueType t = c.type(xs);
  if (t.shape && !t.shape->empty()) t.shape->erase(t.shape->begin());
  std::string name = c.b.fresh_name(base);
  c.b.add_input(name, t);
  return name;
}

std::vector<ValueType> out_types(Ctx& c) {
  std::vector<ValueType> r;
  for (size_t i = 0; i < c.n_outputs(); ++i) r.push_back(c.out_type(i));
  return r;
}

void set_outputs(Ctx& c, const std::vector<std::string>& values) {
  for (size_t i = 0; i < c.n_outputs(); ++i) c.set_output(i, values.at(i));
}

// cond(pred, true_fn, false_fn, operands)
void cond(Ctx& c) {
  const Argument& p = positional(c, 0, "pred");
  const schema::Graph& then_g = graph_arg(c, 1, "true_fn");
  const schema::Graph& else_g = graph_arg(c, 2, "false_fn");
  std::vector<std::string> operands = operand_list(c, 3, "operands");
  if (p.kind == ArgKind::Bool) {  // a predicate torch resolved: the branch inlines
    set_outputs(c, convert_nested(c, p.b ? then_g : else_g, operands));
    return;
  }
  std::string pred = predicate(c, p);
  auto branch = [&](const schema::Graph& g, const char* name) {
    c.b.begin_subgraph(c.node.name + "_" + name);
    std::vector<std::string> outs = convert_nested(c, g, operands);
    if (outs.size() != c.n_outputs())
      c.fail(std::string(name) + " returns " + std::to_string(outs.size()) + " values, cond has " +
             std::to_string(c.n_outputs()) + " outputs");
    return close_scope(c, outs);
  };
  Graph then_branch = branch(then_g, "then");
  Graph else_branch = branch(else_g, "else");
  set_outputs(c, c.b.add_node("If", {pred}, c.n_outputs(),
                              {Attr::Subgraph("then_branch", std::move(then_branch)),
                               Attr::Subgraph("else_branch", std::move(else_branch))},
                              out_types(c)));
}

// while_loop(cond_fn, body_fn, carried_inputs, additional_inputs): a Loop
// with no trip count, its condition computed once before the loop and again
// from the new values at the end of every iteration. `stack`:
// while_loop_stack_output, which returns every iteration's values stacked
// (the initial values, unsqueezed, when the loop does not run).
void emit_while(Ctx& c, bool stack) {
  const schema::Graph& cond_g = graph_arg(c, 0, "cond_fn");
  const schema::Graph& body_g = graph_arg(c, 1, "body_fn");
  std::vector<std::string> carried = operand_list(c, 2, "carried_inputs");
  std::vector<std::string> extra = operand_list(c, 3, "additional_inputs");
  auto with_extra = [&](std::vector<std::string> v) {
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  auto condition = [&](const std::vector<std::string>& state) {
    std::vector<std::string> r = convert_nested(c, cond_g, with_extra(state));
    if (r.size() != 1) c.fail("cond_fn must return one value");
    return c.cast(r[0], DType::Bool);
  };
  std::string first = condition(carried);

  c.b.begin_subgraph(c.node.name + "_body");
  std::string iter = c.b.fresh_name("iter");
  c.b.add_input(iter, ValueType{DType::Int64, Shape{}});
  std::string cond_in = c.b.fresh_name("cond_in");
  c.b.add_input(cond_in, ValueType{DType::Bool, Shape{}});
  std::vector<std::string> state;
  for (size_t i = 0; i < carried.size(); ++i) state.push_back(scope_input(c, body_g, i, "carried"));
  std::vector<std::string> next = convert_nested(c, body_g, with_extra(state));
  if (next.size() != carried.size())
    c.fail("body_fn returns " + std::to_string(next.size()) + " values for " +
           std::to_string(carried.size()) + " carried inputs");
  for (size_t i = 0; i < next.size(); ++i)  // torch keeps each carried value's dtype
    next[i] = c.cast(next[i], c.dtype(carried[i]));
  std::vector<std::string> outs{condition(next)};
  outs.insert(outs.end(), next.begin(), next.end());
  if (stack) outs.insert(outs.end(), next.begin(), next.end());  // scan outputs: stacked by Loop
  Graph body = close_scope(c, outs);

  std::vector<std::string> inputs{"", first};
  inputs.insert(inputs.end(), carried.begin(), carried.end());
  if (!stack) {
    set_outputs(c, c.b.add_node("Loop", inputs, c.n_outputs(),
                                {Attr::Subgraph("body", std::move(body))}, out_types(c)));
    return;
  }
  if (c.n_outputs() != carried.size()) c.fail("expected one output per carried input");
  std::vector<ValueType> loop_types;
  for (auto& v : carried) loop_types.push_back(c.type(v));
  std::vector<ValueType> stacked = out_types(c);
  for (auto& t : stacked) t.shape.reset();
  loop_types.insert(loop_types.end(), stacked.begin(), stacked.end());
  auto loop = c.b.add_node("Loop", inputs, 2 * carried.size(),
                           {Attr::Subgraph("body", std::move(body))}, loop_types);
  c.b.begin_subgraph(c.node.name + "_ran");
  Graph ran = close_scope(
      c, std::vector<std::string>(loop.begin() + static_cast<long>(carried.size()), loop.end()));
  c.b.begin_subgraph(c.node.name + "_not_run");
  std::vector<std::string> initial;
  for (auto& v : carried) initial.push_back(c.unsqueeze(v, {0}));
  Graph not_run = close_scope(c, initial);
  set_outputs(c, c.b.add_node("If", {first}, carried.size(),
                              {Attr::Subgraph("then_branch", std::move(ran)),
                               Attr::Subgraph("else_branch", std::move(not_run))},
                              out_types(c)));
}

void while_loop(Ctx& c) { emit_while(c, false); }
void while_loop_stack_output(Ctx& c) { emit_while(c, true); }

// The Scan both scan and map lower to: `states` carried, `xs` sliced along
// dim 0, `extra` read from the enclosing scope; the body graph takes
// (states..., slices..., extra...) and returns (new states..., ys...).
void emit_scan(Ctx& c, const schema::Graph& body_g, const std::vector<std::string>& states,
               const std::vector<std::string>& xs, const std::vector<std::string>& extra) {
  if (xs.empty()) c.fail("nothing to scan over (no xs)");
  c.b.begin_subgraph(c.node.name + "_body");
  std::vector<std::string> ins;
  for (size_t i = 0; i < states.size(); ++i) ins.push_back(scope_input(c, body_g, i, "state"));
  for (auto& x : xs) ins.push_back(slice_input(c, x, "slice"));
  ins.insert(ins.end(), extra.begin(), extra.end());
  std::vector<std::string> outs = convert_nested(c, body_g, ins);
  if (outs.size() != c.n_outputs())
    c.fail("its body returns " + std::to_string(outs.size()) + " values for " +
           std::to_string(c.n_outputs()) + " outputs");
  for (size_t i = 0; i < states.size(); ++i) outs[i] = c.cast(outs[i], c.dtype(states[i]));
  Graph body = close_scope(c, outs);
  std::vector<std::string> inputs = states;
  inputs.insert(inputs.end(), xs.begin(), xs.end());
  set_outputs(c, c.b.add_node("Scan", inputs, c.n_outputs(),
                              {Attr::Subgraph("body", std::move(body)),
                               Attr::Int("num_scan_inputs", static_cast<int64_t>(xs.size()))},
                              out_types(c)));
}

// scan(combine_fn, init, xs, additional_inputs): torch's wrapper has already
// moved the scanned dim to 0 and flipped xs for reverse=True.
void scan(Ctx& c) {
  emit_scan(c, graph_arg(c, 0, "combine_fn"), operand_list(c, 1, "init"), operand_list(c, 2, "xs"),
            operand_list(c, 3, "additional_inputs"));
}

// map_impl(body_fn, xs, args)
void map_impl(Ctx& c) {
  emit_scan(c, graph_arg(c, 0, "f"), {}, operand_list(c, 1, "xs"), operand_list(c, 2, "args"));
}

// switch(index, branch0, ..., branchN-1, operands): pt2onnx's serializer
// patch (_serialize.py) writes torch's list of branch graphs as N graph
// arguments. torch.switch clamps the index into [0, N) before the op (the
// exported graph holds that clamp); the op itself asserts on an index out of
// range, which an ONNX graph cannot: here an index below 0 runs branch 0 and
// one above N-1 runs branch N-1, the same as torch.switch, as nested Ifs
// If(index < 1, branch0, If(index < 2, branch1, ... branchN-1)).
void switch_op(Ctx& c) {
  const Argument& idx = positional(c, 0, "index");
  size_t n = 0;
  while (1 + n < c.node.inputs.size() && c.node.inputs[1 + n].arg.kind == ArgKind::Graph) ++n;
  if (n == 0) c.fail("switch has no branch graphs");
  if (c.node.inputs.size() != n + 2)
    c.fail("switch expects (index, branches, operands); got " +
           std::to_string(c.node.inputs.size()) + " arguments for " + std::to_string(n) +
           " branches");
  std::vector<std::string> operands = operand_list(c, n + 1, "operands");
  auto branch_g = [&](size_t k) -> const schema::Graph& { return graph_arg(c, 1 + k, "branch"); };
  auto clamp = [&](int64_t k) {
    return static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(n) - 1));
  };
  if (idx.kind == ArgKind::Int || n == 1) {  // a constant index: that branch inlines
    set_outputs(c,
                convert_nested(c, branch_g(idx.kind == ArgKind::Int ? clamp(idx.i) : 0), operands));
    return;
  }
  std::string index;
  if (idx.kind == ArgKind::Tensor || idx.kind == ArgKind::SymInt) {
    index = idx.kind == ArgKind::Tensor ? value_of(c, idx.name) : operand_list(c, 0, "index")[0];
    if (is_floating(c.dtype(index)) || c.dtype(index) == DType::Bool)
      c.fail("the switch index must be an integer tensor or SymInt");
    index = c.cast(index, DType::Int64);
  } else {
    c.fail("the switch index is " + idx.variant + ", expected an integer tensor or a SymInt");
  }
  auto branch = [&](size_t k) {
    std::vector<std::string> outs = convert_nested(c, branch_g(k), operands);
    if (outs.size() != c.n_outputs())
      c.fail("branch " + std::to_string(k) + " returns " + std::to_string(outs.size()) +
             " values, switch has " + std::to_string(c.n_outputs()) + " outputs");
    return outs;
  };
  // Branches k..n-1 in the current scope.
  std::function<std::vector<std::string>(size_t)> from = [&](size_t k) {
    if (k + 1 == n) return branch(k);
    std::string pred = c.b.op("Less", {index, c.b.scalar_i64(static_cast<int64_t>(k) + 1)});
    c.b.begin_subgraph(c.node.name + "_branch" + std::to_string(k));
    Graph then_branch = close_scope(c, branch(k));
    c.b.begin_subgraph(c.node.name + "_above" + std::to_string(k));
    Graph else_branch = close_scope(c, from(k + 1));
    return c.b.add_node("If", {pred}, c.n_outputs(),
                        {Attr::Subgraph("then_branch", std::move(then_branch)),
                         Attr::Subgraph("else_branch", std::move(else_branch))},
                        out_types(c));
  };
  set_outputs(c, from(0));
}

// flex_gemm(gemm_op, body_fn, gemm_args, gemm_kwargs, kernel_options):
// torch computes body_fn(*gemm_args), the body graph holding the GEMM
// (mm/addmm/bmm/baddbmm with gemm_kwargs already applied) and the user's
// epilogue; kernel_options only pick the kernel backend.
void flex_gemm(Ctx& c) {
  const schema::Graph& body = graph_arg(c, 1, "body_fn");
  std::vector<std::string> args = operand_list(c, 2, "gemm_args");
  if (args.size() != body.inputs.size())
    c.fail("flex_gemm's body takes " + std::to_string(body.inputs.size()) + " inputs, given " +
           std::to_string(args.size()) + " gemm_args");
  std::vector<std::string> outs = convert_nested(c, body, args);
  if (outs.size() != c.n_outputs())
    c.fail("flex_gemm's body returns " + std::to_string(outs.size()) + " values, the node has " +
           std::to_string(c.n_outputs()) + " outputs");
  set_outputs(c, outs);
}

// invoke_subgraph(subgraph, identifier, *operands) (nested_compile_region):
// torch calls the subgraph once per call site; torch 2.12's export keeps the
// node where later releases inline it. Inlined here the same way.
void invoke_subgraph(Ctx& c) {
  const schema::Graph& body = graph_arg(c, 0, "subgraph");
  std::vector<std::string> args;
  for (size_t i = 2; i < c.node.inputs.size(); ++i)
    for (std::string& v : operand_list(c, i, "operand")) args.push_back(std::move(v));
  if (args.size() != body.inputs.size())
    c.fail("invoke_subgraph's subgraph takes " + std::to_string(body.inputs.size()) +
           " inputs, given " + std::to_string(args.size()) + " operands");
  std::vector<std::string> outs = convert_nested(c, body, args);
  if (outs.size() != c.n_outputs())
    c.fail("invoke_subgraph's subgraph returns " + std::to_string(outs.size()) +
           " values, the node has " + std::to_string(c.n_outputs()) + " outputs");
  set_outputs(c, outs);
}

}  // namespace

void register_control_flow(Registry& r) {
  r.add("torch.ops.higher_order.invoke_subgraph", invoke_subgraph);
  r.add("torch.ops.higher_order.cond", cond);
  r.add("torch.ops.higher_order.while_loop", while_loop);
  r.add("torch.ops.higher_order.while_loop_stack_output", while_loop_stack_output);
  r.add("torch.ops.higher_order.scan", scan);
  r.add("torch.ops.higher_order.map_impl", map_impl);
  r.add("torch.ops.higher_order.switch", switch_op);
  r.add("torch.ops.higher_order.flex_gemm", flex_gemm);
}

}  // namespace pt2onnx
