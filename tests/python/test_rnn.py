"""Recurrent layers and cells (src/convert/rnn.cpp): nn.LSTM / nn.GRU / nn.RNN
(tanh and relu) as torch.export records them (aten.lstm.input, gru.input,
rnn_tanh.input, rnn_relu.input) and the cells (lstm_cell, gru_cell,
rnn_tanh_cell, rnn_relu_cell), exported with a dynamic batch and sequence
length and matched with PyTorch in onnxruntime on other sizes.

PackedSequence inputs (the `.data` overloads) are not tested: torch.export
cannot capture nn.LSTM / GRU / RNN on a PackedSequence (RNNBase.forward builds
its zero state from `batch_sizes[0]`, a tensor)."""

import onnx
import pytest
import torch
from conftest import assert_matches, assert_same_both_ways
from torch.export import Dim

import pt2onnx

KINDS = {
    "lstm": lambda **kw: torch.nn.LSTM(**kw),
    "gru": lambda **kw: torch.nn.GRU(**kw),
    "rnn_tanh": lambda **kw: torch.nn.RNN(nonlinearity="tanh", **kw),
    "rnn_relu": lambda **kw: torch.nn.RNN(nonlinearity="relu", **kw),
}
ONNX_OP = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}

# (num_layers, bidirectional, batch_first, initial state, bias, dropout):
# every pair of the boolean options appears in some configuration.
CONFIGS = {
    "plain": (1, False, False, False, True, 0.0),
    "2l_bidir_state": (2, True, False, True, True, 0.0),
    "2l_bf_state_nobias": (2, False, True, True, False, 0.0),
    "bidir_bf": (1, True, True, False, True, 0.0),
    "2l_bidir_bf_state_dropout": (2, True, True, True, True, 0.3),
    "state_nobias": (1, False, False, True, False, 0.0),
    "2l_bidir_nobias_dropout": (2, True, False, False, False, 0.5),
}
# Sizes other than the export's (seq 5, batch 3), seq 1 and batch 1 included.
OTHER_SIZES = [(7, 2), (1, 4), (3, 1)]
INPUT, HIDDEN = 4, 6


class Wrap(torch.nn.Module):
    """The recurrent module with its states as separate tensors in and out."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h=None, c=None):
        state = (h, c) if c is not None else h
        y, s = self.rnn(x) if state is None else self.rnn(x, state)
        return (y, *s) if isinstance(s, tuple) else (y, s)


def make_inputs(rnn, with_state, seq, batch):
    x = torch.randn(batch, seq, rnn.input_size) if rnn.batch_first else torch.randn(
        seq, batch, rnn.input_size)
    inputs = {"x": x}
    if with_state:
        states = rnn.num_layers * (2 if rnn.bidirectional else 1)
        out = getattr(rnn, "proj_size", 0) or rnn.hidden_size
        inputs["h"] = torch.randn(states, batch, out)
        if isinstance(rnn, torch.nn.LSTM):
            inputs["c"] = torch.randn(states, batch, rnn.hidden_size)
    return inputs


def dynamic(rnn, inputs):
    seq, batch = Dim("seq"), Dim("batch")
    ds = {"x": {0: batch, 1: seq} if rnn.batch_first else {0: seq, 1: batch}}
    for k in ("h", "c"):
        if k in inputs:
            ds[k] = {1: batch}
    return ds


def export_and_match(rnn, with_state, path, *, opset=18, both_ways=False):
    torch.manual_seed(1)
    model = Wrap(rnn).eval()
    inputs = make_inputs(rnn, with_state, 5, 3)
    args = tuple(inputs.values())
    ds = dynamic(rnn, inputs)
    pt2onnx.export(model, args, path, dynamic_shapes=ds, opset=opset)
    if both_ways:
        assert_same_both_ways(model, args, path, dynamic_shapes=ds, opset=opset)
    mp = onnx.load(path)
    onnx.checker.check_model(mp, full_check=True)
    for seq, batch in OTHER_SIZES:
        assert_matches(model, path, make_inputs(rnn, with_state, seq, batch))
    return mp


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", KINDS)
def test_recurrent(tmp_onnx, kind, config):
    layers, bidir, batch_first, state, bias, dropout = CONFIGS[config]
    torch.manual_seed(0)
    rnn = KINDS[kind](input_size=INPUT, hidden_size=HIDDEN, num_layers=layers, bias=bias,
                      batch_first=batch_first, dropout=dropout, bidirectional=bidir)
    mp = export_and_match(rnn, state, tmp_onnx, both_ways=config == "2l_bidir_state")
    ops = [n.op_type for n in mp.graph.node]
    # One ONNX recurrent node per layer, both directions in one.
    assert ops.count(ONNX_OP[kind]) == layers
    inits = {i.name for i in mp.graph.initializer}
    for n in mp.graph.node:
        if n.op_type == ONNX_OP[kind]:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            assert attrs.get("direction", b"forward") == (b"bidirectional" if bidir else b"forward")
            # W, R, B re-laid out at conversion time: initializers, no nodes.
            assert all(w in inits for w in n.input[1:4] if w)
    # torch's own weights are not written beside the re-laid-out ones.
    assert not any("weight_ih" in i or "bias_hh" in i for i in inits)
    # Dynamic dims stay named.
    x_dims = [d.dim_param or d.dim_value for d in mp.graph.input[0].type.tensor_type.shape.dim]
    assert x_dims == (["batch", "seq", INPUT] if batch_first else ["seq", "batch", INPUT])


@pytest.mark.parametrize("config", ["plain", "2l_bidir_state", "2l_bf_state_nobias",
                                    "bidir_bf"])
def test_lstm_proj_size(tmp_onnx, config):
    """proj_size: the ONNX LSTM runs on the unprojected state with
    R = W_hh W_hr; outputs are projected after it; a given h0 is lifted
    through W_hr's pseudo-inverse. Dynamic sequence length."""
    layers, bidir, batch_first, state, bias, dropout = CONFIGS[config]
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(INPUT, HIDDEN, layers, bias=bias, batch_first=batch_first,
                        bidirectional=bidir, proj_size=3)
    export_and_match(rnn, state, tmp_onnx, both_ways=config == "2l_bidir_state")


