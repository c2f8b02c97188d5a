#include "schema/versions.h"

#include <simdjson.h>

#include <limits>

namespace pt2onnx::schema {

std::optional<VersionStamp> peek_version(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json.data(), json.size()).get(root)) return std::nullopt;
  simdjson::dom::object sv;
  int64_t major = 0, minor = 0;
  if (root["schema_version"].get_object().get(sv) || sv["major"].get_int64().get(major))
    return std::nullopt;
  if (sv["minor"].get_int64().get(minor)) minor = 0;
  constexpr int64_t lo = std::numeric_limits<int>::min(), hi = std::numeric_limits<int>::max();
  if (major < lo || major > hi || minor < lo || minor > hi) return std::nullopt;
  VersionStamp v;
  v.major = static_cast<int>(major);
  v.minor = static_cast<int>(minor);
  std::string_view tv;
  if (!root["torch_version"].get_string().get(tv)) v.torch_version = std::string(tv);
  return v;
}

std::string describe(const VersionStamp& v) {
  std::string s = "schema " + std::to_string(v.major) + "." + std::to_string(v.minor);
  if (v.torch_version.empty()) return s + " (no torch_version in the archive)";
  return s + ", written by torch " + v.torch_version;
}

std::string supported_range() {
  return "this pt2onnx reads schema " + std::to_string(kSchemaMajor) + ".x, written by torch " +
         std::string(kTestedTorch);
}

std::string unsupported_major(const VersionStamp& v) {
  return "unsupported schema major version " + std::to_string(v.major) + ": the archive holds " +
         describe(v) + "; " + supported_range() +
         " (re-export the model with one of those releases)";
}

std::string newer_minor_note(const VersionStamp& v) {
  if (v.major != kSchemaMajor || v.minor <= kNewestTestedMinor) return {};
  return " [the archive holds " + describe(v) + ", newer than the newest tested (" +
         std::to_string(kSchemaMajor) + "." + std::to_string(kNewestTestedMinor) +
         "): this failure may come from what that release changed; " + supported_range() + "]";
}

std::string with_newer_minor_note(std::string message, std::string_view json) {
  if (auto v = peek_version(json)) message += newer_minor_note(*v);
  return message;
}

}  // namespace pt2onnx::schema
