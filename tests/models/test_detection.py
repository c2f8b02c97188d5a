"""torchvision detection: the compiled ops (nms, roi_align, roi_pool,
ps_roi_align, batched_nms as torch.export captures it) and the detection
models, exported with dynamic image sizes and compared with PyTorch in
onnxruntime on images of other sizes, one with no detections included.

Needs torchvision's compiled ops, which the pinned torch 2.13.0 CPU
environment cannot load: run under `make test-torch TORCH=2.14.1`.
"""

import numpy as np
import pytest
import torch
from torch.export import Dim

try:
    import torchvision
    from torchvision.ops import nms, ps_roi_align, roi_align, roi_pool

    torch.ops.torchvision.nms.default  # raises when the compiled ops did not load
except Exception as e:  # noqa: BLE001 - any failure to load means: not here
    pytest.skip(f"torchvision's compiled ops do not load here ({type(e).__name__}); these tests "
                "run under `make test-torch TORCH=2.14.1`", allow_module_level=True)

import onnxruntime as ort

import pt2onnx
from pt2onnx import ConversionError
from pt2onnx._capture_rules import capture_rules


def _run(path, feeds):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {k: v.numpy() for k, v in feeds.items()})


def _boxes(n, g, scale=100.0):
    b = torch.rand(n, 4, generator=g) * scale
    b[:, 2:] = b[:, :2] + torch.rand(n, 2, generator=g) * scale / 2 + 0.01
    return b


# ---- nms / batched_nms

class _NMS(torch.nn.Module):
    def __init__(self, thr):
        super().__init__()
        self.thr = thr

    def forward(self, b, s):
        return nms(b, s, self.thr)


class _BatchedNMS(torch.nn.Module):
    # Looked up at call time, as torchvision's models do (box_ops.batched_nms):
    # the capture rule replaces the module attribute.
    def forward(self, b, s, i):
        return torchvision.ops.batched_nms(b, s, i, 0.5)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("thr", [0.3, 0.7])
def test_nms(tmp_path, opset, thr):
    g = torch.Generator().manual_seed(0)
    n = Dim("n")
    path = tmp_path / "nms.onnx"
    m = _NMS(thr)
    pt2onnx.export(m, (_boxes(20, g), torch.rand(20, generator=g)), path,
                   dynamic_shapes=({0: n}, {0: n}), opset=opset)
    for count in (0, 1, 6, 64, 300):
        b, s = _boxes(count, g), torch.rand(count, generator=g)
        if count >= 64:  # many equal scores: kept in index order, as torchvision
            s = (s * 5).round() / 5
        ref = m(b, s).numpy()
        got = _run(path, {"b": b, "s": s})[0]
        assert got.dtype == np.int64 and got.shape == ref.shape, (count, got.shape, ref.shape)
        np.testing.assert_array_equal(got, ref)


def test_batched_nms_dynamic_count(tmp_path):
    # More than 1000 boxes take torchvision's per-class loop in PyTorch; the
    # capture rule's offset form must keep the same boxes.
    g = torch.Generator().manual_seed(1)
    n = Dim("n")
    path = tmp_path / "bnms.onnx"
    m = _BatchedNMS()
    args = (_boxes(30, g), torch.rand(30, generator=g), torch.randint(0, 4, (30,), generator=g))
    pt2onnx.export(m, args, path, dynamic_shapes=({0: n}, {0: n}, {0: n}))
    for count in (0, 1, 9, 1200):
        b, s = _boxes(count, g), torch.rand(count, generator=g)
        i = torch.randint(0, 5, (count,), generator=g)
        ref = m(b, s, i).numpy()
        got = _run(path, {"b": b, "s": s, "i": i})[0]
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


def test_batched_nms_rule_scope():
    # The rule replaces torchvision's function only inside capture_rules(),
    # and outside a capture (real tensors) calls torchvision's own.
    from torchvision.ops import boxes as box_ops

    original = box_ops.batched_nms
    with capture_rules():
        assert box_ops.batched_nms is not original
        assert torchvision.ops.batched_nms is box_ops.batched_nms
        g = torch.Generator().manual_seed(2)
        b, s = _boxes(50, g), torch.rand(50, generator=g)
        i = torch.randint(0, 3, (50,), generator=g)
        assert torch.equal(box_ops.batched_nms(b, s, i, 0.5), original(b, s, i, 0.5))
        assert box_ops.batched_nms(b[:0], s[:0], i[:0], 0.5).shape == (0,)
    assert box_ops.batched_nms is original and torchvision.ops.batched_nms is original


