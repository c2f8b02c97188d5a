// The converter registry: op families are written in parallel, each in its
// own file; a target registered twice for the same opset would be converted
// by whichever family registered first.
#include <gtest/gtest.h>

#include "convert/mutation.h"
#include "convert/registry.h"

using namespace pt2onnx;

TEST(Registry, NoTargetIsRegisteredTwiceForOneOpset) {
  auto dup = registry().overlapping();
  std::string all;
  for (auto& t : dup) all += "\n  " + t;
  EXPECT_TRUE(dup.empty()) << "registered twice:" << all;
}

TEST(Registry, InPlaceOverloadsMapToTheirFunctionalForm) {
  EXPECT_EQ(functional_target("torch.ops.aten.relu_.default"), "torch.ops.aten.relu.default");
  EXPECT_EQ(functional_target("torch.ops.aten.add_.Tensor"), "torch.ops.aten.add.Tensor");
  EXPECT_EQ(functional_target("torch.ops.aten.__iand__.Tensor"), "torch.ops.aten.__and__.Tensor");
  EXPECT_EQ(functional_target("torch.ops.aten.__and__.Tensor"), "");
  EXPECT_EQ(functional_target("torch.ops.aten.relu.default"), "");
  EXPECT_NE(find_converter("torch.ops.aten.relu_.default", 18), nullptr);
}
