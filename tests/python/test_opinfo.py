"""PyTorch's OpInfo database as the operator test (see opinfo_harness.py).

One test per (configuration, op): every sample of the op (the first
PT2ONNX_OPINFO_SAMPLES, default 3) must pass, unless the checked-in
expected-failure list (opinfo_expected/*.txt) names the op for that dtype,
opset and form; an expected failure whose samples all pass fails the test
("XPASS"), so the list only shrinks. Samples torch.export cannot capture are
skipped and counted. The pass rates per configuration are printed at the end
(conftest.py). The opset-18 float32 configuration is the quick subset; the
other configurations are marked slow."""

import json
import os

import pytest

import opinfo_harness as h

# name -> (dtype, opset, form, quick)
CONFIGS = {
    "o18-float32-train": ("float32", 18, "train", True),
    "o18-float32-core": ("float32", 18, "core", False),
    "o18-float32-inplace": ("float32", 18, "inplace", False),
    "o11-float32-train": ("float32", 11, "train", False),
    "o12-float32-train": ("float32", 12, "train", False),
    "o13-float32-train": ("float32", 13, "train", False),
    "o17-float32-train": ("float32", 17, "train", False),
    "o21-float32-train": ("float32", 21, "train", False),
    "o23-float32-train": ("float32", 23, "train", False),
    "o18-int32-train": ("int32", 18, "train", False),
    "o18-int64-train": ("int64", 18, "train", False),
    "o18-bool-train": ("bool", 18, "train", False),
    "o18-float16-train": ("float16", 18, "train", False),
    "o18-bfloat16-train": ("bfloat16", 18, "train", False),
}

# Opsets 11 and 12 convert at 13 and rewrite the result (src/opt/lower_to_opset.cpp):
# one sample per op exercises each rewrite the op's converter output needs; the
# other samples would repeat o13's conversion (CI time, docs/contributing/ci-times.md).
SAMPLES = {"o11-float32-train": 1, "o12-float32-train": 1}

_DB = {h.op_id(o): o for o in h.op_db()}
_EXPECTED = h.load_expected()


def _params():
    out = []
    for cfg, (dtype, opset, form, quick) in CONFIGS.items():
        for name, op in _DB.items():
            if form == "inplace" and op.inplace_variant is None:
                continue
            if not h.op_supports(op, h.DTYPES[dtype]):
                continue
            marks = [] if quick else [pytest.mark.slow]
            if _shares_capture(cfg):  # one worker captures once for all these configurations
                marks.append(pytest.mark.xdist_group(f"opinfo-float32-train-{name}"))
            out.append(pytest.param(cfg, name, id=f"{cfg}-{name}", marks=marks))
    return out


# The float32 "train" configurations (opsets 11 to 23) and "core" (the same programs after
# run_decompositions()) convert the same captured samples: the first of them on a worker
# captures an op's samples (and runs them eagerly), the others of that op convert those
# programs at their opsets, or decompose them first (xdist_group keeps an op's configurations on
# one worker). Only the current op's are kept.
_PREPARED: dict = {}


def _shares_capture(cfg):
    dtype, _, form, _ = CONFIGS[cfg]
    return dtype == "float32" and form in ("train", "core")


def _prepared(name, op, dtype, count):
    if _PREPARED.get("op") != name:
        _PREPARED.clear()
        _PREPARED["op"] = name
    have = _PREPARED.setdefault("samples", [])
    if len(have) < count:
        more = h.samples(op, dtype, count)[len(have):]  # seeded: the same samples every call
        have.extend(h.prepare(op, s, dtype) for s in more)
    return have[:count]


@pytest.mark.parametrize("cfg,name", _params())
def test_opinfo(cfg, name, record_property):
    import torch

    torch.set_num_threads(1)
    dtype_name, opset, form, _ = CONFIGS[cfg]
    op = _DB[name]
    dtype = h.DTYPES[dtype_name]
    count = SAMPLES.get(cfg, h.MAX_SAMPLES)
    if _shares_capture(cfg):
        results = [h.run_sample(op, None, dtype, opset, decomposed=form == "core", prepared=p)
                   for p in _prepared(name, op, dtype, count)]
    else:
        results = [h.run_sample(op, s, dtype, opset, decomposed=form == "core",
                                inplace=form == "inplace")
                   for s in h.samples(op, dtype, count)]
    captured = [r for r in results if r.outcome != h.CAPTURE]
    passed = sum(r.outcome == h.PASS for r in captured)
    record_property("opinfo", json.dumps({"cfg": cfg, "op": name, "samples": len(results),
                                          "captured": len(captured), "passed": passed}))
    exp = h.expected_failure(_EXPECTED, name, dtype_name, opset, form)
    if not captured:
        pytest.skip(f"torch.export cannot capture any sample: {results[0].detail if results else 'no samples'}")
    failures = [f"{r.outcome}: {r.detail} {' '.join(r.missing)}" for r in captured
                if r.outcome != h.PASS]
    if exp is not None:
        if not failures:
            pytest.fail(f"XPASS: {name} passes now; remove its expected failure ({exp.where})")
        pytest.xfail(exp.reason)
    assert not failures, f"{len(failures)} of {len(captured)} samples fail:\n" + "\n".join(failures)