@pytest.mark.parametrize("opset", [13, 17, 23])
@pytest.mark.parametrize("kind", KINDS)
def test_opsets(tmp_onnx, kind, opset):
    torch.manual_seed(0)
    rnn = KINDS[kind](input_size=INPUT, hidden_size=HIDDEN, num_layers=2, bidirectional=True)
    export_and_match(rnn, True, tmp_onnx, opset=opset)


@pytest.mark.parametrize("kind", KINDS)
def test_float64(tmp_onnx, kind):
    """onnxruntime's LSTM / GRU / RNN kernels are float32 only: float64 layers
    compute in float32 between float64 inputs and outputs."""
    torch.manual_seed(0)
    rnn = KINDS[kind](input_size=INPUT, hidden_size=HIDDEN, bidirectional=True).double()
    model = Wrap(rnn).eval()
    x = torch.randn(5, 3, INPUT, dtype=torch.float64)
    pt2onnx.export(model, (x,), tmp_onnx, dynamic_shapes={"x": {0: Dim("seq"), 1: Dim("b")}})
    for seq, batch in OTHER_SIZES:
        assert_matches(model, tmp_onnx, {"x": torch.randn(seq, batch, INPUT, dtype=torch.float64)},
                       atol=1e-5, rtol=1e-5)


class Cell(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, h, c=None):
        return self.cell(x, (h, c)) if c is not None else self.cell(x, h)


CELLS = {
    "lstm_cell": lambda bias: torch.nn.LSTMCell(INPUT, HIDDEN, bias=bias),
    "gru_cell": lambda bias: torch.nn.GRUCell(INPUT, HIDDEN, bias=bias),
    "rnn_tanh_cell": lambda bias: torch.nn.RNNCell(INPUT, HIDDEN, bias=bias, nonlinearity="tanh"),
    "rnn_relu_cell": lambda bias: torch.nn.RNNCell(INPUT, HIDDEN, bias=bias, nonlinearity="relu"),
}


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", CELLS)
def test_cell(tmp_onnx, kind, bias, opset):
    torch.manual_seed(0)
    model = Cell(CELLS[kind](bias)).eval()

    def inputs(batch):
        d = {"x": torch.randn(batch, INPUT), "h": torch.randn(batch, HIDDEN)}
        if kind == "lstm_cell":
            d["c"] = torch.randn(batch, HIDDEN)
        return d

    args = tuple(inputs(3).values())
    batch = Dim("batch")
    ds = {k: {0: batch} for k in inputs(3)}
    pt2onnx.export(model, args, tmp_onnx, dynamic_shapes=ds, opset=opset)
    if bias and opset == 18:
        assert_same_both_ways(model, args, tmp_onnx, dynamic_shapes=ds, opset=opset)
    onnx.checker.check_model(tmp_onnx, full_check=True)
    for b in (1, 2, 7):
        assert_matches(model, tmp_onnx, inputs(b))


