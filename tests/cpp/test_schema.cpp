// Schema reader and sympy-expression parser.
#include <gtest/gtest.h>

#include <cmath>

#include "pt2onnx/error.h"
#include "schema/json_split.h"
#include "schema/program.h"

using namespace pt2onnx;
using namespace pt2onnx::schema;

namespace {

// A minimal but complete program: x (dynamic batch) -> add(x, weight) -> out.
std::string program_json(int major = 8) {
  return R"JSON({"schema_version": {"major": )JSON" + std::to_string(major) + R"JSON(, "minor": 3},
  "torch_version": "2.13.0", "future_field": {"ignored": true},
  "range_constraints": {"s0": {"min_val": 2, "max_val": null}},
  "graph_module": {
    "graph": {
      "inputs": [{"as_tensor": {"name": "p_w"}}, {"as_tensor": {"name": "x"}}],
      "outputs": [{"as_tensor": {"name": "add"}}],
      "nodes": [{
        "target": "torch.ops.aten.add.Tensor", "name": "add",
        "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                   {"name": "other", "arg": {"as_tensor": {"name": "p_w"}}, "kind": 1},
                   {"name": "alpha", "arg": {"as_float": "Infinity"}, "kind": 2}],
        "outputs": [{"as_tensor": {"name": "add"}}],
        "metadata": {"stack_trace": "File \"m.py\", line 3, in forward\n    return x + self.w",
                     "nn_module_stack": "L__self__,,M;L__self__sub,sub.layer,torch.nn.Linear"}
      }],
      "tensor_values": {
        "x": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "Symbol('s0', integer=True, positive=True)", "hint": {"as_int": 2}}}, {"as_int": 4}],
              "strides": [{"as_int": 4}, {"as_int": 1}], "storage_offset": {"as_int": 0}},
        "p_w": {"dtype": 7, "sizes": [{"as_int": 4}], "strides": [{"as_int": 1}], "storage_offset": {"as_int": 0}},
        "add": {"dtype": 7, "sizes": [{"as_expr": {"expr_str": "Symbol('s0', integer=True, positive=True)"}}, {"as_int": 4}]}
      },
      "sym_int_values": {}
    },
    "signature": {
      "input_specs": [{"parameter": {"arg": {"name": "p_w"}, "parameter_name": "w"}},
                      {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
      "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "add"}}}}]
    }
  }})JSON";
}

}  // namespace

TEST(SchemaReader, ParsesProgram) {
  Program p = parse_program(program_json());
  EXPECT_EQ(p.schema_major, 8);
  EXPECT_EQ(p.schema_minor, 3);
  EXPECT_EQ(p.torch_version, "2.13.0");
  ASSERT_EQ(p.graph.nodes.size(), 1u);
  const Node& n = p.graph.nodes[0];
  EXPECT_EQ(n.target, "torch.ops.aten.add.Tensor");
  ASSERT_NE(n.input("other"), nullptr);
  EXPECT_EQ(n.input("other")->kind, ArgKind::Tensor);
  EXPECT_EQ(n.input("other")->name, "p_w");
  EXPECT_TRUE(std::isinf(n.input("alpha")->f));
  EXPECT_EQ(n.input("alpha")->kind, ArgKind::Float);
  EXPECT_EQ(n.module_path(), "sub.layer");
  EXPECT_EQ(n.source_line(), "File \"m.py\", line 3, in forward: return x + self.w");
  const TensorMeta& x = p.graph.tensor_values.at("x");
  EXPECT_EQ(x.dtype, DType::Float);
  ASSERT_EQ(x.sizes.size(), 2u);
  ASSERT_TRUE(x.sizes[0].expr);
  EXPECT_EQ(x.sizes[0].expr->render(), "s0");
  EXPECT_EQ(x.sizes[0].hint, 2);
  EXPECT_EQ(x.sizes[1].value, 4);
  ASSERT_EQ(p.input_specs.size(), 2u);
  EXPECT_EQ(p.input_specs[0].kind, InputSpec::Kind::Parameter);
  EXPECT_EQ(p.input_specs[0].target, "w");
  EXPECT_EQ(p.input_specs[1].kind, InputSpec::Kind::UserInput);
  EXPECT_EQ(p.range_constraints.at("s0").min, 2);
  EXPECT_FALSE(p.range_constraints.at("s0").max.has_value());
}

