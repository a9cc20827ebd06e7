"""The one place that loads libmxnet_amp.so (the C++ extension library) and names its ops.

The library is loaded once per process at ``import mxnet.amp``: from ``$MXNET_AMP_LIBRARY`` when that
is set, else from ``_lib/libmxnet_amp.so`` next to this file (built by ``bash tools/build_dev.sh`` or
by ``pip install .``). A second load of the same file (or of another copy when the ops are already
registered) is skipped: loading twice would half-register the ops in MXNet.

The matrix-product ops (``amp_fully_connected``, ``amp_batch_dot``, ``amp_matmul``) run oneDNN 3 kernels
from a second library, ``_lib/libmxnet_amp_onednn.so``, which libmxnet_amp.so opens on first use (it
links the ``libdnnl.so.3`` of the ``onednn-cpu-gomp`` wheel). :func:`onednn` says whether that worked;
``MXNET_AMP_ONEDNN=0`` in the environment keeps it closed (MXNet's own kernels are used then).

All functions take NDArrays (legacy ``mx.nd.NDArray`` or numpy-mode ``mx.np.ndarray``) that live on one
context, and return arrays of the kind of the first one.
"""
import ctypes
import functools
import logging
import os

import mxnet as mx
import numpy as np
from mxnet.ndarray._internal import _imperative_invoke

__all__ = ["SUPPORTED_MXNET", "check_mxnet_version", "OP_NAMES", "ONEDNN_OPS", "LIBRARY_PATH", "UPDATE_RULES", "GRAPH_INFER_ENV", "GRAPH_INFERENCE",
           "WITHOUT_GRAPH_INFER", "ONEDNN_BF16_ISAS", "invoker_convention", "install_graph_inference",
           "CACHE_FIELDS", "cpu_isa", "cuda_kernels", "onednn", "onednn_bf16", "onednn_cache", "onednn_threads",
           "multi_cast", "widest_cast", "unscale_and_check", "multi_update", "scaler_update"]

#: The library's oneDNN 3 matrix products and convolution (they need libmxnet_amp_onednn.so, see :func:`onednn`).
ONEDNN_OPS = ("amp_fully_connected", "amp_batch_dot", "amp_matmul", "amp_convolution", "amp_deconvolution")
OP_NAMES = ("amp_multi_cast", "amp_multi_widest_cast", "amp_multi_unscale_check", "amp_round", "amp_multi_update",
            "amp_scaler_update", "amp_batch_norm") + ONEDNN_OPS
#: Update rules of :func:`multi_update`, with the float32 states each parameter carries.
UPDATE_RULES = {"sgd": (), "sgd_mom": ("momentum",), "adam": ("mean", "var"), "adamw": ("mean", "var")}

#: The one MXNet release the library is built for (lib_api 11, and the wheels' C++ ABI).
SUPPORTED_MXNET = "1.9.1"


def _mxnet_distribution():
    """Which installed distribution provides the ``mxnet`` package (mxnet, mxnet-cu117, ...), if pip knows."""
    import importlib.metadata as metadata
    try:
        names = [n for n in metadata.packages_distributions().get("mxnet") or [] if n != "mxnet-amp"]
    except Exception:  # a broken metadata directory must not hide the version error
        names = []
    return ", ".join("%s %s" % (n, metadata.version(n)) for n in sorted(set(names))) or "no pip distribution"


def check_mxnet_version(version=None):
    """Refuse an MXNet other than :data:`SUPPORTED_MXNET`, naming what is installed.

    Raises
    ------
    ImportError
        ``mx.__version__`` (or ``version``) is not 1.9.1.
    """
    version = mx.__version__ if version is None else version
    if version != SUPPORTED_MXNET:
        raise ImportError(
            "mxnet.amp supports MXNet %s only (the mxnet or mxnet-cu1xx %s wheels, or a %s source build); "
            "installed: MXNet %s (%s) at %s" % (SUPPORTED_MXNET, SUPPORTED_MXNET, SUPPORTED_MXNET, version,
                                                 _mxnet_distribution(), os.path.dirname(mx.__file__)))


