"""What a conversion returns: the converted model (:class:`Conversion`) and what changed
(:class:`ConversionSummary`)."""
from dataclasses import dataclass
from typing import Dict, Tuple

import mxnet as mx

__all__ = ["ConversionSummary", "Conversion"]


@dataclass(frozen=True)
class ConversionSummary:
    """What a conversion produced.

    Attributes
    ----------
    target_dtype : str
        'float16' or 'bfloat16'.
    device_type : str
        'cpu' or 'gpu': the device the graph was converted for.
    fused : bool
        Whether oneDNN fusion ran before the rewrite.
    emulated : bool
        Whether low precision ops are emulated (rounding casts around float32 kernels).
    lp16_modes : tuple of (str, int)
        Op nodes that run in low precision, by how they run (:meth:`mxnet.amp.Policy.lp16_mode`):
        'native' (target dtype kernel), 'emulated', 'float32' (no such kernel on a device that runs the
        target dtype natively).
    kernels : tuple of (str, int)
        Nodes that run this project's library kernels, per kernel (``amp_fully_connected``, ...); they are
        counted as 'native' in ``lp16_modes`` too.
    casts, multicasts : int
        Cast nodes in the converted graph: ``amp_cast`` + ``amp_round`` (emulation rounding), and
        ``amp_multicast``.
    ops : tuple of (str, int)
        Op nodes per decision: 'lp16' (target dtype), 'fp32', 'widest', 'neutral' (runs in what arrives).
    params_cast : int
        Parameters converted offline (stored in the target dtype, or rounded to it when emulated).
    param_bytes_before, param_bytes_after : int
        Bytes of all parameters before and after conversion.
    """

    target_dtype: str
    device_type: str
    fused: bool
    emulated: bool
    casts: int
    multicasts: int
    ops: Tuple[Tuple[str, int], ...]
    lp16_modes: Tuple[Tuple[str, int], ...]
    params_cast: int
    param_bytes_before: int
    param_bytes_after: int
    kernels: Tuple[Tuple[str, int], ...] = ()

    def as_dict(self) -> Dict[str, object]:
        """Return a JSON-safe dict of every field."""
        return {"target_dtype": self.target_dtype, "device_type": self.device_type, "fused": self.fused,
                "emulated": self.emulated, "casts": self.casts, "multicasts": self.multicasts,
                "ops": dict(self.ops), "lp16_modes": dict(self.lp16_modes), "params_cast": self.params_cast,
                "param_bytes_before": self.param_bytes_before, "param_bytes_after": self.param_bytes_after,
                "kernels": dict(self.kernels)}

    def format(self) -> str:
        """Return a short human-readable report (several lines)."""
        mode = "emulated (float32 kernels, values rounded to %s)" % self.target_dtype if self.emulated \
            else "native %s kernels" % self.target_dtype
        ops = ", ".join("%s %d" % (k, v) for k, v in self.ops) or "none"
        modes = dict(self.lp16_modes)
        lp16 = "%d native, %d emulated, %d in float32 (no %s kernel for the op on this device)" % (
            modes.get("native", 0), modes.get("emulated", 0), modes.get("float32", 0), self.target_dtype)
        if self.kernels:
            lp16 += "; on this project's oneDNN 3 kernels: %s" % ", ".join("%s %d" % kv for kv in self.kernels)
        return "\n".join([
            "target dtype:     %s on %s, %s%s" % (self.target_dtype, self.device_type, mode,
                                                  ", oneDNN-fused" if self.fused else ""),
            "casts inserted:   %d amp_cast/amp_round, %d amp_multicast" % (self.casts, self.multicasts),
            "ops by precision: %s" % ops,
            "low precision:    %s" % lp16,
            "parameters:       %d cast offline; %s -> %s bytes" % (
                self.params_cast, format(self.param_bytes_before, ","), format(self.param_bytes_after, ","))])


@dataclass(frozen=True)
class Conversion:
    """Result of :func:`convert`: the converted symbol, its parameters and the summary."""

    symbol: mx.sym.Symbol
    arg_params: Dict[str, mx.nd.NDArray]
    aux_params: Dict[str, mx.nd.NDArray]
    summary: ConversionSummary
