"""Write safety (issue 8): the output path holds the previous complete model
(with its data) or the new one, never a mix or a partial file, under errors,
a full disk, a failed commit rename and SIGKILL at any point; temporaries are
unique, short, cleaned; symlinks are written through; concurrent exports from
threads are safe.

Faults are injected into the `pt2onnx` command (the same C++ writer as the
Python API) with an LD_PRELOAD shim built beside it (tests/fault/fault_shim.cpp):
it fails renames or writes, or SIGKILLs the process at the n-th write, fsync or
rename. After each fault the model at the path is run in onnxruntime and must
give exactly the old model's or the new model's outputs."""

import os
import signal
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import pt2onnx
import conftest
from conftest import cli_path, ort_session

N_LAYERS = 8
WIDTH = 512  # 8 x 1 MiB weights + biases: several kernel copies per data file


class Stack(nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(N_LAYERS))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


X = torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(7))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two models of one architecture with different weights, as .pt2
    archives, with their eager outputs on X."""
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, seed in (("old", 1), ("new", 2)):
        m = Stack(seed).eval()
        pt2 = d / f"{name}.pt2"
        torch.export.save(torch.export.export(m, (X,)), pt2)
        with torch.no_grad():
            out[name] = (m, str(pt2), m(X).numpy())
    return out


def shim():
    path = os.path.join(conftest.CPP_BUILD, "libpt2onnx_fault_shim.so")
    if not os.path.exists(path):
        pytest.fail(f"fault shim not built at {path} (run `make cpp`)")
    return path


def convert(pt2, out, *extra, env=None):
    return subprocess.run([cli_path(), pt2, "-o", str(out), "-q", *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def faulty_env(**faults):
    env = dict(os.environ)
    env["LD_PRELOAD"] = shim()
    env.update({f"PT2ONNX_FAULT_{k.upper()}": str(v) for k, v in faults.items()})
    return env


def which_model(path, models):
    """'old' or 'new': the model whose outputs the file at `path` gives (it
    must load, with its data, and match one of them)."""
    got = ort_session(str(path)).run(None, {"x": X.numpy()})[0]
    for name in ("old", "new"):
        if np.allclose(got, models[name][2], atol=1e-5, rtol=1e-5):
            return name
    raise AssertionError(f"{path} gives neither model's outputs")


def listing(d):
    return sorted(p.name for p in d.iterdir())


def data_files(d):
    return [n for n in listing(d) if n.endswith(".data")]


def test_external_data_names_and_old_data_removed(tmp_path, models):
    """Each export writes its data under a name no committed model uses; the
    previous model's data goes only after the commit."""
    out = tmp_path / "m.onnx"
    assert convert(models["old"][1], out, "--external-data", "always").returncode == 0
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data"]
    assert convert(models["new"][1], out, "--external-data", "always").returncode == 0
    assert listing(tmp_path) == ["m.onnx", "m.onnx.1.data"]
    assert which_model(out, models) == "new"
    assert convert(models["old"][1], out, "--external-data", "always").returncode == 0
    assert listing(tmp_path) == ["m.onnx", "m.onnx.data"]
    assert which_model(out, models) == "old"
    assert convert(models["new"][1], out, "--external-data", "never").returncode == 0
    assert listing(tmp_path) == ["m.onnx"]
    assert which_model(out, models) == "new"


@pytest.mark.parametrize("external", [True, False])
def test_failed_commit_rename_keeps_the_old_pair(tmp_path, models, external):
    out = tmp_path / "m.onnx"
    mode = ["--external-data", "always" if external else "never"]
    assert convert(models["old"][1], out, *mode).returncode == 0
    before = {n: (tmp_path / n).read_bytes() for n in listing(tmp_path)}
    r = convert(models["new"][1], out, *mode, env=faulty_env(rename="fail"))
    assert r.returncode != 0 and "cannot rename" in r.stderr, r.stderr
    assert {n: (tmp_path / n).read_bytes() for n in listing(tmp_path)} == before
    assert which_model(out, models) == "old"