# ---- roi_align / roi_pool / ps_roi_align

def _rois(k, nb, h, w, scale, g):
    b = torch.rand(k, 4, generator=g)
    b[:, 0] *= w / scale
    b[:, 1] *= h / scale
    b[:, 2] = b[:, 0] + torch.rand(k, generator=g) * w / scale / 2
    b[:, 3] = b[:, 1] + torch.rand(k, generator=g) * h / scale / 2
    if k > 3:  # under one cell, zero height, beyond the feature map
        b[0, 2] = b[0, 0] + 0.1
        b[1, 3] = b[1, 1]
        b[2] = torch.tensor([-5.0, -5.0, w / scale + 5, h / scale + 3])
    idx = torch.randint(0, nb, (k, 1), generator=g).float()
    return torch.cat([idx, b], 1)


class _Op(torch.nn.Module):
    def __init__(self, fn, *a):
        super().__init__()
        self.fn, self.a = fn, a

    def forward(self, x, r):
        return self.fn(x, r, *self.a)


def _check_roi_op(tmp_path, m, channels, scale, opset):
    g = torch.Generator().manual_seed(3)
    path = tmp_path / "roi.onnx"
    pt2onnx.export(m, (torch.randn(2, channels, 20, 24, generator=g), _rois(6, 2, 20, 24, scale, g)),
                   path, opset=opset,
                   dynamic_shapes=({0: Dim("n"), 2: Dim("h"), 3: Dim("w")}, {0: Dim("k")}))
    for nb, h, w, k in [(1, 16, 16, 0), (3, 33, 17, 7), (2, 40, 50, 40)]:
        x, r = torch.randn(nb, channels, h, w, generator=g), _rois(k, nb, h, w, scale, g)
        ref = m(x, r).numpy()
        got = _run(path, {"x": x, "r": r})[0]
        assert got.shape == ref.shape, (got.shape, ref.shape)
        # NaN where torchvision gives NaN (ps_roi_align: adaptive grid of 0 samples)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [13, 16, 18])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [-1, 2])
def test_roi_align(tmp_path, opset, aligned, sampling):
    m = _Op(roi_align, (5, 4), 0.25, sampling, aligned)
    if aligned and opset < 16:
        with pytest.raises(ConversionError, match="aligned=True needs opset >= 16"):
            pt2onnx.export(m, (torch.randn(1, 3, 8, 8), torch.tensor([[0, 1.0, 1, 5, 5]])),
                           opset=opset)
        return
    _check_roi_op(tmp_path, m, 8, 0.25, opset)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("size,scale", [((5, 4), 0.5), ((3, 3), 1.0)])
def test_roi_pool(tmp_path, opset, size, scale):
    _check_roi_op(tmp_path, _Op(roi_pool, size, scale), 8, scale, opset)


@pytest.mark.parametrize("opset", [13, 16, 18])
@pytest.mark.parametrize("sampling", [-1, 2])
def test_ps_roi_align(tmp_path, opset, sampling):
    m = _Op(ps_roi_align, (3, 2), 0.25, sampling)
    if opset < 16:
        with pytest.raises(ConversionError, match="ps_roi_align needs opset >= 16"):
            pt2onnx.export(m, (torch.randn(1, 12, 8, 8), torch.tensor([[0, 1.0, 1, 5, 5]])),
                           opset=opset)
        return
    _check_roi_op(tmp_path, m, 12, 0.25, opset)


# ---- MultiScaleRoIAlign over several levels (capture rule 5)

class _Pooler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torchvision.ops.MultiScaleRoIAlign(["0", "1", "2"], 3, 2)

    def forward(self, f0, f1, f2, boxes):
        return self.pool({"0": f0, "1": f1, "2": f2}, [boxes], [(64, 64)])


