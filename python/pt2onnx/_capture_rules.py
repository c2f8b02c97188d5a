"""Rules pt2onnx gives torch.export for the duration of a capture.

1. Recurrent layers with a dynamic sequence length.

torch.export keeps `aten.lstm.input` / `gru.input` / `rnn_tanh.input` /
`rnn_relu.input` in the graph, but computes their output shapes by running
their Python decomposition on fake tensors, which loops over the time steps:
the sequence length is specialized to the example's, and a dynamic sequence
dim fails to export ("specialized it to be a constant"). The rules here give
the output shapes (and torch's strides) directly, so the sequence stays
symbolic; the ops themselves are converted in C++ (src/convert/rnn.cpp).
The decomposition is registered as the ops' Python Autograd and
CompositeImplicitAutograd kernels (what the tracer calls for the output
metadata), and FakeTensorMode reaches it below autograd: all are replaced, for
fake tensors only.

2. nn.TransformerEncoder / TransformerDecoder given a mask and no
`is_causal`: torch checks whether the mask is causal by comparing its values
(`_detect_is_causal_mask`), a data-dependent branch torch.export cannot
capture ("Could not guard on data-dependent expression"). `is_causal` is only
a hint (the mask is applied either way), so while capturing an undecided
mask counts as not causal: the graph applies the mask as given.

3. transformers' mixture-of-experts layers set to the "eager" experts
implementation (a Python loop over the experts that were hit, a
data-dependent loop torch.export cannot capture): while capturing they run
transformers' "grouped_mm" implementation, the same arithmetic over the
token rows sorted by expert, which converts to one product per expert over
its rows only (src/convert/moe.cpp). Pass the model: `capture_rules(model)`.

4. torchvision's `batched_nms` picks its algorithm from `boxes.numel() >
4000` and returns early when `boxes.numel() == 0`: both are guards on the
number of boxes, which in a detection model is data-dependent ("Could not
guard on data-dependent expression 4*u1 > 4000"). While capturing (fake
tensors only) it runs its coordinate-offset form without the two guards:
boxes of class k are shifted by k * (max coordinate + 1), so boxes of
different classes never overlap, and one `nms` keeps the same boxes as the
per-class loop (torchvision's own form for up to 1000 boxes and for tracing);
no boxes give no kept boxes through `nms` itself. The rule replaces the
attribute `torchvision.ops.boxes.batched_nms` (and `torchvision.ops.
batched_nms`), which torchvision's models look up at each call; a function
imported by name before the capture is torchvision's own.

5. torchvision's multi-level `MultiScaleRoIAlign` sizes its result with
`len(rois)`, a Python int, which an unbacked number of rois cannot give
("Could not extract specialized integer from data-dependent expression").
While capturing, the same computation (rois assigned to levels by the
model's LevelMapper, `roi_align` per level, results written back in roi
order) sizes it with `rois.shape[0]`.

6. torchvision's GeneralizedRCNNTransform.batch_images pads the images to
a multiple of 32 with `int(math.ceil(float(size) / 32) * 32)`: the float
round trip makes torch.export specialize the padded size to the example's
(silently: the graph then holds only for images padded to the same size).
While capturing, the padded size is the integer ceiling `(size + 31) // 32
* 32` (the same value), and the images are zero-padded to it and stacked.
Where the size is symbolic, the number of 32-pixel blocks is computed as a
tensor and read back (`.tolist()`: one new symbol per dim, known to be at
least 1 and to cover the image), so every feature map below is a multiple
or a floor of one symbol, not of the expression of rule 10 (see there).

7. torchvision's `paste_masks_in_image` (Mask R-CNN) pastes each mask with
a Python loop over the detections, resizing it to its own integer box size
(a data-dependent shape: "Could not guard on data-dependent expression").
While capturing, every mask is resampled at once in the image frame: for each
image pixel inside a detection's (padded, integer) box, the bilinear taps and
weights torch's upsample_bilinear2d (align_corners=False) takes for that box
size (scale = float(in) / out, source = scale * (dst + 0.5) - 0.5 clamped at
0), gathered along x then y, zero outside the box: the same values (the four
products summed in another order: measured within 1e-6).

8. torchvision's `heatmaps_to_keypoints` (Keypoint R-CNN) resizes each roi's
heatmaps bicubically to the roi's ceiled size in a Python loop, then takes
the argmax. While capturing, all rois are resampled into one frame as large
as the largest roi map (torch's bicubic taps and A = -0.75 weights, summed in
torch's order, x then y), positions beyond a roi's own size set to -inf, and
the first maximum in row-major order is taken as torch's flattened argmax
does: the same positions, scores within 3e-6 of torch's.

9. torchvision's SSD / SSDlite `postprocess_detections` loops over the
classes (90 for COCO), each step keeping the scores above the threshold and
their top k: every step makes two data-dependent sizes, and torch.export's
symbolic reasoning over a few hundred of them made this loop 13.4 s of
SSDlite's 18.4 s capture (1,147 ops at ~13 ms each). While capturing, all
classes are taken at once: scores not above the threshold set to -inf, the
top min(k, anchors) of every class column (a superset of the top k of the
scores kept), then the entries above the threshold, class by class in
descending score as the loop concatenates them: the same detections with one
data-dependent size.

10. torchvision's GeneralizedRCNNTransform resizes each image by the float
`min(min_size / min(h, w), max_size / max(h, w))`, and F.interpolate sizes
the result `floor(h * scale)` in double precision: with a dynamic image size
every feature map of the backbone, FPN, heads and anchors is then a nested
expression (the floor of a float product, padded, floor-divided at each
stride), and torch.export's symbolic reasoning over the ~55,000 size
operations of a capture (sympy simplifying those expressions) was most of
the R-CNNs' and RetinaNet's export time (RetinaNet: 8.4 s, 1.6 s for the
TorchScript exporter). While capturing, the same double-precision scale and
floor are computed as float64 tensor operations and read back as the resized
size (one new symbol per dim, at least 1), and the image is interpolated to
that size (bilinear, align_corners=False: the same kernel and coordinates as
the scale_factor call with recompute_scale_factor=True). The ONNX graph
computes the size in double as torch does, so the resize holds for every
image size (rule 11 states the one limit below it). Only for the inference
path (no targets, no fixed_size).

11. torchvision's MultiScaleRoIAlign infers each level's scale as the Python
float `2 ** round(log2(feature height / image height))`, which rule 10's
symbols cannot give (no value to round). While capturing, it is computed by
torchvision's own function on the example's sizes (kept by the rules for the
symbols they make): a constant, as the capture without rule 10 fixed it too.
It holds for every image resized to a height of 68 pixels or more (padding to
32 then keeps the ratio within a factor of sqrt(2) of the stride).

12. Batch norm in inference (`aten._native_batch_norm_legit_no_training`,
what every eval-mode BatchNorm layer runs) over symbolic sizes: torch's fake
tensors compute its output by running its Python decomposition, ten
elementwise operations each broadcasting over the symbolic image size (about
10 ms for each layer it runs on, those whose sizes the fake-tensor cache has
not seen: 0.23 s of ResNet-50's 0.89 s capture with a dynamic batch and image
size). While capturing, the output is made as torch's
decomposition makes it on the CPU: a tensor of the input's shape, strides and
dtype, and two empty tensors (the statistics torch does not save in
inference). Only for an input laid out contiguous or channels-last with
statistics of its channel count (checked); anything else runs torch's own.
The graph and every value's shape, strides and dtype are the same as
without the rule (tests/python/test_capture_rules.py).

13. transformers' sliding-window caches (`DynamicSlidingWindowLayer`: Mistral,
Gemma 2/3, GPT-OSS, ...) keep the last `sliding_window - 1` positions and count the
tokens seen in a Python int, which a cropped cache cannot give back; captured as is,
their branches on that count fix the file to one side of the window. While capturing,
the count comes from the 2D attention mask (every token seen and the new ones; set by a
forward pre-hook on each transformers model and again where the masks are made), the
crop is a max in the graph, and the mask sizes come from the cached length: one file
right below, at and past the window (python/pt2onnx/_hf_cache.py,
`sliding_window_patches`). transformers 5 only.

The rules replace module attributes torchvision looks up at each call
(`roi_heads.paste_masks_in_image` and `transform.paste_masks_in_image`, which
imports it by name; `roi_heads.heatmaps_to_keypoints`), and run only on fake
tensors (outside a capture they call torchvision's own).

torch.export removes fake rules of the ops it preserves when it returns, so
the rules are installed around each capture: `pt2onnx.export` does it;
wrap your own `torch.export.export` call in `capture_rules()` to save a
`.pt2` with a dynamic sequence length for the `pt2onnx` command.
"""