def test_full_disk_keeps_the_old_pair(tmp_path, models):
    out = tmp_path / "m.onnx"
    assert convert(models["old"][1], out, "--external-data", "always").returncode == 0
    before = listing(tmp_path)
    for n in (1, 3, 6):  # model file header, first and later weight copies
        r = convert(models["new"][1], out, "--external-data", "always", env=faulty_env(enospc=n))
        assert r.returncode != 0 and "No space left on device" in r.stderr, r.stderr
        assert listing(tmp_path) == before
        assert which_model(out, models) == "old"


# Kill points: the n-th write into the model temporary or the data file, the
# n-th fsync (data, model, directory), just before and just after the commit
# rename. Before the rename the old model must be there; after it, the new.
KILL_POINTS = [("write:1", "old"), ("write:4", "old"), ("write:9", "old"), ("fsync:1", "old"),
               ("fsync:2", "old"), ("fsync:3", "old"), ("rename:1", "old"), ("renamed:1", "new")]


@pytest.mark.parametrize("point,expect", KILL_POINTS)
def test_sigkill_leaves_a_complete_model(tmp_path, models, point, expect):
    out = tmp_path / "m.onnx"
    assert convert(models["old"][1], out, "--external-data", "always").returncode == 0
    r = convert(models["new"][1], out, "--external-data", "always", env=faulty_env(kill=point))
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert which_model(out, models) == expect
    # What a killed run leaves is ours only (a temporary, a data file no
    # model names), and the next export to the path removes it.
    for n in listing(tmp_path):
        assert n == "m.onnx" or n.startswith(".pt2onnx-") or n.endswith(".data"), n
    assert convert(models["new"][1], out, "--external-data", "always").returncode == 0
    assert which_model(out, models) == "new"
    assert len(data_files(tmp_path)) == 1 and len(listing(tmp_path)) == 2, listing(tmp_path)


@pytest.fixture(scope="module")
def big_models(tmp_path_factory):
    """Two 256 MiB models as .pt2 archives (an export takes long enough to be
    killed at many instants), with their outputs on a fixed input."""
    d = tmp_path_factory.mktemp("big")
    x = torch.randn(2, 2048, generator=torch.Generator().manual_seed(5))
    out = {"x": x}
    for name, seed in (("old", 1), ("new", 2)):
        torch.manual_seed(seed)
        m = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(16)]).eval()
        pt2 = d / f"{name}.pt2"
        torch.export.save(torch.export.export(m, (x,)), pt2)
        with torch.no_grad():
            out[name] = (str(pt2), m(x).numpy())
        del m
    return out


@pytest.mark.slow
def test_sigkill_at_random_times(tmp_path, big_models):
    """Kills a 256 MiB export at wall-clock points from start to past the
    end (no shim): the path always holds one complete model, old or new."""
    out = tmp_path / "m.onnx"
    x = big_models["x"].numpy()

    def which():
        got = ort_session(str(out)).run(None, {"input": x})[0]
        for name in ("old", "new"):
            if np.allclose(got, big_models[name][1], atol=1e-4, rtol=1e-4):
                return name
        raise AssertionError("neither model's outputs")

    args = ["--external-data", "always"]
    assert convert(big_models["old"][0], out, *args).returncode == 0
    t = time.perf_counter()
    assert convert(big_models["new"][0], out, *args).returncode == 0
    full = time.perf_counter() - t
    seen = []
    for frac in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.2):
        assert convert(big_models["old"][0], out, *args).returncode == 0
        p = subprocess.Popen([cli_path(), big_models["new"][0], "-o", str(out), "-q", *args])
        time.sleep(full * frac)
        p.send_signal(signal.SIGKILL)
        p.wait()
        seen.append(which())
    # The cleanup export leaves exactly the model and its data.
    assert convert(big_models["new"][0], out, *args).returncode == 0
    assert which() == "new" and len(listing(tmp_path)) == 2, listing(tmp_path)
    print(f"export {full:.2f} s; killed runs left: {seen}")


