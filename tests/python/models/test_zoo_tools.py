"""``lists --op``, ``convert_hybrid_block`` -> export -> reload, and the precision map on the tier's models."""
import contextlib
import io
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp
from mxnet.amp.__main__ import main
from mxnet.amp.core.support import native_support

import zoo

DTYPES = ("bfloat16", "float16")
pytestmark = pytest.mark.filterwarnings("ignore:convert. MXNet:UserWarning")  # the emulation notice


def _ops(sym):
    return {n["op"] for n in zoo.nodes(sym)} - {"null"}


@pytest.mark.parametrize("model", zoo.params())
def test_lists_op_on_every_op(model, saved):
    """Every op of the saved graph and of its bfloat16 conversion (casts, fused oneDNN ops) has a category
    and a reason per dtype."""
    from mxnet.amp.inference.convert import convert
    from mxnet.amp.cli.convert import load_model
    _, prefix, _ = saved(model)
    sym, args, aux = load_model(prefix + "-symbol.json", prefix + "-0000.params")
    with mx.util.np_shape(model.export == "numpy"):
        low = convert(sym, args, aux, "bfloat16").symbol
        ops = _ops(sym) | _ops(low)
    for op in sorted(ops):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["lists", "--op", op]) == 0
        lines = out.getvalue().splitlines()
        assert lines[0] == op
        rows = {line.split()[0]: line.split(None, 1)[1] for line in lines[1:] if not line.startswith(" " * 12)}
        assert sorted(rows) == ["bfloat16", "float16"], out.getvalue()
        assert all(not line.strip().startswith("unknown") for line in lines)
        assert len(lines) >= 5, out.getvalue()  # a reason under each dtype


def _float32(outputs):
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    arrays = [o.as_nd_ndarray() if isinstance(o, mx.np.ndarray) else o for o in outputs]
    return [(mx.nd.amp_cast(a, dtype="float32") if a.dtype != np.float32 else a).asnumpy() for a in arrays]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", zoo.params())
def test_convert_hybrid_block_export_reload(model, dtype, saved, tmp_path):
    """The converted block, exported and imported again, gives bit-identical outputs."""
    net, _, _ = saved(model)
    batch = model.batch()
    low = amp.convert_hybrid_block(net, batch if len(batch) > 1 else batch[0], dtype, cast_params_offline=True)
    expected = _float32(low(*batch))
    if model.export == "numpy" and dtype == "bfloat16" and native_support(dtype, "cpu"):
        pytest.skip("MXNet 1.9.1's numpy arrays cannot be bfloat16 (numpy-mode export saves numpy arrays), so "
                    "the native bfloat16 weights of a numpy-mode block cannot be exported")
    low.export(str(tmp_path / "low"))
    with open(str(tmp_path / "low-symbol.json")) as f:
        ops = {n["op"] for n in json.load(f)["nodes"]}
    assert {"amp_cast", "amp_round"} & ops  # exported with its casts or rounding (ConvertedBlock.export)
    names = ["data"] if len(batch) == 1 else ["data%d" % i for i in range(len(batch))]
    back = mx.gluon.SymbolBlock.imports(str(tmp_path / "low-symbol.json"), names, str(tmp_path / "low-0000.params"))
    got = _float32(back(*batch))
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        assert np.array_equal(e, g)
    reference = _float32(net(*batch))
    for r, g in zip(reference, got):
        assert float(np.abs(r - g).max()) / float(np.abs(r).max()) < zoo.TOLERANCE[dtype]


def test_precision_map_of_resnet18(saved, tmp_path):
    """The demo's picture for ResNet-18: one row per stage (not ~70 wrapped nodes), counts per precision."""
    from mxnet.amp.graph.rewrite import rewrite_symbol
    from mxnet.amp.cli.plots import plot_precision_map
    from mxnet.amp.graph.precision_map import precision_map, stage_summary
    from mxnet.amp.core.policy import make_policy
    model, = [m for m in zoo.MODELS if m.name == "resnet18_v1" and m.export == "block"]
    net, _, _ = saved(model)
    sym = net._cached_graph[1]
    policy = make_policy("bfloat16")
    low, _ = rewrite_symbol(sym, policy, "cpu")
    nodes = precision_map(low, policy)
    groups = stage_summary(nodes)
    prefix = sym.name.split("_")[0]
    assert [g for g, _ in groups] == ["data", prefix] + ["%s_stage%d" % (prefix, i) for i in range(1, 5)] + [prefix]
    conv_ops = ("Convolution", "amp_convolution")  # amp_convolution: this project's kernel, where it is used
    convs = [sum(c for (op, _), c in ops.items() if op in conv_ops) for _, ops in groups]
    assert convs == [0, 1, 4, 5, 5, 5, 0]  # stages 2-4 have a downsampling convolution
    lp = "low precision (emulated)" if policy.emulates("Convolution", "cpu") else "low precision"
    assert all(role == lp for _, ops in groups for (op, role) in ops
               if op in conv_ops + ("FullyConnected", "amp_fully_connected"))
    # BatchNorm, or this project's (amp_batch_norm) in the training graphs of CPUs that run bfloat16 natively
    bn_roles = {role for _, ops in groups for (op, role) in ops if op in ("BatchNorm", "amp_batch_norm")}
    assert bn_roles == {"dtype-neutral"}
    path = str(tmp_path / "precision_map.png")
    plot_precision_map(nodes, path, "resnet18_v1, bfloat16")
    import matplotlib.image
    height, width, _ = matplotlib.image.imread(path).shape
    assert 300 < height < 1000 and 800 < width < 2000  # seven rows, readable without zooming


def test_gluoncv_detector(tmp_path):
    """A GluonCV SSD (random weights): bfloat16 conversion -> export -> reload gives the same detections, and
    the doctor runs on it. Skipped without gluoncv (not a requirement of this project)."""
    model_zoo = pytest.importorskip("gluoncv.model_zoo", reason="gluoncv is not installed")
    from mxnet.amp import diagnose_block
    mx.random.seed(0)
    net = model_zoo.get_model("ssd_512_mobilenet1.0_voc", pretrained=False, pretrained_base=False)
    net.initialize()  # Gluon's default: its expand_trans_bn layers have vectors Xavier cannot fill
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (1, 3, 256, 256)))
    net(x)
    low = amp.convert_hybrid_block(net, x, "bfloat16", cast_params_offline=True)
    expected = _float32(low(x))
    low.export(str(tmp_path / "ssd"))
    back = mx.gluon.SymbolBlock.imports(str(tmp_path / "ssd-symbol.json"), ["data"],
                                        str(tmp_path / "ssd-0000.params"))
    for e, g in zip(expected, _float32(back(x))):
        assert np.array_equal(e, g)
    report = diagnose_block(net, x, "bfloat16")
    assert report.format().startswith("amp doctor (bfloat16")
