"""The block a conversion returns: a ``SymbolBlock`` that takes and returns the nesting of the original
block's arguments and outputs, and keeps it through ``export`` / :meth:`ConvertedBlock.imports`.

Gluon describes nesting by formats (0 for one array, a list of formats for a list): :func:`flatten_arrays` and
:func:`nest` go between nested values and flat lists in those formats.
"""
import json
import os
import re
from typing import Dict, Optional, Sequence, Tuple

import mxnet as mx
from mxnet.gluon import SymbolBlock

from ..base.files import atomic_output, atomic_write

__all__ = ["ConvertedBlock", "InputShapeError", "flatten_arrays", "nest"]


class InputShapeError(mx.base.MXNetError, ValueError):
    """A converted block was called with inputs its operators cannot take: the message names the inputs'
    shapes, the shapes it was converted with, and what MXNet's shape inference said. An ``MXNetError``, as
    before, and a ``ValueError``."""


def flatten_arrays(value):
    """``(flat list of arrays, format)`` of an NDArray or a nested list/tuple of them, in Gluon's input format
    (0 for an array, a list of formats for a list), so that a ``SymbolBlock`` takes the same nesting.

    Raises
    ------
    TypeError
        A leaf is not an NDArray.
    """
    import mxnet as mx
    if isinstance(value, mx.nd.NDArray):
        return [value], 0
    if isinstance(value, (list, tuple)) and value:
        flat, fmt = [], []
        for item in value:
            items, item_fmt = flatten_arrays(item)
            flat += items
            fmt.append(item_fmt)
        return flat, fmt
    raise TypeError("expected an NDArray or a non-empty list of them, got %r" % (value,))


def nest(flat, fmt):
    """The items of ``flat`` nested as Gluon's format ``fmt`` says (0: one item; a list: one entry each)."""
    items = list(flat)
    out = _nest(items, fmt)
    if items:
        raise ValueError("nest: %d items left over for format %r" % (len(items), fmt))
    return out


def _nest(items, fmt):
    if isinstance(fmt, int):
        if fmt != 0:
            raise ValueError("nest: format %r (multi-output or absent entries) is not supported" % (fmt,))
        return items.pop(0)
    return [_nest(items, f) for f in fmt]


