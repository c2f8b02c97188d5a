// The TorchScript file check (src/archive/torchscript_check.cpp) on archives made
// here: what it refuses and names, what it lets through, and damaged archives that
// must fail with pt2onnx::Error, never a crash. The hostile files that really
// harm when torch.jit.load'ed are in tests/python/test_torchscript_untrusted.py.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "archive/torchscript_check.h"
#include "pt2onnx/pt2onnx.h"

using namespace pt2onnx;

namespace {

struct Entry {
  std::string name, data;
  bool deflate = false;
  uint32_t claimed_size = UINT32_MAX;  // the inflated size its headers state (default: true)
};

void put16(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

std::string raw_deflate(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip of `entries`, each stored or deflated, as torch.jit.save lays one out.
std::string zip_of(const std::vector<Entry>& entries) {
  std::string out, central;
  for (const Entry& e : entries) {
    std::string body = e.deflate ? raw_deflate(e.data) : e.data;
    uint32_t usize =
        e.claimed_size != UINT32_MAX ? e.claimed_size : static_cast<uint32_t>(e.data.size());
    uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(e.data.data()), static_cast<uInt>(e.data.size())));
    auto header = [&](std::string& s, bool is_central) {
      if (is_central) put16(s, 20);  // version made by
      put16(s, 20);                  // version needed
      put16(s, 0);                   // flags
      put16(s, e.deflate ? 8 : 0);   // method
      put32(s, 0);                   // time, date
      put32(s, crc);
      put32(s, static_cast<uint32_t>(body.size()));
      put32(s, usize);
      put16(s, static_cast<uint32_t>(e.name.size()));
      put16(s, 0);  // extra length
    };
    uint32_t local = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    header(out, false);
    out += e.name + body;
    put32(central, 0x02014b50);
    header(central, true);
    put16(central, 0);  // comment length
    put32(central, 0);  // disk, internal attributes
    put32(central, 0);  // external attributes
    put32(central, local);
    central += e.name;
  }
  uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put32(out, 0);
  put16(out, static_cast<uint32_t>(entries.size()));
  put16(out, static_cast<uint32_t>(entries.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

const char* kPlain =
    "class M(Module):\n"
    "  __parameters__ = []\n"
    "  training : bool\n"
    "  def forward(self: __torch__.M,\n"
    "    x: Tensor) -> Tensor:\n"
    "    # torch.from_file in a comment is no call\n"
    "    _0 = \"torch.from_file in a string is none either\"\n"
    "    return torch.add(ops.prim.NumToTensor(torch.size(x, 0)), x)\n";

// The check's message for an archive holding `code` as its one code entry
// (deflated, as torch.jit.save writes it); "" when it passes.
std::string refusal(const std::string& code, std::vector<Entry> more = {}) {
  std::vector<Entry> entries = {{"m/data.pkl", "\x80\x02."},
                                {"m/code/__torch__.py", code, /*deflate=*/true}};
  entries.insert(entries.end(), more.begin(), more.end());
  std::string zip = zip_of(entries);
  try {
    check_torchscript_bytes(reinterpret_cast<const uint8_t*>(zip.data()), zip.size(), "m.pt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string with_line(const std::string& line) {
  std::string code = kPlain;
  return code.replace(code.find("    return"), 0, "    " + line + "\n");
}

}  // namespace

TEST(TorchScriptCheck, PlainCodeStringsAndCommentsPass) { EXPECT_EQ(refusal(kPlain), ""); }

TEST(TorchScriptCheck, NamesEntryLineMethodAndOp) {
  std::string why = refusal(with_line("_1 = torch.from_file(\"/etc/passwd\", True, 4)"));
  EXPECT_EQ(why,
            "m.pt: entry 'm/code/__torch__.py', line 8, __torch__.M.forward: uses "
            "aten::from_file, which maps a file into a tensor (and writes it when shared); "
            "pt2onnx loads no such file");
}

TEST(TorchScriptCheck, RefusesSideEffectsHoweverWritten) {
  for (const char* line :
       {"torch.save(x, \"f\")", "torch .\n      save(x, \"f\")", "torch.\\\nsave(x, \"f\")",
        "ops.aten.save(x, \"f\")", "torch.ops.aten.save.default(x, \"f\")", "print(x)",
        "ops.prim.Print(x)", "_1 = ops.debugprims.load_tensor(\"a\")",
        "_1 = getattr(torch, \"sa\" \"ve\")", "_1 = getattr(ops.aten, \"save\")", "_1 = torch.ops",
        "_1 = torch.manual_seed(1)", "_1 = torch._sparse_bsc_tensor_unsafe(x, x, x, [1])",
        "_1 = __torch__.torch.classes.c10d.Store()", "_1 = torch.classes.dist_rpc.WorkerInfo()"})
    EXPECT_NE(refusal(with_line(line)), "") << line;
}

TEST(TorchScriptCheck, SetstateOnlyInTorchsOwnClassesAndReadByTheSameRules) {
  std::string user = std::string(kPlain) +
                     "  def __setstate__(self: __torch__.M,\n"
                     "    state: Tuple[bool]) -> NoneType:\n"
                     "    self.training = (state)[0]\n"
                     "    return None\n";
  EXPECT_NE(refusal(user).find("__torch__.M.__setstate__: a __setstate__ not of torch's own"),
            std::string::npos);
  // torch's parser takes a class indented by a blank as well; so does the check.
  std::string indented = user;
  indented.replace(indented.find("class M"), 7, " class N");
  EXPECT_NE(refusal(indented).find("__torch__.N.__setstate__"), std::string::npos);
  std::string own = user;
  own.replace(own.find("class M"), 7, "class LinearPackedParams");
  std::vector<Entry> more = {{"m/code/__torch__/torch/ao/quantized.py", own, true}};
  EXPECT_EQ(refusal(kPlain, more), "");
  own.replace(own.find("    return None"), 0, "    _2 = torch.from_file(\"p\", True, 1)\n");
  more[0].data = own;
  EXPECT_NE(refusal(kPlain, more)
                .find("__torch__.torch.ao.quantized.LinearPackedParams."
                      "__setstate__: uses aten::from_file"),
            std::string::npos);
}

TEST(TorchScriptCheck, DamagedArchivesFailCleanly) {
  EXPECT_NE(refusal("x = \"unterminated\n").find("unterminated string"), std::string::npos);
  EXPECT_NE(refusal("x = '\\").find("unterminated string"), std::string::npos);
  EXPECT_NE(refusal(kPlain, {{"m/CODE/__torch__.py", "", false}}).find("differ only in case"),
            std::string::npos);
  Entry lying{"m/code/__torch__/a.py", kPlain, true, 5};  // inflates to more than it states
  EXPECT_NE(refusal(kPlain, {lying}).find("does not inflate to the size"), std::string::npos);
  Entry bomb{"m/code/__torch__/b.py", "x", true, 0x7fffffff};
  EXPECT_NE(refusal(kPlain, {bomb}).find("more code than pt2onnx reads"), std::string::npos);
  std::string zip = zip_of({{"m/code/__torch__.py", kPlain, true}});
  for (size_t n = 0; n < zip.size(); ++n) {
    try {
      check_torchscript_bytes(reinterpret_cast<const uint8_t*>(zip.data()), n, "cut");
    } catch (const Error&) {
    }
  }
}

TEST(TorchScriptCheck, NodeKindsByTheSameRules) {
  EXPECT_FALSE(torchscript_op_refusal("aten::add").has_value());
  EXPECT_FALSE(torchscript_op_refusal("prim::CallMethod").has_value());
  EXPECT_TRUE(torchscript_op_refusal("aten::from_file").has_value());
  EXPECT_TRUE(torchscript_op_refusal("prim::Print").has_value());
  EXPECT_TRUE(torchscript_op_refusal("c10d::allreduce_").has_value());
}
