// Archive reading: the hostile corpus (each file must fail with its expected
// message and leave no output), zip edge cases, and the restricted unpickler.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "archive/unpickler.h"
#include "archive/zip_reader.h"
#include "pt2onnx/pt2onnx.h"

namespace fs = std::filesystem;
using namespace pt2onnx;

namespace {

fs::path corpus_dir() { return fs::path(PT2ONNX_SOURCE_DIR) / "tests" / "data" / "hostile"; }

std::vector<std::pair<std::string, std::string>> expected_failures() {
  std::ifstream f(corpus_dir() / "expected.tsv");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(f, line)) {
    auto tab = line.find('\t');
    if (tab != std::string::npos) out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

std::string temp_output() {
  return (fs::temp_directory_path() /
          ("pt2onnx_archive_test_" + std::to_string(::getpid()) + ".onnx"))
      .string();
}

}  // namespace

TEST(HostileCorpus, EveryDamagedArchiveFailsClearly) {
  auto cases = expected_failures();
  ASSERT_GE(cases.size(), 10u) << "corpus missing at " << corpus_dir();
  std::string out = temp_output();
  for (auto& [file, expect] : cases) {
    SCOPED_TRACE(file);
    try {
      convert((corpus_dir() / file).string(), out, Options{});
      ADD_FAILURE() << "converted without error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out + ".data"));
  }
}

TEST(HostileCorpus, ValidArchiveConvertsFromFileAndMemory) {
  std::string out = temp_output();
  Result r = convert((corpus_dir() / "valid.pt2").string(), out, Options{});
  EXPECT_GT(r.nodes, 0u);
  ASSERT_TRUE(fs::exists(out));
  std::ifstream f1(out, std::ios::binary);
  std::string from_file((std::istreambuf_iterator<char>(f1)), {});
  fs::remove(out);
  std::ifstream in(corpus_dir() / "valid.pt2", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  convert_buffer(bytes.data(), bytes.size(), out, Options{});
  std::ifstream f2(out, std::ios::binary);
  std::string from_memory((std::istreambuf_iterator<char>(f2)), {});
  fs::remove(out);
  EXPECT_EQ(from_file, from_memory);  // same bytes either way
  EXPECT_EQ(r.timings.front().first, "open");
}

TEST(HostileCorpus, InspectValidArchive) {
  ArchiveInfo info = inspect((corpus_dir() / "valid.pt2").string(), 18);
  EXPECT_EQ(info.schema_major, 8);
  ASSERT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0].dims, (std::vector<std::string>{"2", "4"}));
  EXPECT_EQ(info.weights, 2u);
  EXPECT_EQ(info.weight_bytes, (12u + 3u) * 4u);
  EXPECT_TRUE(info.unsupported.empty());
}

TEST(ZipReader, EveryTruncationFailsCleanly) {
  std::ifstream in(corpus_dir() / "valid.pt2", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  for (size_t n = 0; n < bytes.size(); n += 97) {
    try {
      ZipReader z(reinterpret_cast<const uint8_t*>(bytes.data()), n, "cut");
    } catch (const Error&) {
    }
  }
}

TEST(Unpickler, RefusesEverythingButTensorRecords) {
  // GLOBAL 'os system' -> refused before anything else.
  std::string evil =
      "\x80\x02"
      "cos\nsystem\n"
      "X\x02\x00\x00\x00ls"
      "\x85R.";
  try {
    read_tensor_dict_pickle(reinterpret_cast<const uint8_t*>(evil.data()), evil.size(), "p");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to load global 'os system'"), std::string::npos);
  }
  std::string truncated = "\x80\x02}q\x00(X\x01\x00";
  EXPECT_THROW(read_tensor_dict_pickle(reinterpret_cast<const uint8_t*>(truncated.data()),
                                       truncated.size(), "p"),
               Error);
  std::string not_dict = "\x80\x02K\x05.";
  EXPECT_THROW(read_tensor_dict_pickle(reinterpret_cast<const uint8_t*>(not_dict.data()),
                                       not_dict.size(), "p"),
               Error);
  std::string empty_dict = "\x80\x02}.";
  EXPECT_TRUE(read_tensor_dict_pickle(reinterpret_cast<const uint8_t*>(empty_dict.data()),
                                      empty_dict.size(), "p")
                  .empty());
}