check_mxnet_version()

_DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libmxnet_amp.so")
_BF16 = np.dtype([("bfloat16", np.uint16)])
_TARGET_DTYPES = ("float32", "float16", "bfloat16")


def _library_path():
    path = os.environ.get("MXNET_AMP_LIBRARY") or _DEFAULT_PATH
    return os.path.realpath(path)


def _registered_ops():
    return set(mx.operator.get_all_registered_operators())


def _load(path):
    """Load the library at path unless its ops are already registered, then install its graph inference
    (once per process, whoever loaded the ops); returns the path used."""
    missing = [name for name in OP_NAMES if name not in _registered_ops()]
    if missing and len(missing) != len(OP_NAMES):
        raise ImportError(
            "mxnet.amp: MXNet already has some but not all ops of libmxnet_amp (missing: %s); "
            "another version of the library was loaded earlier in this process" % ", ".join(missing))
    if not os.path.isfile(path):
        raise ImportError(
            "mxnet.amp: C++ extension library not found at %s. Build it with "
            "`bash tools/build_dev.sh` (dev tree) or `pip install .`, or set MXNET_AMP_LIBRARY "
            "to the path of a built libmxnet_amp.so" % path)
    if missing:
        mx.library.load(path, verbose=False)
    install_graph_inference(ctypes.CDLL(path))
    return path


#: ``MXNET_AMP_GRAPH_INFER=0`` loads the library without its MXNet-native graph inference (the fallback where
#: the invoker check is inconclusive); these then fail, as with lib_api's own inference:
GRAPH_INFER_ENV = "MXNET_AMP_GRAPH_INFER"
WITHOUT_GRAPH_INFER = ("hybridized RNNs whose begin state's batch size is unknown until the data arrives "
                       "(shapes come back with a dimension of 4294967295)",
                       "graphs bound from the data shape alone whose weights' rank is unknown (std::bad_alloc)",
                       "output shapes known from a consumer flowing back to amp_cast / amp_round inputs")
#: What :func:`install_graph_inference` did in this process: None (not yet), "installed", "already installed"
#: or "skipped" (``MXNET_AMP_GRAPH_INFER=0``).
GRAPH_INFERENCE = {"state": None, "convention": None}
_CONVENTIONS = {1: "GCC 4 (pointers by value)", 2: "GCC >= 5 (pointers by reference)"}


def invoker_convention(lib):
    """``(code, text)``: how the loaded libmxnet.so calls ``std::function`` invokers, found by a probe.

    ``code`` is 1 (GCC 4, as the official 1.9.1 wheels), 2 (GCC >= 5, as a source build may be) or 0 when
    the probe is inconclusive; ``text`` says which, or why not.
    """
    probe = lib.mxnet_amp_libmxnet_invoker_convention
    probe.restype = ctypes.c_int
    probe.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
    message = ctypes.c_char_p()
    code = probe(os.fsencode(mx.base._LIB._name), ctypes.byref(message))
    return code, _CONVENTIONS.get(code) or message.value.decode()


def install_graph_inference(lib):
    """Give the library's ops MXNet-native graph shape/type inference (both directions; lib_api 11 has one).

    Idempotent: a second call, or a call after another copy of the library installed it, changes nothing.

    Raises
    ------
    ImportError
        The invoker convention of libmxnet.so could not be established (installing with a wrong guess would
        write shapes through a wrong pointer), or the install failed; the message names the fallback.
    """
    if os.environ.get(GRAPH_INFER_ENV) == "0":
        GRAPH_INFERENCE["state"] = "skipped"
        logging.getLogger("mxnet.amp").warning(
            "mxnet.amp: %s=0: graph inference of the library's ops is lib_api's; these fail: %s",
            GRAPH_INFER_ENV, "; ".join(WITHOUT_GRAPH_INFER))
        return
    code, text = invoker_convention(lib)
    if code == 0:
        raise ImportError(
            "mxnet.amp: cannot tell how %s calls std::function (%s), so its graph inference is not installed. "
            "Set %s=0 to load mxnet.amp without it; then these fail: %s"
            % (mx.base._LIB._name, text, GRAPH_INFER_ENV, "; ".join(WITHOUT_GRAPH_INFER)))
    install = lib.mxnet_amp_install_graph_inference
    install.restype = ctypes.c_char_p
    install.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    installed = ctypes.c_int()
    error = install(os.fsencode(mx.base._LIB._name), code, ctypes.byref(installed))
    if error is not None:
        raise ImportError("mxnet.amp: cannot install graph shape inference: %s" % error.decode())
    GRAPH_INFERENCE.update(state="installed" if installed.value else "already installed", convention=text)