def test_fsync_before_and_after_the_commit(tmp_path, models):
    out = tmp_path / "m.onnx"
    log = tmp_path.parent / f"{tmp_path.name}.log"
    r = convert(models["old"][1], out, "--external-data", "always", env=faulty_env(log=log))
    assert r.returncode == 0, r.stderr
    lines = log.read_text().splitlines()
    rename = next(i for i, ln in enumerate(lines) if ln.startswith("rename "))
    before = [ln.split(" ", 1)[1] for ln in lines[:rename] if ln.startswith("fsync ")]
    after = [ln.split(" ", 1)[1] for ln in lines[rename:] if ln.startswith("fsync ")]
    d = str(tmp_path)
    assert any(p.endswith("/m.onnx.data") for p in before), lines
    assert any(os.path.basename(p).startswith(".pt2onnx-") for p in before), lines
    assert d in before and d in after, lines
    assert lines[rename].split()[-1] == f"{d}/m.onnx", lines


def fnv1a(name: str) -> str:
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) % (1 << 64)
    return f"{h:016x}"


def test_stale_temporaries_cleaned_only_ours(tmp_path, models):
    out = tmp_path / "m.onnx"
    stale = f".pt2onnx-{fnv1a('m.onnx')}-deadbeef.tmp"  # a killed run's, for m.onnx
    others = [f".pt2onnx-{fnv1a('other.onnx')}-deadbeef.tmp",  # another target's
              "m.onnx.backup", "m.onnx.old.data", "notes.data", "m.onnx.tmp1234"]
    for n in [stale, *others]:
        (tmp_path / n).write_bytes(b"x" * 100)
    assert convert(models["old"][1], out, "--external-data", "never").returncode == 0
    assert listing(tmp_path) == sorted(["m.onnx", *others])