import contextlib
import math
import types

import torch

_RNN_OPS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _bind(func, args, kwargs):
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def _rnn_fake(fake_mode, func, *args, **kwargs):
    a = _bind(func, args, kwargs)
    x, hx = a["input"], a["hx"]
    hs = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    dirs = 2 if a["bidirectional"] else 1
    # h0 is [layers * dirs, batch, out] (out = proj_size for a projected LSTM).
    out = hs[0].shape[2]
    # torch's batch_first output is the transpose of a sequence-major tensor.
    if a["batch_first"]:
        y = x.new_empty((x.shape[1], x.shape[0], dirs * out)).transpose(0, 1)
    else:
        y = x.new_empty((x.shape[0], x.shape[1], dirs * out))
    return (y, *[h.new_empty(h.shape) for h in hs])


def _decomposition_kernel(op, original):
    def kernel(*args, **kwargs):
        x = args[0] if args else kwargs.get("input")
        mode = getattr(x, "fake_mode", None)
        if mode is None or original is None:
            return original(*args, **kwargs) if original else NotImplemented
        return _rnn_fake(mode, op, *args, **kwargs)

    return kernel


def _ops():
    return [getattr(torch.ops.aten, name).input for name in _RNN_OPS]


def _detect_is_causal_mask(original):
    from torch._subclasses.fake_tensor import is_fake

    def detect(mask, is_causal=None, size=None):
        # Non-strict capture only (strict capture traces torch's function).
        if torch.compiler.is_dynamo_compiling():
            return original(mask, is_causal, size)
        if is_causal is None and mask is not None and is_fake(mask):
            return False
        return original(mask, is_causal, size)

    return detect


