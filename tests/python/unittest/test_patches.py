"""``amp.reset()`` puts back everything mxnet.amp changed outside its own objects (:mod:`mxnet.amp.base.patches`).

The strongest check runs in a fresh process: MXNet's classes, operator front ends and ONNX registry are taken
*before* ``import mxnet.amp``, then everything that patches runs (the import, ``amp.init``, ``init_trainer`` on
a trainer and on an optimizer, a conversion, an ONNX export), then ``amp.reset()``, and every attribute must be
the very object it was.
"""
import json
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon

from mxnet.amp.base.patches import PATCHES, Patches

_SNAPSHOT = r"""
import json, sys, types
import mxnet as mx
from mxnet.gluon import Trainer, block
from mxnet.module import Module
from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
from mxnet.symbol.symbol import Symbol

CLASSES = {"Block": block.Block, "HybridBlock": block.HybridBlock, "SymbolBlock": block.SymbolBlock,
           "Symbol": Symbol, "Module": Module, "Trainer": Trainer, "MXNetGraph": MXNetGraph}
FAMILIES = ("mxnet.ndarray", "mxnet.numpy", "mxnet.numpy_extension", "mxnet.symbol")

def snapshot():
    found = {}
    for name, cls in CLASSES.items():
        found.update({"%s.%s" % (name, k): id(v) for k, v in vars(cls).items()})
    for modname, module in list(sys.modules.items()):
        if module is not None and modname.startswith(FAMILIES):
            found.update({"%s.%s" % (modname, k): id(v) for k, v in vars(module).items()
                          if isinstance(v, types.FunctionType)})
    for opset, ops in MXNetGraph.registry_.items():
        found.update({"registry_[%s][%s]" % (opset, op): id(f) for op, f in ops.items()})
    found["registry_ opsets"] = sorted(MXNetGraph.registry_)
    return found

# the library loaded before anything of mxnet.amp runs (through mx.library.load, which regenerates MXNet's operator
# front ends: mxnet.amp then finds its ops registered and loads nothing)
import importlib.util, os
package = os.path.dirname(importlib.util.find_spec("mxnet.amp").origin)
mx.library.load(os.environ.get("MXNET_AMP_LIBRARY") or os.path.join(package, "_lib", "libmxnet_amp.so"), False)
before = snapshot()
from mxnet import amp, autograd, gluon
amp.init("bfloat16")
net = gluon.nn.Dense(4, in_units=3)
net.initialize()
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
amp.init_trainer(trainer)
x = mx.nd.ones((2, 3))
with autograd.record():
    loss = net(x).sum()
    with amp.scale_loss(loss, trainer) as scaled:
        scaled.backward()
trainer.step(2)
optimizer = mx.optimizer.SGD(learning_rate=0.1)
amp.init_trainer(optimizer)
low = amp.convert_hybrid_block(net, x, "float16", cast_params_offline=True)
amp.export_onnx(low, None, [x.shape], sys.argv[1])
during = snapshot()
amp.reset()
after = snapshot()
changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
patched = sorted(k for k in set(before) | set(during) if before.get(k) != during.get(k))
print(json.dumps({"changed": changed, "patched": patched}))
"""


def test_reset_restores_every_patched_attribute_by_identity(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _SNAPSHOT, str(tmp_path / "m.onnx")], capture_output=True,
                          text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["changed"] == [], "amp.reset() left these changed: %s" % result["changed"]
    # the check sees the patches: a wrapped front end, the graph hooks, Module's methods, the ONNX registry
    patched = set(result["patched"])
    for expected in ("HybridBlock._get_graph", "Block.__call__", "HybridBlock.export", "Symbol.bind",
                     "Symbol.simple_bind", "Module.update", "Module.backward", "MXNetGraph.create_onnx_graph_proto",
                     "registry_[12][amp_cast]", "registry_[17][LayerNorm]"):
        assert expected in patched, (expected, sorted(patched)[:20])
    assert any(k.endswith(".FullyConnected") and k.startswith("mxnet.ndarray") for k in patched)
    assert not any(k.startswith("Trainer.") for k in patched)  # trainers are changed on the instance only


