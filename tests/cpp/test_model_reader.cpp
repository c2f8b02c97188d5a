// The ONNX reader (onnx/model_reader.h): models written by our writer read
// back equal, a model made by the `onnx` package, and malformed bytes
// (every truncation, byte corruption, inconsistent lengths) end in
// pt2onnx::Error naming the file and field, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "onnx/model_reader.h"
#include "onnx/model_writer.h"
#include "onnx/pretty.h"
#include "onnx/wire.h"
#include "pt2onnx/error.h"

using namespace pt2onnx;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct TmpDir {
  fs::path p;
  TmpDir() {
    p = fs::temp_directory_path() / ("pt2onnx_reader_" + std::to_string(::getpid()));
    fs::create_directories(p);
  }
  ~TmpDir() { fs::remove_all(p); }
};

Node make_node(std::string op, std::vector<std::string> in, std::vector<std::string> out,
               std::vector<Attr> attrs = {}) {
  Node n;
  n.op_type = std::move(op);
  n.name = n.op_type + "_" + out.at(0);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

ValueType tensor_type(DType t, Shape s) { return ValueType{t, std::move(s)}; }

// A graph using every attribute kind, a subgraph, provenance, a custom-domain
// call of a function with an attribute reference and a default.
struct Sample {
  std::vector<float> w{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1.0f};
  std::vector<int64_t> shape{3, 2};
  Graph g;

  Sample() {
    auto x_t = tensor_type(DType::Float, {Dim::symbol("batch"), Dim::of(3)});
    g.name = "sample";
    g.inputs.push_back({"x", x_t});
    g.types["x"] = x_t;
    TensorData wd;
    wd.dtype = DType::Float;
    wd.dims = {2, 3};
    wd.data = reinterpret_cast<const uint8_t*>(w.data());
    g.initializers.push_back({"fc.weight", wd});
    g.initializers.push_back({"shape", TensorData::from_vector(DType::Int64, {2}, shape)});

    Node mm = make_node("MatMul", {"x", "fc.weight"}, {"mm"});
    mm.origin = std::make_shared<const Origin>(
        Origin{"linear", "aten.linear.default", "encoder.fc", nullptr});
    g.nodes.push_back(mm);
    g.types["mm"] = tensor_type(DType::Float, {Dim::symbol("batch"), Dim::of(3)});

    Attr strs;
    strs.name = "names";
    strs.kind = Attr::Kind::Strings;
    strs.strings = {"a", "", "c d"};
    g.nodes.push_back(make_node(
        "Kitchen", {"mm", "", "shape"}, {"k1", "k2"},
        {Attr::Int("i", -7), Attr::Float("f", 0.1f), Attr::Str("s", std::string("x\0y", 3)),
         Attr::Ints("is", {1, -2, 1LL << 40}), Attr::Floats("fs", {0.5f, -0.25f}), strs,
         Attr::Tensor("t", TensorData::from_vector<int32_t>(DType::Int32, {3}, {4, -5, 6}))}));
    g.nodes.back().domain = "custom.ops";
    g.domain_versions["custom.ops"] = 1;

    Graph then_g;
    then_g.name = "then_body";
    then_g.nodes.push_back(make_node("Relu", {"mm"}, {"r"}));
    then_g.nodes.back().edit_origin().module_path = "branch";
    then_g.outputs.push_back({"r", tensor_type(DType::Float, {Dim::symbol("batch"), Dim::of(3)})});
    Graph else_g;
    else_g.name = "else_body";
    else_g.nodes.push_back(make_node("Neg", {"mm"}, {"n"}));
    else_g.outputs.push_back({"n", tensor_type(DType::Float, {Dim::symbol("batch"), Dim::of(3)})});
    g.nodes.push_back(
        make_node("If", {"k2"}, {"if_out"},
                  {Attr::Subgraph("then_branch", then_g), Attr::Subgraph("else_branch", else_g)}));

    Node call = make_node("ScaleAdd", {"if_out", "mm"}, {"y"}, {Attr::Float("scale", 3.0f)});
    call.domain = "custom.fn";
    g.nodes.push_back(call);
    g.domain_versions["custom.fn"] = 1;
    g.outputs.push_back({"y", tensor_type(DType::Float, {Dim::symbol("batch"), Dim::unknown()})});

    Function fn;
    fn.domain = "custom.fn";
    fn.name = "ScaleAdd";
    fn.inputs = {"a", "b"};
    fn.outputs = {"out"};
    fn.attributes = {"scale", "bias"};
    fn.attribute_defaults = {Attr::Float("bias", 0.5f)};
    Attr ref;
    ref.name = "value_float";
    ref.kind = Attr::Kind::Float;
    ref.ref = "scale";
    fn.nodes.push_back(make_node("Constant", {}, {"s"}, {ref}));
    fn.nodes.push_back(make_node("Mul", {"a", "s"}, {"as"}));
    fn.nodes.push_back(make_node("Add", {"as", "b"}, {"out"}));
    fn.opset_imports[""] = 18;
    fn.doc = "a * scale + b";
    g.functions.push_back(fn);
  }
};

void expect_same_nodes(const std::vector<Node>& a, const std::vector<Node>& b);

void expect_same_graph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  expect_same_nodes(a.nodes, b.nodes);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].name, b.inputs[i].name);
    EXPECT_EQ(value_type_text(a.inputs[i].type), value_type_text(b.inputs[i].type));
  }
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(a.outputs[i].name, b.outputs[i].name);
    EXPECT_EQ(value_type_text(a.outputs[i].type), value_type_text(b.outputs[i].type));
  }
  ASSERT_EQ(a.initializers.size(), b.initializers.size());
  for (size_t i = 0; i < a.initializers.size(); ++i) {
    auto &x = a.initializers[i].data, &y = b.initializers[i].data;
    EXPECT_EQ(a.initializers[i].name, b.initializers[i].name);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.dims, y.dims);
    ASSERT_EQ(x.nbytes(), y.nbytes());
    EXPECT_EQ(std::memcmp(x.bytes(), y.bytes(), x.nbytes()), 0) << a.initializers[i].name;
  }
}