TEST(SchemaReader, RejectsUnknownMajorVersion) {
  try {
    parse_program(program_json(9));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported schema major version 9"), std::string::npos)
        << e.what();
  }
}

TEST(SchemaReader, MalformedJsonNamesTheCause) {
  try {
    parse_program("{\"schema_version\": ", "model.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.json: malformed JSON"), std::string::npos)
        << e.what();
  }
}

TEST(SchemaReader, WrongShapeNamesThePath) {
  std::string j = program_json();
  j.replace(j.find("\"nodes\": ["), 10, "\"nodes\": 7, \"x\": [");
  try {
    parse_program(j);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("$.graph_module.graph.nodes: expected a JSON array"),
              std::string::npos)
        << e.what();
  }
}

TEST(SchemaReader, BadUnionIsReported) {
  std::string j = program_json();
  j.replace(j.find("{\"as_tensor\": {\"name\": \"p_w\"}}, \"kind\""), 31,
            "{\"as_tensor\": {\"name\": \"p_w\"}, \"as_int\": 3}");
  EXPECT_THROW(parse_program(j), Error);
}

TEST(SymExpr, ParsesAndRenders) {
  auto e = parse_sym_expr(
      "Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), Integer(-1))");
  EXPECT_EQ(e->render(), "2*s0 - 1");
  EXPECT_EQ(e->render({{"s0", "batch"}}), "2*batch - 1");
  // A sum renders in one order whatever order torch printed its terms in (torch
  // sorts by its own symbol names): the same dims give the same dim_param.
  const std::map<std::string, std::string> names{{"s3", "past"}, {"s10", "seq"}};
  EXPECT_EQ(parse_sym_expr("Add(Symbol('s10'), Symbol('s3'))")->render(names), "past + seq");
  EXPECT_EQ(parse_sym_expr("Add(Symbol('s3'), Symbol('s10'))")->render(names), "past + seq");
  EXPECT_EQ(parse_sym_expr("Add(Integer(-1), Symbol('s10'))")->render(names), "seq - 1");
  EXPECT_EQ(parse_sym_expr("Add(Integer(1), Symbol('s10'), Symbol('s3'))")->render(names),
            "past + seq + 1");
  EXPECT_EQ(e->eval({{"s0", 5}}), 9);
  EXPECT_FALSE(e->eval({}).has_value());
  auto f = parse_sym_expr("FloorDiv(Symbol('s1', integer=True), Integer(2))");
  EXPECT_EQ(f->eval({{"s1", -3}}), -2);  // floor, not truncation
  EXPECT_EQ(f->render(), "floor(s1/2)");
}

TEST(SymExpr, ReadsBooleanAtoms) {
  // What a bool input used as data leaves in sym_int_values (sym_ite).
  auto e = parse_sym_expr(
      "Piecewise(ExprCondPair(Integer(1), Equality(Symbol('u0', integer=True), Integer(1))), "
      "ExprCondPair(Integer(0), true))");
  EXPECT_EQ(e->head, "Piecewise");
  EXPECT_EQ(e->args.at(1)->args.at(1)->render(), "true");
  EXPECT_FALSE(e->eval({}).has_value());
  EXPECT_THROW(parse_sym_expr("true(Integer(1))x"), Error);
}

TEST(SymExpr, RejectsGarbage) {
  EXPECT_THROW(parse_sym_expr("Add(Symbol('s0'"), Error);
  EXPECT_THROW(parse_sym_expr("Symbol(s0)"), Error);
  EXPECT_THROW(parse_sym_expr(std::string(1000, '(')), Error);
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "Neg(";
  EXPECT_THROW(parse_sym_expr(deep), Error);
}

