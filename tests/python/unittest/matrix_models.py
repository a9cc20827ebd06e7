"""The models, data and training loop of the training matrix (test_training_matrix.py and its GPU twin).

Every row is a tiny model with its own deterministic synthetic data and loss(es). ``train`` runs one cell:
the same seeds, initial weights and batches in float32 or under ``amp.init``. Also runnable as a script,
``python matrix_models.py ROW HYBRIDIZE DTYPE EMULATE``, which is how cells that may abort the process run in
a child.
"""
import json
import math
import sys

import mxnet as mx
import numpy as np
from mxnet import amp, autograd, gluon
from mxnet.gluon import nn, rnn

SEED = 7
STEPS = 8
BATCH = 16


def _f32(y):
    """Float32 NumPy copy (native bfloat16 arrays may sit in oneDNN's layout, which asnumpy refuses)."""
    if isinstance(y, mx.np.ndarray):
        y = y.as_nd_ndarray()
    return mx.nd.amp_cast(y.reshape((-1,)), dtype="float32").asnumpy()


class _CNN(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(nn.Conv2D(8, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                          nn.MaxPool2D(2), nn.Flatten(), nn.Dense(4))

    def hybrid_forward(self, F, x):
        return self.body(x)


class _Decoder(gluon.HybridBlock):
    """Code -> Dense -> two stride-2 Conv2DTranspose -> an 8x8 image."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.fc = nn.Dense(32)
            self.up1 = nn.Conv2DTranspose(8, 4, strides=2, padding=1)
            self.up2 = nn.Conv2DTranspose(1, 4, strides=2, padding=1)

    def hybrid_forward(self, F, z):
        h = F.relu(self.fc(z)).reshape((0, 8, 2, 2))
        return self.up2(F.relu(self.up1(h)))


class _EmbedDense(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = nn.Embedding(20, 16)
            self.fc = nn.Dense(4)

    def hybrid_forward(self, F, tokens):
        return self.fc(F.mean(self.embed(tokens), axis=1))


class _Recurrent(gluon.HybridBlock):
    def __init__(self, cell, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.rnn = (rnn.LSTM if cell == "lstm" else rnn.GRU)(16, layout="NTC", input_size=4)
            self.fc = nn.Dense(2)

    def hybrid_forward(self, F, x):
        return self.fc(F.mean(self.rnn(x), axis=1))


#: The attention rows' dropout rate. Their graphs keep a Dropout node (Gluon's Dropout block with rate 0 would
#: leave none), which amp.init routes to the library's amp_dropout on bfloat16 CPUs, whose random stream is not
#: MXNet's: at rate 0 float32's losses stay comparable step by step (test_dropout.py checks that training drops).
DROPOUT = 0.0


class _Attention(gluon.HybridBlock):
    """Embedding, single-head self-attention with a Dropout node, residual + LayerNorm, dense head."""

    def __init__(self, units=16, **kwargs):
        super().__init__(**kwargs)
        self._scale = 1.0 / math.sqrt(units)
        with self.name_scope():
            self.embed = nn.Embedding(20, units)
            self.qkv = nn.Dense(3 * units, flatten=False)
            self.norm = nn.LayerNorm()
            self.fc = nn.Dense(4)


class _LegacyTransformer(_Attention):
    """Legacy mode: batch_dot, softmax."""

    def hybrid_forward(self, F, tokens):
        h = self.embed(tokens)
        q, k, v = F.split(self.qkv(h), num_outputs=3, axis=2)
        att = F.Dropout(F.softmax(F.batch_dot(q, k, transpose_b=True) * self._scale, axis=-1), p=DROPOUT)
        h = self.norm(h + F.batch_dot(att, v))
        return self.fc(F.mean(h, axis=1))


class _NumpyTransformer(_Attention):
    """Numpy mode: np.matmul with np.swapaxes, np.einsum, npx.softmax."""

    def hybrid_forward(self, F, tokens):
        h = self.embed(tokens)
        q, k, v = F.np.split(self.qkv(h), 3, axis=2)
        att = F.npx.dropout(F.npx.softmax(F.np.matmul(q, F.np.swapaxes(k, 1, 2)) * self._scale, axis=-1), p=DROPOUT)
        h = self.norm(h + F.np.einsum("bqk,bkd->bqd", att, v))
        return self.fc(F.np.mean(h, axis=1))


class _Interleaved(gluon.HybridBlock):
    """Two-head self-attention through _contrib_interleaved_matmul_selfatt_qk / _valatt (TNC layout)."""

    def __init__(self, units=16, heads=2, **kwargs):
        super().__init__(**kwargs)
        self._heads = heads
        with self.name_scope():
            self.embed = nn.Embedding(20, units)
            self.qkv = nn.Dense(3 * units, flatten=False)
            self.fc = nn.Dense(4)

    def hybrid_forward(self, F, tokens_tn):
        qkv = self.qkv(self.embed(tokens_tn))
        att = F.softmax(F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=self._heads), axis=-1)
        h = F.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=self._heads)
        return self.fc(F.mean(h, axis=0))


class _Shared(gluon.HybridBlock):
    """One Dense applied three times (recursive), and a second Dense sharing its parameters."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.inp = nn.Dense(16)
            self.step = nn.Dense(16, in_units=16)
            self.tied = nn.Dense(16, in_units=16, params=self.step.params)
            self.fc = nn.Dense(4)

    def hybrid_forward(self, F, x):
        h = F.tanh(self.inp(x))
        for _ in range(3):
            h = F.tanh(self.step(h))
        return self.fc(F.tanh(self.tied(h)))


class _TwoHeads(gluon.HybridBlock):
    """A trunk with a classification head and a regression head."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.Dense(32, activation="relu")
            self.cls = nn.Dense(4)
            self.reg = nn.Dense(1)

    def hybrid_forward(self, F, x):
        h = self.trunk(x)
        return self.cls(h), self.reg(h)


# ---- data: a fixed list of batches per row --------------------------------------------------------------
def _images(rs):
    x = rs.randn(BATCH, 1, 8, 8).astype(np.float32)
    return x, (x[:, 0, :4].mean(axis=(1, 2)) > 0).astype(np.float32) + 2 * (x[:, 0, 4:].mean(axis=(1, 2)) > 0)


def _codes(rs):
    z = rs.randn(BATCH, 6).astype(np.float32)
    grid = np.linspace(-1, 1, 8, dtype=np.float32)
    img = np.tanh(z[:, 0, None, None] * grid[None, :, None] + z[:, 1, None, None] * grid[None, None, :])
    return z, img[:, None]


def _tokens(rs):
    t = rs.randint(0, 20, (BATCH, 6)).astype(np.float32)
    return t, (t[:, 0] % 4).astype(np.float32)


def _sequences(rs):
    x = rs.randn(BATCH, 6, 4).astype(np.float32)
    return x, (x[:, :, 0].sum(axis=1) > 0).astype(np.float32)


def _tokens_tn(rs):
    t, y = _tokens(rs)
    return np.ascontiguousarray(t.T), y


def _features(rs):
    x = rs.randn(BATCH, 8).astype(np.float32)
    return x, ((x[:, 0] > 0) + 2 * (x[:, 1] > 0)).astype(np.float32)


def _features_two(rs):
    x, y = _features(rs)
    return x, (y, x[:, 2:3] * x[:, 3:4])


def _ce(net, x, y):
    return [gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y).mean()]


def _l2(net, x, y):
    return [gluon.loss.L2Loss()(net(x), y).mean()]


def _two_losses(net, x, y):
    cls, reg = net(x)
    return [gluon.loss.SoftmaxCrossEntropyLoss()(cls, y[0]).mean(), gluon.loss.L2Loss()(reg, y[1]).mean()]


class Row:
    """One row of the matrix: model, data, losses, learning rate, and whether it builds in numpy mode."""

    def __init__(self, build, data, losses, lr=0.02, numpy_mode=False):
        self.build, self.data, self.losses, self.lr, self.numpy_mode = build, data, losses, lr, numpy_mode


ROWS = {
    "cnn_batchnorm": Row(_CNN, _images, _ce),
    "deconv_decoder": Row(_Decoder, _codes, _l2),
    "embedding_dense": Row(_EmbedDense, _tokens, _ce),
    "lstm": Row(lambda: _Recurrent("lstm"), _sequences, _ce),
    "gru": Row(lambda: _Recurrent("gru"), _sequences, _ce),
    "legacy_transformer": Row(_LegacyTransformer, _tokens, _ce),
    "numpy_transformer": Row(_NumpyTransformer, _tokens, _ce, numpy_mode=True),
    "interleaved_attention": Row(_Interleaved, _tokens_tn, _ce),
    "shared_weights": Row(_Shared, _features, _ce),
    "two_losses": Row(_TwoHeads, _features_two, _two_losses),
}


def _to_arrays(value, ctx, numpy_mode):
    if isinstance(value, tuple):
        return tuple(_to_arrays(v, ctx, numpy_mode) for v in value)
    return mx.np.array(value, ctx=ctx) if numpy_mode else mx.nd.array(value, ctx=ctx)


def train(row, hybridize, dtype=None, emulate=None, ctx=None, steps=STEPS):
    """Train ``row`` for ``steps`` Adam steps; return the per-step losses (sum over the row's losses).

    ``dtype`` None trains in float32; otherwise under ``amp.init(dtype, emulate=emulate)`` with
    ``amp.init_trainer`` and ``amp.scale_loss``. AMP and numpy mode are switched off again on return.
    """
    ctx = ctx or mx.cpu()
    spec = ROWS[row]
    try:
        if spec.numpy_mode:
            mx.npx.set_np()
        if dtype is not None:
            amp.init(dtype, emulate=emulate)
        mx.random.seed(SEED)
        rs = np.random.RandomState(SEED)
        batches = [tuple(_to_arrays(v, ctx, spec.numpy_mode) for v in spec.data(rs)) for _ in range(2)]
        net = spec.build()
        net.initialize(mx.init.Xavier(), ctx=ctx)
        if hybridize:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": spec.lr})
        if dtype is not None:
            amp.init_trainer(trainer)
        losses = []
        for step in range(steps):
            x, y = batches[step % len(batches)]
            with autograd.record():
                parts = spec.losses(net, x, y)
                if dtype is None:
                    autograd.backward(parts)
                else:
                    with amp.scale_loss(parts, trainer) as scaled:
                        autograd.backward(scaled)
            trainer.step(1)
            losses.append(float(sum(_f32(p).sum() for p in parts)))
        return losses
    finally:
        amp.reset()
        mx.npx.reset_np()


if __name__ == "__main__":
    _row, _hybridize, _dtype, _emulate = sys.argv[1:5]
    print(json.dumps(train(_row, _hybridize == "1", None if _dtype == "float32" else _dtype,
                           {"1": True, "auto": None}[_emulate])))
