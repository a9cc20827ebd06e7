"""Parameter surgery for conversion: which variables are parameters, which are stored in low precision, and
the graph and arrays after offline casting.

A parameter whose every reader wants the target dtype is stored in that dtype and its cast disappears;
parameters some reader needs in float32 (BatchNorm statistics, say) stay float32. A shared parameter is stored
and cast once. In an *emulated* graph the parameter is stored in the target dtype too and read through an exact
cast to float32 (numpy-mode bfloat16 models, whose arrays cannot be bfloat16 in MXNet 1.9.1: in float32,
already rounded, without a rounding node).
"""
import json
import warnings
from typing import Dict, Iterable, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from ..base.callers import stacklevel_outside_package
from ..base.dtypes import TYPE_CODES
from ..core.ops import multi_cast
from ..graph.builder import RewriteStats
from ..graph.infer import infer_entry_dtypes
from ..graph.symbol_json import compact

__all__ = ["cast_offline", "nbytes"]


def cast_offline(sym: mx.sym.Symbol, graph: dict, params: Dict[str, mx.nd.NDArray],
                 input_names: Optional[Sequence[str]], stats: RewriteStats, target: str, device_type: str,
                 everywhere: bool) -> Tuple[dict, Dict[str, str], Dict[str, Optional[mx.nd.NDArray]]]:
    """Store parameters of the rewritten ``graph`` in low precision where their readers allow it.

    Parameters
    ----------
    sym : Symbol
        The graph before the rewrite (its variables and readers decide what is a parameter).
    graph : dict
        The rewritten symbol-JSON graph.
    params : dict of str to NDArray
        The parameters given (empty for ``convert_symbol``).
    input_names : list of str or None
        The model's inputs, never cast (None: see :func:`_param_names`).
    stats : RewriteStats
        The rewrite's statistics (the nodes that followed low precision inputs).
    target : str
        The target dtype.
    device_type : {'cpu', 'gpu'}
    everywhere : bool
        ``cast_params_offline``: every parameter whose readers allow it; otherwise, as upstream, only those of
        ops that followed low precision inputs.

    Returns
    -------
    (dict, dict, dict)
        The graph, ``{name: storage dtype}`` of the parameters stored anew, and ``{name: array or None}`` of the
        cast arrays (None where no array was given).
    """
    if everywhere:
        offline = _param_names(sym, params, input_names)
    else:  # as upstream: the parameters of an op that follows low precision inputs are low precision
        offline = _read_only_by(sym, stats.followed) & (
            set(params) if input_names is None else set(sym.list_inputs()) - set(input_names))
    if not offline:
        return graph, {}, {}
    # numpy-mode arrays cannot be bfloat16 in MXNet 1.9.1: emulated numpy-mode models keep float32 storage
    numpy = isinstance(sym, mx.sym.np._Symbol)
    emulated_storage = "float32" if numpy and target == "bfloat16" else target
    var_dtypes = {name: arr.dtype for name, arr in params.items()}
    graph, storage = _cast_params_in_graph(graph, offline, target, var_dtypes, emulated_storage, device_type)
    cast = _cast_arrays({n: params[n] for n in storage if n in params}, storage, target)
    cast.update({n: None for n in storage if n not in params})  # convert_symbol: no arrays
    return graph, storage, cast


def _param_names(sym, params, input_names):
    """Variables that hold parameters: all but ``input_names`` when given, else those with arrays, else (as
    ``mxnet.contrib.amp``) those whose ``__dtype__`` attribute is set."""
    if input_names is not None:
        return set(sym.list_inputs()) - set(input_names)
    if params:
        return set(params)
    attrs = sym.attr_dict()
    marked = {name for name in sym.list_inputs() if "__dtype__" in attrs.get(name, {})}
    if not marked:
        warnings.warn("convert: cast_params_offline=True without parameters or input_names treats the variables "
                      "with a __dtype__ attribute as parameters (as mxnet.contrib.amp); this symbol has none, so "
                      "nothing is cast offline. Pass input_names (the model inputs) to cast every other variable.",
                      stacklevel=stacklevel_outside_package())
    return marked


def _read_only_by(sym, names):
    """Variables of ``sym`` whose every reader is a node named in ``names``."""
    nodes = json.loads(sym.tojson())["nodes"]
    readers = {}
    for node in nodes:
        for src, _, _ in node["inputs"]:
            readers.setdefault(nodes[src]["name"], set()).add(node["name"])
    return {n["name"] for n in nodes if n["op"] == "null" and readers.get(n["name"]) and
            readers[n["name"]] <= set(names)}


