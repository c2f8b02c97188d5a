"""What a torch release itself cannot export, stated once for the tests.

Each entry is a strict xfail on the releases it names, so a release that
starts exporting the case turns the test red and the entry is removed, and
test_torch_release_limits.py shows plain torch.export failing the same way
(the limit is torch's, not the converter's).
"""

import pytest
import torch
import torch._dynamo.exc

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])

# torch 2.12's torch.export cannot prove min(16*s, 32*s) == 16*s for a dynamic
# s when a reshape follows an expand (transformers' repeat_kv, grouped-query
# attention) and raises a ConstraintViolation. Fixed in 2.13.
EXPAND_RESHAPE_GUARD = pytest.mark.xfail(
    TORCH < (2, 13), raises=torch._dynamo.exc.UserError, strict=True,
    reason="torch 2.12's torch.export rejects reshape after expand with a dynamic dim "
           "(guard min(16*s, 32*s) == 16*s); test_torch_release_limits shows plain "
           "torch.export failing the same way")

# torch 2.12's fake bincount with weights records int64 for the result while
# eager returns the weighted sums (float32 / float64): the captured program's
# own dtype is wrong, and a converter that follows it must disagree with eager.
BINCOUNT_WEIGHTS_DTYPE = pytest.mark.xfail(
    TORCH < (2, 13), strict=True,
    reason="torch 2.12 records bincount(weights=...) as int64 (eager: float); "
           "test_torch_release_limits shows the exported program's dtype")
