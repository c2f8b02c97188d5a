// NameSet and NameMap: the name tables of graph building and passes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/name_map.h"
#include "ir/name_set.h"

using namespace pt2onnx;

TEST(NameSet, DenseIdsInOrderOfAddition) {
  NameSet s;
  EXPECT_FALSE(s.contains("a"));
  EXPECT_EQ(s.find("a"), NameSet::kNone);
  auto [a, added_a] = s.insert("a");
  auto [b, added_b] = s.insert("bb");
  auto [a2, added_a2] = s.insert(std::string("a"));
  EXPECT_TRUE(added_a);
  EXPECT_TRUE(added_b);
  EXPECT_FALSE(added_a2);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(a2, a);
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.name(b), "bb");
  // The empty name is a name like any other.
  auto [e, added_e] = s.insert("");
  EXPECT_TRUE(added_e);
  EXPECT_EQ(s.find(""), e);
}

// Past many rehashes and arena chunks (names longer than a chunk included),
// every name keeps its id and its bytes; a copy has the same ids.
TEST(NameSet, GrowsAndCopies) {
  NameSet s;
  std::vector<std::string> names;
  for (int k = 0; k < 100000; ++k) names.push_back("value_" + std::to_string(k) + "/MatMul");
  names.push_back(std::string(3 << 20, 'x'));  // longer than an arena chunk
  for (size_t k = 0; k < names.size(); ++k) ASSERT_EQ(s.insert(names[k]).first, k);
  NameSet copy = s;
  for (size_t k = 0; k < names.size(); ++k) {
    ASSERT_EQ(s.find(names[k]), k);
    ASSERT_EQ(copy.find(names[k]), k);
    ASSERT_EQ(copy.name(static_cast<uint32_t>(k)), names[k]);
  }
  EXPECT_FALSE(s.contains("value_100000/MatMul"));
  EXPECT_FALSE(s.contains("value_1/MatMu"));
}

TEST(NameMap, BehavesAsTheMapItReplaces) {
  NameMap<ValueType> m;
  m["x"] = ValueType{DType::Float, Shape{Dim::of(2)}};
  ValueType& x = m["x"];
  // References survive many insertions (the passes hold them while adding).
  for (int k = 0; k < 5000; ++k) m["v" + std::to_string(k)].dtype = DType::Int64;
  EXPECT_EQ(x.dtype, DType::Float);
  EXPECT_EQ(&x, &m["x"]);
  EXPECT_EQ(m.size(), 5001u);
  EXPECT_EQ(m.count("v7"), 1u);
  EXPECT_EQ(m.at("v7").dtype, DType::Int64);
  EXPECT_THROW((void)m.at("nothing"), std::out_of_range);
  EXPECT_EQ(m.find("nothing"), m.end());
  // Erased: absent to every lookup and to iteration; added again with a
  // default value.
  EXPECT_EQ(m.erase("v7"), 1u);
  EXPECT_EQ(m.erase("v7"), 0u);
  EXPECT_EQ(m.count("v7"), 0u);
  EXPECT_EQ(m.get("v7"), nullptr);
  EXPECT_EQ(m.size(), 5000u);
  size_t seen = 0;
  for (auto& [name, t] : m) {
    EXPECT_NE(name, "v7");
    EXPECT_EQ(m.get(name), &t);
    ++seen;
  }
  EXPECT_EQ(seen, 5000u);
  EXPECT_EQ(m["v7"].dtype, DType::Undefined);
  EXPECT_EQ(m.size(), 5001u);
  auto it = m.find("x");
  ASSERT_NE(it, m.end());
  EXPECT_EQ(it->first, "x");
  EXPECT_EQ(it->second.dtype, DType::Float);
}

// A copy's names are its own: the original may go.
TEST(NameMap, CopyOwnsItsNames) {
  NameMap<int> copy;
  {
    NameMap<int> m;
    for (int k = 0; k < 1000; ++k) m["name_" + std::to_string(k)] = k;
    m.erase("name_3");
    copy = m;
  }
  EXPECT_EQ(copy.size(), 999u);
  for (auto& [name, v] : copy) EXPECT_EQ(name, "name_" + std::to_string(v));
  EXPECT_EQ(copy.count("name_3"), 0u);
  EXPECT_EQ(copy.at("name_999"), 999);
  // A graph copy carries its types the same way.
  Graph g;
  g.types["a"] = ValueType{DType::Float, Shape{}};
  Graph h = g;
  g = Graph{};
  ASSERT_NE(h.type_of("a"), nullptr);
  EXPECT_EQ(h.type_of("a")->dtype, DType::Float);
}

// emplace as std::unordered_map's: adds only when absent (an erased name is absent), and says so.
TEST(NameMap, EmplaceKeepsThePresentValue) {
  NameMap<std::string> m;
  auto [it, added] = m.emplace("x", "x_onnx");
  EXPECT_TRUE(added);
  EXPECT_EQ(it->second, "x_onnx");
  auto [again, added_again] = m.emplace("x", std::string("other"));
  EXPECT_FALSE(added_again);
  EXPECT_EQ(again->second, "x_onnx");
  m.at("x") = "renamed";  // the mutable at, as Env::values' users write through it
  EXPECT_EQ(m.at("x"), "renamed");
  m.erase("x");
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.emplace("x", "back").second);
  EXPECT_EQ(m.at("x"), "back");
  EXPECT_EQ(m.size(), 1u);
  EXPECT_THROW(m.at("missing"), std::out_of_range);
}