def _eager_experts_configs(model):
    """The configs of `model`'s transformers experts layers (classes wrapped by
    transformers' use_experts_implementation: they hold `_is_expert_parallel`
    and read config._experts_implementation at each call) set to "eager"."""
    if not isinstance(model, torch.nn.Module):
        return []
    found = {}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if (hasattr(m, "_is_expert_parallel") and cfg is not None
                and getattr(cfg, "_experts_implementation", None) == "eager"):
            found[id(cfg)] = cfg
    return list(found.values())


def _batched_nms(original):
    from torch._subclasses.fake_tensor import is_fake

    def batched_nms(boxes, scores, idxs, iou_threshold):
        if torch.compiler.is_dynamo_compiling() or not is_fake(boxes):
            return original(boxes, scores, idxs, iou_threshold)
        offsets = idxs.to(boxes) * (boxes.max() + 1)
        return torch.ops.torchvision.nms(boxes + offsets[:, None], scores, iou_threshold)

    return batched_nms


def _multiscale_roi_align(original):
    from torch._subclasses.fake_tensor import is_fake

    def multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper):
        if (torch.compiler.is_dynamo_compiling() or len(x_filtered) < 2
                or not is_fake(x_filtered[0]) or scales is None or mapper is None):
            return original(x_filtered, boxes, output_size, sampling_ratio, scales, mapper)
        from torchvision.ops import roi_align
        from torchvision.ops.poolers import _convert_to_roi_format

        rois = _convert_to_roi_format(boxes)
        levels = mapper(boxes)
        first = x_filtered[0]
        out = first.new_zeros((rois.shape[0], first.shape[1], *output_size))
        for level, (features, scale) in enumerate(zip(x_filtered, scales)):
            at = torch.where(levels == level)[0]
            pooled = roi_align(features, rois[at], output_size=output_size,
                               spatial_scale=scale, sampling_ratio=sampling_ratio)
            out[at] = pooled.to(out.dtype)
        return out

    return multiscale_roi_align