def test_temporary_of_a_live_writer_is_kept(tmp_path, models):
    """A temporary another export still holds (flock) is not stale."""
    import fcntl

    out = tmp_path / "m.onnx"
    live = tmp_path / f".pt2onnx-{fnv1a('m.onnx')}-0000live.tmp"
    with open(live, "wb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert convert(models["old"][1], out).returncode == 0
        assert live.exists()
    assert convert(models["old"][1], out).returncode == 0
    assert not live.exists()


def test_long_file_name(tmp_path, models):
    """A 250-byte name (legal: NAME_MAX is 255) works, inline and with
    external data, twice (the second data file needs a name that fits)."""
    name = "m" * 245 + ".onnx"
    out = tmp_path / name
    for pt2 in ("old", "new", "old"):
        r = convert(models[pt2][1], out, "--external-data", "always")
        assert r.returncode == 0, r.stderr
        assert which_model(out, models) == pt2
        assert len(data_files(tmp_path)) == 1 and len(listing(tmp_path)) == 2, listing(tmp_path)
    assert convert(models["new"][1], out, "--external-data", "never").returncode == 0
    assert listing(tmp_path) == [name]


def test_symlink_is_written_through(tmp_path, models):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "model.onnx"
    link = real_dir / "current.onnx"
    link.symlink_to("model.onnx")
    assert convert(models["old"][1], link, "--external-data", "never").returncode == 0
    assert link.is_symlink() and os.readlink(link) == "model.onnx"
    assert which_model(real, models) == "old"
    assert convert(models["new"][1], link, "--external-data", "always").returncode == 0
    assert link.is_symlink()
    assert which_model(link, models) == "new"
    assert listing(real_dir) == ["current.onnx", "model.onnx", "model.onnx.data"]
    # A dangling link names the file to create.
    dangling = tmp_path / "later.onnx"
    dangling.symlink_to(real_dir / "created.onnx")
    assert convert(models["old"][1], dangling).returncode == 0
    assert dangling.is_symlink() and which_model(real_dir / "created.onnx", models) == "old"


def test_planted_symlinks_are_not_followed(tmp_path, models):
    """A symlink at the data file's usual name (or anywhere the writer might
    write) is neither written through nor removed: the writer creates its
    files with O_EXCL | O_NOFOLLOW and picks another name."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    d = tmp_path / "out"
    d.mkdir()
    (d / "m.onnx.data").symlink_to(victim)
    assert convert(models["old"][1], d / "m.onnx", "--external-data", "always").returncode == 0
    assert victim.read_bytes() == b"precious"
    assert (d / "m.onnx.data").is_symlink()
    assert which_model(d / "m.onnx", models) == "old"


@pytest.fixture(scope="module")
def wide_programs():
    """Two captured programs with 64 MiB of weights each: exporting them
    from threads overlaps the C++ stages (capture is serialized, and these
    need none), which is where two writers to one path could collide."""
    out = {}
    x = torch.randn(2, 2048, generator=torch.Generator().manual_seed(3))
    for name, seed in (("old", 1), ("new", 2)):
        torch.manual_seed(seed)
        m = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)]).eval()
        ep = torch.export.export(m, (x,))
        with torch.no_grad():
            out[name] = (ep, x, m(x).numpy())
    return out


def which_wide(path, progs):
    x = progs["old"][1]
    got = ort_session(str(path)).run(None, {"input": x.numpy()})[0]
    for name in ("old", "new"):
        if np.allclose(got, progs[name][2], atol=1e-4, rtol=1e-4):
            return name
    raise AssertionError(f"{path} gives neither model's outputs")


def _export_in_thread(program, path, external, results, i):
    try:
        results[i] = pt2onnx.export(program, (), path, external_data=external)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        results[i] = e


def _run_threads(jobs):
    results = [None] * len(jobs)
    threads = [threading.Thread(target=_export_in_thread, args=(*job, results, i))
               for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("external", [False, True])
def test_threads_export_to_one_path(tmp_path, wide_programs, external):
    """Concurrent pt2onnx.export calls to one path: every caller succeeds
    (each wrote a complete model; the last commit wins) and the path holds one
    complete model with its data, nothing else."""
    out = str(tmp_path / "m.onnx")
    for _ in range(3):
        jobs = [(wide_programs["old" if i % 2 else "new"][0], out, external) for i in range(4)]
        for r in _run_threads(jobs):
            assert isinstance(r, pt2onnx.ExportResult), r
        which_wide(out, wide_programs)
        onnx.checker.check_model(out)  # the suite-wide check skips calls that overlapped
        assert len(listing(tmp_path)) == (2 if external else 1), listing(tmp_path)


def test_threads_export_to_different_paths(tmp_path, wide_programs):
    jobs = [(wide_programs["old" if i % 2 else "new"][0], str(tmp_path / f"m{i}.onnx"), i >= 2)
            for i in range(4)]
    for i, r in enumerate(_run_threads(jobs)):
        assert isinstance(r, pt2onnx.ExportResult), r
        assert which_wide(tmp_path / f"m{i}.onnx", wide_programs) == ("old" if i % 2 else "new")


def test_threads_capture_concurrently(tmp_path, models):
    """pt2onnx.export of nn.Modules from several threads: capture (not
    thread-safe in torch) is serialized, every export is right."""
    results = [None] * 4

    def run(i):
        try:
            m = models["old" if i % 2 else "new"][0]
            results[i] = pt2onnx.export(m, (X,), str(tmp_path / f"c{i}.onnx"))
        except BaseException as e:  # noqa: BLE001
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in enumerate(results):
        assert isinstance(r, pt2onnx.ExportResult), r
        assert which_model(tmp_path / f"c{i}.onnx", models) == ("old" if i % 2 else "new")
