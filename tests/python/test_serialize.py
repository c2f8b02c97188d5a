"""pt2onnx's serializer (python/pt2onnx/_serialize.py) against torch's: the
same JSON bytes on programs with every kind of content the schema carries,
and its patches gone afterwards. (tests/conftest.py repeats the byte check on
every program the suite exports.)"""

import logging

import torch

from pt2onnx._serialize import serialize_program


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x, n: int):
        y = self.bn(self.conv(x)).relu().mean(dim=(2, 3))
        y = self.fc(y) * self.scale + float("inf") * 0 + n
        v, i = y.max(dim=-1)  # torch.return_types output
        z = torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (y,))
        return z[:, : y.shape[1] - 1], (v, i), y.shape[0] * 2


def _program():
    x = torch.randn(2, 3, 8, 8)
    b = torch.export.Dim("b", min=2, max=64)
    return torch.export.export(Blocks().eval(), (x, 3),
                               dynamic_shapes=({0: b}, torch.export.Dim.DYNAMIC))


def test_same_bytes_as_torch():
    ep = _program()
    fast = serialize_program(ep)
    assert fast == serialize_program(ep, fast=False)
    assert b'"cond"' in fast or b"torch.ops.higher_order.cond" in fast  # a nested graph went through


def test_patches_are_undone():
    from torch._export.serde import serialize as serde
    from torch._export.serde.union import _Union

    ep = _program()
    def state():
        return (serde.canonicalize, serde._to_json_bytes, serde._print_sympy,
                _Union.__dict__["create"])

    before = state()
    serialize_program(ep)
    assert state() == before
    assert "print_readable" not in ep.graph_module.__dict__
    assert "def forward" in ep.graph_module.print_readable(print_output=False)


def test_debug_logging_still_gets_the_listing():
    """With the serializer's debug log on, the graph listing is built (the
    fast path only skips it when nobody would see it)."""
    log = logging.getLogger("torch._export.serde.serialize")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler, level, propagate = Keep(), log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        ep = _program()
        out = serialize_program(ep)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
    assert out == serialize_program(ep, fast=False)
    assert any("def forward" in m for m in seen)
