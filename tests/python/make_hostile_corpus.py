"""Regenerates tests/data/hostile/: damaged .pt2 archives, each with the text
its error message must contain (expected.tsv). Run from the repo root:

    python tests/python/make_hostile_corpus.py

The files are checked in; the C++ tests (also under ASan/UBSan) and the
pytest CLI tests read them, and the fuzzer starts from them."""

import io
import json
import os
import pickle
import struct
import zipfile

import torch
import torch.nn as nn

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "hostile")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).relu()


def valid_archive() -> bytes:
    torch.manual_seed(0)
    ep = torch.export.export(Tiny().eval(), (torch.randn(2, 4),))
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return buf.getvalue()


class ControlFlow(nn.Module):
    """cond, while_loop and scan in one small model: seeds the fuzzer with
    nested graphs and gives the C++ tests a control-flow archive."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, n):
        from torch._higher_order_ops.scan import scan
        from torch._higher_order_ops.while_loop import while_loop

        y = torch.cond(x.sum() > 0, lambda x: self.fc(x).relu(), lambda x: x * 2, (x,))
        _, y = while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 0.5),
                          (torch.zeros((), dtype=torch.int64), y))
        s, ys = scan(lambda c, r: (c + r, c * r), torch.zeros(4), x)
        return y + s, ys


def control_flow_archive() -> bytes:
    torch.manual_seed(0)
    ep = torch.export.export(ControlFlow().eval(), (torch.randn(2, 4), torch.tensor(3)))
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return buf.getvalue()


def entries(data: bytes):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def rezip(items, compress=None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, payload in items:
            if compress and name.endswith(compress):
                z.writestr(zipfile.ZipInfo(name), payload, compress_type=zipfile.ZIP_DEFLATED)
            else:
                z.writestr(name, payload)
    return buf.getvalue()


def replace(items, name, payload):
    return [(n, payload if n == name else p) for n, p in items]


def edit_json(items, name, fn):
    return replace(items, name, json.dumps(fn(json.loads(dict(items)[name]))).encode())


def central_directory_offset(data: bytes) -> int:
    eocd = data.rfind(b"PK\x05\x06")
    return struct.unpack_from("<I", data, eocd + 16)[0]


def evil_pickle_zip() -> bytes:
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps({"fc.weight": Evil()}, protocol=2))
        z.writestr("archive/byteorder", "little")
    return buf.getvalue()


def deep_tuple_pickle_zip(depth: int) -> bytes:
    """A torch.save zip whose data.pkl nests `depth` 1-tuples: None, then TUPLE1
    (one byte each) `depth` times. Built by hand: short, and pickle.dumps would
    hit Python's own recursion limit."""
    pkl = b"\x80\x02N" + b"\x85" * depth + b"."
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
    return buf.getvalue()


