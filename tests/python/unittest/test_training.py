"""Real training under ``amp.init('bfloat16')`` on CPU: a small CNN and a small attention model, legacy and
numpy mode. Where the CPU has no bf16 kernels the low precision ops are emulated (same numerics)."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon
from mxnet.gluon import nn


class _CNN(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(8, 3, padding=1, use_bias=False)
            self.bn = nn.BatchNorm()
            self.pool = nn.MaxPool2D(2)
            self.fc = nn.Dense(10)

    def hybrid_forward(self, F, x):
        relu = F.npx.relu if mx.util.is_np_array() else F.relu
        return self.fc(self.pool(relu(self.bn(self.conv(x)))))


class _Attention(gluon.HybridBlock):
    """Embedding, LayerNorm, single-head attention with batch_dot + softmax, dense head."""

    def __init__(self, vocab=20, units=16, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = nn.Embedding(vocab, units)
            self.norm = nn.LayerNorm()
            self.qkv = nn.Dense(3 * units, flatten=False)
            self.out = nn.Dense(2)

    def hybrid_forward(self, F, tokens):
        h = self.norm(self.embed(tokens))
        if mx.util.is_np_array():
            q, k, v = F.np.split(self.qkv(h), 3, axis=-1)
            att = F.npx.softmax(F.npx.batch_dot(q, k, transpose_b=True) * 0.25, axis=-1)
            return self.out(F.np.mean(F.npx.batch_dot(att, v), axis=1))
        q, k, v = F.split(self.qkv(h), num_outputs=3, axis=-1)
        att = F.softmax(F.batch_dot(q, k, transpose_b=True) * 0.25, axis=-1)
        return self.out(F.mean(F.batch_dot(att, v), axis=1))


def _digits_batch():
    from sklearn.datasets import load_digits
    d = load_digits()
    return (d.images[:256] / 16.0).astype(np.float32)[:, None], d.target[:256].astype(np.float32)


def _token_batch():
    rs = np.random.RandomState(0)
    tokens = rs.randint(0, 20, size=(128, 6)).astype(np.float32)
    labels = (tokens[:, 0] > tokens[:, -1]).astype(np.float32)  # learnable from the tokens
    return tokens, labels


def _train(make_net, data, numpy_mode, hybridize, steps=30, lr=0.1):
    if numpy_mode:
        mx.npx.set_np()
    amp.init("bfloat16")
    mx.random.seed(1)
    net = make_net()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": lr * 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    array = mx.np.array if numpy_mode else mx.nd.array
    x, y = array(data[0]), array(data[1])
    losses = []
    for _ in range(steps):
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, y)
        loss.backward()
        trainer.step(len(data[1]))
        losses.append(float(loss.mean().item() if numpy_mode else loss.mean().asscalar()))
    if hybridize:  # the graph really runs bf16 casts around its low precision ops
        graph = json.loads(net._cached_graph[1].tojson(remove_amp_cast=False))
        assert any(n["op"] in ("amp_cast", "amp_multi_cast", "amp_round") and n["attrs"]["dtype"] == "bfloat16"
                   for n in graph["nodes"])
    return losses, out


@pytest.mark.parametrize("numpy_mode", [False, True])
@pytest.mark.parametrize("hybridize", [True, False])
def test_cnn_trains_in_bfloat16(numpy_mode, hybridize):
    losses, out = _train(_CNN, _digits_batch(), numpy_mode, hybridize)
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("numpy_mode", [False, True])
def test_attention_model_trains_in_bfloat16(numpy_mode):
    losses, _ = _train(_Attention, _token_batch(), numpy_mode, hybridize=True, steps=40)
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.7 * losses[0], losses
