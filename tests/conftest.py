"""Applies to every test directory: each program the suite exports in this
process goes to the C++ core both ways, and the ONNX files must be the same
bytes (issue 18 item 5). The export path hands over torch's serializer's
dataclass tree, read in place by the C++ reader (with pt2onnx's faster
serializer, python/pt2onnx/_serialize.py); the reference is the JSON of
torch's serializer as it ships (less the discarded canonicalize()), read by
the JSON reader as a .pt2 archive's is. A conversion that fails one way must
fail the other way with the same message. Calls that overlap in time on one
output path (the write-safety tests' racing threads) are not compared: what
the path holds then depends on which commit came last.

Every file written through the core is also held to ONNX's rules
(follows_onnx_rules, onnx_rules.py): structure, and onnx.checker or
onnxruntime's operator schemas, by target (issue 34)."""

import os
import importlib.util
import shutil
import tempfile
import threading
import time
import weakref
import zlib

import pytest


def _threads_per_worker() -> int:
    """CPU threads for each pytest-xdist worker: the cores shared out, so that
    `-n <cores>` does not run two threads per core. Set for torch here and
    exported as PT2ONNX_TEST_THREADS (onnxruntime sessions of the helpers) and
    OMP_NUM_THREADS (subprocesses), unless the caller set them. Measured on the
    quick zoo with 2 workers on 2 cores: 21.9 s with 2 threads each, 18.9 s
    with 1."""
    if "PT2ONNX_TEST_THREADS" not in os.environ:
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        os.environ["PT2ONNX_TEST_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    n = int(os.environ["PT2ONNX_TEST_THREADS"])
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    import torch

    torch.set_num_threads(n)
    return n


_threads_per_worker()

@pytest.fixture(autouse=True, scope="session")
def _program_cache_of_the_run(tmp_path_factory):
    """export_pretrained's program cache (on by default) in a folder of this run, not the
    user's: a config exported twice in the run is a hit the second time (the file is the
    same; verification still runs), and nothing outlives the run."""
    if os.environ.get("PT2ONNX_CACHE_DIR"):
        yield
        return
    os.environ["PT2ONNX_CACHE_DIR"] = str(tmp_path_factory.mktemp("program-cache"))
    try:
        yield
    finally:
        os.environ.pop("PT2ONNX_CACHE_DIR", None)


# Off inside tests that take the no_hand_off_comparison fixture; "sampled": whether the current
# test is in the hand-off check's sample (_hand_off_sample below).
_HAND_OFF = {"compare": True, "sampled": True}

# Seconds this process spent in the suite-wide checks below, by check; each test's share goes
# to its report (user_properties) and the totals are printed at the end of the run, so a CI log
# shows what the checks cost.
_CHECK_SECONDS = {"hand-off (torch's JSON + 2nd conversion)": 0.0, "ONNX rules": 0.0}


class _timed:
    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        _CHECK_SECONDS[self.what] += time.perf_counter() - self.t0


@pytest.fixture(autouse=True)
def _check_seconds_of_test(request):
    before = dict(_CHECK_SECONDS)
    yield
    spent = {k: round(v - before[k], 4) for k, v in _CHECK_SECONDS.items() if v > before[k]}
    if spent:
        request.node.user_properties.append(("check_seconds", spent))


_CHECK_TOTALS: dict = {}
_TEST_SECONDS = [0.0]


def pytest_runtest_logreport(report):
    _TEST_SECONDS[0] += report.duration
    if report.when != "teardown":
        return
    for key, value in getattr(report, "user_properties", []):
        if key == "check_seconds":
            for what, t in value.items():
                _CHECK_TOTALS[what] = _CHECK_TOTALS.get(what, 0.0) + t


def pytest_terminal_summary(terminalreporter):
    if not _CHECK_TOTALS:
        return
    tr = terminalreporter
    tr.write_sep("=", "suite-wide checks (tests/conftest.py): seconds, all workers together")
    for what, t in sorted(_CHECK_TOTALS.items()):
        tr.write_line(f"{what:44s} {t:9.1f} s  ({t / max(_TEST_SECONDS[0], 1e-9):6.1%} of "
                      f"{_TEST_SECONDS[0]:.0f} s in tests)")


# The hand-off check (below) compares the programs of a fixed sample of the tests, one in
# HAND_OFF_SAMPLE by a hash of the test's id (the same tests in every run and on every worker),
# and every program of the tests marked `hand_off` (the check's own tests). Each compared
# program costs torch's JSON serializer and a second conversion (144 of the suite's 3,324
# test-seconds when every distinct program was compared). tools/hand_off_mutations.py plants
# reader differences and shows the sample catches each one the full check catches.
# PT2ONNX_TEST_HAND_OFF=every: every export compared; =distinct: every distinct program.
HAND_OFF_SAMPLE = 4


@pytest.fixture(autouse=True)
def _hand_off_sample(request):
    mode = os.environ.get("PT2ONNX_TEST_HAND_OFF", "sample")
    _HAND_OFF["sampled"] = (mode in ("every", "distinct")
                            or request.node.get_closest_marker("hand_off") is not None
                            or zlib.crc32(request.node.nodeid.encode()) % HAND_OFF_SAMPLE == 0)
    yield
    _HAND_OFF["sampled"] = True


@pytest.fixture
def no_hand_off_comparison():
    """For tests that convert one program many times to test something else
    (the option matrix): each conversion made once, not also from torch's
    JSON. The rules check stays."""
    _HAND_OFF["compare"] = False
    try:
        yield
    finally:
        _HAND_OFF["compare"] = True


def _onnx_rules():
    """tests/onnx_rules.py, loaded by path: putting tests/ on sys.path would
    make `import conftest` find this file instead of tests/python's."""
    mod = _onnx_rules.__dict__.get("module")
    if mod is None:
        spec = importlib.util.spec_from_file_location(
            "pt2onnx_test_onnx_rules", os.path.join(os.path.dirname(__file__), "onnx_rules.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _onnx_rules.module = mod
    return mod


def follows_onnx_rules(r, kwargs):
    """Every file the suite writes follows ONNX's rules (issue 34): the
    structure, then onnx.checker (standard target) or onnxruntime's operator
    schemas (onnxruntime target); see onnx_rules.py."""
    check_model_file = _onnx_rules().check_model_file
    target = kwargs.get("target") or "standard"
    memory = [m[0] for m in r.get("memory_initializers") or []]
    model = r["model_bytes"] if r.get("model_bytes") is not None else r["model_path"]
    if isinstance(model, str) and not os.path.exists(model):
        return  # replaced by a racing call to the same path (the write-safety tests)
    try:
        with _timed("ONNX rules"):
            check_model_file(model, target, memory_initializers=memory)
    except Exception as e:
        raise AssertionError(f"the written file breaks ONNX's rules ({target} target): "
                             f"{type(e).__name__}: {e}") from e


def _fingerprint(ep):
    """What export() reads of an ExportedProgram, cheaply: its graph modules'
    generated code (nodes, targets, arguments; control flow's subgraphs too),
    signature and ranges. A program changed in place between two exports
    gets a new tree."""
    import torch

    gm = ep.graph_module
    return (id(gm), tuple(m.code for m in gm.modules() if isinstance(m, torch.fx.GraphModule)),
            str(ep.graph_signature), str(ep.range_constraints))


@pytest.fixture(autouse=True, scope="session")
def _hand_off_checked_against_torch_json():
    from pt2onnx import _core, _export, _serialize

    HAND = "hand-off (torch's JSON + 2nd conversion)"
    reference = {}  # id(tree) -> torch's JSON of the same program, until its first conversion
    trees = {}  # id(ep) -> (fingerprint, tree) of an ExportedProgram exported before

    def program(ep):
        # An ExportedProgram exported again unchanged (the zoo's and OpInfo's
        # configurations, the option matrix: one capture, many option sets)
        # reuses its tree, and its hand-off was compared on its first
        # conversion: the C++ reader's result depends on the document alone
        # (ProgramReader takes no option), so a second comparison of the same
        # tree could only repeat the first. Only the tests of the sample
        # compare (_hand_off_sample).
        # PT2ONNX_TEST_HAND_OFF=every: each export serialized and compared anew
        # (what tools/hand_off_mutations.py runs beside this, to show both
        # catch the same reader differences).
        tree = None
        if os.environ.get("PT2ONNX_TEST_HAND_OFF") != "every":
            key, fp = id(ep), _fingerprint(ep)
            known = trees.get(key)
            if known is not None and known[0] == fp:
                return known[1]
            tree = _serialize.program_tree(ep)
            trees[key] = (fp, tree)
            weakref.finalize(ep, trees.pop, key, None)
        if tree is None:
            tree = _serialize.program_tree(ep)
        if not (_HAND_OFF["compare"] and _HAND_OFF["sampled"]):
            return tree
        with _timed(HAND):
            reference[id(tree)] = _serialize.serialize_program(ep, fast=False)
        weakref.finalize(tree, reference.pop, id(tree), None)
        return tree

    def same_error(a, b):
        norm = str(a).replace("ExportedProgram JSON", "ExportedProgram")
        if norm != str(b).replace("ExportedProgram JSON", "ExportedProgram"):
            raise AssertionError(f"the two routes fail differently:\n{a}\nvs JSON:\n{b}")

    lock = threading.Lock()
    active: dict = {}  # output path -> tokens of the calls writing it now
    contended: set = set()  # tokens of calls that overlapped another on their path

    def ref_convert(*args, **kwargs):
        with _timed(HAND):
            return original_convert(*args, **kwargs)

    def convert(program, weights, output_path, *args, **kwargs):
        if kwargs.get("in_memory"):
            r = compared(program, None, weights, output_path, *args, **kwargs)
            follows_onnx_rules(r, kwargs)
            return r
        key, token = os.path.abspath(output_path), object()
        with lock:
            others = active.setdefault(key, set())
            if others:
                contended.update(others)
                contended.add(token)
            others.add(token)
        try:
            r = compared(program, token, weights, output_path, *args, **kwargs)
            # A call that overlapped another on its path may find the path
            # holding a later call's model whose data file a still later commit
            # replaced while it was read (the write-safety tests check the final file).
            try:
                follows_onnx_rules(r, kwargs)
            except AssertionError:
                with lock:
                    if token not in contended:
                        raise
            return r
        finally:
            with lock:
                active[key].discard(token)
                contended.discard(token)

    def compared(program, token, weights, output_path, *args, **kwargs):
        ref_json = None if isinstance(program, bytes) else reference.pop(id(program), None)
        if ref_json is None:  # JSON given by a test, or a program made elsewhere
            return original_convert(program, weights, output_path, *args, **kwargs)
        if kwargs.get("in_memory"):
            return checked_in_memory(program, ref_json, weights, output_path, *args, **kwargs)
        return checked(program, ref_json, token, weights, output_path, *args, **kwargs)

    def checked_in_memory(program, ref_json, weights, output_path, *args, **kwargs):
        ref_kwargs = dict(kwargs, progress=None)
        try:
            r = original_convert(program, weights, output_path, *args, **kwargs)
        except _core.ConversionError as e:
            try:
                ref_convert(ref_json, weights, output_path, *args, **ref_kwargs)
            except _core.ConversionError as ref_e:
                same_error(e, ref_e)
                raise e from None
            raise AssertionError(f"only the direct hand-off failed: {e}") from e
        ref = ref_convert(ref_json, weights, output_path, *args, **ref_kwargs)
        if r["model_bytes"] != ref["model_bytes"]:
            raise AssertionError("in memory, the direct hand-off and torch's JSON give different "
                                 "model bytes")
        return r

    def checked(program, ref_json, token, weights, output_path, *args, **kwargs):
        with tempfile.TemporaryDirectory(prefix="pt2onnx-ref-") as d:
            # The reference directory starts as the output's does: a model
            # written over an earlier one names its data file anew.
            base = os.path.basename(output_path)
            out_dir = os.path.dirname(os.path.abspath(output_path))
            if os.path.isdir(out_dir):
                for name in os.listdir(out_dir):
                    if name.startswith(base) and os.path.isfile(os.path.join(out_dir, name)):
                        try:
                            shutil.copy2(os.path.join(out_dir, name), os.path.join(d, name))
                        except FileNotFoundError:  # replaced by a racing call
                            pass
            ref_path = os.path.join(d, base)
            ref_kwargs = dict(kwargs, progress=None)
            try:
                r = original_convert(program, weights, output_path, *args, **kwargs)
            except _core.ConversionError as e:
                if token in contended:
                    raise
                try:  # to the same path: a failure to write it must recur
                    ref = ref_convert(ref_json, weights, output_path, *args, **ref_kwargs)
                except _core.ConversionError as ref_e:
                    same_error(e, ref_e)
                    raise e from None
                for f in [ref["model_path"], *ref["data_paths"]]:
                    os.remove(f)
                raise AssertionError(f"only the direct hand-off failed: {e}") from e
            ref = ref_convert(ref_json, weights, ref_path, *args, **ref_kwargs)
            files = [r["model_path"], *r["data_paths"]]
            ref_files = [ref["model_path"], *ref["data_paths"]]
            t0 = time.perf_counter()
            problem = None
            if [os.path.basename(f) for f in files] != [os.path.basename(f) for f in ref_files]:
                problem = f"different files: {files} vs {ref_files}"
            for a, b in zip(files, ref_files):
                if problem:
                    break
                try:
                    with open(a, "rb") as fa, open(b, "rb") as fb:
                        da, db = fa.read(), fb.read()
                except FileNotFoundError as e:  # a racing call's commit removed it
                    problem = f"{a}: {e}"
                    break
                if da != db:
                    at = next((i for i, (x, y) in enumerate(zip(da, db)) if x != y),
                              min(len(da), len(db)))
                    problem = (f"{os.path.basename(a)}: the direct hand-off and torch's JSON give "
                               f"different bytes from byte {at} ({len(da)} vs {len(db)} bytes)")
            _CHECK_SECONDS[HAND] += time.perf_counter() - t0
            # Checked last: a call to the same path that started before this
            # point may have replaced the files read above.
            if problem and token not in contended:
                raise AssertionError(problem)
        return r

    original_program, original_convert = _export._program, _core.convert
    _export._program, _core.convert = program, convert
    try:
        yield
    finally:
        _export._program, _core.convert = original_program, original_convert
