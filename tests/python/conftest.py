import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

# torchvision's PyPI wheel is built against CUDA torch and its operator
# registrations fail with our CPU torch; transformers imports torchvision
# too. Model definitions work without them (opinfo_harness.hide_torchvision_ops).
from opinfo_harness import hide_torchvision_ops  # noqa: E402

hide_torchvision_ops()

ATOL = 1e-4
RTOL = 1e-4


def ort_session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("PT2ONNX_TEST_THREADS", "2"))  # tests/conftest.py
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run_ort(path, feeds):
    sess = ort_session(path)
    return sess, sess.run(None, {k: v for k, v in feeds.items()})


def assert_matches(model, path, inputs, atol=ATOL, rtol=RTOL):
    """Runs `path` in onnxruntime on `inputs` (a dict name -> tensor) and
    compares every output with the PyTorch model's."""
    import torch

    with torch.no_grad():
        expected = model(*inputs.values())
    if not isinstance(expected, (tuple, list)):
        expected = (expected,)
    _, got = run_ort(path, {k: v.numpy() for k, v in inputs.items()})
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        # Shapes and dtypes exactly: assert_allclose broadcasts ((1,) vs ()).
        assert g.shape == tuple(e.shape), (g.shape, tuple(e.shape))
        assert g.dtype == e.numpy().dtype, (g.dtype, e.dtype)
        np.testing.assert_allclose(g, e.numpy(), atol=atol, rtol=rtol)


@pytest.fixture
def tmp_onnx(tmp_path):
    return str(tmp_path / "model.onnx")


def installed_cli():
    """The pt2onnx command pip installed with the package (the environment's
    scripts directory, on PATH)."""
    import sysconfig

    return os.path.join(sysconfig.get_path("scripts"), "pt2onnx")


# The installed command unless PT2ONNX_CLI names another build of it.
CLI = os.environ.get("PT2ONNX_CLI", installed_cli())
# The C++ build (make cpp): the embedding example and the fault-injection shim.
CPP_BUILD = os.environ.get(
    "PT2ONNX_CPP_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build", "cpp"))


def cli_path():
    if not os.path.exists(CLI):
        pytest.fail(f"pt2onnx command not found at {CLI} (run `make python`, which installs it)")
    return CLI


def _first_difference(a, b):
    """Where two ONNX files first differ, as text (for the failure message)."""
    import difflib

    import onnx

    ta = onnx.printer.to_text(onnx.load(a, load_external_data=False)).splitlines()
    tb = onnx.printer.to_text(onnx.load(b, load_external_data=False)).splitlines()
    diff = list(difflib.unified_diff(ta, tb, "python", "pt2", n=1, lineterm=""))
    return "\n".join(diff[:40]) if diff else "(same text: metadata or byte layout differs)"