LIBRARY_PATH = _load(_library_path())


def cpu_isa():
    """Instruction set the CPU kernels use on this machine: "avx512", "avx2" or "baseline"."""
    func = ctypes.CDLL(LIBRARY_PATH).mxnet_amp_cpu_isa
    func.restype = ctypes.c_char_p
    return func().decode()


@functools.lru_cache(maxsize=None)
def cuda_kernels():
    """Whether the library was built with its CUDA kernels (``-DMXNET_AMP_CUDA=ON``): its ops then run on GPUs."""
    func = ctypes.CDLL(LIBRARY_PATH).mxnet_amp_cuda_kernels
    func.restype = ctypes.c_int
    return bool(func())


@functools.lru_cache(maxsize=None)
def onednn():
    """Whether the oneDNN 3 matrix products and convolution can run in this process, and what they are.

    Returns
    -------
    (bool, str)
        ``(True, "oneDNN 3.2.0, cpu isa avx512_core_amx")``, or ``(False, why not)``: built without
        oneDNN 3, ``libdnnl.so.3`` not found, or ``MXNET_AMP_ONEDNN=0``. Decided once per process.
    """
    func = ctypes.CDLL(LIBRARY_PATH).mxnet_amp_onednn_available
    func.restype = ctypes.c_int
    func.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    info = ctypes.c_char_p()
    ok = bool(func(ctypes.byref(info)))
    return ok, info.value.decode()


#: The counters :func:`onednn_cache` returns, in the library's order.
CACHE_FIELDS = ("entries", "hits", "misses", "evictions", "buffer_bytes", "capacity", "onednn_capacity")


def onednn_cache():
    """The oneDNN 3 primitive caches and scratch buffers of this process, as counted by the library.

    Returns
    -------
    dict or None
        ``{"entries", "hits", "misses", "evictions", "buffer_bytes", "capacity", "onednn_capacity"}``:
        primitives cached now (all kinds), lookups that found one or built one, primitives evicted (least
        recently used first), bytes of the per-thread scratch buffers, the entries allowed per kind of
        primitive (``MXNET_AMP_ONEDNN_CACHE_SIZE``, default 256), and the capacity of oneDNN's own primitive
        cache (the same bound unless ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` sets it). None where the oneDNN 3
        kernels are unavailable.
    """
    lib = _onednn_library()
    if lib is None:
        return None
    values = (ctypes.c_int64 * len(CACHE_FIELDS))()
    lib.mxnet_amp_onednn_cache_stats(values)
    return dict(zip(CACHE_FIELDS, (int(v) for v in values)))


def onednn_threads():
    """The OpenMP team of a oneDNN 3 call that runs alone: ``MXNET_AMP_ONEDNN_THREADS``, else
    ``OMP_NUM_THREADS``, else every core; None without oneDNN 3. Without those two variables, calls that run at
    once (``MXNET_CPU_WORKER_NTHREADS`` engine workers) divide the cores among them."""
    lib = _onednn_library()
    return None if lib is None else int(lib.mxnet_amp_onednn_team_threads())


def _onednn_library():
    """libmxnet_amp_onednn.so, which libmxnet_amp.so has opened already, or None where it could not."""
    if not onednn()[0]:
        return None
    return ctypes.CDLL(os.path.join(os.path.dirname(LIBRARY_PATH), "libmxnet_amp_onednn.so"))