def test_reset_empties_the_record():
    amp.init("float16")
    amp.init_trainer(mx.optimizer.SGD())
    groups = {p.group for p in PATCHES.entries()}
    assert {"amp.init", "init_trainer(optimizer)"} <= groups
    amp.reset()
    assert PATCHES.entries() == ()


class _Owner:
    attr = "class value"


def test_patches_record_attributes_and_items_and_undo_newest_first():
    patches = Patches()
    registry = {"kept": 1}
    patches.set_attr(_Owner, "attr", "one", "g1")
    patches.set_attr(_Owner, "added", "two", "g1")
    patches.set_item(registry, "kept", 2, "g2")
    patches.set_item(registry, "new", 3, "g2")
    patches.set_attr(_Owner, "attr", "three", "g2")
    assert _Owner.attr == "three" and registry == {"kept": 2, "new": 3} and patches.holds("g1")
    assert patches.restore("g2") == 3
    assert _Owner.attr == "one" and registry == {"kept": 1} and not patches.holds("g2")
    assert patches.restore() == 2
    assert _Owner.attr == "class value" and not hasattr(_Owner, "added") and patches.entries() == ()


def _dense():
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(mx.init.Constant(0.5))
    return net


def test_a_gluon_trainer_initialised_before_reset_keeps_its_loss_scaling():
    amp.init("float16")
    net = _dense()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0})
    scaler = amp.init_trainer(trainer)
    amp.reset()
    x = mx.nd.ones((1, 3))
    with autograd.record():
        loss = net(x).sum()
        with amp.scale_loss(loss, trainer) as scaled:
            scaled.backward()
    assert net.weight.grad().asnumpy()[0, 0] == scaler.scale  # the scaled loss's gradient
    assert trainer.step(1)  # unscaled by the wrapped step: w = 0.5 - 1.0 * 1
    np.testing.assert_array_equal(net.weight.data().asnumpy(), -0.5)
    with autograd.record():
        loss = net(x).sum() * np.inf
        with amp.scale_loss(loss, trainer) as scaled:
            scaled.backward()
    assert not trainer.step(1)  # still skipped on inf
    np.testing.assert_array_equal(net.weight.data().asnumpy(), -0.5)


def _module():
    out = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    mod = mx.mod.Module(out, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (1, 3))])
    mod.init_params(mx.init.Constant(0.5))
    return mod


def test_a_module_optimizer_needs_init_trainer_again_after_reset():
    original_update = mx.mod.Module.update
    optimizer = mx.optimizer.SGD(learning_rate=1.0, rescale_grad=1.0)
    amp.init_trainer(optimizer, amp.LossScaler(init_scale=4.0, dynamic=False))
    assert mx.mod.Module.update is not original_update
    mod = _module()
    mod.init_optimizer(optimizer=optimizer)
    amp.reset()
    assert mx.mod.Module.update is original_update
    with pytest.raises(RuntimeError, match=r"amp.reset\(\) put Module.update back .* amp.init_trainer\(optimizer\)"):
        with amp.scale_loss(mx.nd.ones((1,)), optimizer):
            pass
    with pytest.raises(RuntimeError, match="call amp.init_trainer"):
        amp.unscale(optimizer)
    amp.init_trainer(optimizer)  # again: the wrappers come back, the scaler is kept
    assert mx.mod.Module.update is not original_update and amp.get_loss_scaler(optimizer).scale == 4.0
    batch = mx.io.DataBatch([mx.nd.ones((1, 3))])
    mod.forward(batch, is_train=True)
    with amp.scale_loss(mx.nd.ones((1, 2)), optimizer) as scaled:  # the output's head gradient
        mod.backward([scaled])
    assert mod._exec_group.grad_arrays[0][0].asnumpy()[0, 0] == 4.0  # scaled
    mod.update()  # the scale divided out: one step of size 1 on the weight
    np.testing.assert_array_equal(mod.get_params()[0]["fc_weight"].asnumpy(), -0.5)
