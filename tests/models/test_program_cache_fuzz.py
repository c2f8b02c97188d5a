"""Fuzzing of the program cache's entry reader (issue 56): hypothesis mutates a real entry
(a LLaMA checkpoint's) and _program_cache.export_hit reads it. Each result must be either a
miss with exactly one CacheWarning naming the entry, or a hit whose file is the fresh
export's, byte for byte; nothing may crash, hang, or write outside the output.

- test_damaged_entry: bit flips, truncations, bytes appended and JSON values replaced in any
  of the entry's files, not signed again (damage, or a hand without the cache's key).
- test_signed_entry: entry.json's values retyped, removed, added or set to hostile integers,
  then signed again with the cache's key (a writer holding it): the value checks behind the
  signature decide. Removals are of record keys only: a dim name removed from the call is a
  value the capture decides, which only the signature protects.

Examples per test: $PT2ONNX_CACHE_FUZZ_EXAMPLES, 10 by default (the ordinary suite, about
6 s, most of it the one export of the fixture); `make fuzz` (its fuzz-cache step) runs 500
each, about 20 s on 2 cores."""

import json
import os
import re
import shutil
import types
import warnings

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import zoo
from program_cache_helpers import entry_of, resign, tree
from pt2onnx import _program_cache, hf

TASK = "text-generation-with-past"
OPTIONS = dict(opset=None, target="standard", dtype="float32", external_data=True,
               quantize=None)
FILES = ("entry.json", "entry.mac", "part0.json", "part0.bin")
EXAMPLES = int(os.environ.get("PT2ONNX_CACHE_FUZZ_EXAMPLES", "10"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A LLaMA checkpoint, a cache holding its entry, and the fresh capture's files."""
    d = tmp_path_factory.mktemp("fuzz")
    zoo.build("hf_llama")[0].save_pretrained(d / "ckpt")
    r = hf.export_pretrained(d / "ckpt", TASK, d / "first" / "model.onnx", verify=False,
                             cache_dir=d / "cache")
    files = [open(p, "rb").read() for p in [r.path, *r.data_paths]]
    return _Base(dir=d, ckpt=str(d / "ckpt"), cache=str(d / "cache"), fresh=files,
                 ckpt_tree=tree(d / "ckpt"))


class _Base(types.SimpleNamespace):
    def __repr__(self):  # hypothesis prints the fixture with a failing example: not its bytes
        return "base"


class Run:
    """One example's copy of the cache and output folder."""

    def __init__(self, base, n):
        self.base = base
        self.cache = str(base.dir / f"c{n}")
        self.out = str(base.dir / f"o{n}")
        shutil.rmtree(self.cache, ignore_errors=True)
        shutil.rmtree(self.out, ignore_errors=True)
        shutil.copytree(base.cache, self.cache)
        os.mkdir(self.out)
        self.entry = entry_of(self.cache)

    def read(self, name):
        return open(os.path.join(self.entry, name), "rb").read()

    def write(self, name, data):
        with open(os.path.join(self.entry, name), "wb") as f:
            f.write(data)

    def check(self):
        """export_hit on the mutated entry: a miss with one warning naming it, or the fresh
        capture's bytes; only the output folder written."""
        before = tree(self.cache)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = _program_cache.export_hit(self.cache, self.base.ckpt, TASK,
                                          os.path.join(self.out, "model.onnx"), OPTIONS)
        cw = [str(w.message) for w in caught
              if issubclass(w.category, _program_cache.CacheWarning)]
        if r is None:
            assert len(cw) == 1 and self.entry in cw[0] and "\n" not in cw[0], cw
            assert "unexpected" not in cw[0], cw  # refused by a check, not by luck
            assert os.listdir(self.out) == []
            event("miss: " + re.sub(r"[0-9]+|'.*'", "N", cw[0].partition(" (")[2])[:50])
        else:
            assert not cw, cw
            event("hit")
            assert [open(p, "rb").read() for p in [r.path, *r.data_paths]] == self.base.fresh
        assert tree(self.cache) == before
        assert tree(self.base.ckpt) == self.base.ckpt_tree
        shutil.rmtree(self.cache)
        shutil.rmtree(self.out)


_counter = iter(range(1 << 30))

# Any JSON value: what a damaged or crafted entry.json may hold anywhere.
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
                    | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                        max_size=3),
                    max_leaves=6)