def assert_same_both_ways(model, args, onnx_path, *, dynamic_shapes=None, opset=18,
                          kwargs=None, extra_cli_args=()):
    """One capture of `model` (as pt2onnx.export captures it), converted both
    ways: in memory by pt2onnx.export(ep) and, through torch.export.save, by
    the pt2onnx command; the two files (model and external data) must be
    byte-identical. Dim names go to both as names of the program's dynamic
    dims (dynamic_axes / --dim-name), since torch.export.save does not keep
    them. The caller's own export wrote `onnx_path` (its name is reused so the
    external data `location` matches); comparing with it directly would also
    compare two separate torch.export captures, whose FX names torch does not
    always repeat (seen: getitem vs getitem_2 after other tests ran)."""
    import filecmp
    import subprocess

    import torch

    import pt2onnx
    from pt2onnx._export import _capture  # as pt2onnx.export captures (capture rules included)

    ep, in_names, _ = _capture(model, args, kwargs, dynamic_shapes, None, None, None)
    work = os.path.join(os.path.dirname(onnx_path), "via_pt2")
    via_py = os.path.join(os.path.dirname(onnx_path), "via_python")
    os.makedirs(work, exist_ok=True)
    os.makedirs(via_py, exist_ok=True)
    ext = {}  # both defaults (external data, as torch.onnx) unless the test names a mode
    if "--external-data" in extra_cli_args:
        ext["external_data"] = {"always": True, "never": False, "auto": None}[
            extra_cli_args[list(extra_cli_args).index("--external-data") + 1]]
    py_out = os.path.join(via_py, os.path.basename(onnx_path))
    pt2onnx.export(ep, None, py_out, opset=opset, dynamic_axes=in_names or None, **ext)
    pt2 = os.path.join(work, "model.pt2")
    torch.export.save(ep, pt2)
    out = os.path.join(work, os.path.basename(onnx_path))  # same name: same data `location`
    cmd = [cli_path(), pt2, "-o", out, "--opset", str(opset), "-q", *extra_cli_args]
    for inp, axes in in_names.items():
        for axis, name in axes.items():
            cmd += ["--dim-name", f"{inp}:{axis}={name}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert filecmp.cmp(py_out, out, shallow=False), \
        "ONNX differs between Python and .pt2 paths:\n" + _first_difference(py_out, out)
    if os.path.exists(py_out + ".data"):
        assert filecmp.cmp(py_out + ".data", out + ".data", shallow=False)
    else:
        assert not os.path.exists(out + ".data")
    # The caller's file came from a capture of its own: same graph up to FX names.
    assert _op_types(onnx_path) == _op_types(py_out)
    return pt2


def _op_types(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    return [n.op_type for n in m.graph.node], len(m.graph.input), len(m.graph.output)


# ---- OpInfo pass rates (test_opinfo.py), printed at the end of the run
_OPINFO = {}
_MODULEINFO = {}  # test_moduleinfo.py


def pytest_runtest_logreport(report):
    if report.when != "call" and not (report.when == "setup" and report.skipped):
        return
    for key, value in getattr(report, "user_properties", []):
        if key == "opinfo":
            import json

            d = json.loads(value)
            _OPINFO[(d["cfg"], d["op"])] = d
        elif key == "moduleinfo":
            import json

            d = json.loads(value)
            _MODULEINFO[(d["cfg"], d["module"])] = d


def _moduleinfo_summary(tr):
    by_cfg = {}
    for (cfg, _), d in _MODULEINFO.items():
        by_cfg.setdefault(cfg, []).append(d)
    tr.write_sep("=", "ModuleInfo pass rates (judged samples; module classes with every sample "
                      "passing)")
    for cfg, ds in sorted(by_cfg.items()):
        cap = sum(d["captured"] for d in ds)
        ok = sum(d["passed"] for d in ds)
        mods = [d for d in ds if d["captured"]]
        mods_ok = sum(d["passed"] == d["captured"] for d in mods)
        tr.write_line(f"{cfg:16s} samples {ok}/{cap} = {ok / max(cap, 1):6.1%}   modules "
                      f"{mods_ok}/{len(mods)} = {mods_ok / max(len(mods), 1):6.1%}   (not "
                      f"capturable: {sum(d['not_capturable'] for d in ds)}, no onnxruntime "
                      f"kernel: {sum(d['no_ort_kernel'] for d in ds)}; also judged on permuted "
                      f"inputs: {sum(d['second_checked'] for d in ds)})")
    data = _coverage_run()
    for key, r in sorted(data.get("moduleinfo", {}).items()):
        tr.write_line(f"coverage run {data.get('moduleinfo_date')}: {key:22s} samples "
                      f"{r['passed']}/{r['capturable']} = {r['sample_rate']:6.1%}   modules "
                      f"{r['modules_passed']}/{r['modules']} = {r['module_rate']:6.1%}")


def _coverage_run() -> dict:
    """docs/coverage.json: torch.onnx's rates on the same samples, measured by
    `make coverage` (too slow for every test run); {} when absent."""
    import json

    cov = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "coverage.json")
    if not os.path.exists(cov):
        return {}
    with open(cov) as fh:
        return json.load(fh)


def pytest_terminal_summary(terminalreporter):
    if _MODULEINFO:
        _moduleinfo_summary(terminalreporter)
    if not _OPINFO:
        return
    by_cfg = {}
    for (cfg, _), d in _OPINFO.items():
        by_cfg.setdefault(cfg, []).append(d)
    tr = terminalreporter
    tr.write_sep("=", "OpInfo pass rates (capturable samples; ops with every sample passing)")
    for cfg, ds in sorted(by_cfg.items()):
        cap = sum(d["captured"] for d in ds)
        ok = sum(d["passed"] for d in ds)
        ops = [d for d in ds if d["captured"]]
        ops_ok = sum(d["passed"] == d["captured"] for d in ops)
        skipped = sum(d["samples"] - d["captured"] for d in ds)
        tr.write_line(f"{cfg:24s} samples {ok}/{cap} = {ok / max(cap, 1):6.1%}   "
                      f"ops {ops_ok}/{len(ops)} = {ops_ok / max(len(ops), 1):6.1%}   "
                      f"(not capturable: {skipped} samples)")
    # torch.onnx on the same samples: measured by `make coverage` (too slow
    # for every test run); shown with the date of that run.
    data = _coverage_run()
    for key, r in sorted(data.get("summary", {}).items()):
        tr.write_line(f"coverage run {data.get('date')}: {key:34s} samples "
                      f"{r['passed']}/{r['capturable']} = {r['sample_rate']:6.1%}   ops "
                      f"{r['ops_passed']}/{r['ops']} = {r['op_rate']:6.1%}")