#: oneDNN 3 ISAs (``dnnl::cpu_isa`` names, as :func:`onednn` reports them) on which oneDNN 3.2 creates bfloat16
#: matrix products and convolutions; below avx512_core (AVX2 CPUs, or ``ONEDNN_MAX_CPU_ISA=AVX2``) it cannot.
ONEDNN_BF16_ISAS = ("avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx",
                    "avx512_core_amx_fp16")


@functools.lru_cache(maxsize=None)
def onednn_bf16():
    """Whether the library's oneDNN 3 kernels can take bfloat16 operands in this process.

    Returns
    -------
    (bool, str)
        ``(True, info)`` where oneDNN 3 is available and runs an ISA of :data:`ONEDNN_BF16_ISAS` (the CPU's,
        or the one ``ONEDNN_MAX_CPU_ISA`` caps it to); otherwise ``(False, why not)``. Float32 operands run
        wherever :func:`onednn` is true.
    """
    ok, info = onednn()
    if not ok:
        return False, info
    isa = info.rsplit("cpu isa ", 1)[-1]
    if isa not in ONEDNN_BF16_ISAS:
        return False, "%s: oneDNN 3.2 has no bfloat16 matrix product or convolution below avx512_core" % info
    return True, info


_ND = mx.nd.NDArray
_NP = mx.np.ndarray


def _op_handle(name):
    handle = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.NNGetOpHandle(mx.base.c_str(name), ctypes.byref(handle)))
    return handle.value


_OP_HANDLES = {name: _op_handle(name) for name in OP_NAMES}


def _check_arrays(func, name, arrays):
    if isinstance(arrays, (_ND, np.ndarray)):
        raise TypeError("%s: %s must be a list or tuple of NDArrays, got a single %s"
                        % (func, name, type(arrays).__name__))
    arrays = list(arrays)
    if not arrays:
        raise ValueError("%s: %s is empty; pass at least one NDArray" % (func, name))
    for i, a in enumerate(arrays):
        if not isinstance(a, _ND):
            raise TypeError("%s: %s[%d] is a %s; expected mx.nd.NDArray or mx.np.ndarray"
                            % (func, name, i, type(a).__name__))
    return arrays


def _invoke(op_name, func, arrays, out=None, **attrs):
    """Run op_name on arrays (a non-empty sequence of NDArrays) in one call; returns a list.

    Outputs are numpy-mode arrays when arrays[0] is one, or the arrays of out when given. Array
    handles go straight to MXNet (no per-array conversion); MXNet itself rejects arrays on different
    contexts and out arrays of the wrong shape or dtype.
    """
    arrays = _check_arrays(func, "arrays", arrays)
    if out is not None:
        out = _check_arrays(func, "out", out)
        if len(out) != len(arrays):
            raise ValueError("%s: out has %d arrays but arrays has %d; they must match one to one"
                             % (func, len(out), len(arrays)))
    attrs["num_args"] = len(arrays)
    result = _imperative_invoke(_OP_HANDLES[op_name], arrays, list(attrs),
                                [str(v) for v in attrs.values()], out,
                                isinstance(arrays[0], _NP), True)
    return out if out is not None else result


def _target_name(dtype):
    if isinstance(dtype, str) and dtype in _TARGET_DTYPES:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt == _BF16:
        return "bfloat16"
    if dt is not None and dt.name in ("float32", "float16"):
        return dt.name
    raise ValueError("multi_cast: dtype %r is not supported; valid choices: %s"
                     % (dtype, ", ".join(_TARGET_DTYPES)))


def multi_cast(arrays, dtype, out=None):
    """Cast N arrays to one dtype in a single fused op call.

    Parameters
    ----------
    arrays : list of NDArray
        Float arrays (float32, float64, float16 or bfloat16, mixed allowed) on one context.
    dtype : str or numpy dtype
        Target dtype: "float32", "float16" or "bfloat16" (or np.float32, np.float16, MXNet's bfloat16
        dtype object). Math is float32; float16 rounds like ``numpy.astype``, bfloat16 like ``amp_cast``.
    out : list of NDArray, optional
        N preallocated arrays of the target dtype and the inputs' shapes to write into (saves one
        allocation per array when the same list is cast every step).

    Returns
    -------
    list of NDArray
        N arrays of the target dtype (``out`` when given), same shapes and kind as the inputs.

    Raises
    ------
    ValueError
        Empty list, unsupported dtype, or ``out`` of another length.
    TypeError
        An element is not an NDArray.

    Example
    -------
    >>> low = multi_cast([w1, w2], "float16")
    """
    return _invoke("amp_multi_cast", "multi_cast", arrays, out, dtype=_target_name(dtype))