HOSTILE_INTS = st.sampled_from([-1, -4096, -(1 << 40), 1 << 40, (1 << 63) - 1, 1 << 63, 1 << 64])


def _kind(v):
    """A JSON value's type (bool apart from numbers; int and float one number)."""
    if isinstance(v, bool) or v is None:
        return type(v).__name__
    return "number" if isinstance(v, (int, float)) else type(v).__name__


def _walk(data, tree_):
    """A path (list of keys/indices) to a node of `tree_`, drawn step by step (one step in
    five stops: deep values, a view's offset, are reached as often as shallow ones)."""
    path, node = [], tree_
    while isinstance(node, (dict, list)) and node and data.draw(st.integers(0, 4)) > 0:
        key = data.draw(st.sampled_from(sorted(node) if isinstance(node, dict)
                                        else range(len(node))))
        path.append(key)
        node = node[key]
    return path, node


def _set(tree_, path, value):
    if not path:
        return value
    parent = tree_
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return tree_


@FUZZ
@given(data=st.data(), file=st.sampled_from(FILES))
def test_damaged_entry(base, data, file):
    run = Run(base, next(_counter))
    raw = run.read(file)
    how = data.draw(st.sampled_from(["flip", "truncate", "append"]
                                    + (["json"] if file.endswith(".json") else [])))
    event(how)
    if how == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([raw[i] ^ (1 << data.draw(st.integers(0, 7)))]) + raw[i + 1:]
    elif how == "truncate":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    elif how == "append":
        raw += data.draw(st.binary(min_size=1, max_size=16))
    else:
        doc = json.loads(raw)
        path, _ = _walk(data, doc)
        raw = json.dumps(_set(doc, path, data.draw(JSON))).encode()
    run.write(file, raw)
    run.check()


# Dicts whose keys are values a capture decided (names of inputs, weights, aliases): a key
# removed there changes the file and only the signature can tell. Elsewhere every key is
# part of a record the reader checks whole.
_CAPTURE_MAPS = {"input_dim_names", "output_dim_names", "source_aliases", "weight_names",
                 "input_names", "output_names"}


@FUZZ
@given(data=st.data())
def test_signed_entry(base, data):
    run = Run(base, next(_counter))
    meta = json.loads(run.read("entry.json"))
    # Mostly inside the part (views, call), where most values are; else anywhere.
    start = data.draw(st.sampled_from([[], ["parts", 0], ["parts", 0], ["parts", 0]]))
    path, node = _walk(data, meta["parts"][0] if start else meta)
    path = start + path
    how = data.draw(st.sampled_from(
        ["retype"] + (["remove"] if path and not _CAPTURE_MAPS & set(map(str, path)) else [])
        + (["add"] if isinstance(node, dict) else [])
        + (["hostile int"] if type(node) is int else [])))
    event(how)
    if how == "retype":
        meta = _set(meta, path, data.draw(JSON.filter(lambda v: _kind(v) != _kind(node))))
    elif how == "remove":
        parent = meta
        for k in path[:-1]:
            parent = parent[k]
        del parent[path[-1]]
    elif how == "add":
        node[data.draw(st.text(max_size=4).filter(lambda k: k not in node))] = data.draw(JSON)
    else:
        meta = _set(meta, path, data.draw(HOSTILE_INTS))
    run.write("entry.json", json.dumps(meta).encode())
    resign(run.entry)
    run.check()
