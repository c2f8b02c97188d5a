"""export(verify=True): onnxruntime against PyTorch on the example inputs and,
with dynamic dims, on inputs whose dynamic dims are one larger; the max
differences in the result, an error naming the outputs beyond tolerance."""

import pytest
import torch

import pt2onnx


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, ids, x):
        return self.lin(self.emb(ids)) + x, ids.shape[1]


def example(b=2, s=5):
    return torch.randint(0, 10, (b, s)), torch.randn(b, s, 3)


def test_verify_passes_at_two_shapes(tmp_onnx):
    torch.manual_seed(0)
    r = pt2onnx.export(Net().eval(), example(), tmp_onnx, verify=True,
                       dynamic_shapes={"ids": {0: "batch", 1: "seq"},
                                       "x": {0: "batch", 1: "seq"}})
    runs = r.checks["verify"]
    assert [run["inputs"]["ids"] for run in runs] == [[2, 5], [3, 6]]
    assert [len(run["max_abs_diff"]) for run in runs] == [2, 2]  # the tensor and the int output
    assert max(max(run["max_abs_diff"].values()) for run in runs) < 1e-5
    assert "verify" in r.timings


def test_verify_static_model_runs_once():
    r = pt2onnx.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),), None, verify=True)
    assert len(r.checks["verify"]) == 1 and r.model_bytes


def test_verify_fails_beyond_tolerance(tmp_onnx):
    """Random noise in forward: onnxruntime draws other numbers than torch."""
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    with pytest.raises(pt2onnx.VerificationError, match=r"differs from PyTorch.*max abs"):
        pt2onnx.export(Noisy(), (torch.randn(16, 8),), tmp_onnx, verify=True)
    # Not an error in the conversion: the file is kept for inspection.
    assert __import__("os").path.exists(tmp_onnx)


def test_verify_skips_sizes_pytorch_refuses(tmp_onnx):
    class Capped(torch.nn.Module):
        def forward(self, x):
            torch._check(x.shape[0] <= 4)
            return x * 2

    r = pt2onnx.export(Capped(), (torch.randn(4, 3),), tmp_onnx, verify=True,
                       dynamic_shapes={"x": {0: torch.export.Dim("n", max=4)}})
    first, second = r.checks["verify"]
    assert first["inputs"] == {"x": [4, 3]} and first["max_abs_diff"] == {"mul": 0.0}
    assert second["skipped"].startswith("dynamic dims one larger: RuntimeError")


def test_report_of_an_export(tmp_path):
    report = tmp_path / "export.md"
    torch.manual_seed(0)
    pt2onnx.export(Net().eval(), example(), str(tmp_path / "m.onnx"), verify=True,
                   report=str(report), dynamic_shapes={"ids": {0: "batch", 1: "seq"},
                                                       "x": {0: "batch", 1: "seq"}})
    text = report.read_text()
    assert text.startswith("# pt2onnx export report: Net")
    assert "## Result: written" in text and "m.onnx" in text
    for stage in ("| capture |", "| convert |", "| write |", "| verify |"):
        assert stage in text
    assert "| `ids` | int64 | [batch, seq] |" in text
    assert "| `x` | float32 | [batch, seq, 3] |" in text
    assert "| Gather | 1 |" in text and "| MatMul | 1 |" in text
    assert "run 2, inputs ids [3, 6], x [3, 6, 3]: max abs difference" in text


def test_report_of_a_failed_export(tmp_path):
    @torch.library.custom_op("pt2onnx_test::report_only", mutates_args=())
    def report_only(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @report_only.register_fake
    def _(x):
        return torch.empty_like(x)

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.pt2onnx_test.report_only(x) + 1

    report = tmp_path / "failed.md"
    with pytest.raises(pt2onnx.ConversionError):
        pt2onnx.export(M(), (torch.randn(2, 3),), str(tmp_path / "m.onnx"), report=str(report))
    text = report.read_text()
    assert "## Result: failed" in text and "not supported at opset 18" in text
    assert "## Ops without a converter" in text
    assert "| `torch.ops.pt2onnx_test.report_only.default` | 1 |" in text
    assert not (tmp_path / "m.onnx").exists()


class _TiedRouter(torch.nn.Module):
    """A mixture-of-experts router as transformers initialises some (AFMoE's gate: zeros):
    every score ties, and torch.topk's choice among equal values (unspecified; on CPU it
    depends on the size and on k) differs from ONNX TopK's (the lower index first)."""

    def __init__(self, tied: bool):
        super().__init__()
        self.gate = torch.nn.Linear(8, 8, bias=False)
        if tied:
            torch.nn.init.zeros_(self.gate.weight)
        self.experts = torch.nn.Parameter(torch.arange(8.0))

    def forward(self, x):
        _, idx = torch.sigmoid(self.gate(x)).topk(2, dim=-1)
        return self.experts[idx].sum(-1)


def test_verify_accepts_ties_chosen_as_onnx_does(tmp_onnx):
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch_pick = _TiedRouter(True)(x)
    assert not torch.equal(torch_pick, torch.full((3,), 1.0))  # torch does not pick 0 and 1
    with pytest.warns(UserWarning, match="lower index first"):
        r = pt2onnx.export(_TiedRouter(True), (x,), tmp_onnx, verify=True)
    assert any("topk_ties" in run for run in r.checks["verify"])
    # The same model with a random router: no ties, no warning.
    import warnings

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = pt2onnx.export(_TiedRouter(False), (x,), tmp_onnx, verify=True)
    assert not any("topk_ties" in run for run in r.checks["verify"])


def test_scaled_tolerance_follows_the_outputs_magnitude():
    """export_pretrained's check (scaled=True): an output whose values reach 1000 is compared
    with atol x 1000, as the zoo's tests do (float32 rounding grows with the values); small
    outputs keep atol as given."""
    import numpy as np

    from pt2onnx import _verify

    class Sess:
        def get_outputs(self):
            return [type("O", (), {"name": "logits"})()]

    e = torch.tensor([1000.0, 0.001])
    g = np.array([1000.0, 0.0015], dtype=np.float32)
    assert "failures" in _verify._differences(Sess(), {}, [g], e, 1e-4, 1e-4)
    assert "failures" not in _verify._differences(Sess(), {}, [g], e, 1e-4, 1e-4, scaled=True)
    small = torch.tensor([0.5, 0.001])
    assert "failures" in _verify._differences(Sess(), {}, [np.array([0.5, 0.0015], np.float32)],
                                              small, 1e-4, 1e-4, scaled=True)
