"""The one place that loads libmxnet_amp.so (the C++ extension library) and reports what it can do here.

The library is loaded once per process at ``import mxnet.amp``: from ``$MXNET_AMP_LIBRARY`` when that
is set, else from ``_lib/libmxnet_amp.so`` in the package (built by ``bash tools/build_dev.sh`` or
by ``pip install .``). A second load of the same file (or of another copy when the ops are already
registered) is skipped: loading twice would half-register the ops in MXNet. The names of the library's ops
are data, in :mod:`.op_names`; :mod:`.ops` runs them.

The matrix products and convolutions run oneDNN 3 kernels from a second library, ``_lib/libmxnet_amp_onednn.so``,
which libmxnet_amp.so opens on first use (it links the ``libdnnl.so.3`` of the ``onednn-cpu-gomp`` wheel); BatchNorm
and the multi-tensor ops run the library's own kernels. :func:`onednn` says whether that worked;
``MXNET_AMP_ONEDNN=0`` in the environment keeps it closed (MXNet's own kernels are used then).
"""
import ctypes
import functools
import logging
import os
import sys
from typing import List, Optional, Tuple

import mxnet as mx

from ..base.op_names import ALL_OPS, MATMUL_OPS
from ..base.registry import op_handle, registered_ops

__all__ = ["OP_NAMES", "ONEDNN_OPS", "LIBRARY_PATH", "GRAPH_INFER_ENV", "GRAPH_INFERENCE", "WITHOUT_GRAPH_INFER",
           "invoker_convention", "install_graph_inference", "CACHE_FIELDS", "cpu_isa", "cuda_kernels", "onednn",
           "onednn_bf16", "onednn_cache", "onednn_threads"]

#: Every op the library registers. ``ONEDNN_OPS``: those that need libmxnet_amp_onednn.so (see :func:`onednn`).
ONEDNN_OPS = MATMUL_OPS
OP_NAMES = ALL_OPS

#: The one MXNet release the library is built for (lib_api 11, and the wheels' C++ ABI).
SUPPORTED_MXNET = "1.9.1"


def _mxnet_distribution() -> str:
    """Which installed distribution provides the ``mxnet`` package (mxnet, mxnet-cu117, ...), if pip knows."""
    import importlib.metadata as metadata
    try:
        names = [n for n in metadata.packages_distributions().get("mxnet") or [] if n != "mxnet-amp"]
    except Exception:  # a broken metadata directory must not hide the version error
        names = []
    return ", ".join("%s %s" % (n, metadata.version(n)) for n in sorted(set(names))) or "no pip distribution"


def check_mxnet_version(version: Optional[str] = None) -> None:
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

_DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_lib",
                             "libmxnet_amp.so")


def _library_path() -> str:
    path = os.environ.get("MXNET_AMP_LIBRARY") or _DEFAULT_PATH
    return os.path.realpath(path)


def _load(path: str) -> str:
    """Load the library at path unless its ops are already registered, then install its graph inference
    (once per process, whoever loaded the ops); returns the path used."""
    registered = set(registered_ops())
    missing = [name for name in OP_NAMES if name not in registered]
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
        mx.base.check_call(mx.base._LIB.MXLoadLib(mx.base.c_str(path), mx.base.mx_uint(0)))
        _add_op_functions(sorted(set(registered_ops()) - registered))
    install_graph_inference(ctypes.CDLL(path))
    return path


def _add_op_functions(names: List[str]) -> None:
    """Give the newly registered ops ``names`` their ``mx.nd`` and ``mx.sym`` functions, as MXNet makes its own
    (``mx.nd.op`` / ``mx.sym.op`` and the packages themselves; ``_internal`` for names starting with ``_``).

    ``mx.library.load`` would regenerate the function of every op MXNet has (about 0.8 s and 5 MB of Python
    objects), replacing each: a patch made before (``mxnet.contrib.amp.init``'s, a user's) would be silently
    undone. MXNet's existing functions are left as they are.
    """
    from mxnet.ndarray.register import _make_ndarray_function
    from mxnet.symbol.register import _make_symbol_function
    for package, make in (("mxnet.ndarray", _make_ndarray_function), ("mxnet.symbol", _make_symbol_function)):
        internal, op_module = sys.modules[package + "._internal"], sys.modules[package + ".op"]
        for name in names:
            function = make(mx.base.OpHandle(op_handle(name)), name, name)
            function.__module__ = package
            homes = (internal,) if name.startswith("_") else (op_module, sys.modules[package])
            for module in homes:
                setattr(module, name, function)
                if hasattr(module, "__all__"):
                    module.__all__.append(name)


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


