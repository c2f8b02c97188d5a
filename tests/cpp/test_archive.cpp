// Archive reading: the hostile corpus (each file must fail with its expected
// message and leave no output), zip edge cases, and the restricted unpickler.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "archive/mapped_file.h"
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

// A directory of this process's own, removed with everything in it.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("pt2onnx_hostile_" + std::to_string(::getpid()));
  TempDir() { clear(); }
  ~TempDir() { fs::remove_all(path); }
  void clear() const {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  bool empty() const { return fs::is_empty(path); }
};

std::vector<PickledTensor> unpickle(const std::string& p) {
  return read_tensor_dict_pickle(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "t.pkl");
}

std::string error_of(const std::string& pickle) {
  try {
    unpickle(pickle);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// Each damaged archive goes through the whole pipeline (read, convert, write)
// and must fail with its message, leaving nothing in the output directory
// (neither the model, its external data, nor a temporary file).
TEST(HostileCorpus, EveryDamagedArchiveFailsClearly) {
  auto cases = expected_failures();
  ASSERT_GE(cases.size(), 25u) << "corpus missing at " << corpus_dir();
  TempDir dir;
  std::string out = (dir.path / "out.onnx").string();
  for (auto& [file, expect] : cases) {
    SCOPED_TRACE(file);
    try {
      convert((corpus_dir() / file).string(), out, Options{});
      ADD_FAILURE() << "converted without error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
    EXPECT_TRUE(dir.empty());
    dir.clear();  // one case's leftovers must not fail the next
  }
}

// The same bytes through the in-memory entry (what the fuzzer drives).
TEST(HostileCorpus, EveryDamagedArchiveFailsClearlyFromMemory) {
  TempDir dir;
  std::string out = (dir.path / "out.onnx").string();
  for (auto& [file, expect] : expected_failures()) {
    SCOPED_TRACE(file);
    std::ifstream in(corpus_dir() / file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    try {
      convert_buffer(bytes.data(), bytes.size(), out, Options{});
      ADD_FAILURE() << "converted without error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
    EXPECT_TRUE(dir.empty());
    dir.clear();
  }
}

// Inputs a fuzzer once found undefined behaviour on (tests/data/fuzz/, one file each):
// every one converts or fails with pt2onnx::Error; the sanitizer build (make test-sanitize)
// stops at any UB report. pipeline_empty_int64_constant.pt2: fuzz_pipeline, a mutated archive
// with an empty int64 constant (memcpy to a null pointer in GraphBuilder::const_ints).
TEST(FuzzFindings, EachConvertsOrFailsClearly) {
  TempDir dir;
  std::string out = (dir.path / "out.onnx").string();
  size_t n = 0;
  for (auto& entry : fs::directory_iterator(corpus_dir().parent_path() / "fuzz")) {
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    try {
      convert_buffer(bytes.data(), bytes.size(), out, Options{});
    } catch (const Error&) {
      EXPECT_TRUE(dir.empty());
    }
    dir.clear();
    ++n;
  }
  EXPECT_GE(n, 1u);
}

// The fuzzers' seeds from the zoo's real models (tests/data/fuzz_seeds/, made by
// tests/python/make_fuzz_seeds.py): each converts from memory as fuzz_pipeline
// reads it, so a seed the core stops converting (which would end the fuzzers'
// mutations before conversion) fails here. zoo_timm_volo.pt2 holds VOLO's col2im
// over a symbolic batch, which crashed the core (issue 56).
TEST(FuzzSeeds, EveryZooProgramConverts) {
  Options o;
  o.in_memory = true;
  size_t n = 0;
  for (auto& entry : fs::directory_iterator(corpus_dir().parent_path() / "fuzz_seeds")) {
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    Result r = convert_buffer(bytes.data(), bytes.size(), "unused.onnx", o);
    EXPECT_GT(r.nodes, 5u);
    ++n;
  }
  EXPECT_GE(n, 5u);
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

TEST(HostileCorpus, ControlFlowArchiveConverts) {
  // cond, while_loop and scan (tests/python/make_hostile_corpus.py): If, Loop
  // and Scan nodes, their bodies written as graph attributes.
  std::string out = temp_output();
  Result r = convert((corpus_dir() / "valid_control_flow.pt2").string(), out, Options{});
  std::ifstream f(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  fs::remove(out);
  EXPECT_EQ(r.nodes, 9u);
  for (const char* op : {"If", "Loop", "Scan", "then_branch", "else_branch", "body"})
    EXPECT_NE(bytes.find(op), std::string::npos) << op;
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

TEST(Unpickler, BoundsNestingDepth) {
  // A dict whose key 'k' holds None wrapped in n 1-tuples (TUPLE1): n + 1 levels.
  auto nested = [](size_t n) {
    return std::string("\x80\x02}X\x01\x00\x00\x00kN", 10) + std::string(n, '\x85') + "s.";
  };
  std::string e = error_of(nested(kMaxPickleDepth - 1));
  EXPECT_NE(e.find("entry 'k' is not a plain tensor"), std::string::npos) << e;
  e = error_of(nested(kMaxPickleDepth));
  EXPECT_NE(e.find("t.pkl: pickled values nest 1001 levels deep, more than the 1000 allowed"),
            std::string::npos)
      << e;
  // Far past the bound (a recursive free overflowed the stack here).
  EXPECT_NE(error_of(nested(200'000)).find("nest 1001 levels deep"), std::string::npos);
  // Lists and dicts nest through APPEND / SETITEM too.
  std::string lists = "\x80\x02";
  for (int i = 0; i < 1500; ++i) lists += "]";
  for (int i = 0; i < 1499; ++i) lists += "a";
  lists += ".";
  EXPECT_NE(error_of(lists).find("nest 1001 levels deep"), std::string::npos);
  std::string dicts = "\x80\x02";
  for (int i = 0; i < 1500; ++i) dicts += "}K\x01";
  dicts.pop_back(), dicts.pop_back();  // the innermost dict gets no key
  for (int i = 0; i < 1499; ++i) dicts += "s";
  dicts += ".";
  EXPECT_NE(error_of(dicts).find("nest 1001 levels deep"), std::string::npos) << error_of(dicts);
}

TEST(Unpickler, SelfReferenceIsRejectedWithoutLeakOrRecursion) {
  // L = []; L.append(L) repeatedly via the memo: a cycle (LeakSanitizer checks the free).
  std::string cyc("\x80\x02]q\x00", 5);
  for (int i = 0; i < 2000; ++i) cyc += std::string("h\x00", 2) + "a";
  cyc += ".";
  EXPECT_NE(error_of(cyc).find("levels deep"), std::string::npos) << error_of(cyc);
  std::string once = cyc.substr(0, 5) + std::string("h\x00", 2) + "a.";
  EXPECT_NE(error_of(once).find("not a dict"), std::string::npos) << error_of(once);
}

namespace {

size_t resident_pages() {
  std::ifstream statm("/proc/self/statm");
  size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident;
}

}  // namespace

// A fake tensor (empty storage file) of any size costs no memory: 64 GiB of
// zeros read at both ends and in the middle leaves resident memory flat.
TEST(ZeroPages, HugeFakeTensorCostsNoMemory) {
  const size_t n = size_t{64} << 30;
  size_t before = resident_pages();
  pt2onnx::ZeroPages z(n, "test");
  for (size_t off : {size_t{0}, n / 2, n - 1}) EXPECT_EQ(z.data()[off], 0);
  uint64_t sum = 0;
  for (size_t off = 0; off < n; off += n / 4096) sum += z.data()[off];  // 4096 scattered pages
  EXPECT_EQ(sum, 0u);
  EXPECT_LT(resident_pages(), before + 1024);  // < 4 MiB more, not 64 GiB
}
