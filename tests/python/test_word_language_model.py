"""The word-level language model of PyTorch's examples repository
(word_language_model: an RNN model with LSTM / GRU / RNN_TANH / RNN_RELU
layers, and its Transformer variant), written here after its well-known
structure. Exported in eval mode with a dynamic batch and sequence length,
the hidden state as inputs and outputs, and matched with PyTorch in
onnxruntime at three other sizes."""

import math

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_both_ways, ort_session
from torch import nn
from torch.export import Dim

import pt2onnx

NTOKEN, NINP, NHID, NLAYERS = 50, 16, 16, 2
EXPORT_SIZE = (5, 3)  # (seq, batch)
OTHER_SIZES = [(7, 2), (1, 5), (12, 1)]


class RNNModel(nn.Module):
    """Encoder (embedding), a recurrent module, decoder (linear); dropout
    after the embedding and after the recurrent module."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            assert nhid == ninp
            self.decoder.weight = self.encoder.weight
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        h = torch.randn(self.nlayers, bsz, self.nhid)  # random: not the zeros special case
        if self.rnn_type == "LSTM":
            return (h, torch.randn(self.nlayers, bsz, self.nhid))
        return h


class PositionalEncoding(nn.Module):
    """Sinusoidal position encodings added to the [seq, batch, d] input."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0), :])


class TransformerModel(nn.Module):
    """Embedding * sqrt(d) + positional encoding, a causal TransformerEncoder
    (the square mask built in forward from the sequence length), decoder."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.ninp = ninp
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.encoder = nn.TransformerEncoder(layer, nlayers)
        self.decoder = nn.Linear(ninp, ntoken)
        nn.init.uniform_(self.input_emb.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, src):
        mask = nn.Transformer.generate_square_subsequent_mask(src.shape[0])
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def flat(x):
    if isinstance(x, (tuple, list)):
        return [t for e in x for t in flat(e)]
    return [x]


def match(model, path, args):
    with torch.no_grad():
        expected = flat(model(*args))
    sess = ort_session(path)
    feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), flat(args))}
    got = sess.run(None, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape)
        np.testing.assert_allclose(g, e.numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("rnn_type,tied", [("LSTM", False), ("GRU", True), ("RNN_TANH", False),
                                           ("RNN_RELU", False)])
def test_rnn_model(tmp_onnx, rnn_type, tied):
    torch.manual_seed(0)
    model = RNNModel(rnn_type, NTOKEN, NINP, NHID, NLAYERS, tie_weights=tied).eval()

    def inputs(seq, batch):
        return (torch.randint(0, NTOKEN, (seq, batch)), model.init_hidden(batch))

    args = inputs(*EXPORT_SIZE)
    seq, batch = Dim("seq"), Dim("batch")
    hidden_ds = ({1: batch}, {1: batch}) if rnn_type == "LSTM" else {1: batch}
    ds = {"input": {0: seq, 1: batch}, "hidden": hidden_ds}
    pt2onnx.export(model, args, tmp_onnx, dynamic_shapes=ds)
    if rnn_type == "LSTM":
        assert_same_both_ways(model, args, tmp_onnx, dynamic_shapes=ds)
    mp = onnx.load(tmp_onnx)
    onnx.checker.check_model(mp, full_check=True)
    # hidden state in and out: input ids + 1 or 2 states; logits + states.
    n_states = 2 if rnn_type == "LSTM" else 1
    assert len(mp.graph.input) == 1 + n_states and len(mp.graph.output) == 1 + n_states
    for size in OTHER_SIZES:
        match(model, tmp_onnx, inputs(*size))


def test_transformer_model(tmp_onnx):
    torch.manual_seed(0)
    model = TransformerModel(NTOKEN, NINP, 2, NHID, NLAYERS).eval()
    args = (torch.randint(0, NTOKEN, EXPORT_SIZE),)
    ds = {"src": {0: Dim("seq", max=5000), 1: Dim("batch")}}  # positional table: 5000
    pt2onnx.export(model, args, tmp_onnx, dynamic_shapes=ds)
    assert_same_both_ways(model, args, tmp_onnx, dynamic_shapes=ds)
    onnx.checker.check_model(tmp_onnx, full_check=True)
    for seq, batch in OTHER_SIZES:
        match(model, tmp_onnx, (torch.randint(0, NTOKEN, (seq, batch)),))