def invoker_convention(lib: ctypes.CDLL) -> Tuple[int, str]:
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


def install_graph_inference(lib: ctypes.CDLL) -> None:
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


def cpu_isa() -> str:
    """Instruction set the CPU kernels use on this machine: "avx512", "avx2" or "baseline"."""
    func = ctypes.CDLL(LIBRARY_PATH).mxnet_amp_cpu_isa
    func.restype = ctypes.c_char_p
    return func().decode()


@functools.lru_cache(maxsize=None)
def cuda_kernels() -> bool:
    """Whether the library was built with its CUDA kernels (``-DMXNET_AMP_CUDA=ON``): its ops then run on GPUs."""
    func = ctypes.CDLL(LIBRARY_PATH).mxnet_amp_cuda_kernels
    func.restype = ctypes.c_int
    return bool(func())


@functools.lru_cache(maxsize=None)
def onednn() -> Tuple[bool, str]:
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


def onednn_cache() -> Optional[dict]:
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


def onednn_threads() -> Optional[int]:
    """The OpenMP team of a oneDNN 3 call that runs alone: ``MXNET_AMP_ONEDNN_THREADS``, else
    ``OMP_NUM_THREADS``, else every core; None without oneDNN 3. Without those two variables, calls that run at
    once (``MXNET_CPU_WORKER_NTHREADS`` engine workers) divide the cores among them."""
    lib = _onednn_library()
    return None if lib is None else int(lib.mxnet_amp_onednn_team_threads())


def _onednn_library() -> Optional[ctypes.CDLL]:
    """libmxnet_amp_onednn.so, which libmxnet_amp.so has opened already, or None where it could not."""
    if not onednn()[0]:
        return None
    return ctypes.CDLL(os.path.join(os.path.dirname(LIBRARY_PATH), "libmxnet_amp_onednn.so"))


#: oneDNN 3 ISAs (``dnnl::cpu_isa`` names, as :func:`onednn` reports them) on which oneDNN 3.2 creates bfloat16
#: matrix products and convolutions; below avx512_core (AVX2 CPUs, or ``ONEDNN_MAX_CPU_ISA=AVX2``) it cannot.
ONEDNN_BF16_ISAS = ("avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx",
                    "avx512_core_amx_fp16")


@functools.lru_cache(maxsize=None)
def onednn_bf16() -> Tuple[bool, str]:
    """Whether the library's oneDNN 3 kernels run bfloat16 arithmetic in this process.

    Returns
    -------
    (bool, str)
        ``(True, info)`` where oneDNN 3 is available and runs an ISA of :data:`ONEDNN_BF16_ISAS` (the CPU's,
        or the one ``ONEDNN_MAX_CPU_ISA`` caps it to); otherwise ``(False, why not)``. Wherever :func:`onednn` is
        true the kernels take float32 and bfloat16 operands: below those ISAs they widen bfloat16 ones to float32
        (``src/operator/amp/onednn/widen.h``), which the storage plan of training graphs uses
        (:func:`mxnet.amp.core.support.plans_storage`).
    """
    ok, info = onednn()
    if not ok:
        return False, info
    isa = info.rsplit("cpu isa ", 1)[-1]
    if isa not in ONEDNN_BF16_ISAS:
        return False, ("%s: oneDNN 3.2 has no bfloat16 matrix product or convolution below avx512_core (the kernels "
                       "widen bfloat16 operands to float32 there)" % info)
    return True, info