void expect_same_nodes(const std::vector<Node>& a, const std::vector<Node>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("node " + a[i].name);
    EXPECT_EQ(a[i].op_type, b[i].op_type);
    EXPECT_EQ(a[i].domain, b[i].domain);
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].inputs, b[i].inputs);
    EXPECT_EQ(a[i].outputs, b[i].outputs);
    EXPECT_EQ(a[i].module_path(), b[i].module_path());
    EXPECT_EQ(a[i].fx_node(), b[i].fx_node());
    EXPECT_EQ(a[i].fx_target(), b[i].fx_target());
    ASSERT_EQ(a[i].attrs.size(), b[i].attrs.size());
    for (size_t k = 0; k < a[i].attrs.size(); ++k) {
      const Attr &x = a[i].attrs[k], &y = b[i].attrs[k];
      if (x.kind == Attr::Kind::Graph) {
        EXPECT_EQ(x.name, y.name);
        ASSERT_EQ(y.kind, Attr::Kind::Graph);
        expect_same_graph(*x.g, *y.g);
      } else {
        EXPECT_TRUE(x == y) << "attribute " << x.name;
      }
    }
  }
}

std::string written(const Graph& g, const fs::path& path, int ir_version) {
  WriteOptions o;
  o.ir_version = ir_version;
  o.opset = 18;
  write_model(g, path.string(), o);
  return slurp(path.string());
}

// read_model(prefix / corrupted copy) either reads or throws Error naming the source.
size_t errors_over(const std::vector<std::string>& inputs) {
  size_t errors = 0;
  for (auto& in : inputs) {
    try {
      read_model(in, "bad.onnx");
    } catch (const Error& e) {
      ++errors;
      EXPECT_EQ(std::string(e.what()).rfind("bad.onnx: ", 0), 0u) << e.what();
    }
  }
  return errors;
}

}  // namespace

class ReaderRoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(ReaderRoundTrip, EqualsWhatWasWritten) {
  // IR 10 keeps provenance in metadata_props, IR 8 in doc_string.
  TmpDir dir;
  Sample s;
  std::string bytes = written(s.g, dir.p / "m.onnx", GetParam());
  ReadModel m = read_model(bytes, "m.onnx");
  EXPECT_EQ(m.ir_version, GetParam());
  EXPECT_EQ(m.producer_name, "pt2onnx");
  EXPECT_EQ(m.producer_version, PT2ONNX_VERSION);
  EXPECT_EQ(m.opset_imports,
            (std::map<std::string, int64_t>{{"", 18}, {"custom.fn", 1}, {"custom.ops", 1}}));
  EXPECT_EQ(m.graph.domain_versions, s.g.domain_versions);
  expect_same_graph(s.g, m.graph);
  // value_info of node outputs lands in types, beside the inputs' and outputs'.
  ASSERT_TRUE(m.graph.type_of("mm"));
  EXPECT_EQ(value_type_text(*m.graph.type_of("mm")), "float32[batch, 3]");
  EXPECT_EQ(value_type_text(*m.graph.type_of("y")), "float32[batch, ?]");
  // Initializers with raw_data are views on the bytes read, not copies.
  const uint8_t* w = m.graph.initializers[0].data.data;
  auto* lo = reinterpret_cast<const uint8_t*>(bytes.data());
  EXPECT_TRUE(w >= lo && w + 24 <= lo + bytes.size());
  EXPECT_FALSE(m.graph.initializers[0].data.owned);

  ASSERT_EQ(m.graph.functions.size(), 1u);
  const Function &a = s.g.functions[0], &b = m.graph.functions[0];
  EXPECT_EQ(a.domain, b.domain);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.attributes, b.attributes);
  ASSERT_EQ(b.attribute_defaults.size(), 1u);
  EXPECT_TRUE(a.attribute_defaults[0] == b.attribute_defaults[0]);
  EXPECT_EQ(a.opset_imports, b.opset_imports);
  EXPECT_EQ(a.doc, b.doc);
  expect_same_nodes(a.nodes, b.nodes);
  EXPECT_EQ(b.nodes[0].attrs[0].ref, "scale");
  EXPECT_EQ(b.nodes[0].attrs[0].kind, Attr::Kind::Float);
}

INSTANTIATE_TEST_SUITE_P(IrVersions, ReaderRoundTrip, ::testing::Values(8, 10));

TEST(Reader, ExternalDataIsReferencedNotRead) {
  TmpDir dir;
  Sample s;
  std::vector<float> big(600, 0.25f);
  TensorData bd;
  bd.dtype = DType::Float;
  bd.dims = {600};
  bd.data = reinterpret_cast<const uint8_t*>(big.data());
  s.g.initializers.push_back({"big", bd});
  WriteOptions o;
  o.external_data = ExternalData::Always;
  auto path = (dir.p / "ext.onnx").string();
  write_model(s.g, path, o);
  fs::remove(path + ".data");  // not needed to read the model
  ReadModel m = read_model(slurp(path), path);
  ASSERT_EQ(m.external.count("big"), 1u);
  const ExternalRef& r = m.external.at("big");
  EXPECT_EQ(r.location, "ext.onnx.data");
  EXPECT_EQ(r.length, 2400u);
  EXPECT_EQ(r.offset % 4096, 0u);
  const Initializer& init = m.graph.initializers.back();
  EXPECT_EQ(init.name, "big");
  EXPECT_EQ(init.data.dims, std::vector<int64_t>{600});
  EXPECT_EQ(init.data.data, nullptr);
  EXPECT_FALSE(init.data.owned);
  // The 24-byte weight is below the external threshold: still inline.
  EXPECT_EQ(m.external.count("fc.weight"), 0u);
}