class ConvertedBlock(SymbolBlock):
    """The ``SymbolBlock`` :func:`convert_hybrid_block` returns.

    It takes the arguments the original block took, nested lists included (``low(tokens, [h, c])`` for a
    GluonNLP language model), and returns its outputs nested the same way. Its ``export`` keeps the casts by
    default (MXNet's default drops them, and the exported low precision graph would no longer fit its
    parameters) and writes the nesting to ``PATH-io.json`` beside the symbol, which :meth:`imports` reads back.

    It runs with ``static_alloc=True``: its intermediate arrays are kept from call to call and grow to the largest
    input seen, instead of being allocated on every call. A service of varying lengths then holds flat memory, where
    the allocations of each new length fragmented the heap (a BERT-base-sized encoder at batch 8, 600 requests of
    233 lengths: RSS +6.8% over the second half, its free heap from 191 to 404 MB; AMD EPYC, class (c), 2026-12-07),
    and calls are faster. ``block.hybridize()`` without it frees them after each call.
    """

    IO_VERSION = 1
    #: ``{input name: shape}`` of the data example the block was converted with (None: not known).
    converted_shapes: Optional[Dict[str, Tuple[int, ...]]] = None

    def forward(self, x, *args):
        """The graph on the inputs; a shape its operators refuse raises :class:`InputShapeError`."""
        try:
            return super().forward(x, *args)
        except mx.base.MXNetError as err:
            if not isinstance(x, mx.nd.NDArray) or not re.search(r"(?i)shape", str(err)):
                raise
            raise InputShapeError(self._shape_message([x] + list(args), err)) from err

    def _shape_message(self, args: Sequence, err: Exception) -> str:
        flat, _ = flatten_arrays(list(args))
        names = [s.name for s in self._cached_graph[0]]
        given = ", ".join("%s %s" % (n, tuple(a.shape)) for n, a in zip(names, flat))
        converted = ", ".join("%s %s" % (n, tuple(s)) for n, s in (self.converted_shapes or {}).items())
        said = [re.sub(r"^\[\d+\] \S+\[\d+\]: |^MXNetError: ", "", line.strip())
                for line in str(err).splitlines() if line.strip()]
        reason = next((line for line in reversed(said) if re.search(r"(?i)shape", line)), said[-1])
        return ("converted block: its operators cannot take inputs of shapes %s%s. MXNet's shape inference: %s"
                % (given, " (converted with %s; the dimensions the layers fix must stay)" % converted
                   if converted else "", reason))

    @classmethod
    def nested(cls, sym, inputs, in_format, out_format):
        """A block of ``sym`` (a group of outputs) whose flat ``inputs`` and outputs take Gluon's formats."""
        import mxnet as mx
        is_np = isinstance(sym, mx.sym.np._Symbol)  # where sym[i] slices the tensor, not the outputs
        legacy = sym.as_nd_ndarray() if is_np else sym
        outputs = [legacy[i] for i in range(len(legacy.list_outputs()))]
        outputs = [o.as_np_ndarray() for o in outputs] if is_np else outputs
        try:
            nested_in, nested_out = nest(inputs, in_format), nest(outputs, out_format)
        except ValueError:  # formats with absent (None) arguments or multi-output symbols: flat, as MXNet's
            nested_in, nested_out = inputs, sym
        block = cls(nested_out, nested_in)
        block.hybridize(static_alloc=True)
        return block

    def export(self, path: str, epoch: int = 0,  # pylint: disable=arguments-differ
               remove_amp_cast: bool = False) -> None:
        """Write ``PATH-symbol.json``, ``PATH-EPOCH.params`` and ``PATH-io.json`` (the nesting), each whole or not at
        all. Unlike ``HybridBlock.export`` it needs no call first (MXNet's writes no parameters before one)."""
        sym = self._cached_graph[1]
        args, aux = set(sym.list_arguments()), set(sym.list_auxiliary_states())
        saved = {}
        for name, param in self.collect_params().items():
            if name in args or name in aux:
                saved["%s:%s" % ("arg" if name in args else "aux", name)] = param._reduce()
        with atomic_output("%s-symbol.json" % path) as tmp:
            sym.save(tmp, remove_amp_cast=remove_amp_cast)
        with atomic_output("%s-%04d.params" % (path, epoch)) as tmp:
            (mx.npx.save if mx.util.is_np_array() else mx.nd.save)(tmp, saved)  # as HybridBlock.export saves
        io = {"version": self.IO_VERSION, "in_format": self._in_format, "out_format": self._out_format}
        atomic_write("%s-io.json" % path, json.dumps(io).encode())

    def load_parameters(self, filename: str, ctx=None, allow_missing: bool = False,  # pylint: disable=arguments-differ
                        ignore_extra: bool = False, cast_dtype: bool = True, dtype_source: str = "current") -> None:
        """``SymbolBlock.load_parameters``, casting by default into the dtypes the block stores: a converted block
        stores its weights in the target dtype, and a float32 file of its parameter names (``collect_params().save``
        of a float32-parameter conversion, or ``export``'s ``arg:``/``aux:`` names) loads into it, each array rounded
        to nearest as ``amp_cast`` rounds (MXNet's ``astype`` to bfloat16 truncates). ``cast_dtype=False`` or
        ``dtype_source="saved"``: as ``SymbolBlock``'s."""
        import mxnet as mx
        params = self.collect_params()
        arrays = {re.sub(r"^(arg|aux):", "", name): arr for name, arr in mx.nd.load(filename).items()}
        if not cast_dtype or dtype_source != "current" or not set(arrays) & set(params):
            super().load_parameters(filename, ctx=ctx, allow_missing=allow_missing, ignore_extra=ignore_extra,
                                    cast_dtype=cast_dtype, dtype_source=dtype_source)
            return
        arrays = {name: mx.nd.amp_cast(arr, dtype=params[name].dtype)
                  if name in params and arr.dtype != params[name].dtype else arr for name, arr in arrays.items()}
        params.load_dict(arrays, ctx=ctx, allow_missing=allow_missing, ignore_extra=ignore_extra)

    @classmethod
    def imports(cls, symbol_file, input_names, param_file=None, ctx=None, allow_missing=False,
                ignore_extra=False):
        """``SymbolBlock.imports`` of an exported converted block, with the nesting ``export`` wrote next to the
        symbol file (``PATH-io.json``) when it is there; ``input_names`` are the flat input names in order."""
        import mxnet as mx
        flat = SymbolBlock.imports(symbol_file, input_names, param_file, ctx, allow_missing, ignore_extra)
        io_file = symbol_file[:-len("-symbol.json")] + "-io.json" if symbol_file.endswith("-symbol.json") else None
        if io_file is None or not os.path.isfile(io_file):
            return flat
        with open(io_file) as f:
            io = json.load(f)
        if io.get("version") != cls.IO_VERSION or set(io) != {"version", "in_format", "out_format"}:
            raise ValueError("%s: expected keys in_format, out_format and version %d, got %r"
                             % (io_file, cls.IO_VERSION, io))
        names = [input_names] if isinstance(input_names, str) else list(input_names)
        sym = mx.sym.load(symbol_file)
        inputs = [mx.sym.var(n) for n in names]
        net = cls.nested(sym, inputs, io["in_format"], io["out_format"])
        net.collect_params().load_dict({k: v.data() for k, v in flat.collect_params().items()}, ctx=ctx or mx.cpu(),
                                       cast_dtype=True, dtype_source="saved")
        return net