def test_cell_unrolled_over_time(tmp_onnx):
    """A cell applied per step in a Python loop: unrolled by torch.export over
    the (static) sequence, with a dynamic batch."""

    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.LSTMCell(INPUT, HIDDEN)

        def forward(self, x):
            h = c = x.new_zeros(x.shape[1], HIDDEN)
            outs = []
            for t in range(x.shape[0]):
                h, c = self.cell(x[t], (h, c))
                outs.append(h)
            return torch.stack(outs), c

    torch.manual_seed(0)
    model = Loop().eval()
    pt2onnx.export(model, (torch.randn(4, 3, INPUT),), tmp_onnx,
                   dynamic_shapes={"x": {1: Dim("batch")}})
    for b in (1, 5):
        assert_matches(model, tmp_onnx, {"x": torch.randn(4, b, INPUT)})


def test_training_mode_dropout_fails(tmp_onnx):
    torch.manual_seed(0)
    model = Wrap(torch.nn.LSTM(INPUT, HIDDEN, 2, dropout=0.5)).train()
    with pytest.raises(pt2onnx.ConversionError, match=r"dropout.*training mode.*eval\(\)"):
        pt2onnx.export(model, (torch.randn(5, 3, INPUT),), tmp_onnx,
                       training=pt2onnx.TrainingMode.TRAINING)
    # EVAL, the default, captures it in eval mode: no dropout
    pt2onnx.export(model, (torch.randn(5, 3, INPUT),), tmp_onnx)
    assert model.training
    assert_matches(model.eval(), tmp_onnx, {"x": torch.randn(5, 3, INPUT)})


def test_training_mode_without_dropout(tmp_onnx):
    """train=True with dropout 0 is deterministic: it converts."""
    torch.manual_seed(0)
    rnn = torch.nn.GRU(INPUT, HIDDEN, 2)
    model = Wrap(rnn).train()
    pt2onnx.export(model, (torch.randn(5, 3, INPUT),), tmp_onnx,
                   training=pt2onnx.TrainingMode.TRAINING, dynamic_shapes={"x": {0: Dim("seq"), 1: Dim("batch")}})
    for seq, batch in OTHER_SIZES:
        assert_matches(model, tmp_onnx, {"x": torch.randn(seq, batch, INPUT)})


def test_capture_rules_restore_torch():
    """capture_rules() leaves torch's kernels as they were."""
    op = torch.ops.aten.lstm.input
    before = dict(op.py_kernels)
    with pt2onnx.capture_rules():
        assert dict(op.py_kernels) != before
    assert dict(op.py_kernels) == before
    # Eager LSTM still runs torch's own kernels.
    rnn = torch.nn.LSTM(INPUT, HIDDEN)
    with pt2onnx.capture_rules():
        y, _ = rnn(torch.randn(5, 3, INPUT))
    assert y.shape == (5, 3, HIDDEN)


def test_unbatched(tmp_onnx):
    """nn.LSTM on a 2-D input (no batch dim) unsqueezes around the op."""
    torch.manual_seed(0)
    model = Wrap(torch.nn.LSTM(INPUT, HIDDEN, 2, bidirectional=True)).eval()
    args = (torch.randn(5, INPUT), torch.randn(4, HIDDEN), torch.randn(4, HIDDEN))
    pt2onnx.export(model, args, tmp_onnx, dynamic_shapes={"x": {0: Dim("seq")}, "h": None,
                                                          "c": None})
    for seq in (1, 8):
        assert_matches(model, tmp_onnx, {"x": torch.randn(seq, INPUT), "h": torch.randn(4, HIDDEN),
                                         "c": torch.randn(4, HIDDEN)})