TEST(Reader, ModelMadeByTheOnnxPackage) {
  // tests/data/onnx/make_onnx_models.py made it.
  const std::string path = PT2ONNX_SOURCE_DIR "/tests/data/onnx/made_by_onnx.onnx";
  std::string bytes = slurp(path);
  ASSERT_FALSE(bytes.empty());
  ReadModel m = read_model(bytes, path);
  EXPECT_EQ(m.ir_version, 10);
  EXPECT_EQ(m.producer_name, "onnx-helper");
  EXPECT_EQ(m.opset_imports.at(""), 18);
  EXPECT_EQ(m.opset_imports.at("custom.ops"), 1);
  ASSERT_EQ(m.metadata_props.size(), 2u);
  EXPECT_EQ(m.metadata_props[0], (std::pair<std::string, std::string>{"author", "tests"}));
  const Graph& g = m.graph;
  EXPECT_EQ(g.name, "made_by_onnx");
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(value_type_text(g.inputs[0].type), "float32[batch, 3]");
  EXPECT_EQ(value_type_text(g.outputs[0].type), "float32[3, ?]");
  // Typed-field tensors come back as owned little-endian bytes.
  ASSERT_EQ(g.initializers.size(), 5u);
  auto floats = [](const TensorData& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.bytes(), t.nbytes());
    return v;
  };
  EXPECT_EQ(floats(g.initializers[0].data), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(g.initializers[0].data.owned);
  std::vector<int64_t> shape(2);
  std::memcpy(shape.data(), g.initializers[1].data.bytes(), 16);
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(g.initializers[2].data.dtype, DType::Float16);
  ASSERT_EQ(g.initializers[2].data.nbytes(), 4u);
  uint16_t half[2];
  std::memcpy(half, g.initializers[2].data.bytes(), 4);
  EXPECT_EQ(half[0], 0x3e00);  // 1.5
  EXPECT_EQ(half[1], 0xc000);  // -2.0
  EXPECT_EQ(floats(g.initializers[3].data), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_FALSE(g.initializers[3].data.owned);  // raw_data: a view
  EXPECT_TRUE(g.initializers[4].data.dims.empty());

  ASSERT_EQ(g.nodes.size(), 11u);
  EXPECT_EQ(g.nodes[0].attr("alpha")->f, 0.25f);
  EXPECT_EQ(g.nodes[1].module_path(), "encoder.proj");  // node metadata_props
  const Node& iff = g.nodes[4];
  ASSERT_EQ(iff.op_type, "If");
  ASSERT_EQ(subgraphs(iff).size(), 2u);
  const Attr* then_b = iff.attr("then_branch");
  ASSERT_TRUE(then_b && then_b->g);
  EXPECT_EQ(then_b->g->name, "then_body");
  EXPECT_EQ(then_b->g->nodes.at(0).op_type, "Relu");
  EXPECT_EQ(value_type_text(then_b->g->outputs.at(0).type), "float32[batch, 3]");
  EXPECT_EQ(g.nodes[5].domain, "custom.fn");
  const Attr* cv = g.nodes[7].attr("value");
  ASSERT_TRUE(cv && cv->t);
  int32_t c[2];
  std::memcpy(c, cv->t->bytes(), 8);
  EXPECT_EQ(c[0], 7);
  EXPECT_EQ(c[1], -8);
  EXPECT_EQ(g.nodes[8].inputs, (std::vector<std::string>{"x", "", "cmax"}));
  EXPECT_EQ(m.other_types.at("seq"), "seq(float32[batch, 3])");
  EXPECT_EQ(g.nodes[10].attr("names")->strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(g.nodes[10].attr("ratios")->floats, (std::vector<float>{0.5f, 2.0f}));

  ASSERT_EQ(g.functions.size(), 1u);
  const Function& fn = g.functions[0];
  EXPECT_EQ(fn.domain, "custom.fn");
  EXPECT_EQ(fn.name, "ScaleAdd");
  EXPECT_EQ(fn.attributes, std::vector<std::string>{"scale"});
  ASSERT_EQ(fn.attribute_defaults.size(), 1u);
  EXPECT_EQ(fn.attribute_defaults[0].f, 2.0f);
  EXPECT_EQ(fn.nodes[0].attrs.at(0).ref, "scale");
}

TEST(Reader, ReadsOneFunctionProto) {
  wire::Msg ref;
  ref.bytes_field(1, "value_float");
  ref.bytes_field(21, "alpha");
  ref.int_field(20, 1);
  wire::Msg node;
  node.bytes_field(2, "c");
  node.bytes_field(4, "Constant");
  node.message(5, ref);
  wire::Msg f;
  f.bytes_field(1, "F");
  f.bytes_field(5, "c");
  f.bytes_field(6, "alpha");
  f.message(7, node);
  f.bytes_field(10, "my.domain");
  Function fn = read_function(f.bytes, "f.pb");
  EXPECT_EQ(fn.name, "F");
  EXPECT_EQ(fn.domain, "my.domain");
  EXPECT_EQ(fn.attributes, std::vector<std::string>{"alpha"});
  ASSERT_EQ(fn.nodes.size(), 1u);
  EXPECT_EQ(fn.nodes[0].attrs.at(0).ref, "alpha");
}

TEST(Reader, EveryTruncationThrowsOrReads) {
  TmpDir dir;
  Sample s;
  std::string bytes = written(s.g, dir.p / "t.onnx", 10);
  std::vector<std::string> prefixes;
  for (size_t k = 0; k < bytes.size(); ++k) prefixes.push_back(bytes.substr(0, k));
  // A prefix ending between two top-level fields is a valid message (it may
  // lack the graph or the functions); every other one is an error.
  size_t errors = errors_over(prefixes);
  EXPECT_GT(errors, bytes.size() * 9 / 10);
  // Truncated inside the graph: the graph's length runs past the end.
  try {
    read_model(bytes.substr(0, bytes.size() / 2), "t.onnx");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.onnx: truncated: field 7 claims"), std::string::npos)
        << e.what();
  }
}

TEST(Reader, CorruptedBytesThrowOrRead) {
  TmpDir dir;
  Sample s;
  std::string bytes = written(s.g, dir.p / "c.onnx", 10);
  std::vector<std::string> variants;
  for (size_t k = 0; k < bytes.size(); ++k)
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x7f}, uint8_t{0x80}}) {
      std::string b = bytes;
      b[k] = static_cast<char>(v);  // (the sanitizer build checks these for UB)
      variants.push_back(std::move(b));
    }
  EXPECT_GT(errors_over(variants), 0u);
}

