// Finds the two large parts of a program's JSON text, the top graph's nodes
// and tensor_values, without parsing it, so the reader can parse them a batch
// at a time: a document tree of the whole text cost 2.8 KB a node on top of
// the program read from it (bench/node_scaling.md).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pt2onnx::schema {

struct ProgramSplit {
  // The text with $.graph_module.graph.nodes as [] and .tensor_values as {}.
  std::string skeleton;
  // Each node's text, in order.
  std::vector<std::string_view> nodes;
  // Each tensor_values member: its key's text (no escapes) and its value's.
  std::vector<std::pair<std::string_view, std::string_view>> tensor_values;
};

// nullopt when the text is not laid out as expected: not an object, the
// members absent or repeated, an escaped key on the way, text the scan
// cannot follow. The caller then parses the whole text, which names any
// error. A split of malformed text yields pieces that fail to parse.
std::optional<ProgramSplit> split_program(std::string_view json);

struct Program;
namespace detail {
// For tests: the two ways parse_program reads, split (`batch_bytes` of text
// a batch; throws if the text does not split) and whole.
Program parse_program_split(std::string_view json, const std::string& source, size_t batch_bytes);
Program parse_program_whole(std::string_view json, const std::string& source);
}  // namespace detail

}  // namespace pt2onnx::schema