class Functional(torch.nn.Module):
    """aten.lstm / aten.gru with the weights as graph inputs (not
    initializers): re-laid out by Split / Concat / MatMul nodes."""

    def __init__(self, kind, proj=False, random_h0=False):
        super().__init__()
        self.kind, self.proj, self.random_h0 = kind, proj, random_h0

    def forward(self, x, w_ih, w_hh, b_ih, b_hh, w_hr=None):
        params = [w_ih, w_hh, b_ih, b_hh] + ([w_hr] if self.proj else [])
        b = x.shape[1]
        if self.kind == "lstm":
            out = params[-1].shape[0] if self.proj else HIDDEN
            h0 = x.new_ones(1, b, out) if self.random_h0 else x.new_zeros(1, b, out)
            hx = (h0, x.new_zeros(1, b, HIDDEN))
            y, h, c = torch.lstm(x, hx, params, True, 1, 0.0, False, False, False)
            return y, h, c
        y, h = torch.gru(x, x.new_zeros(1, b, HIDDEN), params, True, 1, 0.0, False, False, False)
        return y, h


@pytest.mark.parametrize("kind,proj", [("lstm", False), ("lstm", True), ("gru", False)])
def test_weights_as_inputs(tmp_onnx, kind, proj):
    torch.manual_seed(0)
    ref = (torch.nn.LSTM(INPUT, HIDDEN, proj_size=3 if proj else 0) if kind == "lstm" else
           torch.nn.GRU(INPUT, HIDDEN))
    params = [p.detach().clone() for p in ref._flat_weights]
    model = Functional(kind, proj)
    x = torch.randn(5, 3, INPUT)
    seq, batch = Dim("seq"), Dim("batch")
    pt2onnx.export(model, (x, *params), tmp_onnx,
                   dynamic_shapes=({0: seq, 1: batch},) + (None,) * len(params))
    mp = onnx.load(tmp_onnx)
    assert len(mp.graph.input) == 1 + len(params)
    for s, b in OTHER_SIZES:
        inputs = {i.name: t for i, t in zip(mp.graph.input, (torch.randn(s, b, INPUT), *params))}
        assert_matches(model, tmp_onnx, inputs)


def test_proj_size_state_needs_known_weights(tmp_onnx):
    """proj_size with a non-zero h0 lifts h0 through W_hr's pseudo-inverse,
    computed at conversion time: weights given as graph inputs cannot."""
    torch.manual_seed(0)
    params = [p.detach().clone() for p in torch.nn.LSTM(INPUT, HIDDEN, proj_size=3)._flat_weights]
    model = Functional("lstm", proj=True, random_h0=True)
    with pytest.raises(pt2onnx.ConversionError, match="proj_size and a non-zero initial state"):
        pt2onnx.export(model, (torch.randn(5, 3, INPUT), *params), tmp_onnx)


def test_module_called_twice_shares_weights(tmp_onnx):
    """Two calls of one module: the re-laid-out weights are made once."""

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(INPUT, HIDDEN, 2, bidirectional=True, proj_size=3)

        def forward(self, x, h, c):
            y1, _ = self.rnn(x, (h, c))
            y2, _ = self.rnn(x.flip(0), (h, c))
            return y1 + y2

    torch.manual_seed(0)
    model = Twice().eval()
    args = (torch.randn(5, 3, INPUT), torch.randn(4, 3, 3), torch.randn(4, 3, HIDDEN))
    batch = Dim("batch")
    pt2onnx.export(model, args, tmp_onnx, dynamic_shapes={"x": {0: Dim("seq"), 1: batch},
                                                          "h": {1: batch}, "c": {1: batch}})
    mp = onnx.load(tmp_onnx)
    names = sorted(i.name for i in mp.graph.initializer if "onnx_" in i.name)
    # W, R, B, P, M for each of the two layers, once.
    assert len(names) == 10, names
    assert [n.op_type for n in mp.graph.node].count("LSTM") == 4
    assert_matches(model, tmp_onnx, {"x": torch.randn(7, 2, INPUT), "h": torch.randn(4, 2, 3),
                                     "c": torch.randn(4, 2, HIDDEN)})