namespace {

// A program whose only node is a grad-mode wrapper nesting `depth` levels.
std::string nested_wrapper_json(int depth) {
  std::string g = R"({"inputs": [], "outputs": [], "nodes": [], "tensor_values": {}})";
  for (int i = 0; i < depth; ++i)
    g = R"({"inputs": [], "outputs": [], "tensor_values": {}, "nodes": [{"target": )"
        R"("torch.ops.higher_order.wrap_with_set_grad_enabled", "name": "w", "inputs": [)"
        R"({"name": "", "arg": {"as_bool": false}, "kind": 1}, {"name": "", "arg": {"as_graph": )"
        R"({"name": "submod", "graph": )" +
        g + R"(}}, "kind": 1}], "outputs": []}]})";
  return R"({"schema_version": {"major": 8, "minor": 3}, "graph_module": {"graph": )" + g +
         R"(, "signature": {"input_specs": [], "output_specs": []}, "module_call_graph": []}})";
}

}  // namespace

TEST(Schema, ReadsSubgraphsOfHigherOrderOps) {
  Program p = parse_program(nested_wrapper_json(3));
  ASSERT_EQ(p.graph.nodes.size(), 1u);
  const Argument& a = p.graph.nodes[0].inputs[1].arg;
  EXPECT_EQ(a.kind, ArgKind::Graph);
  EXPECT_EQ(a.name, "submod");
  ASSERT_TRUE(a.graph);
  EXPECT_EQ(a.graph->nodes.size(), 1u);
}

TEST(Schema, RefusesSubgraphsNestedTooDeeply) {
  try {
    parse_program(nested_wrapper_json(100));  // within simdjson's own depth limit
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos) << e.what();
  }
}