def _cast_params_in_graph(gdict, param_names, target, var_dtypes, emulated_storage, device_type):
    """Store parameters that are only read in one low precision dtype in that dtype; drop the casts.

    Returns ``(new graph dict, {name: storage dtype name})``. A parameter is stored in ``target`` when every
    reader casts it to ``target`` or is an ``amp_multicast`` whose output for it is of dtype ``target`` or whose
    inputs are all variables (``mxnet.contrib.amp`` narrows those), and in float16/bfloat16 when every reader
    is the user's own ``amp_cast`` to that dtype. A parameter only read through emulation rounding
    (``amp_round``, or an ``amp_cast`` to ``target`` and back) is stored in ``emulated_storage``: ``target``, as
    upstream stores it, read through an exact cast to float32 (half the memory, the same values; on CPUs the
    library's ``amp_multi_cast``, see :func:`_read_as_float32`), or float32 holding the rounded values, its
    rounding nodes gone.
    """
    nodes = gdict["nodes"]
    readers = {}
    for nid, node in enumerate(nodes):
        for src, _, _ in node["inputs"]:
            readers.setdefault(src, []).append(nid)
    head_ids = {h[0] for h in gdict["heads"]}
    dtypes = None
    alias, storage = {}, {}
    for vid, node in enumerate(nodes):
        if node["op"] != "null" or node["name"] not in param_names or vid in head_ids:
            continue
        first = readers.get(vid, [])
        if not first:
            continue
        cast_dtypes = {nodes[c]["attrs"]["dtype"] if nodes[c]["op"] == "amp_cast" else None for c in first}
        if all(_is_round(nodes[c], target) for c in first):  # emulation
            if emulated_storage == "float32":
                alias.update({(c, 0): (vid, 0) for c in first})
            else:  # read in float32, exactly
                for c in first:
                    nodes[c] = _read_as_float32(nodes[c], device_type)
            storage[node["name"]] = emulated_storage
        elif cast_dtypes == {target}:
            ups = [r for c in first for r in readers.get(c, [])]
            if len(first) == 1 and ups and all(_is_cast_to(nodes[u], "float32") for u in ups):
                alias[(first[0], 0)] = (vid, 0)  # an amp_cast round trip
                if emulated_storage == "float32":
                    alias.update({(u, 0): (vid, 0) for u in ups})
                else:
                    for u in ups:
                        nodes[u] = _read_as_float32(nodes[u], device_type)
                storage[node["name"]] = emulated_storage
            else:
                alias.update({(c, 0): (vid, 0) for c in first})
                storage[node["name"]] = target
        elif len(cast_dtypes) == 1 and cast_dtypes <= {"float16", "bfloat16"}:  # the user's own casts
            alias.update({(c, 0): (vid, 0) for c in first})
            storage[node["name"]] = cast_dtypes.pop()
        elif all(nodes[c]["op"] == "amp_multicast" or _is_cast_to(nodes[c], target) for c in first):
            # amp_multicast readers: those of variables only narrow them (mxnet.contrib.amp's rule for
            # variables of unknown dtype), the others where the variable's output is of dtype target
            if dtypes is None:
                dtypes = infer_entry_dtypes(gdict, var_dtypes)
            slots = [(c, k) for c in first if nodes[c]["op"] == "amp_multicast"
                     and not all(nodes[src]["op"] == "null" for src, _, _ in nodes[c]["inputs"])
                     for k, e in enumerate(nodes[c]["inputs"]) if e[0] == vid]
            if all(dtypes.get(slot) == target for slot in slots):
                alias.update({(c, 0): (vid, 0) for c in first if nodes[c]["op"] == "amp_cast"})
                storage[node["name"]] = target
    for name, dtype in storage.items():
        if dtype != "float32":
            node = next(n for n in nodes if n["op"] == "null" and n["name"] == name)
            node.setdefault("attrs", {})["__dtype__"] = TYPE_CODES[dtype]
    if not alias:
        return gdict, storage
    return compact(gdict, {nid for nid, _ in alias}, alias), storage


def _read_as_float32(node, device_type):
    """``node`` turned into the exact cast to float32 of a parameter stored in low precision. On CPUs that is the
    library's ``amp_multi_cast``: MXNet's bfloat16 ``amp_cast`` runs about 170x slower there without AVX-512
    (6.0 s against 35 ms for 100 M values), and an emulated model reads every weight once per call."""
    if device_type == "cpu":
        return dict(node, op="amp_multi_cast", attrs={"num_args": "1", "dtype": "float32"})
    return dict(node, op="amp_cast", attrs={"dtype": "float32"})


def _is_round(node, dtype):
    return node["op"] == "amp_round" and node["attrs"]["dtype"] == dtype


def _is_cast_to(node, dtype):
    return node["op"] == "amp_cast" and node["attrs"]["dtype"] == dtype


def _cast_arrays(arrays, storage, target):
    """Cast ``arrays`` to ``storage[name]``; float32 storage means rounded to ``target`` (emulation)."""
    groups = {}
    for name, arr in arrays.items():
        groups.setdefault((storage[name], str(arr.context)), []).append(name)
    out = {}
    for (kind, _), names in sorted(groups.items()):
        cast = multi_cast([arrays[n] for n in names], target if kind == "float32" else kind)
        if kind == "float32":
            cast = multi_cast(cast, "float32")
        out.update(zip(names, cast))
    return out


def nbytes(arrays: Iterable[Optional[mx.nd.NDArray]]) -> int:
    """Bytes held by ``arrays`` (None entries count nothing)."""
    return int(sum(a.size * np.dtype(a.dtype).itemsize for a in arrays if a is not None))