def test_multiscale_roi_align_dynamic_rois(tmp_path):
    g = torch.Generator().manual_seed(4)
    m = _Pooler().eval()
    feats = [torch.randn(1, 4, 64 // s, 64 // s, generator=g) for s in (4, 8, 16)]

    def boxes(k):
        b = torch.rand(k, 4, generator=g) * 40
        b[:, 2:] = b[:, :2] + torch.rand(k, 2, generator=g) * 40 + 1
        return b

    # The number of rois is data-dependent in a model (after nms): unbacked here too.
    class FromNMS(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, f0, f1, f2, b, s):
            keep = nms(b, s, 0.6)
            return self.m(f0, f1, f2, b[keep])

    wrapper = FromNMS().eval()
    args = (*feats, boxes(30), torch.rand(30, generator=g))
    dyn = (None, None, None, {0: Dim("n")}, {0: Dim("n")})
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(wrapper, args, dynamic_shapes=dyn, strict=False)  # without the rules
    path = tmp_path / "pooler.onnx"
    pt2onnx.export(wrapper, args, path, dynamic_shapes=dyn)
    for k in (0, 3, 60):
        b, s = boxes(k), torch.rand(k, generator=g)
        ref = wrapper(*feats, b, s).numpy()
        got = _run(path, {"f0": feats[0], "f1": feats[1], "f2": feats[2], "b": b, "s": s})[0]
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ---- GeneralizedRCNNTransform's resize and padding to a multiple of 32 (capture rules 10, 6)

class _Transform(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from torchvision.models.detection.transform import GeneralizedRCNNTransform

        self.t = GeneralizedRCNNTransform(320, 320, [0.5, 0.4, 0.3], [0.2, 0.25, 0.3])

    def forward(self, img):
        return self.t([img])[0].tensors


def test_rcnn_transform_padding_dynamic(tmp_path):
    # Without the rule torch.export silently fixes the padded size to the
    # export image's (256 x 320 here): an image of another aspect failed.
    g = torch.Generator().manual_seed(6)
    m = _Transform().eval()
    path = tmp_path / "transform.onnx"
    pt2onnx.export(m, (torch.rand(3, 240, 320, generator=g),), path,
                   dynamic_shapes=({1: Dim("h", min=32, max=2048), 2: Dim("w", min=32, max=2048)},))
    # Sizes whose resize lands on every side of the capture's (rule 10: the resized size is
    # computed in double as torch does; rule 6: padded to 32): extreme aspects, the range's
    # ends, a scale of exactly 1, sizes one off a multiple of 32.
    for h, w in [(300, 256), (200, 280), (97, 131), (32, 2048), (2048, 33), (320, 320),
                 (321, 320), (641, 1279), (240, 320), (63, 64)]:
        img = torch.rand(3, h, w, generator=g)
        ref = m(img).numpy()
        got = _run(path, {"img": img})[0]
        assert got.shape == ref.shape, (got.shape, ref.shape)
        # The bilinear resize's source coordinates: onnxruntime divides by
        # out/in, torch multiplies by in/out (float32 rounding, ~3e-5 px at
        # column 260), times the normalized image's slope (up to ~5 / px).
        np.testing.assert_allclose(got, ref, rtol=0, atol=3e-4)


# ---- paste_masks_in_image / heatmaps_to_keypoints over an unbacked number of
# detections (capture rules 7 and 8)

class _PostNMS(torch.nn.Module):
    """nms (an unbacked count) then Mask R-CNN's mask pasting into an image of
    the input's size, or Keypoint R-CNN's heatmap decoding."""

    def __init__(self, what):
        super().__init__()
        self.what = what

    def forward(self, img, b, s, maps):
        from torchvision.models.detection import roi_heads

        keep = nms(b, s, 0.5)
        if self.what == "masks":
            return roi_heads.paste_masks_in_image(maps[keep], b[keep], img.shape[-2:])
        return roi_heads.heatmaps_to_keypoints(maps[keep], b[keep])


def _post_inputs(g, k, h, w, what):
    b = torch.rand(k, 4, generator=g)
    # Inside the image, as the models' boxes (clipped); expanded by the mask
    # padding they reach beyond it.
    b[:, 0] = b[:, 0] * w
    b[:, 1] = b[:, 1] * h
    b[:, 2] = b[:, 0] + torch.rand(k, generator=g) * (w - b[:, 0])
    b[:, 3] = b[:, 1] + torch.rand(k, generator=g) * (h - b[:, 1])
    if k > 2:  # under a pixel wide and tall
        b[0, 2:] = torch.minimum(b[0, :2] + 0.3, torch.tensor([w, h]))
    maps = (torch.rand(k, 1, 28, 28, generator=g) if what == "masks"
            else torch.randn(k, 5, 56, 56, generator=g) * 3)
    return torch.zeros(1, h, w), b, torch.rand(k, generator=g), maps


@pytest.mark.parametrize("what", ["masks", "keypoints"])
def test_detection_postprocess_dynamic(tmp_path, what):
    from torchvision.models.detection import roi_heads

    g = torch.Generator().manual_seed(7)
    m = _PostNMS(what).eval()
    args = _post_inputs(g, 12, 60, 80, what)
    n = Dim("n")
    dyn = ({1: Dim("h", min=8, max=512), 2: Dim("w", min=8, max=512)}, {0: n}, {0: n}, {0: n})
    original = (roi_heads.paste_masks_in_image, roi_heads.heatmaps_to_keypoints)
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(m, args, dynamic_shapes=dyn, strict=False)  # without the rules
    path = tmp_path / "post.onnx"
    pt2onnx.export(m, args, path, dynamic_shapes=dyn)
    assert (roi_heads.paste_masks_in_image, roi_heads.heatmaps_to_keypoints) == original
    names = ("img", "b", "s", "maps")
    for k, h, w in [(0, 50, 40), (1, 33, 70), (9, 90, 64), (40, 120, 150)]:
        feeds = _post_inputs(g, k, h, w, what)
        ref = m(*feeds)
        got = _run(path, dict(zip(names, feeds)))
        ref = (ref,) if what == "masks" else ref
        assert len(got) == len(ref)
        for r, o in zip(ref, got):
            assert o.shape == tuple(r.shape), (o.shape, tuple(r.shape))
        if what == "masks":
            # Same taps and weights; the products summed in another order
            # (measured: up to 9e-7).
            np.testing.assert_allclose(got[0], ref[0].numpy(), rtol=0, atol=2e-6)
            assert ((got[0] > 0.5) != (ref[0].numpy() > 0.5)).sum() <= 1e-4 * got[0].size
        else:
            np.testing.assert_array_equal(got[0], ref[0].numpy())  # argmax positions
            np.testing.assert_allclose(got[1], ref[1].numpy(), rtol=1e-5, atol=1e-5)


# ---- models

def _reinit(m, gain, bias_std):
    # Random weights on the scale of a trained network's (the constructors'
    # own init leaves these heads' scores all but constant).
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * (gain / p[0].numel()) ** 0.5)
            else:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(torch.randn(p.shape, generator=g) * bias_std + base)
    return m


def _build(name, thresh):
    from torchvision.models import detection

    torch.manual_seed(0)
    kw = dict(weights=None, weights_backbone=None)
    if name == "fasterrcnn_mobilenet_v3_large_fpn":
        m = detection.fasterrcnn_mobilenet_v3_large_fpn(**kw, min_size=320, max_size=320,
                                                        box_score_thresh=thresh)
        return _reinit(m.eval(), 1.0, 0.01)
    if name == "retinanet_resnet50_fpn":
        return detection.retinanet_resnet50_fpn(**kw, min_size=320, max_size=320,
                                                score_thresh=thresh).eval()
    if name == "maskrcnn_resnet50_fpn":
        return detection.maskrcnn_resnet50_fpn(**kw, min_size=320, max_size=320,
                                               box_score_thresh=thresh,
                                               box_detections_per_img=20).eval()
    if name == "keypointrcnn_resnet50_fpn":
        return detection.keypointrcnn_resnet50_fpn(**kw, min_size=320, max_size=320,
                                                   box_score_thresh=thresh,
                                                   box_detections_per_img=10).eval()
    if name == "ssdlite320_mobilenet_v3_large":
        m = detection.ssdlite320_mobilenet_v3_large(**kw, score_thresh=thresh)
        return _reinit(m.eval(), 2.0, 0.1)
    raise KeyError(name)


# model -> (threshold keeping detections on random images and none on a
# constant image, or None where no threshold separates them: then a second
# export with a threshold above every score gives the empty case).
MODELS = {
    "fasterrcnn_mobilenet_v3_large_fpn": (0.0, 0.02),
    "retinanet_resnet50_fpn": (0.02, None),
    "ssdlite320_mobilenet_v3_large": (0.5, None),
    # Softmax scores are at most 1: a threshold of 1.0 keeps nothing.
    "maskrcnn_resnet50_fpn": (0.0, 1.0),
    "keypointrcnn_resnet50_fpn": (0.0, 1.0),
}
# Outputs beside KEYS, compared per matched detection (_compare_extra).
EXTRA = {"maskrcnn_resnet50_fpn": ("masks",),
         "keypointrcnn_resnet50_fpn": ("keypoints", "keypoints_scores")}
SLOW = {"maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"}
KEYS = ("boxes", "labels", "scores")


def _export_detector(m, path):
    img = torch.rand(3, 240, 320, generator=torch.Generator().manual_seed(9))
    dyn = ([{1: Dim("height", min=32, max=2048), 2: Dim("width", min=32, max=2048)}],)
    pt2onnx.export(m, ([img],), path, dynamic_shapes=dyn)
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert len(s.get_inputs()) == 1
    return s


def _float32_spread(m, img):
    """How far PyTorch's own float32 detections are from its float64 ones on
    `img` (each float32 detection against the nearest float64 box of its
    label): (largest box difference, largest score difference)."""
    import copy

    m64 = copy.deepcopy(m).double()
    with torch.no_grad():
        a, b = m([img])[0], m64([img.double()])[0]
    box = score = 0.0
    for i in range(a["boxes"].shape[0]):
        d = (b["boxes"] - a["boxes"][i].double()).abs().amax(1)
        d = torch.where(b["labels"] == a["labels"][i], d, torch.inf)
        if d.numel():
            j = int(d.argmin())
            box = max(box, float(d[j]))
            score = max(score, float((b["scores"][j] - a["scores"][i].double()).abs()))
    return box, score


@pytest.mark.parametrize("anchors,spread", [(500, 4.0), (120, 4.0), (500, 0.5), (300, 12.0)])
def test_ssd_selection_rule_equals_the_class_loop(anchors, spread):
    """Rule 9 (the classes at once) against torchvision's per-class loop, on
    real tensors: the same detections, bit for bit, in the same order but
    among equal scores (topk orders ties in no defined way: at spread 12 the
    softmax saturates and one class holds equal scores). Spreads of the
    logits: every class with more, fewer or none of its scores above the
    threshold than the top k; 120 anchors: fewer than k."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    from pt2onnx._capture_rules import _ssd_detections

    m = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    g = torch.Generator().manual_seed(anchors + int(spread))
    heads = {"bbox_regression": torch.randn(2, anchors, 4, generator=g),
             "cls_logits": torch.randn(2, anchors, 91, generator=g) * spread}
    shapes = [(320, 320), (240, 300)]
    priors = [_boxes(anchors, g, 320.0), _boxes(anchors, g, 320.0)]
    ref = m.postprocess_detections(heads, priors, shapes)
    got = _ssd_detections(m, heads, priors, shapes)
    assert sum(len(r["scores"]) for r in ref) > 0

    def ordered(d):  # by score, then label and box: ties in one order
        cols = [d["boxes"][:, i].numpy() for i in (3, 2, 1, 0)]
        order = np.lexsort(cols + [d["labels"].numpy(), -d["scores"].numpy()])
        return {k: v[torch.from_numpy(order)] for k, v in d.items()}

    for r, o in zip(ref, got):
        assert all(r[k].dtype == o[k].dtype for k in r)
        assert torch.equal(r["scores"], o["scores"]) and torch.equal(r["labels"], o["labels"])
        r, o = ordered(r), ordered(o)
        for k in ("boxes", "scores", "labels"):
            assert torch.equal(r[k], o[k]), k


def _compare(s, m, img, expect_empty, spread=None):
    # spread: PyTorch's own float32 vs float64 difference on this image
    # (_float32_spread); the ONNX result may differ from PyTorch's float32 one
    # by up to 4 times as much (where that exceeds the fixed tolerances).
    box_atol, score_atol = 2e-3, 1e-4
    if spread is not None:
        box_atol, score_atol = max(box_atol, 4 * spread[0]), max(score_atol, 4 * spread[1])
    with torch.no_grad():
        ref = m([img])[0]
    outs = s.run(None, {s.get_inputs()[0].name: img.numpy()})
    names = [o.name for o in s.get_outputs()]
    got = {}
    for k in KEYS + tuple(ref)[len(KEYS):]:
        (i,) = [j for j, n in enumerate(names) if n.endswith("." + k)]
        got[k] = outs[i]
    n = ref["boxes"].shape[0]
    assert (n == 0) == expect_empty, (tuple(img.shape), n)
    for k in KEYS:
        r = ref[k].numpy()
        assert got[k].shape == r.shape, (k, got[k].shape, r.shape)
        assert got[k].dtype == r.dtype, (k, got[k].dtype, r.dtype)
    extra = [k for k in ref if k not in KEYS]
    for k in extra:
        assert got[k].shape == tuple(ref[k].shape), (k, got[k].shape, tuple(ref[k].shape))
    ref = {k: ref[k].numpy() for k in ref}
    # Same detections as a set: each PyTorch detection matched to its own ONNX
    # one (same label, score within 1e-4, box within 2e-3 px + 1e-4
    # relative). The order is checked as decreasing score: detections of
    # (nearly) equal score come in no defined order.
    assert (np.diff(got["scores"]) <= 1e-6).all(), "ONNX scores not in decreasing order"
    free = np.ones(n, dtype=bool)
    for i in range(n):
        ok = (free & (got["labels"] == ref["labels"][i])
              & np.isclose(got["scores"], ref["scores"][i], rtol=1e-4, atol=score_atol)
              & np.isclose(got["boxes"], ref["boxes"][i], rtol=1e-4, atol=box_atol).all(1))
        assert ok.any(), (i, ref["labels"][i], ref["scores"][i], ref["boxes"][i])
        j = np.argmax(ok)
        free[j] = False
        for k in extra:
            _compare_extra(k, got[k][j], ref[k][i])


def _compare_extra(k, got, ref):
    if k == "masks":
        # Float masks: the pasted probabilities (bilinear resize of the mask
        # head's 28 x 28 into the integer box); thresholded as users do (> 0.5).
        np.testing.assert_allclose(got, ref, rtol=0, atol=MASK_ATOL)
        assert ((got > 0.5) != (ref > 0.5)).mean() <= MASK_FLIP, k
    elif k == "keypoints":
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-3)
    else:
        # Keypoint scores are heatmap logits (~50 with this init) after
        # ResNet-50, FPN and 8 convolutions of 512 channels: PyTorch's own
        # float32 result differs from its float64 one by up to 8.7e-4 here
        # (measured, same images); allowed: about 4 times that.
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=4e-3)


MASK_ATOL, MASK_FLIP = 1e-2, 1e-3


# Models whose float32 result is itself unstable on these random weights:
# measured, PyTorch float32 vs float64 on the test images: Faster R-CNN boxes
# 0.81 / 0.90 px apart with scores 1.4e-9 apart (the class scores are all but
# constant: near-tied boxes are kept in either order), SSDlite scores 6.7e-6 /
# 4.7e-5 and boxes 0.002 / 0.012 px. ONNX vs PyTorch float32 shows the same
# pattern (0.8 px with equal scores; SSDlite 1e-5 in scores), so those two
# are compared within 4 times PyTorch's own float32 error on each image.
_F32_UNSTABLE = {"fasterrcnn_mobilenet_v3_large_fpn", "ssdlite320_mobilenet_v3_large"}

# Open gaps, each seen and stated (strict: the test fails once they are fixed).
# SSDlite was one until the exporter computed interpolate's source coordinates
# as torch does (Resize's differed by 1.5e-5 on its 200 x 280 -> 320 x 320
# resize, 1.2e-4 in scores; tests/python/test_resize_coordinates.py).
_OPEN = {}


def _marks(n):
    marks = [pytest.mark.xfail(strict=True, reason=_OPEN[n])] if n in _OPEN else []
    return marks + ([pytest.mark.slow] if n in SLOW else [])


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in MODELS])
def test_detection_model(tmp_path, name):
    keep, empty_thresh = MODELS[name]
    m = _build(name, keep)
    s = _export_detector(m, tmp_path / "det.onnx")
    g = torch.Generator().manual_seed(10)
    for h, w in [(200, 280), (300, 256)]:  # not the export image's size
        img = torch.rand(3, h, w, generator=g)
        spread = _float32_spread(m, img) if name in _F32_UNSTABLE else None
        _compare(s, m, img, expect_empty=False, spread=spread)
    constant = torch.full((3, 224, 260), 0.5)
    if empty_thresh is None:
        _compare(s, m, constant, expect_empty=True)
    else:
        m2 = _build(name, empty_thresh)
        s2 = _export_detector(m2, tmp_path / "det_empty.onnx")
        _compare(s2, m2, constant, expect_empty=True)
        _compare(s2, m2, torch.rand(3, 200, 280, generator=g), expect_empty=True)
