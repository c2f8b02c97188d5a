"""PyTorch's ModuleInfo database (torch.testing._internal.common_modules.
module_db) as a test of whole nn modules (see moduleinfo_harness.py).

One test per (configuration, module class): every sample of the slice must
pass on its own inputs and on permuted inputs of the same shapes, unless
moduleinfo_expected.txt names the sample; an expected failure that passes
fails the test ("XPASS"), so the list only shrinks. Samples torch.export
cannot capture are skipped and counted (with torch's error), as are float64
samples onnxruntime has no CPU kernel for (the onnx checker still checks the
model's types: a float64 model fails there if mistyped). The pass rates are
printed at the end (conftest.py).

Quick subset: the first QUICK samples of every module in float32; the other
float32 samples and float64's first QUICK are marked slow (`make test`, CI), float64's
other samples exhaustive (`make test-exhaustive`): they repeat float32's samples in
another float type, which float64's first samples already check every module in, and
took about a fifth of `make test`'s ModuleInfo time (one module, LinearCrossEntropyLoss,
119 s of it on one worker in CI)."""

import json

import pytest

import moduleinfo_harness as h

QUICK = 3

# name -> (dtype, first sample, last sample (exclusive, None = all), mark: None (quick),
# "slow" or "exhaustive")
CONFIGS = {
    "float32-quick": ("float32", 0, QUICK, None),
    "float32-rest": ("float32", QUICK, None, "slow"),
    "float64": ("float64", 0, QUICK, "slow"),
    "float64-rest": ("float64", QUICK, None, "exhaustive"),
}

_DB = {h.module_id(m): m for m in h.module_db()}
_EXPECTED = h.load_expected()


def _params():
    out = []
    counts = {}  # (module, dtype) -> number of samples (making them takes milliseconds)
    for cfg, (dtype, lo, hi, mark) in CONFIGS.items():
        for name, info in _DB.items():
            if not h.supports(info, h.DTYPES[dtype]):
                continue
            if (name, dtype) not in counts:
                counts[(name, dtype)] = len(h.samples(info, h.DTYPES[dtype]))
            if not range(counts[(name, dtype)])[lo:hi]:
                continue
            marks = [getattr(pytest.mark, mark)] if mark else []
            out.append(pytest.param(cfg, name, id=f"{cfg}-{name}", marks=marks))
    return out


def test_expected_list_names_known_modules():
    for e in _EXPECTED:
        assert e.module in _DB, f"{e.where}: no ModuleInfo named {e.module!r}"


@pytest.mark.parametrize("cfg,name", _params())
def test_moduleinfo(cfg, name, record_property):
    import torch

    torch.set_num_threads(1)
    dtype_name, lo, hi, _ = CONFIGS[cfg]
    dtype = h.DTYPES[dtype_name]
    info = _DB[name]
    all_samples = h.samples(info, dtype)
    idx = list(range(len(all_samples)))[lo:hi]
    if not idx:
        pytest.skip(f"{name} has {len(all_samples)} samples, none in [{lo}:{hi}]")
    results = {i: h.run_sample(info, all_samples[i], dtype) for i in idx}
    judged = {i: r for i, r in results.items() if r.outcome not in (h.CAPTURE, h.NOKERNEL)}
    passed = sum(r.outcome == h.PASS for r in judged.values())
    record_property("moduleinfo", json.dumps({
        "cfg": cfg, "module": name, "samples": len(results), "captured": len(judged),
        "passed": passed, "not_capturable": sum(r.outcome == h.CAPTURE for r in results.values()),
        "no_ort_kernel": sum(r.outcome == h.NOKERNEL for r in results.values()),
        "second_checked": sum(r.second.startswith("checked") for r in judged.values())}))
    if not judged:
        r = next(iter(results.values()))
        pytest.skip(f"no sample judged ({r.outcome}): {r.detail}")
    unexpected, xpass, xfail = [], [], []
    for i, r in judged.items():
        exp = h.expected_failure(_EXPECTED, name, dtype_name, i)
        if r.outcome == h.PASS:
            if exp is not None:
                xpass.append(f"sample {i} passes now; remove its expected failure ({exp.where})")
        elif exp is not None:
            xfail.append(f"sample {i}: {exp.reason}")
        else:
            unexpected.append(f"sample {i} ({all_samples[i].desc}): {r.outcome}: {r.detail}")
    assert not unexpected, (f"{len(unexpected)} of {len(judged)} samples fail:\n"
                            + "\n".join(unexpected))
    if xpass:
        pytest.fail("XPASS: " + "; ".join(xpass))
    if xfail:
        pytest.xfail("; ".join(xfail))
