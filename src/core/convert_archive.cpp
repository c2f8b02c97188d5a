// .pt2 archives: open (map, zip, weight tables) then the common pipeline.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <string_view>

#include "archive/pt2_archive.h"
#include "convert/convert_graph.h"
#include "core/pipeline.h"
#include "ir/graph.h"
#include "pt2onnx/pt2onnx.h"
#include "schema/program.h"
#include "schema/versions.h"

namespace pt2onnx {

namespace {

// Runs f; when it fails on an archive whose schema is newer than the tested
// ones, the error says so (schema/versions.h). Other errors pass unchanged.
template <typename F>
auto noting_newer_schema(std::string_view program_json, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    std::string m = schema::with_newer_minor_note(e.what(), program_json);
    if (m == e.what()) throw;
    throw Error(m);
  }
}

Result convert_opened(const Pt2Archive& a, const std::string& output_path, const Options& options,
                      double open_seconds) {
  Result r = noting_newer_schema(a.program_json(), [&] {
    return convert_program_from(a.program_json(), a.program_source(), a.weights(), output_path,
                                options, a.program_json_place());
  });
  r.timings.insert(r.timings.begin(), {"open", open_seconds});
  return r;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result convert(const std::string& input_path, const std::string& output_path,
               const Options& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto a = Pt2Archive::open(input_path);
  return convert_opened(*a, output_path, options, since(t0));
}

Result convert_buffer(const void* data, size_t size, const std::string& output_path,
                      const Options& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto a = Pt2Archive::from_memory(static_cast<const uint8_t*>(data), size, "<archive in memory>");
  return convert_opened(*a, output_path, options, since(t0));
}

ArchiveInfo inspect(const std::string& input_path, int opset) {
  auto a = Pt2Archive::open(input_path);
  schema::Program p = noting_newer_schema(a->program_json(), [&] {
    return schema::parse_program(a->program_json(), a->program_source());
  });
  ArchiveInfo info;
  info.layout = a->layout();
  info.schema_major = p.schema_major;
  info.schema_minor = p.schema_minor;
  info.torch_version = p.torch_version;
  auto describe = [&](const std::string& name) {
    ArchiveInfo::Value v;
    v.name = name;
    auto it = p.graph.tensor_values.find(name);
    if (it == p.graph.tensor_values.end()) return v;
    v.dtype = std::string(dtype_name(it->second.dtype));
    for (auto& s : it->second.sizes)
      v.dims.push_back(s.value ? std::to_string(*s.value) : s.expr->render());
    return v;
  };
  for (auto& s : p.input_specs)
    if (s.kind == schema::InputSpec::Kind::UserInput) info.inputs.push_back(describe(s.arg_name));
  for (auto& s : p.output_specs)
    if (s.kind == schema::OutputSpec::Kind::UserOutput)
      info.outputs.push_back(describe(s.arg.name));
  std::map<std::string, size_t> hist;
  for (auto& n : p.graph.nodes) ++hist[n.target];
  for (auto& [t, n] : hist) {
    info.op_histogram.emplace_back(t, n);
    if (!converts(t, opset)) info.unsupported.push_back(t);
  }
  std::stable_sort(info.op_histogram.begin(), info.op_histogram.end(),
                   [](auto& x, auto& y) { return x.second > y.second; });
  // Bytes stored, not bytes viewed: tied / aliased weights share storage, so
  // count the union of their byte ranges.
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (auto& [fqn, w] : a->weights()) {
    ++info.weights;
    auto b = strided_span_bytes(w.sizes, w.strides, dtype_size(dtype_from_torch_name(w.dtype)));
    auto start = reinterpret_cast<uintptr_t>(w.data);
    if (b && *b) ranges.emplace_back(start, start + *b);
  }
  std::sort(ranges.begin(), ranges.end());
  uintptr_t end = 0;
  for (auto [b, e] : ranges) {
    if (e <= end) continue;
    info.weight_bytes += e - std::max(b, end);
    end = e;
  }
  return info;
}

}  // namespace pt2onnx