def main():
    os.makedirs(OUT, exist_ok=True)
    good = valid_archive()
    items = entries(good)
    root = items[0][0].split("/")[0] + "/"
    model = root + "models/model.json"
    wcfg = root + "data/weights/model_weights_config.json"
    w0 = root + "data/weights/weight_0"
    cases = {}

    cases["truncated.pt2"] = (good[: len(good) // 2], "end-of-central-directory")
    bad_cd = bytearray(good)
    cd = central_directory_offset(good)
    bad_cd[cd : cd + 4] = b"XXXX"
    cases["bad_central_directory.pt2"] = (bytes(bad_cd), "bad central directory entry 0")
    cases["missing_model_json.pt2"] = (
        rezip([(n, p) for n, p in items if n != model]), "missing entry '" + model + "'")
    cases["weight_too_short.pt2"] = (
        rezip(replace(items, w0, dict(items)[w0][:20])), "weight_0' has 20")

    def huge_sizes(cfg):
        meta = cfg["config"]["fc.weight"]["tensor_meta"]
        meta["sizes"] = [{"as_int": 1 << 40}, {"as_int": 1 << 40}]
        meta["strides"] = [{"as_int": 1 << 40}, {"as_int": 1}]
        return cfg

    cases["overflow_sizes.pt2"] = (rezip(edit_json(items, wcfg, huge_sizes)), "overflow")
    cases["dotdot_entry.pt2"] = (
        rezip(items + [(root + "data/weights/../../../etc/evil", b"x")]), "unsafe name")
    huge = bytearray(rezip(items))
    cd = central_directory_offset(bytes(huge))
    struct.pack_into("<II", huge, cd + 20, 0xFFFFFFF0, 0xFFFFFFF0)  # compressed, uncompressed size
    cases["huge_entry_size.pt2"] = (bytes(huge), "lies outside the file")

    def wrong_shape(ep):
        ep["graph_module"]["graph"]["nodes"] = {"not": "a list"}
        return ep

    cases["wrong_json_shape.pt2"] = (
        rezip(edit_json(items, model, wrong_shape)), "graph.nodes: expected a JSON array")

    def major_99(ep):
        ep["schema_version"]["major"] = 99
        return ep

    cases["unknown_major.pt2"] = (
        rezip(edit_json(items, model, major_99)), "unsupported schema major version 99")
    cases["malformed_json.pt2"] = (rezip(replace(items, model, b'{"schema_version": {')),
                                   "malformed JSON")
    pickled = [(n, p) for n, p in items if not n.startswith(root + "data/weights/")]
    pickled.append((root + "data/weights/model.pt", evil_pickle_zip()))
    cases["pickle_os_system.pt2"] = (rezip(pickled), "refusing to load global 'posix system'")
    cases["not_a_zip.pt2"] = (bytes(range(256)) * 4, "end-of-central-directory")
    cases["compressed_entry.pt2"] = (rezip(items, compress="model.json"), "is compressed")
    cases["big_endian.pt2"] = (rezip(replace(items, root + "byteorder", b"big")), "big-endian")

    def missing_weight(cfg):
        del cfg["config"]["fc.bias"]
        return cfg

    cases["weight_missing_from_config.pt2"] = (
        rezip(edit_json(items, wcfg, missing_weight)), "weight 'fc.bias'")

    cases["deep_pickle.pt2"] = (
        rezip([(n, p) for n, p in items if not n.startswith(root + "data/weights/")]
              + [(root + "data/weights/model.pt", deep_tuple_pickle_zip(200_000))]),
        "pickled values nest 1001 levels deep")

    # Numbers in the JSON and in sympy expressions: each must be read whole.
    def x_size0(value):
        def edit(ep):
            ep["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] = value
            return ep
        return edit

    def sym(expr):
        return x_size0({"as_expr": {"expr_str": expr, "hint": {"as_int": 2}}})

    for name, expr, msg in [
        ("sym_integer_overflow.pt2", "Integer(99999999999999999999)",
         "Integer(99999999999999999999) does not fit in a 64-bit integer"),
        ("sym_integer_sign_only.pt2", "Integer(-)", "Integer(-) is not an integer"),
        ("sym_integer_float.pt2", "Integer(1.5e3)", "Integer(1.5e3) is not an integer"),
        ("sym_integer_negative.pt2", "Integer(-5)", "x.sizes[0]: negative size -5"),
        ("sym_float_garbage.pt2", "Mul(Float('1.5x', precision=53), Symbol('s0', integer=True))",
         "Float(1.5x) is not a number"),
    ]:
        cases[name] = (rezip(edit_json(items, model, sym(expr))), msg)
    cases["json_negative_size.pt2"] = (
        rezip(edit_json(items, model, x_size0({"as_int": -3}))), "x.sizes[0]: negative size -3")
    cases["json_float_size.pt2"] = (
        rezip(edit_json(items, model, x_size0({"as_int": 1.5e3}))),
        "x.sizes[0].as_int: expected an integer, found the number 1500.0")
    cases["json_uint64_size.pt2"] = (
        rezip(edit_json(items, model, x_size0({"as_int": (1 << 64) - 1}))),
        "integer 18446744073709551615 does not fit in a 64-bit signed integer")
    # Beyond 64 bits simdjson rejects the whole document; the message names the number.
    cases["json_integer_overflow.pt2"] = (
        rezip(edit_json(items, model, x_size0({"as_int": 99999999999999999999}))),
        "malformed JSON: Problem while parsing a number: 99999999999999999999 at byte")

    def major_wraps(ep):
        ep["schema_version"]["major"] = (1 << 32) + 8  # a 32-bit cast would read 8
        return ep

    cases["major_wraps.pt2"] = (
        rezip(edit_json(items, model, major_wraps)), "major: integer 4294967304 out of range")

    cf = entries(control_flow_archive())
    cf_model = cf[0][0].split("/")[0] + "/models/model.json"

    def branch_arity(ep):
        for n in ep["graph_module"]["graph"]["nodes"]:
            if n["target"] == "torch.ops.higher_order.cond":
                n["inputs"][1]["arg"]["as_graph"]["graph"]["inputs"].append(
                    {"as_tensor": {"name": "extra"}})
        return ep

    cases["cond_branch_arity.pt2"] = (
        rezip(edit_json(cf, cf_model, branch_arity)), "takes 4 inputs but 3 are given")

    def loop_body_unknown_value(ep):
        for n in ep["graph_module"]["graph"]["nodes"]:
            if n["target"] == "torch.ops.higher_order.while_loop":
                body = n["inputs"][1]["arg"]["as_graph"]["graph"]
                body["nodes"][0]["inputs"][0]["arg"] = {"as_tensor": {"name": "nowhere"}}
        return ep

    cases["loop_body_unknown_value.pt2"] = (
        rezip(edit_json(cf, cf_model, loop_body_unknown_value)), "undefined value 'nowhere'")

    def drop_output_meta(ep):
        del ep["graph_module"]["graph"]["tensor_values"]["relu"]
        return ep

    cases["output_without_metadata.pt2"] = (
        rezip(edit_json(items, model, drop_output_meta)), "output 'relu' has no tensor metadata")

    for name, (data, _) in cases.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    with open(os.path.join(OUT, "expected.tsv"), "w") as f:
        for name, (_, msg) in sorted(cases.items()):
            f.write(f"{name}\t{msg}\n")
    with open(os.path.join(OUT, "valid.pt2"), "wb") as f:
        f.write(good)
    with open(os.path.join(OUT, "valid_control_flow.pt2"), "wb") as f:
        f.write(rezip(cf))


if __name__ == "__main__":
    main()
