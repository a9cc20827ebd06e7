"""Products kept in float32 for their rounding, whose result only casts to low precision read, run on the library's
broadcast product: float32 math, the one rounding that the casts would make, and no float32 tensor in between."""
from typing import Any, Mapping

from .infer import infer_entry_dtypes
from .symbol_json import Entry, compact

__all__ = ["rounded_products"]


def rounded_products(graph: dict, var_dtypes: Mapping[str, Any], dtype: str, kernels: Mapping[str, str]) -> dict:
    """Each product of two operands (``kernels``: op -> library kernel, ``lists.rounded_products``) whose readers are
    all casts to ``dtype`` runs on that kernel writing ``dtype`` itself, for inference graphs running ``dtype``
    natively: the same values, one pass instead of a float32 product and its cast.

    Operands are float32 or ``dtype``; one that reaches the product through a cast of a ``dtype`` tensor to float32
    (exact) is read as that tensor, and the cast goes where nothing else reads it. A squeeze-excitation block's gate
    times its features before the next convolution (MobileNet v3) is such a product.
    """
    if not any(node["op"] in kernels for node in graph["nodes"]):
        return graph
    nodes = graph["nodes"]
    dtypes = infer_entry_dtypes(graph, var_dtypes)
    readers = {}
    for nid, node in enumerate(nodes):
        for src, idx, _ in node["inputs"]:
            readers.setdefault((src, idx), []).append(nid)
    heads = {tuple(h[:2]) for h in graph["heads"]}

    def rounding_cast(nid: int) -> bool:
        return nodes[nid]["op"] == "amp_cast" and nodes[nid]["attrs"]["dtype"] == dtype

    def source(entry: Entry) -> Entry:  # the dtype tensor an exact widening cast reads, else the entry
        node = nodes[entry[0]]
        if node["op"] == "amp_cast" and node["attrs"]["dtype"] == "float32":
            inner = tuple(node["inputs"][0][:2])
            return inner if dtypes.get(inner) == dtype else entry
        return entry

    replaced, alias = {}, {}
    for nid, node in enumerate(nodes):
        if node["op"] not in kernels or len(node["inputs"]) != 2 or (nid, 0) in heads:
            continue
        operands = [source(tuple(e[:2])) for e in node["inputs"]]
        if (not readers.get((nid, 0)) or not all(rounding_cast(r) for r in readers[(nid, 0)])
                or any(dtypes.get(e) not in ("float32", dtype) for e in operands)):
            continue
        replaced[nid] = dict(node, op=kernels[node["op"]], attrs={"dtype": dtype},
                             inputs=[[src, idx, 0] for src, idx in operands])
        alias.update({(r, 0): (nid, 0) for r in readers[(nid, 0)]})
    if not replaced:
        return graph
    graph = dict(graph, nodes=[replaced.get(n, node) for n, node in enumerate(nodes)])
    dropped = {r for r, _ in alias}  # the products' casts
    read = heads | {tuple(e[:2]) for n, node in enumerate(graph["nodes"]) if n not in dropped for e in node["inputs"]}
    former = {src for n in replaced for src, _, _ in nodes[n]["inputs"]}  # the widening casts bypassed among them
    dropped |= {n for n in former if nodes[n]["op"] == "amp_cast" and (n, 0) not in read}
    return compact(graph, dropped, alias)