# The example's value of each size symbol the rules below make (rule 10), for the one
# decision torchvision takes from sizes as a Python number (rule 11). Cleared after a capture.
_EXAMPLE_SIZES = {}


def _example_int(size):
    """The example's value of a size: an int, or a SymInt of the capture's input sizes and the
    symbols made by `_read_back`. Raises TypeError where it has none."""
    import sympy

    if isinstance(size, int):
        return size
    env = size.node.shape_env
    known = dict(getattr(env, "backed_var_to_val", None) or getattr(env, "var_to_val", {}))
    known.update(_EXAMPLE_SIZES)
    value = size.node.expr.xreplace({k: sympy.Integer(int(v)) for k, v in known.items()})
    if not getattr(value, "is_number", False):
        raise TypeError(f"no example value for {size.node.expr}")
    return int(value)


def _sizes_tensor(sizes, dtype):
    """A 1-D tensor of (symbolic) sizes, computed in the graph."""
    return torch.stack([torch.scalar_tensor(s, dtype=dtype) for s in sizes])


def _read_back(values, examples):
    """Python ints of an int64 tensor, each a new symbol while capturing, known to be at
    least 1 (sizes); `examples`: their values for the example inputs."""
    out = values.tolist()
    for v, e in zip(out, examples):
        torch._check(v >= 1)
        if isinstance(v, torch.SymInt):
            _EXAMPLE_SIZES[v.node.expr] = int(e)
    return out


