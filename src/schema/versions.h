// Which torch.export archives this pt2onnx reads, in one place. Every check
// of a version (schema major / minor, archive_version) and every message that
// names one goes through here; readers call these, nothing else compares
// versions.
//
// Tested: archives saved by torch 2.10.0, 2.11.0, 2.12.1, 2.13.0 and 2.14.1
// (tests/data/compat/, tools/make_compat_archives.py). They write schema 8.15
// (2.10), 8.17 (2.11) and 8.20 (2.12 to 2.14), archive_version 0,
// archive_format "pt2", byteorder "little", the same entries and the same node
// targets for the same models. The one difference the reader handles: torch
// 2.10 writes nodes without "name" (reader_impl.h names them after their first
// output); fields added since (metadata.from_node) are ignored.
//
// Policy:
//   schema major != 8           refused: one error naming the archive's schema
//                               version, the torch that wrote it, and the range
//                               read here.
//   schema 8.x, x > newest      converted: minor bumps add optional fields and
//     tested minor              unknown keys are ignored. If conversion then
//                               fails, the error adds that the archive's schema
//                               is newer than the newest tested.
//   archive_version != 0,       refused, naming the same versions.
//   archive_format != "pt2"
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace pt2onnx::schema {

inline constexpr int kSchemaMajor = 8;
// The newest schema minor among the tested releases (torch 2.13 and 2.14 write 8.20).
inline constexpr int kNewestTestedMinor = 20;
inline constexpr std::string_view kTestedTorch = "2.10 to 2.14.1";
// The archive layout version torch.export.save writes (archive_version) and
// reads; torch.export.load itself refuses any other.
inline constexpr std::string_view kArchiveVersion = "0";

// The version fields of a serialized program.
struct VersionStamp {
  int major = 0, minor = 0;
  std::string torch_version;  // empty when the program has none
};

// Best effort and never throws: the schema version and torch release a
// program's JSON names, or nullopt when they cannot be read.
std::optional<VersionStamp> peek_version(std::string_view json);

// "schema 9.0, written by torch 2.16.0" (or "... (no torch_version in the archive)").
std::string describe(const VersionStamp& v);
// "this pt2onnx reads schema 8.x, written by torch 2.10 to 2.14.1"
std::string supported_range();
// The whole message for a major version other than kSchemaMajor.
std::string unsupported_major(const VersionStamp& v);
// Empty unless `v` is a schema newer than the newest tested: then a sentence to
// add to the message of a failed conversion.
std::string newer_minor_note(const VersionStamp& v);
// Adds newer_minor_note for the program in `json` to a failure message (when
// the note applies); the message unchanged otherwise.
std::string with_newer_minor_note(std::string message, std::string_view json);

}  // namespace pt2onnx::schema
