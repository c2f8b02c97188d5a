// Which archives are read (schema/versions.h): the version stamp, the
// messages naming it, the newer-minor note.
#include <gtest/gtest.h>

#include "pt2onnx/error.h"
#include "schema/program.h"
#include "schema/versions.h"

using namespace pt2onnx;
using namespace pt2onnx::schema;

namespace {

std::string stamp_json(const std::string& version, const std::string& rest = "") {
  return R"({"schema_version": )" + version + rest + "}";
}

std::string error_of(const std::string& json) {
  try {
    parse_program(json, "m.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(Versions, PeekReadsTheStamp) {
  auto v =
      peek_version(stamp_json(R"({"major": 8, "minor": 17})", R"(, "torch_version": "2.11.0")"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->major, 8);
  EXPECT_EQ(v->minor, 17);
  EXPECT_EQ(v->torch_version, "2.11.0");
  EXPECT_EQ(describe(*v), "schema 8.17, written by torch 2.11.0");
  auto no_minor = peek_version(stamp_json(R"({"major": 9})"));
  ASSERT_TRUE(no_minor);
  EXPECT_EQ(describe(*no_minor), "schema 9.0 (no torch_version in the archive)");
}

TEST(Versions, PeekNeverThrows) {
  for (const char* bad :
       {"", "{", "[]", R"({"schema_version": 8})", R"({"schema_version": {"major": "8"}})",
        R"({"schema_version": {"major": 4294967304}})",
        R"({"schema_version": {"major": 99999999999999999999}})"})
    EXPECT_FALSE(peek_version(bad)) << bad;
  // A torch_version of another kind is left out, the stamp kept.
  auto v = peek_version(stamp_json(R"({"major": 8, "minor": 1})", R"(, "torch_version": 2)"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->torch_version, "");
}

TEST(Versions, MajorOtherThanEightNamesBothRanges) {
  for (int major : {7, 9}) {
    std::string e =
        error_of(stamp_json(R"({"major": )" + std::to_string(major) + R"(, "minor": 2})",
                            R"(, "torch_version": "2.99.0")"));
    EXPECT_TRUE(has(e, "unsupported schema major version " + std::to_string(major))) << e;
    EXPECT_TRUE(has(e, "schema " + std::to_string(major) + ".2, written by torch 2.99.0")) << e;
    EXPECT_TRUE(has(e, "this pt2onnx reads schema 8.x, written by torch 2.10 to 2.14.1")) << e;
  }
}

TEST(Versions, NoteOnlyForMinorsNewerThanTested) {
  EXPECT_EQ(newer_minor_note({8, kNewestTestedMinor, "2.14.1"}), "");
  EXPECT_EQ(newer_minor_note({8, 15, "2.10.0"}), "");
  EXPECT_EQ(newer_minor_note({9, 99, ""}), "");  // refused by the reader anyway
  std::string n = newer_minor_note({8, kNewestTestedMinor + 1, "2.15.0"});
  EXPECT_TRUE(has(n, "schema 8.21, written by torch 2.15.0, newer than the newest tested (8.20)"))
      << n;
  std::string json = stamp_json(R"({"major": 8, "minor": 30})");
  EXPECT_EQ(with_newer_minor_note("boom", json).rfind("boom [the archive holds schema 8.30", 0),
            0u);
  EXPECT_EQ(with_newer_minor_note("boom", "not json"), "boom");
}

// torch 2.10 (schema 8.15) writes nodes without "name" (2.11, schema 8.17, has
// it): the node takes its first output's name (tests/data/compat/2.10.0).
TEST(Versions, NodeWithoutNameTakesItsFirstOutputs) {
  std::string json = R"({"schema_version": {"major": 8, "minor": 15}, "torch_version": "2.10.0",
  "graph_module": {
    "graph": {
      "inputs": [{"as_tensor": {"name": "x"}}], "outputs": [{"as_tensor": {"name": "relu"}}],
      "nodes": [{"target": "torch.ops.aten.relu.default",
                 "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1}],
                 "outputs": [{"as_tensor": {"name": "relu"}}], "metadata": {}},
                {"target": "torch.ops.aten.split.Tensor",
                 "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "relu"}}, "kind": 1}],
                 "outputs": [{"as_tensors": [{"name": "split_0"}, {"name": "split_1"}]}]}],
      "tensor_values": {}, "sym_int_values": {}},
    "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
                  "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "relu"}}}}]}}})";
  Program p = parse_program(json);
  ASSERT_EQ(p.graph.nodes.size(), 2u);
  EXPECT_EQ(p.graph.nodes[0].name, "relu");
  EXPECT_EQ(p.graph.nodes[1].name, "split_0");
  EXPECT_EQ(p.schema_minor, 15);
  EXPECT_EQ(p.torch_version, "2.10.0");
}