def widest_cast(arrays, out=None):
    """Cast N arrays to the widest float dtype among them (``amp_multicast`` semantics), one op call.

    float64 > float32 > float16, bfloat16; float16 mixed with bfloat16 gives float32.

    Parameters
    ----------
    arrays : list of NDArray
        Float arrays on one context, any shapes (zero-size included).
    out : list of NDArray, optional
        N preallocated arrays of the widest dtype to write into.

    Returns
    -------
    list of NDArray
        N arrays of the widest dtype (``out`` when given).

    Raises
    ------
    ValueError
        Empty list, or ``out`` of another length.
    TypeError
        An element is not an NDArray.

    Example
    -------
    >>> a32, b32 = widest_cast([a16, b32])
    """
    return _invoke("amp_multi_widest_cast", "widest_cast", arrays, out)


def unscale_and_check(arrays, inv_scale, sum_squares=False):
    """Unscale gradients in place and check them for inf/nan in one fused pass.

    Every array is multiplied by ``inv_scale`` in place (no writes when ``inv_scale == 1.0``: a pure
    check); each byte is read once. Results are checked after rounding to the array's dtype.

    Parameters
    ----------
    arrays : list of NDArray
        Float gradients (float32, float64, float16, bfloat16, mixed allowed) on one context. Each array
        at most once, and no two overlapping views (they are scaled in place).
    inv_scale : float
        1 / loss scale.
    sum_squares : bool, optional
        Also return the global sum of squares of the unscaled values (for norm clipping).

    Returns
    -------
    NDArray or (NDArray, NDArray)
        float32 array of shape (1,): 1.0 if every value is finite, else 0.0. With ``sum_squares``,
        the pair (flag, sumsq), sumsq a float32 array of shape (1,). Reading either on the host
        (``.asscalar()``) waits for the computation: a host sync.

    Raises
    ------
    ValueError
        Empty list, or an array given twice.
    TypeError
        An element is not an NDArray, or inv_scale is not a real number.

    Example
    -------
    >>> flag = unscale_and_check(grads, 1.0 / scaler.scale)
    >>> if flag.asscalar():  # host sync
    ...     trainer.update(batch_size)
    """
    if isinstance(inv_scale, bool) or not isinstance(inv_scale, (int, float, np.floating, np.integer)):
        raise TypeError("unscale_and_check: inv_scale must be a real number, got %r" % (inv_scale,))
    arrays = list(arrays)
    handles = [getattr(getattr(a, "handle", None), "value", id(a)) for a in arrays]
    if len(set(handles)) != len(handles):
        first = {}
        i = next(i for i, h in enumerate(handles) if first.setdefault(h, i) != i)
        raise ValueError("unscale_and_check: arrays[%d] is arrays[%d] again; each gradient may appear once "
                         "(it is scaled in place)" % (i, first[handles[i]]))
    out = _invoke("amp_multi_unscale_check", "unscale_and_check", arrays,
                  inv_scale=repr(float(inv_scale)), sum_squares=bool(sum_squares))
    return (out[0], out[1]) if sum_squares else out[0]


def _floats(values):
    return ",".join(repr(float(v)) for v in values)


