"""Archives saved by every torch release pt2onnx reads (tests/data/compat/<version>/,
written by tools/make_compat_archives.py in each release's own environment):
each converts with the pt2onnx command and runs in onnxruntime to the outputs the
release's own program gave on inputs of other sizes than the export sizes (fp32
atol/rtol 1e-4; integer and boolean outputs exact; shapes and dtypes exact);
and the pinned torch loads each and pt2onnx.export converts it the same.

Then the version checks: archives edited to carry a schema major, a schema
minor or an archive version this pt2onnx does not read."""

import io
import json
import os
import subprocess
import zipfile

import numpy as np
import pytest
from conftest import cli_path, ort_session

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "compat")
# The releases whose archives are tested (tools/make_compat_archives.py RELEASES).
RELEASES = ["2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1"]
ARCHIVES = ["mlp", "convbn", "tagger", "attention", "cond", "intbool", "attention_core",
            "cond_core"]
# What this pt2onnx says it reads (src/schema/versions.h).
RANGE = "schema 8.x, written by torch 2.10 to 2.14.1"
NEWEST_TESTED = "8.20"


def manifest(version):
    with open(os.path.join(DATA, version, "manifest.json")) as f:
        return json.load(f)


def cli(*args):
    return subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True)


def test_every_release_has_its_archives():
    for v in RELEASES:
        m = manifest(v)
        assert m["torch_version"].split("+")[0] == v
        assert sorted(m["archives"]) == sorted(ARCHIVES)
        for name, info in m["archives"].items():
            assert info["schema_version"] == m["schema_version"]
            assert os.path.exists(os.path.join(DATA, v, name + ".pt2"))
    assert sorted(os.listdir(DATA)) == sorted(RELEASES)


def program(version, name):
    with zipfile.ZipFile(os.path.join(DATA, version, name + ".pt2")) as z:
        return json.loads(z.read(name + "/models/model.json"))


def test_the_differences_between_releases_are_in_the_data():
    """What differs between the releases' archives of the same models (the
    reader handles each; tests/cpp/test_versions.cpp): schema minors 8.15
    (2.10), 8.17 (2.11), 8.20 (2.12 to 2.14); torch 2.10 writes nodes without
    "name" (named after their first output) and without metadata.from_node.
    Layout (entries, archive_format, archive_version 0, .data/version 6,
    byteorder) and node targets are the same in all five."""
    minors = {v: manifest(v)["schema_version"] for v in RELEASES}
    assert minors == {"2.10.0": "8.15", "2.11.0": "8.17", "2.12.1": "8.20", "2.13.0": "8.20",
                      "2.14.1": "8.20"}
    for v in RELEASES:
        nodes = program(v, "mlp")["graph_module"]["graph"]["nodes"]
        assert all(("name" in n) == (v != "2.10.0") for n in nodes), v
        archives = manifest(v)["archives"]
        for name, info in archives.items():
            ref = manifest("2.13.0")["archives"][name]
            assert (info["ops"], info["entries"]) == (ref["ops"], ref["entries"]), (v, name)
            assert (info["archive_format"], info["archive_version"], info[".data/version"],
                    info["byteorder"]) == ("pt2", "0", "6", "little")


