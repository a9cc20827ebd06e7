"""What this machine runs fast: MXNet's low precision kernels per device and CPU class, the default plan, and
whether the library's oneDNN 3 kernels are there to take a dtype.

:class:`~mxnet.amp.core.policy.Policy` asks these questions for every op; the commands (``hardware``,
``lists``) and the demo print the answers.
"""
import functools
import logging
import os

from .. import lists
from . import cpu, library

__all__ = ["native_support", "plans_native", "plans_storage", "library_ready"]

_LOG = logging.getLogger("mxnet.amp")


def native_support(dtype: str, device_type: str) -> bool:
    """Whether MXNet 1.9.1 has fast kernels for ``dtype`` on ``device_type``.

    GPUs run float16 (MXNet 1.9.1 has no GPU bfloat16 kernels). On CPUs, oneDNN runs bfloat16 only with
    AVX-512 (``avx512_core``: F, BW, VL, DQ); MXNet's CPU float16 kernels are incomplete whatever the CPU.
    ``MXNET_AMP_EMULATE=1`` says no everywhere (everything emulated); ``MXNET_AMP_EMULATE=0`` says yes to
    bfloat16 on any CPU (the AVX-512 detection skipped). The class comes from
    :func:`mxnet.amp.core.cpu.cpu_class` (the CPU's flags, lowered by oneDNN's ISA caps: ``DNNL_MAX_CPU_ISA=AVX2``
    leaves MXNet no bfloat16 kernels).
    """
    forced = os.environ.get("MXNET_AMP_EMULATE")
    if forced == "1":
        return False
    if device_type == "gpu":
        return dtype == "float16"
    if dtype == "float16":
        return False
    return forced == "0" or cpu.cpu_class().name != "a"


def plans_native(dtype: str, device_type: str) -> bool:
    """Whether the default plan (``emulate=None``) runs ``dtype`` natively on ``device_type``.

    Where MXNet has the kernels (:func:`native_support`): always on GPUs; on CPUs where the plan of the CPU
    class says so (:func:`mxnet.amp.lists.cpu_class_plan`: bfloat16 on classes (c) and (d), emulated on class
    (b), whose bf16 kernels are slower than float32 kernels on rounded values). ``MXNET_AMP_EMULATE=0`` plans
    native on any CPU.
    """
    if not native_support(dtype, device_type):
        return False
    if device_type != "cpu" or os.environ.get("MXNET_AMP_EMULATE") == "0":
        return True
    return lists.cpu_class_plan(dtype, cpu.cpu_class().name)[0] == "native"


def plans_storage(dtype: str, device_type: str) -> bool:
    """Whether the default plan stores ``dtype`` on float32 arithmetic in training graphs on ``device_type``.

    On CPUs whose class's training plan says so (:func:`mxnet.amp.lists.cpu_class_plan` with ``training=True``: class (a)), where
    the default plan does not run ``dtype`` natively, ``MXNET_AMP_EMULATE=1`` is not set and the library's oneDNN 3
    is loaded (its kernels widen bfloat16 operands there: :func:`library_ready`).
    """
    if (device_type != "cpu" or os.environ.get("MXNET_AMP_EMULATE") == "1" or plans_native(dtype, device_type)
            or lists.cpu_class_plan(dtype, cpu.cpu_class().name, training=True)[0] != "storage"):
        return False
    return library_ready(dtype)


@functools.lru_cache(maxsize=None)
def _onednn_loaded() -> bool:
    ok, info = library.onednn()
    if not ok:
        _LOG.warning("mxnet.amp: this project's oneDNN 3 matrix-product kernels are unavailable (%s); matrix "
                     "products and convolutions run on MXNet's kernels", info)
    return ok


def library_ready(dtype: str) -> bool:
    """Whether the library's oneDNN 3 kernels (products, convolutions, LayerNorm, softmax) run here on ``dtype``
    operands: wherever libmxnet_amp_onednn.so loaded (:func:`mxnet.amp.core.library.onednn`; if it did not, one
    warning per process says why, and MXNet's kernels run). float32 and bfloat16 both: where oneDNN 3 has no
    bfloat16 primitive (:func:`mxnet.amp.core.library.onednn_bf16`) the kernels widen bfloat16 operands to float32.
    """
    return dtype in ("float32", "bfloat16") and _onednn_loaded()