def _batch_images(original):
    from torch._subclasses.fake_tensor import is_fake

    def batch_images(self, images, size_divisible=32):
        if torch.compiler.is_dynamo_compiling() or not is_fake(images[0]):
            return original(self, images, size_divisible)
        h, w = images[0].shape[-2], images[0].shape[-1]
        for img in images[1:]:
            h, w = torch.sym_max(h, img.shape[-2]), torch.sym_max(w, img.shape[-1])
        d = int(size_divisible)
        if isinstance(h, int) and isinstance(w, int):
            h, w = (h + d - 1) // d * d, (w + d - 1) // d * d
        else:
            # The number of blocks as one symbol per dim (rule 10's reason).
            sizes = _sizes_tensor((h, w), torch.int64)
            bh, bw = _read_back((sizes + d - 1) // d,
                                [(_example_int(x) + d - 1) // d for x in (h, w)])
            h, w = bh * d, bw * d
            for img in images:
                torch._check(h >= img.shape[-2])
                torch._check(w >= img.shape[-1])
        padded = [torch.nn.functional.pad(img, (0, w - img.shape[-1], 0, h - img.shape[-2]))
                  for img in images]
        return torch.stack(padded)

    return batch_images


def _resize_image(original):
    from torch._subclasses.fake_tensor import is_fake

    def resize_image_and_masks(image, self_min_size, self_max_size, target=None,
                               fixed_size=None):
        h, w = image.shape[-2:]
        if (torch.compiler.is_dynamo_compiling() or not is_fake(image) or target is not None
                or fixed_size is not None or (isinstance(h, int) and isinstance(w, int))):
            return original(image, self_min_size, self_max_size, target, fixed_size)
        # torchvision: scale = min(min_size / min(h, w), max_size / max(h, w)) in Python
        # floats; F.interpolate(recompute_scale_factor=True): floor(float(h) * scale).
        hw = _sizes_tensor((h, w), torch.float64)
        scale = torch.minimum(float(self_min_size) / hw.min(), float(self_max_size) / hw.max())
        eh, ew = _example_int(h), _example_int(w)
        escale = min(self_min_size / min(eh, ew), self_max_size / max(eh, ew))
        oh, ow = _read_back(torch.floor(hw * scale).to(torch.int64),
                            [math.floor(eh * escale), math.floor(ew * escale)])
        image = torch.nn.functional.interpolate(image[None], size=(oh, ow), mode="bilinear",
                                                align_corners=False)[0]
        return image, target

    return resize_image_and_masks


def _infer_scale(original):
    def infer_scale(feature, original_size):
        sizes = [*feature.shape[-2:], *original_size]
        if all(isinstance(x, int) for x in sizes):
            return original(feature, original_size)
        try:
            ex = [_example_int(x) for x in sizes]
        except (TypeError, AttributeError):
            return original(feature, original_size)
        # torchvision's own computation on the example's sizes: a constant, as its capture
        # with the sizes of the example made it.
        return original(types.SimpleNamespace(shape=ex[:2]), ex[2:])

    return infer_scale


def _resample_axis(size, start, n, insize):
    """Bilinear source taps, as torch's upsample_bilinear2d (align_corners=False)
    computes them, for image coordinates 0..size-1 of boxes starting at
    `start` (int64 [N]) resized from `insize` to `n` (int64 [N]) samples:
    (i0, i1, lambda0, lambda1, inside the box), each [N, size]."""
    dst = torch.arange(size, device=n.device)[None, :] - start[:, None]
    inside = (dst >= 0) & (dst < n[:, None])
    nf = n.to(torch.float32)
    scale = torch.full_like(nf, float(insize)) / nf  # (float)in / out, as torch
    src = (scale[:, None] * (dst.to(torch.float32) + 0.5) - 0.5).clamp(min=0)
    i0 = src.floor().clamp(max=insize - 1)
    lam1 = (src - i0).clamp(0, 1)
    i0 = i0.to(torch.int64)
    i1 = i0 + (i0 < insize - 1).to(torch.int64)
    return i0.clamp(0, insize - 1), i1.clamp(0, insize - 1), 1 - lam1, lam1, inside


def _paste_masks_in_image(original):
    from torch._subclasses.fake_tensor import is_fake

    def paste_masks_in_image(masks, boxes, img_shape, padding=1):
        if torch.compiler.is_dynamo_compiling() or not is_fake(masks):
            return original(masks, boxes, img_shape, padding)
        from torchvision.models.detection.roi_heads import expand_boxes, expand_masks

        masks, scale = expand_masks(masks, padding=padding)
        boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)
        im_h, im_w = img_shape
        n, p = masks.shape[0], masks.shape[-1]
        m = masks[:, 0]
        w = (boxes[:, 2] - boxes[:, 0] + 1).clamp(min=1)
        h = (boxes[:, 3] - boxes[:, 1] + 1).clamp(min=1)
        x0, x1, wx0, wx1, in_x = _resample_axis(im_w, boxes[:, 0], w, p)
        y0, y1, wy0, wy1, in_y = _resample_axis(im_h, boxes[:, 1], h, p)
        # Along x (inner), then y (outer): torch's order of the four products.
        cols = lambda i: m.gather(2, i[:, None, :].expand(n, p, i.shape[1]))  # noqa: E731
        t = cols(x0) * wx0[:, None, :] + cols(x1) * wx1[:, None, :]
        rows = lambda i: t.gather(1, i[:, :, None].expand(n, i.shape[1], t.shape[2]))  # noqa: E731
        out = rows(y0) * wy0[:, :, None] + rows(y1) * wy1[:, :, None]
        inside = in_y[:, :, None] & in_x[:, None, :]
        return torch.where(inside, out, out.new_zeros(())).to(masks.dtype)[:, None]

    return paste_masks_in_image


def _cubic_axis(size, n, insize):
    """Bicubic source taps (A = -0.75), as torch's upsample_bicubic2d
    (align_corners=False) computes them, for outputs 0..size-1 of rois resized
    from `insize` to `n` (float [N], whole numbers) samples: four index
    tensors, four weights, each [N, size], and the mask of outputs < n."""
    dst = torch.arange(size, device=n.device, dtype=torch.float32)[None, :]
    scale = torch.full_like(n, float(insize)) / n
    real = scale[:, None] * (dst + 0.5) - 0.5
    base = real.floor()
    t = real - base
    a = -0.75

    def conv1(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def conv2(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = (conv2(t + 1.0), conv1(t), conv1(1.0 - t), conv2((1.0 - t) + 1.0))
    base = base.to(torch.int64)
    index = tuple((base + (j - 1)).clamp(0, insize - 1) for j in range(4))
    return index, weights, dst < n[:, None]


def _heatmaps_to_keypoints(original):
    from torch._subclasses.fake_tensor import is_fake

    def heatmaps_to_keypoints(maps, rois):
        if torch.compiler.is_dynamo_compiling() or not is_fake(maps):
            return original(maps, rois)
        offset_x, offset_y = rois[:, 0], rois[:, 1]
        widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
        heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
        widths_ceil, heights_ceil = widths.ceil(), heights.ceil()
        n, k, hm, wm = maps.shape
        # One frame as large as the largest roi map; each roi's map fills its
        # top-left corner (row-major order kept, so argmax ties resolve alike).
        one = widths.new_ones(1)
        big_w = torch.cat([widths_ceil, one]).max().to(torch.int64).item()
        big_h = torch.cat([heights_ceil, one]).max().to(torch.int64).item()
        torch._check(big_w >= 1)
        torch._check(big_h >= 1)
        (xi, xw, in_x), (yi, yw, in_y) = (_cubic_axis(big_w, widths_ceil, wm),
                                          _cubic_axis(big_h, heights_ceil, hm))
        t = None
        for i, w in zip(xi, xw):  # along x (inner) first, as torch
            g = maps.gather(3, i[:, None, None, :].expand(n, k, hm, big_w)) * w[:, None, None, :]
            t = g if t is None else t + g
        out = None
        for i, w in zip(yi, yw):
            g = t.gather(2, i[:, None, :, None].expand(n, k, big_h, big_w)) * w[:, None, :, None]
            out = g if out is None else out + g
        inside = (in_y[:, :, None] & in_x[:, None, :])[:, None]
        out = torch.where(inside, out, out.new_full((), float("-inf")))
        # The first maximum in row-major order (torch's argmax over the
        # flattened map): the first row holding the maximum, then its first
        # column holding it (no reshape: a Reshape of 0 rois to [0, k, -1]
        # is ambiguous in ONNX).
        y_int = out.amax(dim=3).argmax(dim=2)
        row = out.gather(2, y_int[:, :, None, None].expand(n, k, 1, big_w))[:, :, 0]
        x_int = row.argmax(dim=2)
        x = (x_int.float() + 0.5) * (widths / widths_ceil)[:, None] + offset_x[:, None]
        y = (y_int.float() + 0.5) * (heights / heights_ceil)[:, None] + offset_y[:, None]
        scores = row.gather(2, x_int[:, :, None])[:, :, 0]
        return torch.stack([x, y, torch.ones_like(x)], dim=2), scores

    return heatmaps_to_keypoints


def _ssd_detections(self, head_outputs, image_anchors, image_shapes):
    """SSD.postprocess_detections with the classes taken at once (rule 9); any tensors."""
    from torchvision.ops import boxes as box_ops

    pred_scores = torch.nn.functional.softmax(head_outputs["cls_logits"], dim=-1)
    num_classes = pred_scores.size(-1)
    detections = []
    for boxes, scores, anchors, image_shape in zip(head_outputs["bbox_regression"], pred_scores,
                                                   image_anchors, image_shapes):
        boxes = self.box_coder.decode_single(boxes, anchors)
        boxes = box_ops.clip_boxes_to_image(boxes, image_shape)
        fg = scores[:, 1:]
        fg = fg.masked_fill(~(fg > self.score_thresh), float("-inf"))
        k = torch.sym_min(self.topk_candidates, fg.shape[0])
        top, idx = fg.topk(k, dim=0)  # [k, classes - 1]: each class's column, descending
        top, idx = top.t().reshape(-1), idx.t().reshape(-1)
        labels = torch.arange(1, num_classes, device=fg.device)[:, None].expand(-1, k)
        kept = torch.where(top > self.score_thresh)[0]
        image_boxes, image_scores = boxes[idx[kept]], top[kept]
        image_labels = labels.reshape(-1)[kept]
        keep = box_ops.batched_nms(image_boxes, image_scores, image_labels, self.nms_thresh)
        keep = keep[: self.detections_per_img]
        detections.append({"boxes": image_boxes[keep], "scores": image_scores[keep],
                           "labels": image_labels[keep]})
    return detections


def _ssd_postprocess(original):
    from torch._subclasses.fake_tensor import is_fake

    def postprocess_detections(self, head_outputs, image_anchors, image_shapes):
        if torch.compiler.is_dynamo_compiling() or not is_fake(head_outputs["cls_logits"]):
            return original(self, head_outputs, image_anchors, image_shapes)
        return _ssd_detections(self, head_outputs, image_anchors, image_shapes)

    return postprocess_detections


def _batch_norm_inference_op():
    return torch.ops.aten._native_batch_norm_legit_no_training.default


def _fast_batch_norm_inference(fake_mode, x, weight, bias, running_mean, running_var,
                               momentum, eps):
    """Rule 12: the fake result of an inference batch norm without its decomposition."""
    from torch._decomp import decomposition_table
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    def channels_of(t):
        return t is None or (t.dim() == 1 and isinstance(t.shape[0], int)
                             and t.shape[0] == x.shape[1])

    if (x.device.type == "cpu" and x.dim() >= 2 and isinstance(x.shape[1], int)
            and all(channels_of(t) for t in (weight, bias, running_mean, running_var))
            and running_mean is not None and running_var is not None
            and (x.is_contiguous() or (x.dim() == 4 and x.is_contiguous(
                memory_format=torch.channels_last)))):
        with in_kernel_invocation_manager(fake_mode):
            made = (torch.empty_like(x), x.new_empty((0,)), x.new_empty((0,)))
        return tuple(FakeTensor(fake_mode, t, x.device) for t in made)
    with fake_mode:
        return decomposition_table[_batch_norm_inference_op()](
            x, weight, bias, running_mean, running_var, momentum, eps)


def _torchvision_patches():
    """(module, attribute, replacement) for the torchvision rules, when
    torchvision is imported (it is never imported here)."""
    import sys

    boxes = sys.modules.get("torchvision.ops.boxes")
    poolers = sys.modules.get("torchvision.ops.poolers")
    ops = sys.modules.get("torchvision.ops")
    found = []
    if boxes is not None and hasattr(boxes, "batched_nms"):
        wrapped = _batched_nms(boxes.batched_nms)
        found.append((boxes, "batched_nms", wrapped))
        if ops is not None and getattr(ops, "batched_nms", None) is boxes.batched_nms:
            found.append((ops, "batched_nms", wrapped))
    transform = sys.modules.get("torchvision.models.detection.transform")
    cls = getattr(transform, "GeneralizedRCNNTransform", None)
    if cls is not None and hasattr(cls, "batch_images"):
        found.append((cls, "batch_images", _batch_images(cls.batch_images)))
    if transform is not None and hasattr(transform, "_resize_image_and_masks"):
        found.append((transform, "_resize_image_and_masks",
                      _resize_image(transform._resize_image_and_masks)))
    heads = sys.modules.get("torchvision.models.detection.roi_heads")
    if heads is not None and hasattr(heads, "paste_masks_in_image"):
        paste = _paste_masks_in_image(heads.paste_masks_in_image)
        found.append((heads, "paste_masks_in_image", paste))
        if getattr(transform, "paste_masks_in_image", None) is heads.paste_masks_in_image:
            found.append((transform, "paste_masks_in_image", paste))
    if heads is not None and hasattr(heads, "heatmaps_to_keypoints"):
        found.append((heads, "heatmaps_to_keypoints",
                      _heatmaps_to_keypoints(heads.heatmaps_to_keypoints)))
    ssd = getattr(sys.modules.get("torchvision.models.detection.ssd"), "SSD", None)
    if ssd is not None and hasattr(ssd, "postprocess_detections"):
        found.append((ssd, "postprocess_detections",
                      _ssd_postprocess(ssd.postprocess_detections)))
    if poolers is not None and hasattr(poolers, "_infer_scale"):
        found.append((poolers, "_infer_scale", _infer_scale(poolers._infer_scale)))
    if poolers is not None and hasattr(poolers, "_multiscale_roi_align"):
        found.append((poolers, "_multiscale_roi_align",
                      _multiscale_roi_align(poolers._multiscale_roi_align)))
    return found


def _transformers_patches():
    """(owner, attribute, replacement) for rule 13, when transformers' cache is imported."""
    import sys

    if "transformers.cache_utils" not in sys.modules:
        return []
    from ._hf_cache import sliding_window_patches

    return sliding_window_patches()


def _transformers_hooks(model):
    """Rule 13's forward pre-hooks on `model`'s transformers models (handles); only with
    rule 13's patches installed."""
    from ._hf_cache import sliding_window_hooks

    return sliding_window_hooks(model)


@contextlib.contextmanager
def capture_rules(model=None):
    """Install pt2onnx's capture rules for torch.export for the duration of a `with` block.

    The rules let torch.export capture models it would otherwise refuse or specialize:
    recurrent layers with a dynamic sequence length, transformer masks, given the model,
    transformers' eager experts loops, and, when torchvision is imported, its batched_nms,
    multi-level MultiScaleRoIAlign, resizing and padding of images, the mask pasting and keypoint
    decoding of Mask / Keypoint R-CNN and SSD's per-class selection of detections; and they
    give inference batch norm over symbolic sizes its output without torch's decomposition
    (the same graph, faster). The module docstring describes each.
    `pt2onnx.export` installs them around its own capture; wrap your own
    `torch.export.export` call in `capture_rules()` to save a `.pt2` (with a dynamic
    sequence length, for example) for the `pt2onnx` command.

    Args:
        model: The model being captured, needed for the transformers experts rule (its
            eager experts layers run transformers' "grouped_mm" implementation while
            capturing); None: that rule is not applied.

    Runnable examples:
    [the guide's capture rules](../guides/modules.md#control-flow-data-dependent-shapes-recurrent-layers).
    """
    from torch._subclasses import fake_impls
    from torch.nn.modules import transformer

    keys = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
    added, saved = [], {}
    for op in _ops():
        if not fake_impls._is_op_registered_to_fake_rule(op):
            fake_impls.register_op_impl(op)(_rnn_fake)
            added.append(op)
        for key in keys:
            original = op.py_kernels.get(key)
            if original is not None:
                saved[(op, key)] = original
                op.py_kernels[key] = _decomposition_kernel(op, original)
        op._dispatch_cache.clear()
    # Rule 12 through torch's table of fake-tensor fast paths for symbolic sizes (an empty
    # stand-in where a torch release has none: the rule is then not applied).
    fast = getattr(fake_impls, "get_fast_op_impls", dict)()
    bn = _batch_norm_inference_op()
    fast_bn = fast.get(bn)
    fast[bn] = _fast_batch_norm_inference
    detect = transformer._detect_is_causal_mask
    transformer._detect_is_causal_mask = _detect_is_causal_mask(detect)
    experts = _eager_experts_configs(model)
    for cfg in experts:
        cfg._experts_implementation = "grouped_mm"
    rule13 = _transformers_patches()
    patches = [(m, name, getattr(m, name), new)
               for m, name, new in _torchvision_patches() + rule13]
    for m, name, _, new in patches:
        setattr(m, name, new)
    hooks = _transformers_hooks(model) if rule13 else []
    try:
        yield
    finally:
        for h in hooks:
            h.remove()
        for m, name, old, _ in reversed(patches):
            setattr(m, name, old)
        _EXAMPLE_SIZES.clear()
        for cfg in experts:
            cfg._experts_implementation = "eager"
        transformer._detect_is_causal_mask = detect
        if fast_bn is None:
            fast.pop(bn, None)
        else:
            fast[bn] = fast_bn
        for (op, key), original in saved.items():
            op.py_kernels[key] = original
        for op in _ops():
            op._dispatch_cache.clear()
        for op in added:
            if fake_impls.op_implementations_dict.get(op) is _rnn_fake:
                fake_impls._deregister_op_impl(op)
