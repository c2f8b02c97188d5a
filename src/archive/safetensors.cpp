#include "archive/safetensors.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

#include "ir/dtype.h"

namespace pt2onnx {

namespace {

// The format's own cap on the header (safetensors refuses larger ones): a
// hostile length cannot make us allocate more.
constexpr uint64_t kMaxHeader = 100'000'000;

struct Range {
  uint64_t begin, end;
  std::string name;
};

}  // namespace

std::string_view safetensors_dtype_to_torch(std::string_view st) {
  static const std::pair<std::string_view, std::string_view> kNames[] = {
      {"BOOL", "bool"},
      {"U8", "uint8"},
      {"I8", "int8"},
      {"I16", "int16"},
      {"U16", "uint16"},
      {"F16", "float16"},
      {"BF16", "bfloat16"},
      {"I32", "int32"},
      {"U32", "uint32"},
      {"F32", "float32"},
      {"F64", "float64"},
      {"I64", "int64"},
      {"U64", "uint64"},
      {"F8_E4M3", "float8_e4m3fn"},
      {"F8_E5M2", "float8_e5m2"},
      {"C64", "complex64"},
  };
  for (auto& [s, t] : kNames)
    if (s == st) return t;
  return {};
}

SafetensorsFiles::SafetensorsFiles(const std::vector<std::string>& paths) {
  if (paths.empty()) throw Error("no safetensors file given");
  for (auto& p : paths) {
    files_.push_back(std::make_unique<MappedFile>(p));
    read_header(*files_.back());
  }
}

const std::string& SafetensorsFiles::file_of(const std::string& name) const {
  static const std::string none;
  auto it = file_of_.find(name);
  return it == file_of_.end() ? none : it->second->path();
}

void SafetensorsFiles::read_header(const MappedFile& f) {
  const std::string where = "safetensors file '" + f.path() + "'";
  auto fail = [&](const std::string& why) { throw Error(where + ": " + why); };
  if (f.size() < 8)
    fail("shorter than its 8-byte header length (" + std::to_string(f.size()) +
         " bytes): not a safetensors file, or truncated");
  uint64_t n = 0;
  std::memcpy(&n, f.data(), 8);  // little-endian (static_assert in model_writer.cpp)
  if (n > kMaxHeader)
    fail("header length " + std::to_string(n) + " exceeds the format's limit of 100 MB");
  if (n > f.size() - 8)
    fail("header length " + std::to_string(n) + " runs past the end of the file (" +
         std::to_string(f.size()) + " bytes): truncated or not a safetensors file");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = f.size() - data_start;

  simdjson::dom::parser parser;
  simdjson::padded_string text(reinterpret_cast<const char*>(f.data() + 8), n);
  simdjson::dom::object root;
  if (auto err = parser.parse(text).get_object().get(root))
    fail(std::string("header is not a JSON object (") + simdjson::error_message(err) + ")");

  std::vector<Range> ranges;
  for (auto field : root) {
    std::string name(field.key);
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& why) { fail("tensor '" + name + "': " + why); };
    if (tensors_.count(name))
      bad(file_of_.count(name) && file_of_[name] != &f
              ? "also in '" + file_of_[name]->path() + "' (a tensor must be in one file)"
              : "named twice in the header");
    simdjson::dom::object t;
    if (field.value.get_object().get(t)) bad("entry is not a JSON object");
    std::string_view st_dtype;
    if (t["dtype"].get_string().get(st_dtype)) bad("no \"dtype\" string");
    std::string_view dtype = safetensors_dtype_to_torch(st_dtype);
    if (dtype.empty()) bad("unknown dtype '" + std::string(st_dtype) + "'");
    const uint64_t elem = dtype_size(dtype_from_torch_name(dtype));
    simdjson::dom::array shape, offsets;
    if (t["shape"].get_array().get(shape)) bad("no \"shape\" array");
    if (t["data_offsets"].get_array().get(offsets)) bad("no \"data_offsets\" array");
    std::vector<int64_t> sizes;
    uint64_t numel = 1;
    for (auto d : shape) {
      uint64_t v = 0;
      if (d.get_uint64().get(v) || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        bad("shape holds something other than a non-negative integer");
      if (v && numel > std::numeric_limits<uint64_t>::max() / v / elem)
        bad("shape's element count overflows");
      numel *= v;
      sizes.push_back(static_cast<int64_t>(v));
    }
    uint64_t begin = 0, end = 0;
    if (offsets.size() != 2 || offsets.at(0).get_uint64().get(begin) ||
        offsets.at(1).get_uint64().get(end))
      bad("\"data_offsets\" is not two non-negative integers");
    if (begin > end) bad("data_offsets begin after they end");
    if (end - begin != numel * elem)
      bad("data_offsets span " + std::to_string(end - begin) + " bytes but its shape and dtype (" +
          std::string(dtype) + ") need " + std::to_string(numel * elem));
    if (end > data_size)
      bad("data ends at byte " + std::to_string(data_start + end) + " but the file has " +
          std::to_string(f.size()) + " bytes (truncated?)");
    ranges.push_back({begin, end, name});
    WeightView w;
    w.data = f.data() + data_start + begin;
    w.dtype = std::string(dtype);
    w.sizes = std::move(sizes);
    w.available_bytes = end - begin;
    w.source_fd = f.fd();
    w.source_offset = data_start + begin;
    tensors_.emplace(name, std::move(w));
    file_of_.emplace(name, &f);
  }
  // Overlapping byte ranges: a hostile (or corrupt) header aliasing tensors.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      fail("tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name + "' overlap (bytes " +
           std::to_string(ranges[i].begin) + ".." + std::to_string(ranges[i - 1].end) +
           " of the data)");
}

}  // namespace pt2onnx
