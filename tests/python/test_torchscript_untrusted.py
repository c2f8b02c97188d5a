"""TorchScript files are untrusted (issue 56): torch.jit.load runs a file's code (every
__setstate__ in it), so the pt2onnx command reads the file's code/ text first
(_core.check_torchscript_file) and refuses, in one line naming the entry, line, method and
op, any file whose code is not tensor code. Each hostile file here is shown to do its harm
when torch.jit.load'ed in a child process (so each test can fail), then to be refused by the
command with the victim file untouched and no output written."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import pytest
import torch

from pt2onnx import _core
from pt2onnx._torchscript import TorchScriptError, check_loaded_graphs

ORIGINAL = b"original bytes\n"


class _Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tag = "t"

    def forward(self, x):
        return x * 2

    @torch.jit.export
    def __getstate__(self) -> tuple[str, bool]:
        return (self.tag, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, bool]) -> None:
        self.tag = state[0]
        self.training = state[1]


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Stateful()

    def forward(self, x):
        return self.inner(x) + 1


@torch.jit.script
class _Holder:
    def __init__(self, n: int):
        self.n = n

    def __getstate__(self) -> int:
        return self.n

    def __setstate__(self, state: int) -> None:
        self.n = state


class _HoldsObject(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = _Holder(3)

    def forward(self, x):
        return x + self.holder.n


class _Plain(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def _payload(victim: str, indent: str) -> str:
    """TorchScript that overwrites `victim`'s first 4 bytes with 'AAAA' through a shared
    torch.from_file, its result used by a raise so that no pass removes it."""
    return (f'{indent}_t = torch.from_file("{victim}", True, 4, dtype=0, layout=None, '
            'device=None, pin_memory=None)\n'
            f'{indent}_u = torch.copy_(_t, torch.full([4], 65, dtype=0, layout=None, '
            'device=None, pin_memory=None))\n'
            f'{indent}if bool(torch.lt(torch.sum(_u), 0)):\n'
            f'{indent}  ops.prim.RaiseException("never", "builtins.RuntimeError")\n'
            f'{indent}else:\n{indent}  pass\n')


def _rewrite(src: str, dst: str, edit) -> None:
    """Copies the archive, each code/*.py entry's text through edit(name, text)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith(".py"):
                data = edit(info.filename, data.decode()).encode()
            zout.writestr(info, data)


def _in_setstate(payload: str, cls: str | None = None):
    """An edit that puts `payload` first in the __setstate__ of `cls` (any class if None)."""
    def edit(_name, text):
        pat = re.compile(r"(\n  def __setstate__\(self: __torch__\.[\w.]*" + (cls or r"\w+") +
                         r",[^)]*\)[^:]*:\n)")
        return pat.sub(lambda m: m.group(1) + payload, text, count=1)
    return edit


def _hostile(tmp_path, module, edit, name="hostile.pt"):
    plain = str(tmp_path / "plain.pt")
    torch.jit.script(module).save(plain)
    out = str(tmp_path / name)
    _rewrite(plain, out, edit)
    return out


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_bytes(ORIGINAL)
    return path


def _loads_and_harms(path: str, victim) -> bool:
    """Whether torch.jit.load of `path`, in a child process, changes the victim file."""
    subprocess.run([sys.executable, "-c", f"import torch; torch.jit.load({path!r})"],
                   capture_output=True, timeout=120)
    harmed = victim.read_bytes() != ORIGINAL
    victim.write_bytes(ORIGINAL)
    return harmed


def _command(*args):
    from conftest import cli_path

    return subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _refused(path, victim, tmp_path, *words):
    out = tmp_path / "out.onnx"
    r = _command(path, "-o", str(out), "--input", "x:float32[2,3]")
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert victim.read_bytes() == ORIGINAL
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == []
    return lines[0]


CASES = {
    # name: (module, edit(victim) -> code edit, words the refusal names)
    "setstate_from_file": (_Stateful, lambda v: _in_setstate(_payload(v, "    ")),
                           ["._Stateful.__setstate__", "not of torch's own"]),
    "setstate_in_submodule": (_Outer, lambda v: _in_setstate(_payload(v, "    "), "_Stateful"),
                              ["_Stateful.__setstate__"]),
    "setstate_in_custom_class": (_HoldsObject,
                                 lambda v: _in_setstate(_payload(v, "    "), "_Holder"),
                                 ["_Holder.__setstate__"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_setstate_is_refused_before_loading(case, tmp_path, victim):
    module, edit, words = CASES[case]
    path = _hostile(tmp_path, module(), edit(str(victim)))
    assert _loads_and_harms(path, victim), "the hostile file does no harm: the test shows nothing"
    _refused(path, victim, tmp_path, "line ", *words)


def test_a_setstate_under_torchs_own_names_is_read_by_the_op_rules(tmp_path, victim):
    """A class moved under __torch__.torch (where torch's own modules live, whose
    __setstate__ is allowed) whose __setstate__ calls torch.from_file: refused for the op."""
    plain = str(tmp_path / "plain.pt")
    torch.jit.script(_Stateful()).save(plain)
    here, fake = "__torch__.test_torchscript_untrusted", "__torch__.torch.nn.fake"
    out = str(tmp_path / "spoof.pt")
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data, name = zin.read(info.filename), info.filename
            if name.endswith(".debug_pkl"):
                continue
            if name.endswith("code/__torch__/test_torchscript_untrusted.py"):
                name = name.replace("test_torchscript_untrusted.py", "torch/nn/fake.py")
                text = data.decode().replace(f"{here}._Stateful", f"{fake}.Fake")
                text = text.replace("class _Stateful(", "class Fake(")
                data = _in_setstate(_payload(str(victim), "    "), "Fake")(name, text).encode()
            elif name.endswith("data.pkl"):
                data = data.replace(f"{here}\n_Stateful".encode(), f"{fake}\nFake".encode())
            zout.writestr(name, data, compress_type=info.compress_type)
    assert _loads_and_harms(out, victim), "the spoofed file does no harm: the test shows nothing"
    _refused(out, victim, tmp_path, "Fake.__setstate__", "aten::from_file", "maps a file")


FORWARDS = {
    # what replaces `return torch.mul(x, 2)` in forward; words the refusal names
    "save": ('torch.save(x, "{saved}")\n    return torch.mul(x, 2)', ["aten::save", "writes"]),
    "print": ('print("hi")\n    return torch.mul(x, 2)', ["print", "prints"]),
    "from_file": ('_t = torch.from_file("{victim}", True, 4, dtype=0, layout=None, '
                  'device=None, pin_memory=None)\n    return torch.mul(x, 2)',
                  ["aten::from_file"]),
    "spaced": ('_t = torch .  from_file("{victim}", True, 4)\n    return torch.mul(x, 2)',
               ["aten::from_file"]),
    "continued": ('_t = torch.\\\nfrom_file("{victim}", True, 4)\n    return torch.mul(x, 2)',
                  ["aten::from_file"]),
    "getattr": ('_f = getattr(torch, "from_" "file")\n    return torch.mul(x, 2)',
                ["uses torch", "not named"]),
    "ops_namespace": ('_t = ops.debugprims.load_tensor("a", [1], [1], dtype=6, '
                      'device=torch.device("cpu"))\n    return torch.mul(x, 2)',
                      ["debugprims::load_tensor"]),
    "ops_aten": ('_t = ops.aten.from_file("{victim}", True, 4)\n'
                 '    return torch.mul(x, 2)', ["aten::from_file"]),
    "prim_print": ('ops.prim.Print(x)\n    return torch.mul(x, 2)', ["prim::Print"]),
    "unsafe_index": ('_t = torch._unsafe_index(x, [x])\n    return torch.mul(x, 2)',
                     ["aten::_unsafe_index", "bounds"]),
}


@pytest.mark.parametrize("case", list(FORWARDS))
def test_forward_with_a_side_effect_is_refused(case, tmp_path, victim):
    """The check itself, in this process (the command's path is shown by the tests above and
    below, each command a Python start-up of seconds)."""
    code, words = FORWARDS[case]
    code = code.format(victim=victim, saved=tmp_path / "saved.pt")
    path = _hostile(tmp_path, _Stateful(),
                    lambda _n, text: text.replace("return torch.mul(x, 2)", code))
    with pytest.raises(_core.ConversionError) as e:
        _core.check_torchscript_file(path)
    line = str(e.value)
    assert "\n" not in line and "._Stateful.forward" in line and ", line " in line, line
    for w in words:
        assert w in line, line


def test_the_command_refuses_a_forward_that_writes_a_file(tmp_path, victim):
    code = FORWARDS["save"][0].format(saved=tmp_path / "saved.pt")
    path = _hostile(tmp_path, _Stateful(),
                    lambda _n, text: text.replace("return torch.mul(x, 2)", code))
    _refused(path, victim, tmp_path, "._Stateful.forward", "aten::save")
    assert not (tmp_path / "saved.pt").exists()


def test_each_refused_forward_is_torchscript_that_torch_loads(tmp_path):
    """The variants above are real TorchScript (spaced, continued, getattr by a string...):
    torch.jit.load accepts every one of them, so each refusal above refuses a loadable file."""
    paths = []
    for case, (code, _) in FORWARDS.items():
        code = code.format(victim=tmp_path / "v.txt", saved=tmp_path / "saved.pt")
        paths.append(_hostile(tmp_path, _Stateful(), lambda _n, text, code=code: text.replace(
            "return torch.mul(x, 2)", code), name=f"{case}.pt"))
    r = subprocess.run([sys.executable, "-c", "import sys, torch\n"
                        "for p in sys.argv[1:]: torch.jit.load(p)", *paths],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_arguments_are_checked_before_the_file_is_read(tmp_path, victim):
    path = _hostile(tmp_path, _Stateful(), _in_setstate(_payload(str(victim), "    ")))
    for args in (["--input", "x:float32[2,"], [], ["--input", "x:nosuch[2]"]):
        r = _command(path, "-o", str(tmp_path / "out.onnx"), *args)
        assert r.returncode != 0
        assert "__setstate__" not in r.stderr and "--input" in r.stderr, r.stderr
        assert victim.read_bytes() == ORIGINAL
    assert not (tmp_path / "out.onnx").exists()


def _plain_with(tmp_path, name, edit):
    """A saved _Plain whose entries pass through edit(info, data) -> [(name, bytes), ...]."""
    plain = str(tmp_path / "plain.pt")
    torch.jit.script(_Plain()).save(plain)
    out = str(tmp_path / name)
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            for entry, data in edit(info, zin.read(info.filename)):
                zout.writestr(info if entry == info.filename else entry, data)
    return out


def test_entries_differing_only_in_case_are_refused(tmp_path, victim):
    def twin(info, data):
        yield info.filename, data
        if "/code/" in info.filename and info.filename.endswith(".py"):
            yield info.filename.replace("/code/", "/CODE/"), b"x"
    _refused(_plain_with(tmp_path, "case.pt", twin), victim, tmp_path, "differ only in case")


def test_custom_class_of_another_namespace_in_a_pickle_is_refused(tmp_path, victim):
    def c10d(info, data):
        if info.filename.endswith("/constants.pkl"):
            data = b"\x80\x02c__torch__.torch.classes.c10d\nStore\nq\x00." + data
        yield info.filename, data
    _refused(_plain_with(tmp_path, "c10d.pt", c10d), victim, tmp_path, "torch.classes.c10d")


def test_a_plain_file_converts_and_its_loaded_graphs_pass(tmp_path):
    path = str(tmp_path / "plain.pt")
    torch.jit.script(_Plain()).save(path)
    _core.check_torchscript_file(path)
    r = _command(path, "-o", str(tmp_path / "out.onnx"), "--input", "x:float32[batch,3]")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.onnx").exists()


def test_the_loaded_graph_check_names_the_method_and_op(tmp_path):
    class Printing(torch.nn.Module):
        def forward(self, x):
            print(x.shape)
            return x + 1

    path = str(tmp_path / "p.pt")
    model = torch.jit.script(Printing())
    with pytest.raises(TorchScriptError, match=r"method forward uses prim::Print, which prints"):
        check_loaded_graphs(model, path)
    check_loaded_graphs(torch.jit.script(_Plain()), path)