TEST(Reader, ErrorsNameTheFieldPath) {
  auto expect_error = [](const std::string& bytes, const std::string& text) {
    try {
      read_model(bytes, "model.onnx");
      ADD_FAILURE() << "no error, expected " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  auto model_with_node = [](const wire::Msg& bad_node) {
    wire::Msg ok;
    ok.bytes_field(4, "Relu");
    wire::Msg g;
    for (int i = 0; i < 3; ++i) g.message(1, ok);
    g.message(1, bad_node);
    wire::Msg m;
    m.int_field(1, 8);
    m.message(7, g);
    return m.bytes;
  };
  // An attribute whose string claims more bytes than the attribute holds.
  wire::Msg attr;
  attr.bytes_field(1, "mode");
  attr.tag(4, wire::kLen);
  attr.varint(50);
  attr.bytes.append("ab");
  wire::Msg node;
  node.bytes_field(4, "Pad");
  node.message(5, attr);
  expect_error(
      model_with_node(node),
      "model.onnx: graph.node[3].attribute[0]: truncated: field 4 claims 50 bytes, 2 left");
  // A string field sent as a varint.
  wire::Msg wrong;
  wrong.int_field(4, 3);
  expect_error(model_with_node(wrong),
               "model.onnx: graph.node[3].op_type: wire type varint, expected length-delimited");
  // raw_data not matching dtype and dims.
  wire::Msg t;
  t.int_field(1, 2);
  t.int_field(1, 3);
  t.int_field(2, 1);
  t.bytes_field(8, "w");
  t.bytes_field(9, std::string(20, '\0'));
  wire::Msg g;
  g.message(5, t);
  wire::Msg m;
  m.message(7, g);
  expect_error(m.bytes,
               "model.onnx: graph.initializer[0]: tensor 'w': raw_data holds 20 bytes, "
               "float32[2, 3] needs 24");
  // Negative and overflowing dims.
  wire::Msg t2;
  t2.int_field(1, -4);
  t2.int_field(2, 1);
  wire::Msg g2;
  g2.message(5, t2);
  wire::Msg m2;
  m2.message(7, g2);
  expect_error(m2.bytes, "tensor '': invalid dims [-4]");
  wire::Msg t3;
  for (int i = 0; i < 2; ++i) t3.int_field(1, 1LL << 31);  // 2^62 elements, 2^64 bytes
  t3.int_field(2, 1);
  wire::Msg g3;
  g3.message(5, t3);
  wire::Msg m3;
  m3.message(7, g3);
  expect_error(m3.bytes, "tensor '': dims [2147483648, 2147483648] overflow");
  // An over-long varint; a model without a graph.
  expect_error(std::string(11, '\xff'), "model.onnx: malformed varint");
  expect_error(std::string("\x08\x08", 2), "model.onnx: not an ONNX model: no graph");
}

TEST(Reader, NestingIsBounded) {
  // If bodies nested 200 deep: an error, not a stack overflow.
  std::string g;  // innermost graph: empty
  for (int i = 0; i < 200; ++i) {
    wire::Msg a;
    a.bytes_field(1, "then_branch");
    a.bytes_field(6, g);
    a.int_field(20, 5);
    wire::Msg n;
    n.bytes_field(4, "If");
    n.message(5, a);
    wire::Msg outer;
    outer.message(1, n);
    g = outer.bytes;
  }
  wire::Msg m;
  m.bytes_field(7, g);
  EXPECT_THROW(read_model(m.bytes, "deep.onnx"), Error);
}

TEST(Reader, SkipsUnknownFieldsOfEveryWireType) {
  wire::Msg node;
  node.bytes_field(4, "Relu");
  node.int_field(99, 5);         // varint
  node.float_field(98, 1.0f);    // fixed32
  node.tag(97, wire::kFixed64);  // fixed64
  node.bytes.append(8, '\x01');
  node.bytes_field(96, "whatever");  // length-delimited
  node.tag(95, wire::WireType(3));   // a group holding a varint
  node.int_field(1, 1);
  node.tag(95, wire::WireType(4));
  node.bytes_field(2, "y");
  wire::Msg g;
  g.message(1, node);
  wire::Msg m;
  m.message(7, g);
  m.bytes_field(1000, "unknown model field");
  ReadModel r = read_model(m.bytes, "u.onnx");
  ASSERT_EQ(r.graph.nodes.size(), 1u);
  EXPECT_EQ(r.graph.nodes[0].op_type, "Relu");
  EXPECT_EQ(r.graph.nodes[0].outputs, std::vector<std::string>{"y"});
}

TEST(Pretty, SampleModelText) {
  TmpDir dir;
  Sample s;
  // 22 initializers: 20 listed, then "... 2 more".
  std::vector<int64_t> ones(3, 1);
  for (int i = 0; i < 20; ++i)
    s.g.initializers.push_back(
        {"extra" + std::to_string(i), TensorData::from_vector(DType::Int64, {3}, ones)});
  Attr longs = Attr::Ints("pads", std::vector<int64_t>(40, 2));
  s.g.nodes[0].attrs.push_back(longs);
  std::string bytes = written(s.g, dir.p / "p.onnx", 10);
  std::string text = pretty(read_model(bytes, "p.onnx"));
  std::string extra;
  for (int i = 0; i < 18; ++i) extra += "  extra" + std::to_string(i) + ": int64[3]\n";
  EXPECT_EQ(text, "ir_version 10, producer pt2onnx " PT2ONNX_VERSION
                  "\n"
                  "opsets: ai.onnx 18, custom.fn 1, custom.ops 1\n"
                  "graph sample\n"
                  "inputs: 1\n"
                  "  x: float32[batch, 3]\n"
                  "initializers: 22, 520 bytes\n"
                  "  fc.weight: float32[2, 3]\n"
                  "  shape: int64[2]\n" +
                      extra +
                      "  ... 2 more\n"
                      "nodes: 4\n"
                      "  %mm = MatMul[pads=[2, 2, 2, 2, 2, 2, 2, 2, ... (40 values)]](%x, "
                      "%fc.weight)   # encoder.fc\n"
                      "  %k1, %k2 = custom.ops::Kitchen[i=-7, f=0.1, s=\"x\\x00y\", is=[1, -2, "
                      "1099511627776], fs=[0.5, -0.25], names=[\"a\", \"\", \"c d\"], "
                      "t=int32[3]{4, -5, 6}](%mm, \"\", %shape)\n"
                      "  %if_out = If(%k2)\n"
                      "    then_branch: graph then_body() -> (r: float32[batch, 3])\n"
                      "      %r = Relu(%mm)   # branch\n"
                      "    else_branch: graph else_body() -> (n: float32[batch, 3])\n"
                      "      %n = Neg(%mm)\n"
                      "  %y = custom.fn::ScaleAdd[scale=3.0](%if_out, %mm)\n"
                      "outputs: 1\n"
                      "  y: float32[batch, ?]\n"
                      "\n"
                      "function custom.fn::ScaleAdd(%a, %b) -> (%out) [scale, bias=0.5]\n"
                      "  opsets: ai.onnx 18\n"
                      "  doc: \"a * scale + b\"\n"
                      "  %s = Constant[value_float=@scale]()\n"
                      "  %as = Mul(%a, %s)\n"
                      "  %out = Add(%as, %b)\n");
}
