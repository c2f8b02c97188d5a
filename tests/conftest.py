"""Applies to every test directory: each program the suite exports in this
process is serialized both ways, pt2onnx's fast path and torch's serializer
as it ships (less the discarded canonicalize()), and the JSON must be the
same bytes (python/pt2onnx/_serialize.py)."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _serializer_checked_against_torch():
    from pt2onnx import _export, _serialize

    def serialize(ep):
        out = _serialize.serialize_program(ep)
        ref = _serialize.serialize_program(ep, fast=False)
        if out != ref:
            at = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), min(len(out), len(ref)))
            raise AssertionError("pt2onnx's serializer differs from torch's at byte "
                                 f"{at}: ...{out[max(0, at - 80):at + 80]!r} vs "
                                 f"...{ref[max(0, at - 80):at + 80]!r}")
        return out

    original = _export._serialize
    _export._serialize = serialize
    try:
        yield
    finally:
        _export._serialize = original
