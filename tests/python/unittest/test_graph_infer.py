"""Shape and type inference through the ops the graph rewriter inserts, and the RNN layers that depend on it.

``amp_round`` and the multi-tensor ops must infer like MXNet's ``amp_cast``: a shape known on either side
reaches the other, an unknown dimension stays unknown (an RNN begin state's batch size), and a mismatch is
an error naming the op, never an allocation failure.

RNN tolerances (max abs error / max |float32 output|, gradients likewise): 8 u, with the unit roundoff
u = 2^-8 for bfloat16 and 2^-11 for float16. An RNN with 5 steps rounds its inputs, weights and states once
per step; measured at most 1.8 u (outputs) over every configuration below.
"""
import itertools
import os
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, autograd, gluon
from mxnet.gluon import nn, rnn

U = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
RNN_TOL = 8


def _f32(y):
    """Float32 NumPy copy of any output (native bfloat16 outputs may be in oneDNN's layout)."""
    return mx.nd.amp_cast(y, dtype="float32").asnumpy()


def _rel_err(y, ref):
    return float(np.abs(_f32(y) - ref).max() / max(np.abs(ref).max(), 1e-30))


# ---- the ops alone --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_round_shape_flows_back_from_consumer(dtype):
    w = mx.sym.var("w")
    fc = mx.sym.FullyConnected(mx.sym.var("data"), weight=mx.sym.amp_round(w, dtype=dtype), no_bias=True,
                               num_hidden=5)
    args, outs, _ = fc.infer_shape(data=(2, 3))
    assert dict(zip(fc.list_arguments(), args)) == {"data": (2, 3), "w": (5, 3)}
    assert outs == [(2, 5)]


def test_round_shape_flows_forward_and_unknown_stays_unknown():
    y = mx.sym.amp_round(mx.sym.var("x"), dtype="bfloat16")
    assert y.infer_shape(x=(4, 7))[1] == [(4, 7)]
    args, outs, _ = y.infer_shape_partial()
    assert args == [()] and outs == [()]  # unknown (legacy shape convention), not a guessed or huge shape
    # a partially known shape keeps its unknown dimension (0 in legacy convention), not 4294967295
    args, outs, _ = y.infer_shape_partial(x=(0, 7))
    assert outs == [(0, 7)]


def test_round_shape_mismatch_is_an_error_naming_the_op():
    # x's shape comes from the add, the rounded tensor's from the FullyConnected: amp_round sees both
    x = mx.sym.var("x")
    fc = mx.sym.FullyConnected(mx.sym.var("data"), weight=mx.sym.amp_round(x, dtype="float16"), no_bias=True,
                               num_hidden=5)
    net = mx.sym.Group([fc, mx.sym.elemwise_add(x, mx.sym.var("b"))])
    with pytest.raises(mx.MXNetError, match=r"amp_round: input 0 has shape \[2,3\] but output 0 has shape "
                                            r"\[5,3\]; they must be equal"):
        net.infer_shape(data=(1, 3), b=(2, 3))


def test_round_type_both_directions_and_wrong_dtype():
    y = mx.sym.amp_round(mx.sym.var("x"), dtype="bfloat16")
    args, outs, _ = y.infer_type()
    assert args == [np.float32] and outs == [np.float32]
    with pytest.raises(mx.MXNetError, match=r"amp_round: input 0 must be float32 \(got float16"):
        y.infer_type(x=np.float16)


@pytest.mark.parametrize("op", ["amp_multi_cast", "amp_multi_widest_cast"])
def test_multi_tensor_ops_shape_both_directions(op):
    a, b = mx.sym.var("a"), mx.sym.var("b")
    kwargs = {"dtype": "float16"} if op == "amp_multi_cast" else {}
    outs = getattr(mx.sym, op)(a, b, num_args=2, **kwargs)
    fc = mx.sym.FullyConnected(mx.sym.var("data"), weight=outs[1], no_bias=True, num_hidden=6)
    net = mx.sym.Group([outs[0], fc])
    args, shapes, _ = net.infer_shape(a=(3, 2), data=(1, 4))
    assert dict(zip(net.list_arguments(), args)) == {"a": (3, 2), "b": (6, 4), "data": (1, 4)}
    assert shapes == [(3, 2), (1, 6)]