def check_against_saved(onnx_path, npz_path):
    data = np.load(npz_path)
    cases = sorted({k.split("_")[0] for k in data.files})
    sess = ort_session(onnx_path)
    names = [i.name for i in sess.get_inputs()]
    for c in cases:
        ins = [data[f"{c}_in{i}"] for i in range(len(names))]
        assert f"{c}_in{len(names)}" not in data.files, "the ONNX model has fewer inputs"
        got = sess.run(None, dict(zip(names, ins)))
        n_out = len([k for k in data.files if k.startswith(f"{c}_out")])
        assert len(got) == n_out, (len(got), n_out)
        for j, g in enumerate(got):
            e = data[f"{c}_out{j}"]
            assert g.shape == e.shape, (c, j, g.shape, e.shape)
            assert g.dtype == e.dtype, (c, j, g.dtype, e.dtype)
            if e.dtype.kind == "f":
                np.testing.assert_allclose(g, e, atol=1e-4, rtol=1e-4, err_msg=f"{c} out{j}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"{c} out{j}")


@pytest.mark.parametrize("name", ARCHIVES)
@pytest.mark.parametrize("version", RELEASES)
def test_archive_converts_and_matches(tmp_path, version, name):
    pt2 = os.path.join(DATA, version, name + ".pt2")
    out = tmp_path / (name + ".onnx")
    r = cli(pt2, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    check_against_saved(str(out), os.path.join(DATA, version, name + ".npz"))
    info = cli("inspect", pt2)
    assert info.returncode == 0, info.stderr
    assert f"schema version: {manifest(version)['schema_version']}\n" in info.stdout
    assert f"torch version:  {version}" in info.stdout


# ---- version checks on edited archives ---------------------------------------------------


def rewrite(src, dst, edit_json=None, replace=None):
    """Copies archive `src` to `dst`, passing models/model.json through
    edit_json and replacing entries (name under the root -> bytes, None drops
    the entry)."""
    replace = replace or {}
    with zipfile.ZipFile(src) as z:
        items = [(i.filename, z.read(i)) for i in z.infolist()]
    root = items[0][0].split("/")[0] + "/"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for n, payload in items:
            rel = n[len(root):]
            if rel == "models/model.json" and edit_json:
                prog = json.loads(payload)
                edit_json(prog)
                payload = json.dumps(prog).encode()
            if rel in replace:
                payload = replace[rel]
                if payload is None:
                    continue
            z.writestr(n, payload)
    dst.write_bytes(buf.getvalue())
    return dst


MLP = os.path.join(DATA, "2.13.0", "mlp.pt2")


def set_version(major, minor, torch_version="keep"):
    def edit(prog):
        prog["schema_version"] = {"major": major, "minor": minor}
        if torch_version is None:
            prog.pop("torch_version", None)
        elif torch_version != "keep":
            prog["torch_version"] = torch_version
    return edit


def assert_refused(tmp_path, pt2, *texts):
    out = tmp_path / "out.onnx"
    r = cli(pt2, "-o", out)
    assert r.returncode == 1, r.stdout + r.stderr
    for t in texts:
        assert t in r.stderr, r.stderr
    assert not out.exists() and not (tmp_path / "out.onnx.data").exists()
    return r.stderr


@pytest.mark.parametrize("major,minor,torch_version", [
    (9, 0, "2.16.0"),     # too new
    (7, 3, "2.4.0"),      # too old
])
def test_schema_major_refused_with_versions(tmp_path, major, minor, torch_version):
    pt2 = rewrite(MLP, tmp_path / "m.pt2", set_version(major, minor, torch_version))
    err = assert_refused(tmp_path, pt2, f"unsupported schema major version {major}",
                         f"schema {major}.{minor}, written by torch {torch_version}", RANGE)
    # One error line, not a trace.
    assert err.count("\n") == 1, err
    # inspect refuses too.
    r = cli("inspect", pt2)
    assert r.returncode == 1 and f"schema {major}.{minor}" in r.stderr


def test_schema_major_refused_without_torch_version(tmp_path):
    pt2 = rewrite(MLP, tmp_path / "m.pt2", set_version(9, 1, None))
    assert_refused(tmp_path, pt2, "schema 9.1 (no torch_version in the archive)", RANGE)


def test_newer_minor_converts(tmp_path):
    """Minor bumps add optional fields; unknown keys are ignored, so a newer
    minor converts (and gives the same model)."""
    def edit(prog):
        set_version(8, 99, "2.99.0")(prog)
        prog["graph_module"]["graph"]["a_field_from_the_future"] = {"x": [1, 2]}
        prog["graph_module"]["graph"]["nodes"][0]["another_new_field"] = 3
    pt2 = rewrite(MLP, tmp_path / "m.pt2", edit)
    r = cli(pt2, "-o", tmp_path / "m.onnx", "--external-data", "never")
    assert r.returncode == 0, r.stderr
    ref = cli(MLP, "-o", tmp_path / "ref.onnx", "--external-data", "never")
    assert ref.returncode == 0, ref.stderr
    assert (tmp_path / "m.onnx").read_bytes() == (tmp_path / "ref.onnx").read_bytes()


@pytest.mark.parametrize("what", ["reader", "converter"])
def test_newer_minor_failure_names_the_schema(tmp_path, what):
    """When an archive of a newer minor than the newest tested fails, the
    error says so, whether the reader or a converter failed."""
    def edit(prog):
        set_version(8, 99, "2.99.0")(prog)
        node = prog["graph_module"]["graph"]["nodes"][0]
        if what == "reader":
            node["inputs"][0]["arg"] = {"as_something_new": 1}
        else:
            node["target"] = "torch.ops.aten.brand_new_op.default"
    pt2 = rewrite(MLP, tmp_path / "m.pt2", edit)
    first = "as_something_new" if what == "reader" else "brand_new_op"
    assert_refused(tmp_path, pt2, first, "schema 8.99, written by torch 2.99.0",
                   f"newer than the newest tested ({NEWEST_TESTED})")
    # The same failure at a tested minor carries no such note.
    def same(prog):
        edit(prog)
        prog["schema_version"]["minor"] = 20
    pt2 = rewrite(MLP, tmp_path / "t.pt2", same)
    err = assert_refused(tmp_path, pt2, first)
    assert "newer than" not in err


@pytest.mark.parametrize("entry,value,texts", [
    ("archive_version", b"1", ["archive_version is '1'", "reads archive version 0",
                               "schema 8.20, written by torch 2.13.0", RANGE]),
    ("archive_format", b"pt3", ["archive_format is 'pt3'", "expected 'pt2'",
                                "schema 8.20, written by torch 2.13.0"]),
])
def test_archive_version_refused(tmp_path, entry, value, texts):
    pt2 = rewrite(MLP, tmp_path / "m.pt2", replace={entry: value})
    assert_refused(tmp_path, pt2, *texts)


@pytest.mark.parametrize("value", [b"0\n", None])
def test_archive_version_zero_or_absent_reads(tmp_path, value):
    """archive_version 0 (a newline after it too) or no archive_version /
    archive_format entries at all (writers before they existed)."""
    drop = {"archive_format": None} if value is None else {}
    pt2 = rewrite(MLP, tmp_path / "m.pt2", replace={"archive_version": value, **drop})
    r = cli(pt2, "-o", tmp_path / "a.onnx")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", ARCHIVES)
@pytest.mark.parametrize("version", RELEASES)
def test_loaded_by_pinned_torch_exports(tmp_path, version, name):
    """The Python path: the pinned torch loads every release's archive (its
    deserializer upgrades older schemas) and pt2onnx.export converts the
    program to the same outputs. A release whose archive the pinned torch
    cannot load would fail here by name, not skip."""
    import torch

    import pt2onnx

    ep = torch.export.load(os.path.join(DATA, version, name + ".pt2"))
    out = tmp_path / (name + ".onnx")
    pt2onnx.export(ep, None, str(out))
    check_against_saved(str(out), os.path.join(DATA, version, name + ".npz"))
