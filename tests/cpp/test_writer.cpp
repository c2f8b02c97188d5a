// The streaming writer: wire-format primitives, a written model decoded back
// with a minimal protobuf reader, external data layout, and no file left on error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "ir/builder.h"
#include "onnx/model_writer.h"
#include "onnx/wire.h"

using namespace pt2onnx;
namespace fs = std::filesystem;

namespace {

// Decodes one level of a protobuf message: field -> list of (wire type, bytes / varint).
struct Field {
  uint32_t wire;
  uint64_t v = 0;
  std::string bytes;
};
std::multimap<uint32_t, Field> decode(const std::string& s) {
  std::multimap<uint32_t, Field> out;
  size_t p = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    int shift = 0;
    while (true) {
      uint8_t b = static_cast<uint8_t>(s.at(p++));
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
      shift += 7;
    }
    return v;
  };
  while (p < s.size()) {
    uint64_t tag = varint();
    Field f{static_cast<uint32_t>(tag & 7)};
    if (f.wire == 0)
      f.v = varint();
    else if (f.wire == 2) {
      size_t n = varint();
      f.bytes = s.substr(p, n);
      p += n;
    } else if (f.wire == 5) {
      f.bytes = s.substr(p, 4);
      p += 4;
    } else {
      ADD_FAILURE() << "unexpected wire type";
      break;
    }
    out.emplace(static_cast<uint32_t>(tag >> 3), f);
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct TmpDir {
  fs::path p;
  TmpDir() {
    p = fs::temp_directory_path() / ("pt2onnx_writer_" + std::to_string(::getpid()));
    fs::create_directories(p);
  }
  ~TmpDir() { fs::remove_all(p); }
};

Graph small_graph(const std::vector<float>& w) {
  GraphBuilder b(18);
  const auto n = static_cast<int64_t>(w.size());
  b.add_input("x", ValueType{DType::Float, Shape{Dim::symbol("batch"), Dim::of(n)}});
  TensorData d;
  d.dtype = DType::Float;
  d.dims = {n};
  d.data = reinterpret_cast<const uint8_t*>(w.data());
  std::string wn = b.initializer("layer.weight", d);
  std::string y = b.op("Mul", {"x", wn});
  b.add_output(y, b.type(y));
  return b.take();
}

}  // namespace

TEST(Wire, Varints) {
  wire::Msg m;
  m.varint(300);
  EXPECT_EQ(m.bytes, std::string("\xac\x02", 2));
  EXPECT_EQ(wire::varint_size(300), 2u);
  wire::Msg n;
  n.int_field(1, -1);  // negative int64: 10 bytes of two's complement
  EXPECT_EQ(n.bytes.size(), 11u);
}

TEST(Writer, WritesDecodableModel) {
  TmpDir dir;
  std::vector<float> w(4, 2.0f);
  Graph g = small_graph(w);
  std::string path = (dir.p / "m.onnx").string();
  WriteOptions o;
  o.opset = 18;
  o.ir_version = 8;
  write_model(g, path, o);
  auto model = decode(slurp(path));
  EXPECT_EQ(model.find(1)->second.v, 8u);             // ir_version
  EXPECT_EQ(model.find(2)->second.bytes, "pt2onnx");  // producer_name
  auto opset = decode(model.find(8)->second.bytes);   // opset_import
  EXPECT_EQ(opset.find(2)->second.v, 18u);
  auto graph = decode(model.find(7)->second.bytes);
  EXPECT_EQ(graph.count(1), 1u);  // one node
  ASSERT_EQ(graph.count(5), 1u);  // one initializer
  auto init = decode(graph.find(5)->second.bytes);
  EXPECT_EQ(init.find(8)->second.bytes, "layer.weight");
  EXPECT_EQ(init.find(2)->second.v, 1u);  // FLOAT
  EXPECT_EQ(init.find(9)->second.bytes, std::string(reinterpret_cast<const char*>(w.data()), 16));
  auto input = decode(graph.find(11)->second.bytes);
  EXPECT_EQ(input.find(1)->second.bytes, "x");
  auto tensor_type = decode(decode(input.find(2)->second.bytes).find(1)->second.bytes);
  auto dims = decode(tensor_type.find(2)->second.bytes);
  ASSERT_EQ(dims.count(1), 2u);
  EXPECT_EQ(decode(dims.find(1)->second.bytes).find(2)->second.bytes, "batch");
  EXPECT_FALSE(fs::exists(path + ".data"));
}

TEST(Writer, ExternalDataIsAlignedAndComplete) {
  TmpDir dir;
  std::vector<float> w(1024, 1.5f);
  Graph g = small_graph(w);
  // A second initializer so the second offset must be padded to 4096.
  g.initializers.push_back(Initializer{"extra", g.initializers[0].data});
  std::string path = (dir.p / "big.onnx").string();
  WriteOptions o;
  o.external_data = ExternalData::Always;
  WriteResult r = write_model(g, path, o);
  ASSERT_EQ(r.data_paths.size(), 1u);
  EXPECT_EQ(r.data_paths[0], path + ".data");
  std::string data = slurp(path + ".data");
  EXPECT_EQ(data.size(), 4096u + 4096u);
  EXPECT_EQ(data.substr(4096, 16), std::string(reinterpret_cast<const char*>(w.data()), 16));
  auto graph = decode(decode(slurp(path)).find(7)->second.bytes);
  std::vector<std::string> offsets;
  for (auto it = graph.lower_bound(5); it != graph.upper_bound(5); ++it) {
    auto t = decode(it->second.bytes);
    EXPECT_EQ(t.count(9), 0u);            // no raw_data
    EXPECT_EQ(t.find(14)->second.v, 1u);  // EXTERNAL
    for (auto e = t.lower_bound(13); e != t.upper_bound(13); ++e) {
      auto kv = decode(e->second.bytes);
      if (kv.find(1)->second.bytes == "offset") offsets.push_back(kv.find(2)->second.bytes);
      if (kv.find(1)->second.bytes == "location") {
        EXPECT_EQ(kv.find(2)->second.bytes, "big.onnx.data");
      }
    }
  }
  EXPECT_EQ(offsets, (std::vector<std::string>{"0", "4096"}));
}

// Weights streamed from a mapped file leave the page cache once written when
// they come to more than WriteOptions::uncache_sources_above bytes, and stay
// cached below it. Both ways a weight leaves a file are covered: a kernel
// copy (contiguous) and a transposing copy through memory (a strided view).
TEST(Writer, DropsLargeSourcesFromThePageCache) {
  TmpDir dir;
  const std::string src = (dir.p / "weights.bin").string();
  constexpr int64_t kRows = 512, kCols = 1024;  // 2 MiB of float per tensor
  {
    std::vector<float> v(2 * kRows * kCols);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 977);
    std::ofstream(src, std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  }
  struct statfs fs_info {};
  ASSERT_EQ(::statfs(src.c_str(), &fs_info), 0);
  if (fs_info.f_type == TMPFS_MAGIC)
    GTEST_SKIP() << "the temporary directory is a tmpfs: its pages cannot leave the page cache";
  const int fd = ::open(src.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fsync(fd), 0);  // dirty pages would stay cached whatever the writer asks
  const size_t size = 2 * kRows * kCols * 4;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto resident_pages = [&] {
    const long page = ::sysconf(_SC_PAGESIZE);
    std::vector<unsigned char> in((size + page - 1) / page);
    EXPECT_EQ(::mincore(map, size, in.data()), 0);
    size_t n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
  };
  auto graph = [&] {
    GraphBuilder b(18);
    b.add_input("x", ValueType{DType::Float, Shape{Dim::of(kCols)}});
    TensorData plain;
    plain.dtype = DType::Float;
    plain.dims = {kRows, kCols};
    plain.data = static_cast<const uint8_t*>(map);
    plain.src_fd = fd;
    TensorData transposed = plain;  // [kCols, kRows] view of the second block
    transposed.dims = {kCols, kRows};
    transposed.strides = {1, kCols};
    transposed.data += kRows * kCols * 4;
    transposed.src_offset = kRows * kCols * 4;
    std::string a = b.initializer("a", plain), t = b.initializer("t", transposed);
    std::string y = b.op("MatMul", {b.op("MatMul", {a, "x"}), t});
    b.add_output(y, b.type(y));
    return b.take();
  };
  for (uint64_t above : {uint64_t{1} << 40, uint64_t{1}}) {
    // Read the whole file into the page cache, then export from it.
    for (size_t off = 0; off < size; off += 4096)
      (void)*static_cast<const volatile uint8_t*>(static_cast<uint8_t*>(map) + off);
    ASSERT_EQ(resident_pages(), size / 4096);
    WriteOptions o;
    o.external_data = ExternalData::Always;
    o.uncache_sources_above = above;
    write_model(graph(), (dir.p / "m.onnx").string(), o);
    if (above == 1)
      EXPECT_EQ(resident_pages(), 0u) << "the sources stayed in the page cache";
    else
      EXPECT_EQ(resident_pages(), size / 4096) << "a small source left the page cache";
  }
  ::munmap(map, size);
  ::close(fd);
}

TEST(Writer, FailureLeavesNoFile) {
  TmpDir dir;
  std::vector<float> w(4, 1.0f);
  Graph g = small_graph(w);
  std::string path = (dir.p / "missing_dir" / "m.onnx").string();
  EXPECT_THROW(write_model(g, path, WriteOptions{}), Error);
  for (auto& e : fs::directory_iterator(dir.p)) ADD_FAILURE() << "left behind: " << e.path();
}

// In memory (Options::in_memory): the same bytes as a one-file model, weights
// inline even where external data was asked for, and nothing on disk.
TEST(Writer, InMemoryIsTheOneFileModel) {
  TmpDir dir;
  std::vector<float> w(1024, 0.25f);
  w[7] = -3.0f;
  Graph g = small_graph(w);
  std::string path = (dir.p / "one.onnx").string();
  WriteOptions o;
  o.external_data = ExternalData::Never;
  write_model(g, path, o);
  uint64_t weights = 0;
  o.external_data = ExternalData::Always;
  std::string bytes = write_model_bytes(g, o, &weights);
  EXPECT_EQ(weights, 4096u);
  EXPECT_EQ(bytes, slurp(path));
  auto init = decode(decode(decode(bytes).find(7)->second.bytes).find(5)->second.bytes);
  EXPECT_EQ(init.find(9)->second.bytes.size(), 4096u);
  EXPECT_EQ(init.count(14), 0u);  // not external
}

// Weights by reference: an initializer viewing the caller's bytes as they are
// stays there (external, location pt2onnx:memory, listed with its address,
// no owner); one the converter made whole is handed over in its own buffer;
// a transposed view and a lazily scaled weight are made once, contiguous, in
// a buffer the result owns; a tensor under external_min_tensor_bytes stays
// inline. No weight's bytes are in the model.
TEST(Writer, InMemoryHandsOverEveryLargeInitializer) {
  std::vector<float> w(1024, 0.5f);
  Graph g = small_graph(w);
  g.initializers.push_back(Initializer{
      "made", TensorData::from_vector<float>(DType::Float, {256}, std::vector<float>(256, 2.0f))});
  std::vector<float> src(32 * 16);  // [32, 16], viewed as its [16, 32] transpose
  for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<float>(k);
  TensorData tv;
  tv.dtype = DType::Float;
  tv.dims = {16, 32};
  tv.strides = {1, 16};
  tv.data = reinterpret_cast<const uint8_t*>(src.data());
  g.initializers.push_back(Initializer{"w.T", tv});
  std::vector<float> conv(4 * 2 * 3 * 3, 1.0f);  // [4, 2, 3, 3], row r scaled by r + 1
  TensorData sc;
  sc.dtype = DType::Float;
  sc.dims = {4, 2, 3, 3};
  sc.data = reinterpret_cast<const uint8_t*>(conv.data());
  sc.scale = std::make_shared<ChannelScale>(ChannelScale{{1.0, 2.0, 3.0, 4.0}, 0});
  g.initializers.push_back(Initializer{"conv.folded", sc});
  g.initializers.push_back(Initializer{
      "small", TensorData::from_vector<float>(DType::Float, {4}, std::vector<float>(4, 1.0f))});
  WriteOptions o;
  o.external_min_tensor_bytes = 256;
  std::vector<MemoryInitializer> refs;
  std::string bytes = write_model_bytes(g, o, nullptr, &refs);
  ASSERT_EQ(refs.size(), 4u);
  EXPECT_EQ(refs[0].name, "layer.weight");
  EXPECT_EQ(refs[0].data, static_cast<const void*>(w.data()));
  EXPECT_FALSE(refs[0].owner);
  EXPECT_EQ(refs[0].nbytes, 4096u);
  EXPECT_EQ(refs[0].dims, (std::vector<int64_t>{1024}));
  EXPECT_EQ(refs[0].dtype, 1);
  EXPECT_EQ(refs[1].name, "made");
  ASSERT_TRUE(refs[1].owner);
  EXPECT_EQ(static_cast<const float*>(refs[1].data)[255], 2.0f);
  EXPECT_EQ(refs[2].name, "w.T");
  ASSERT_TRUE(refs[2].owner);
  EXPECT_EQ(refs[2].dims, (std::vector<int64_t>{16, 32}));
  const auto* t = static_cast<const float*>(refs[2].data);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 32; ++j) ASSERT_EQ(t[i * 32 + j], src[static_cast<size_t>(j * 16 + i)]);
  EXPECT_EQ(refs[3].name, "conv.folded");
  ASSERT_TRUE(refs[3].owner);
  const auto* f = static_cast<const float*>(refs[3].data);
  for (int k = 0; k < 72; ++k) ASSERT_EQ(f[k], static_cast<float>(k / 18 + 1)) << k;
  EXPECT_EQ(conv[20], 1.0f);  // the source untouched
  auto graph = decode(decode(bytes).find(7)->second.bytes);
  int external = 0, inline_ = 0;
  for (auto it = graph.lower_bound(5); it != graph.upper_bound(5); ++it) {
    auto tp = decode(it->second.bytes);
    if (tp.count(14)) {
      ++external;
      EXPECT_EQ(tp.count(9), 0u);
      auto kv = decode(tp.lower_bound(13)->second.bytes);
      EXPECT_EQ(kv.find(2)->second.bytes, kMemoryLocation);
    } else {
      ++inline_;
      EXPECT_EQ(tp.find(8)->second.bytes, "small");
      EXPECT_EQ(tp.find(9)->second.bytes.size(), 16u);
    }
  }
  EXPECT_EQ(external, 4);
  EXPECT_EQ(inline_, 1);
  EXPECT_LT(bytes.size(), 1024u);  // no weight's bytes are in it
}