TEST(SymExpr, ReadsIntegersWhole) {
  EXPECT_EQ(parse_sym_expr("Integer(-9223372036854775808)")->eval({}), INT64_MIN);
  EXPECT_EQ(parse_sym_expr("Integer(+7)")->eval({}), 7);
  auto message = [](const std::string& s) -> std::string {
    try {
      parse_sym_expr(s);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  for (const char* bad : {"Integer(-)", "Integer(+)", "Integer(1.5e3)", "Integer(1.5)",
                          "Integer(1e3)", "Integer(+-1)", "Integer(--1)", "Integer(1-)"}) {
    std::string m = message(bad);
    EXPECT_NE(m.find(std::string(bad) + " is not an integer"), std::string::npos) << m;
  }
  for (const char* big : {"Integer(99999999999999999999)", "Integer(9223372036854775808)",
                          "Integer(-9223372036854775809)"}) {
    std::string m = message(big);
    EXPECT_NE(m.find(std::string(big) + " does not fit in a 64-bit integer"), std::string::npos)
        << m;
  }
  EXPECT_EQ(message("Float('1.5e3', precision=53)"), "accepted");
  EXPECT_EQ(message("Float('-inf', precision=53)"), "accepted");
  EXPECT_NE(message("Float('1.5x', precision=53)").find("Float(1.5x) is not a number"),
            std::string::npos);
  EXPECT_NE(message("Float('', precision=53)").find("is not a number"), std::string::npos);
  EXPECT_NE(message("Float('1e999', precision=53)").find("out of the double range"),
            std::string::npos);
}

TEST(SymExpr, EvalGivesUpOnOverflow) {
  auto e = [](const std::string& s) { return parse_sym_expr(s)->eval({}); };
  EXPECT_FALSE(e("Add(Integer(9223372036854775807), Integer(1))"));
  EXPECT_FALSE(e("Mul(Integer(4294967296), Integer(4294967296))"));
  EXPECT_FALSE(e("FloorDiv(Integer(-9223372036854775808), Integer(-1))"));
  EXPECT_FALSE(e("Mod(Integer(-9223372036854775808), Integer(-1))"));
  EXPECT_FALSE(e("Pow(Integer(2), Integer(63))"));
  EXPECT_EQ(e("Pow(Integer(2), Integer(62))"), int64_t{1} << 62);
  EXPECT_EQ(e("Pow(Integer(-1), Integer(9223372036854775807))"), -1);  // no 2^63 loop
  EXPECT_EQ(e("Mod(Integer(-7), Integer(3))"), 2);
}

TEST(SchemaReader, NumbersAreCheckedAndNamed) {
  auto message = [](std::string j) -> std::string {
    try {
      parse_program(j, "m.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  std::string j = program_json();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string r = j;
    size_t at = r.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return r.replace(at, from.size(), to);
  };
  const std::string p_w = R"("p_w": {"dtype": 7, "sizes": [{"as_int": 4}])";
  std::string m =
      message(with(p_w, R"("p_w": {"dtype": 7, "sizes": [{"as_int": 99999999999999999999}])"));
  EXPECT_NE(m.find("Problem while parsing a number: 99999999999999999999 at byte"),
            std::string::npos)
      << m;
  m = message(with(p_w, R"("p_w": {"dtype": 7, "sizes": [{"as_int": 4.5}])"));
  EXPECT_NE(m.find("tensor_values.p_w.sizes[0].as_int: expected an integer, found the number 4.5"),
            std::string::npos)
      << m;
  m = message(with(p_w, R"("p_w": {"dtype": 7, "sizes": [{"as_int": -4}])"));
  EXPECT_NE(m.find("tensor_values.p_w.sizes[0]: negative size -4"), std::string::npos) << m;
  m = message(with(R"("kind": 1},)", R"("kind": 4294967297},)"));
  EXPECT_NE(m.find(".kind: integer 4294967297 out of range"), std::string::npos) << m;
  m = message(with(R"("minor": 3)", R"("minor": -)"));
  EXPECT_NE(m.find("malformed JSON: Problem while parsing a number: - at byte"), std::string::npos)
      << m;
}

// Each malformed value is named by its full JSON path (rendered only when an
// error is reported: reader.cpp's Path): list indices, the node's target,
// map keys and union variants.
TEST(SchemaReader, ErrorsNameTheFullPath) {
  auto message = [](const std::string& from, const std::string& to) {
    std::string json = program_json();
    size_t at = json.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    json.replace(at, from.size(), to);
    try {
      parse_program(json, "m.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message(R"("as_float": "Infinity")", R"("as_float": "inf")"),
            "m.json: $.graph_module.graph.nodes[0] (torch.ops.aten.add.Tensor).inputs[2].arg"
            ".as_float: expected a number, found string 'inf'");
  EXPECT_EQ(message(R"("kind": 2)", R"("kind": 4294967296)"),
            "m.json: $.graph_module.graph.nodes[0] (torch.ops.aten.add.Tensor).inputs[2].kind: "
            "integer 4294967296 out of range");
  EXPECT_EQ(message(R"({"as_int": 4}, {"as_int": 1}])", R"({"as_int": 4}, {"as_int": "1"}])"),
            "m.json: $.graph_module.graph.tensor_values.x.strides[1].as_int: expected an "
            "integer, found a string");
  EXPECT_EQ(message(R"("sizes": [{"as_int": 4}])", R"("sizes": [{"as_int": -4}])"),
            "m.json: $.graph_module.graph.tensor_values.p_w.sizes[0]: negative size -4");
  EXPECT_EQ(message(R"("parameter_name": "w")", R"("parameter_name": 3)"),
            "m.json: $.graph_module.signature.input_specs[0].parameter_name: expected a "
            "string, found a number");
  EXPECT_EQ(message(R"({"min_val": 2, )", R"({"min_val": "2", )"),
            "m.json: $.range_constraints.s0.min_val: expected an integer, found a string");
  EXPECT_EQ(message(R"("outputs": [{"as_tensor": {"name": "add"}}],
      "nodes")",
                    R"("outputs": [7],
      "nodes")"),
            "m.json: $.graph_module.graph.outputs[0]: expected a JSON object, found a number");
}

// Nodes that repeat a stack trace or module stack share one copy of it.
TEST(SchemaReader, SharesRepeatedNodeText) {
  std::string json = program_json();
  const std::string node_start = R"JSON({
        "target": "torch.ops.aten.add.Tensor", "name": "add",)JSON";
  const size_t at = json.find(node_start);
  ASSERT_NE(at, std::string::npos);
  const size_t end = json.find("\n      }]", at);
  ASSERT_NE(end, std::string::npos);
  std::string second = json.substr(at, end + 8 - at);  // the node object, "}" included
  second.replace(second.find("\"name\": \"add\""), 13, "\"name\": \"add2\"");
  json.insert(end + 8, ", " + second);
  Program p = parse_program(json);
  ASSERT_EQ(p.graph.nodes.size(), 2u);
  const Node& a = p.graph.nodes[0];
  const Node& b = p.graph.nodes[1];
  EXPECT_EQ(b.name, "add2");
  EXPECT_EQ(a.stack_trace.str(), b.stack_trace.str());
  EXPECT_EQ(&a.stack_trace.str(), &b.stack_trace.str());
  EXPECT_EQ(&a.nn_module_stack.str(), &b.nn_module_stack.str());
  EXPECT_EQ(b.module_path(), "sub.layer");

  SharedText::Pool pool;
  SharedText x = pool.get("abc"), y = pool.get(std::string("ab") + "c"), z = pool.get("abd");
  EXPECT_EQ(&x.str(), &y.str());
  EXPECT_NE(&x.str(), &z.str());
  EXPECT_TRUE(pool.get("").empty());
  EXPECT_TRUE(SharedText().empty());
  EXPECT_EQ(SharedText().str(), "");
}

// LazyVec: an Argument's vectors cost a pointer until set, and copy as values.
TEST(LazyVec, BehavesAsAVector) {
  LazyVec<int64_t> a;
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.size(), 0u);
  int n = 0;
  for ([[maybe_unused]] auto& x : a) ++n;  // non-const iteration allocates nothing
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(a.get().empty());
  a.push_back(3);
  a.emplace_back(4);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1], 4);
  LazyVec<int64_t> b = a;  // a deep copy
  b.push_back(5);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(b.size(), 3u);
  const std::vector<int64_t>& view = b;
  EXPECT_EQ(view, (std::vector<int64_t>{3, 4, 5}));
  a = std::vector<int64_t>{7};
  EXPECT_EQ(a.get(), std::vector<int64_t>{7});
  a = std::vector<int64_t>{};
  EXPECT_TRUE(a.empty());
  LazyVec<bool> bools{true, false};
  EXPECT_TRUE(bools[0]);
  EXPECT_FALSE(bools.back());
  Argument arg;
  arg.symints.push_back(SymIntArg{std::nullopt, "s0"});
  Argument copy = arg;
  EXPECT_EQ(copy.symints.at(0).name, "s0");
  EXPECT_THROW(static_cast<void>(copy.symints.at(1)), std::out_of_range);
}

namespace {

// What a Program holds, as text, to compare two readings of one JSON.
std::string describe(const Program& p) {
  std::string s;
  auto arg = [&](const Argument& a) {
    s += std::to_string(static_cast<int>(a.kind)) + ":" + a.variant + ":" + a.name + "(";
    for (auto& n : a.names) s += n + ",";
    for (auto v : a.ints) s += std::to_string(v) + ",";
    s += std::to_string(a.i) + "," + std::to_string(a.f) + ")";
  };
  for (auto& n : p.graph.nodes) {
    s += n.target + "|" + n.name + "|" + n.stack_trace.str() + "|" + n.nn_module_stack.str() + "|";
    for (auto& in : n.inputs) {
      s += in.name + "=";
      arg(in.arg);
      s += ";";
    }
    for (auto& o : n.outputs) arg(o);
    s += "\n";
  }
  for (auto& [k, m] : p.graph.tensor_values) {
    s += std::string(k) + ":" + std::to_string(m.scalar_type) + "[";
    for (auto& d : m.sizes) s += d.value ? std::to_string(*d.value) + "," : d.expr->render() + ",";
    s += "]\n";
  }
  for (auto& in : p.input_specs) s += in.arg_name + "<-" + in.target + "\n";
  for (auto& o : p.output_specs) s += o.arg.name + "->\n";
  return s;
}

// program_json() with its node repeated `copies` times (add, add_1, ...) and
// a tensor value for each.
std::string repeated_program(int copies) {
  std::string json = program_json();
  const size_t at = json.find(R"({
        "target": "torch.ops.aten.add.Tensor")");
  const size_t end = json.find("\n      }]", at) + 8;
  const std::string node = json.substr(at, end - at);
  std::string more, values;
  for (int k = 1; k < copies; ++k) {
    std::string n = node;
    const std::string name = "add_" + std::to_string(k);
    n.replace(n.find("\"name\": \"add\""), 13, "\"name\": \"" + name + "\"");
    n.replace(n.find("{\"as_tensor\": {\"name\": \"add\"}}"), 30,
              "{\"as_tensor\": {\"name\": \"" + name + "\"}}");
    more += ", " + n;
    values +=
        ", \"" + name + "\": {\"dtype\": 7, \"sizes\": [{\"as_int\": " + std::to_string(k) + "}]}";
  }
  json.insert(end, more);
  const size_t tv = json.find("\"add\": {\"dtype\": 7");
  const size_t tv_end = json.find("\n      },\n      \"sym_int_values\"", tv);
  json.insert(tv_end, values);
  return json;
}

}  // namespace

// The reader parses a program's nodes and tensor values a batch at a time
// (json_split.h); any batch size gives what reading the whole text gives.
TEST(SchemaReader, SplitReadingEqualsWholeReading) {
  const std::string json = repeated_program(7);
  const Program whole = detail::parse_program_whole(json, "m.json");
  ASSERT_EQ(whole.graph.nodes.size(), 7u);
  ASSERT_EQ(whole.graph.tensor_values.size(), 9u);
  EXPECT_EQ(whole.graph.nodes[6].name, "add_6");
  for (size_t batch : {size_t{1}, size_t{700}, size_t{1} << 20}) {
    const Program split = detail::parse_program_split(json, "m.json", batch);
    EXPECT_EQ(describe(split), describe(whole)) << "batch " << batch;
    EXPECT_EQ(split.schema_major, whole.schema_major);
    EXPECT_EQ(split.range_constraints.size(), whole.range_constraints.size());
  }
  EXPECT_EQ(describe(parse_program(json)), describe(whole));
  // A node text that fails in its batch is named as reading the whole text names it.
  std::string bad = json;
  bad.replace(bad.rfind("\"kind\": 2"), 9, "\"kind\": \"2\"");
  std::string whole_error, error;
  try {
    detail::parse_program_whole(bad, "m.json");
  } catch (const Error& e) {
    whole_error = e.what();
  }
  try {
    parse_program(bad, "m.json");
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(whole_error, "");
  EXPECT_EQ(error, whole_error);
  EXPECT_NE(error.find("nodes[6]"), std::string::npos) << error;
}

// Text laid out otherwise is read whole: the same program, or the same error.
TEST(SchemaReader, UnsplittableTextIsReadWhole) {
  const std::string json = repeated_program(3);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string j = json;
    const size_t at = j.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    j.replace(at, from.size(), to);
    return j;
  };
  // An escaped key on the way ("nodes" spelled with \u0073): simdjson reads it as "nodes".
  const std::string escaped = with("\"nodes\":", "\"node\\u0073\":");
  EXPECT_FALSE(split_program(escaped));
  EXPECT_EQ(describe(parse_program(escaped)), describe(detail::parse_program_whole(json, "m")));
  // nodes repeated: not split; read as simdjson reads it.
  const std::string twice = with("\"sym_int_values\": {}", "\"sym_int_values\": {}, \"nodes\": []");
  EXPECT_FALSE(split_program(twice));
  EXPECT_EQ(describe(parse_program(twice)), describe(detail::parse_program_whole(twice, "m")));
  // No tensor_values, an unterminated string, a non-object: not split, errors as before.
  for (const std::string& j : {with("\"tensor_values\"", "\"tensor_valuez\""),
                               json.substr(0, json.size() / 2), std::string("[1, 2]")}) {
    EXPECT_FALSE(split_program(j));
    std::string a = "(none)", b = "(none)";
    try {
      parse_program(j, "m.json");
    } catch (const Error& e) {
      a = e.what();
    }
    try {
      detail::parse_program_whole(j, "m.json");
    } catch (const Error& e) {
      b = e.what();
    }
    EXPECT_EQ(a, b);
    EXPECT_NE(a, "(none)");
  }
}