def test_multi_tensor_ops_type_with_unknown_inputs():
    a, b = mx.sym.var("a"), mx.sym.var("b")
    cast = mx.sym.amp_multi_cast(a, b, num_args=2, dtype="bfloat16")
    args, outs, _ = cast.infer_type_partial(a=np.float32)
    assert args == [np.float32, None] and len(outs) == 2  # b unknown, not an error; outputs the target
    widest = mx.sym.amp_multi_widest_cast(a, b, num_args=2)
    assert widest.infer_type_partial(a=np.float32)[1] == [None, None]  # needs every input
    assert widest.infer_type(a=np.float16, b=np.float32)[1] == [np.float32, np.float32]
    with pytest.raises(mx.MXNetError, match=r"amp_multi_cast: input 0 has dtype int32 \(code 4\); supported"):
        cast.infer_type(a=np.int32, b=np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_emulated_conversion_binds_from_data_shape_alone(dtype):
    """Issue 12, point 2: simple_bind with the data shape only (was std::bad_alloc in amp_round)."""
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name="conv"),
                                num_hidden=3, name="fc")
    rs = np.random.RandomState(0)
    shapes = dict(zip(sym.list_arguments(), sym.infer_shape(data=(1, 3, 8, 8))[0]))
    params = {k: mx.nd.array(rs.randn(*s) * 0.3) for k, s in shapes.items() if k != "data"}
    x = mx.nd.array(rs.randn(1, 3, 8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the emulation warning
        low, low_args, low_aux = amp.convert_model(sym, params, {}, dtype, emulate=True)
    assert "amp_round" in low.tojson()
    ex = low.simple_bind(mx.cpu(), data=(1, 3, 8, 8), grad_req="null")
    assert {k: v.shape for k, v in ex.arg_dict.items()} == shapes
    ex.copy_params_from(low_args, low_aux)
    ex.arg_dict["data"][:] = x
    full = low.bind(mx.cpu(), dict(low_args, data=x))
    expected = full.forward()[0].asnumpy()
    np.testing.assert_array_equal(ex.forward()[0].asnumpy(), expected)
    mod = mx.mod.Module(low, label_names=None)  # the Module API binds from data_shapes the same way
    mod.bind(data_shapes=[("data", (1, 3, 8, 8))], for_training=False)
    mod.set_params(low_args, low_aux)
    mod.forward(mx.io.DataBatch([x]))
    np.testing.assert_array_equal(mod.get_outputs()[0].asnumpy(), expected)


# ---- RNN layers -----------------------------------------------------------------------------------------
_CELLS = {"lstm": lambda **k: rnn.LSTM(8, **k), "gru": lambda **k: rnn.GRU(8, **k),
          "rnn_tanh": lambda **k: rnn.RNN(8, activation="tanh", **k),
          "rnn_relu": lambda **k: rnn.RNN(8, activation="relu", **k)}
# (bidirectional, num_layers)
_SHAPES = [(False, 1), (True, 2)]
_CONFIGS = list(itertools.product(_CELLS, ["NTC", "TNC"], _SHAPES, [False, True]))
_IDS = ["%s-%s-%s-%s" % (c, l, "bi2" if b else "uni1", "state" if s else "nostate")
        for c, l, (b, _), s in _CONFIGS]


class _Seq(gluon.HybridBlock):
    """RNN layer then a per-step Dense; the begin state is given as inputs or made by the layer."""

    def __init__(self, cell, layout, bidirectional, num_layers, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.rnn = _CELLS[cell](num_layers=num_layers, layout=layout, bidirectional=bidirectional,
                                    input_size=4)
            self.fc = nn.Dense(3, flatten=False)

    def hybrid_forward(self, F, x, *states):
        out = self.rnn(x, list(states))[0] if states else self.rnn(x)
        return self.fc(out)


def _build(cfg):
    cell, layout, (bidirectional, layers), _ = cfg
    mx.random.seed(0)
    net = _Seq(cell, layout, bidirectional, layers)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def _inputs(net, cfg):
    layout, with_state = cfg[1], cfg[3]
    rs = np.random.RandomState(1)
    x = mx.nd.array(rs.randn(*((2, 5, 4) if layout == "NTC" else (5, 2, 4))))
    return [x] + (net.rnn.begin_state(2) if with_state else [])


def _emulate(dtype):
    """float16 has no CPU kernels: emulated; bfloat16: this machine's default (native with AVX-512)."""
    return True if dtype == "float16" else None


def _reference(cfg):
    net = _build(cfg)
    xs = _inputs(net, cfg)
    x = xs[0].copy()
    x.attach_grad()
    with autograd.record():
        y = net(x, *xs[1:])
    y.backward()
    params = {k: p.data().copy() for k, p in net._collect_params_with_prefix().items()}
    grads = {k: p.grad().asnumpy() for k, p in net._collect_params_with_prefix().items()}
    return net, xs, y.asnumpy(), params, grads


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cfg", _CONFIGS, ids=_IDS)
def test_hybridized_rnn_trains_under_amp_init(cfg, dtype):
    _, xs, y0, params, grads0 = _reference(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "amp.init() was called after ... blocks were created": the reference
        amp.init(dtype, emulate=_emulate(dtype))
    net = _build(cfg)
    for k, p in net._collect_params_with_prefix().items():
        p.set_data(params[k])
    x = xs[0].copy()
    x.attach_grad()
    with autograd.record():
        y = net(x, *xs[1:])
    y.backward()
    assert y.shape == y0.shape
    assert _rel_err(y, y0) <= RNN_TOL * U[dtype]
    for k, p in net._collect_params_with_prefix().items():
        g = _f32(p.grad())
        assert np.isfinite(g).all(), k
        assert np.abs(g - grads0[k]).max() <= RNN_TOL * U[dtype] * max(np.abs(grads0[k]).max(), 1e-3), k


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cfg", _CONFIGS, ids=_IDS)
def test_rnn_inference_conversion(cfg, dtype, tmp_path):
    """convert_hybrid_block, and convert_model of the exported checkpoint bound from the input shapes."""
    net, xs, y0, _, _ = _reference(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        low = amp.convert_hybrid_block(net, xs, dtype, emulate=_emulate(dtype))
        assert _rel_err(low(*xs), y0) <= RNN_TOL * U[dtype]
        net(*xs)
        net.export(str(tmp_path / "rnn"))
        sym, args, aux = mx.model.load_checkpoint(str(tmp_path / "rnn"), 0)
        sym, args, aux = amp.convert_model(sym, args, aux, dtype, emulate=_emulate(dtype))
    names = [n for n in sym.list_arguments() if n not in args]
    ex = sym.simple_bind(mx.cpu(), grad_req="null", **{n: x.shape for n, x in zip(names, xs)})
    ex.copy_params_from(args, aux)
    for n, x in zip(names, xs):
        ex.arg_dict[n][:] = x
    assert _rel_err(ex.forward()[0], y0) <= RNN_TOL * U[dtype]


def _onnx_supported(cfg):
    """MXNet 1.9.1's mx2onnx: bidirectional only for single-layer LSTM; no begin state inputs."""
    cell, _, (bidirectional, layers), with_state = cfg
    return not with_state and (not bidirectional or (cell == "lstm" and layers == 1))


_ONNX_CONFIGS = [c for c in _CONFIGS if _onnx_supported(c)] + [("lstm", "TNC", (True, 1), False)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cfg", _ONNX_CONFIGS, ids=lambda c: "%s-%s-%s%d" % (c[0], c[1], "bi" if c[2][0] else
                                                                             "uni", c[2][1]))
def test_converted_rnn_onnx_export_runs(cfg, dtype, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    net, xs, y0, _, _ = _reference(cfg)
    net.export(str(tmp_path / "rnn"))
    sym, args, aux = mx.model.load_checkpoint(str(tmp_path / "rnn"), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sym, args, aux = amp.convert_model(sym, args, aux, dtype, fuse=False, emulate=_emulate(dtype))
    path = amp.export_onnx(sym, (args, aux), [x.shape for x in xs], str(tmp_path / "rnn.onnx"))
    sess = ort.InferenceSession(path)
    out = sess.run(None, {sess.get_inputs()[0].name: xs[0].asnumpy()})[0]
    assert out.dtype == np.float32
    assert float(np.abs(out - y0).max() / np.abs(y0).max()) <= RNN_TOL * U[dtype]
    assert os.path.getsize(path) > 0


# ---- installing it: the run-time check of libmxnet's std::function convention, idempotence, fallback -------
_CHECK = (
    "import json, mxnet as mx\n"
    "from mxnet.amp.core import library, ops\n"
    "y = mx.sym.amp_round(mx.sym.var('x'), dtype='bfloat16')\n"
    "print(json.dumps({'state': library.GRAPH_INFERENCE['state'],\n"
    "                  'convention': library.GRAPH_INFERENCE['convention'],\n"
    "                  'partial': y.infer_shape_partial(x=(0, 7))[1][0]}))\n")


def _child(code, **env):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **env))
    return proc


def _libmxnet_built_by_gcc4():
    with open(mx.base._LIB._name, "rb") as f:
        return b"GCC: (GNU) 4." in f.read()


def test_the_wheel_invoker_convention_is_found_at_run_time():
    import ctypes
    from mxnet.amp.core import library
    code, text = library.invoker_convention(ctypes.CDLL(library.LIBRARY_PATH))
    # independent evidence: the wheels' .comment names GCC 4.8.5, whose invokers take pointers by value
    assert (code, text) == ((1, "GCC 4 (pointers by value)") if _libmxnet_built_by_gcc4()
                            else (2, "GCC >= 5 (pointers by reference)"))
    # "already installed" once an earlier test re-imported the library module: the first install was this process's
    assert library.GRAPH_INFERENCE["convention"] == text
    assert library.GRAPH_INFERENCE["state"] in ("installed", "already installed")


def test_the_invoker_classification():
    import ctypes
    from mxnet.amp.core import library
    classify = ctypes.CDLL(library.LIBRARY_PATH).mxnet_amp_classify_invoker_argument
    classify.restype, classify.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]
    target, other = ctypes.c_double(1.0), ctypes.c_double(2.0)
    expected = ctypes.addressof(target)
    slot = ctypes.c_void_p(expected)  # a reference to the pointer: what GCC >= 5 passes
    assert classify(expected, expected) == 1
    assert classify(ctypes.addressof(slot), expected) == 2
    assert classify(ctypes.addressof(other), expected) == 0
    assert classify(None, expected) == 0 and classify(expected, None) == 0


def test_an_inconclusive_check_refuses_with_the_fallback(monkeypatch):
    import ctypes
    from mxnet.amp.core import library
    monkeypatch.setattr(library, "invoker_convention", lambda lib: (0, "the probe's invoker was called 0 time(s)"))
    monkeypatch.delenv(library.GRAPH_INFER_ENV, raising=False)
    with pytest.raises(ImportError) as err:
        library.install_graph_inference(ctypes.CDLL(library.LIBRARY_PATH))
    message = str(err.value)
    assert "cannot tell how" in message and "called 0 time(s)" in message
    assert "Set MXNET_AMP_GRAPH_INFER=0 to load mxnet.amp without it" in message
    assert all(feature in message for feature in library.WITHOUT_GRAPH_INFER)


def test_install_is_idempotent_in_one_process():
    import ctypes
    from mxnet.amp.core import library
    before = dict(library.GRAPH_INFERENCE)
    library.install_graph_inference(ctypes.CDLL(library.LIBRARY_PATH))
    assert library.GRAPH_INFERENCE == dict(before, state="already installed")
    y = mx.sym.amp_round(mx.sym.var("x"), dtype="bfloat16")
    assert y.infer_shape_partial(x=(0, 7))[1] == [(0, 7)]  # still MXNet-native, once


def test_ops_loaded_by_the_user_first_still_get_graph_inference():
    # the user's own mx.library.load (or a retry after a failed import) registers the ops before mxnet.amp
    from mxnet.amp.core import library
    code = "import mxnet as mx\nmx.library.load(%r, verbose=False)\n" % library.LIBRARY_PATH + _CHECK
    proc = _child(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert result["state"] == "installed" and result["partial"] == [0, 7]


def test_without_graph_inference_the_named_features_fail():
    proc = _child(_CHECK, MXNET_AMP_GRAPH_INFER="0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MXNET_AMP_GRAPH_INFER=0: graph inference of the library's ops is lib_api's" in proc.stderr
    result = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
    assert result["state"] == "skipped"
    # lib_api's inference: the unknown dimension comes back as the "known" 4294967295 (-1 as a signed int)
    assert result["partial"] in ([-1, 7], [4294967295, 7]), result