def multi_update(rule, params, flag, scaler_state, lrs, wds, etas=None, rescale_grad=1.0, clip_gradient=None,
                 momentum=0.0, beta1=0.9, beta2=0.999, epsilon=1e-8, multi_precision=False):
    """One fused optimizer step over many parameters, skipped on the device when ``flag`` is 0.

    Parameters
    ----------
    rule : {'sgd', 'sgd_mom', 'adam', 'adamw'}
        Update formula (MXNet 1.9.1's ``multi_sgd_update``, ``multi_sgd_mom_update``, ``adam_update`` and
        ``contrib.adamw_update``, operation by operation; see ``src/operator/amp/kernels/multi_tensor.h``).
    params : list of tuple of NDArray
        Per parameter ``(weight, grad, *states[, master])`` on one context: ``states`` as
        :data:`UPDATE_RULES` names them (float32), ``master`` the float32 master weights when
        ``multi_precision`` (then the weight may be float16 or bfloat16). Updated in place.
    flag : NDArray
        float32 (1,) from :func:`unscale_and_check`: 0 skips the update (nothing is written).
    scaler_state : NDArray
        float64 (6,) loss scaler state (:func:`scaler_update`); the gradients are multiplied by
        ``rescale_grad / scaler_state[0]``.
    lrs, wds : sequence of float
        Per-parameter learning rates (Adam: bias-corrected) and weight decays.
    etas : sequence of float, optional
        AdamW only: per-parameter schedule multipliers (MXNet's ``eta``).
    rescale_grad, clip_gradient, momentum, beta1, beta2, epsilon : float
        As MXNet's optimizers take them; ``clip_gradient`` None or 0 turns clipping off, as in MXNet.

    Returns
    -------
    NDArray
        float32 (1,): 1.0 if the update was applied, 0.0 if it was skipped. No host sync.

    Raises
    ------
    ValueError
        Unknown rule, no parameters, a tuple of the wrong length, or a lrs/wds/etas length mismatch.
    """
    if rule not in UPDATE_RULES:
        raise ValueError("multi_update: rule %r is not supported; valid choices: %s"
                         % (rule, ", ".join(sorted(UPDATE_RULES))))
    params = list(params)
    width = 2 + len(UPDATE_RULES[rule]) + (1 if multi_precision else 0)
    for i, group in enumerate(params):
        if len(group) != width:
            raise ValueError("multi_update: params[%d] has %d arrays; rule %r%s needs %d (weight, grad%s%s)"
                             % (i, len(group), rule, " with multi_precision" if multi_precision else "", width,
                                "".join(", " + name for name in UPDATE_RULES[rule]),
                                ", master" if multi_precision else ""))
    lists = {"lrs": list(lrs), "wds": list(wds)}
    if rule == "adamw":
        lists["etas"] = list(etas) if etas is not None else []
    for key, values in lists.items():
        if len(values) != len(params):
            raise ValueError("multi_update: %s has %d values for %d parameters" % (key, len(values), len(params)))
    arrays = [array for group in params for array in group] + [flag, scaler_state]
    attrs = {key: _floats(values) for key, values in lists.items()}
    return _invoke("amp_multi_update", "multi_update", arrays, rule=rule, multi_precision=bool(multi_precision),
                   rescale_grad=repr(float(rescale_grad)), clip_gradient=repr(float(clip_gradient or -1.0)),
                   momentum=repr(float(momentum)), beta1=repr(float(beta1)), beta2=repr(float(beta2)),
                   epsilon=repr(float(epsilon)), **attrs)[0]


def scaler_update(scaler_state, flag, config):
    """Advance a loss scaler's device state by one step (``loss_scaler.next_state`` on the device).

    Parameters
    ----------
    scaler_state : NDArray
        float64 (6,): scale, growth_tracker, steps, skipped_steps, last_overflow_step (0: none),
        steps_at_floor. Updated in place.
    flag : NDArray
        float32 (1,): the step's finite flag.
    config : ScalerConfig

    Returns
    -------
    NDArray
        float32 (1,): the new scale. No host sync.
    """
    return _invoke("amp_scaler_update", "scaler_update", [scaler_state, flag], dynamic=bool(config.dynamic),
                   growth_factor=repr(config.growth_factor), backoff_factor=repr(config.backoff_factor),
                   growth_interval=repr(float(config.growth_interval)), min_scale=repr(config.min_scale),
                   max_scale=repr(config.max_scale))[0]
