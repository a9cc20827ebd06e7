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

__all__ = ["native_support", "plans_native", "library_ready"]

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


@functools.lru_cache(maxsize=None)
def _onednn_loaded() -> bool:
    ok, info = library.onednn()
    if not ok:
        _LOG.warning("mxnet.amp: this project's oneDNN 3 matrix-product kernels are unavailable (%s); matrix "
                     "products and convolutions run on MXNet's kernels", info)
    return ok


@functools.lru_cache(maxsize=None)
def library_ready(dtype: str) -> bool:
    """Whether the library's oneDNN 3 kernels (products, convolutions) run here on ``dtype`` operands.

    They need libmxnet_amp_onednn.so loaded (:func:`mxnet.amp.core.library.onednn`) and, for bfloat16, oneDNN
    running an AVX-512 ISA (:func:`mxnet.amp.core.library.onednn_bf16`: not so where ``ONEDNN_MAX_CPU_ISA``
    caps it lower). Where they cannot, one warning per process says why, and MXNet's kernels run.
    """
    if not _onednn_loaded():
        return False
    if dtype != "bfloat16":
        return True
    ok, info = library.onednn_bf16()
    if not ok:
        _LOG.warning("mxnet.amp: %s; matrix products and convolutions run on MXNet's kernels", info)
    return ok
