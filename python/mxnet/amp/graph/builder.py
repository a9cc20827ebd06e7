"""The node list a rewrite builds: casts memoised per ``(tensor, dtype)``, emulation rounding, widest-type
multicasts and the graph's mode flag, with the counts of what was inserted (:class:`RewriteStats`)."""
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence

from ..base.dtypes import FLOAT_RANK
from .symbol_json import MODE_NODE, Entry

__all__ = ["RewriteStats", "CastBuilder"]


@dataclass
class RewriteStats:
    """What a rewrite did: cast nodes inserted, op nodes per action, how the low precision ones run, and the
    nodes that followed low precision inputs (``FOLLOW`` resolved to ``LP16``).

    ``lp16_modes`` counts the nodes that run in low precision by :meth:`Policy.lp16_mode`: 'native',
    'emulated', or 'float32' (the device has no kernel for the op in the target dtype; counted as 'fp32' in
    ``actions`` too). ``kernels`` counts the nodes given to this project's library kernels by op name
    (:meth:`Policy.library_kernel`: ``FullyConnected`` nodes become ``amp_fully_connected``, say).
    """

    casts: int = 0
    multicasts: int = 0
    actions: Counter = field(default_factory=Counter)
    lp16_modes: Counter = field(default_factory=Counter)
    followed: set = field(default_factory=set)
    kernels: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        """Return a JSON-safe summary."""
        return {"casts": self.casts, "multicasts": self.multicasts, "ops": dict(self.actions),
                "lp16_modes": dict(self.lp16_modes), "kernels": dict(self.kernels)}


class CastBuilder:
    """Accumulates a rewritten node list; owns cast memoisation, naming, rounding and the mode flag.

    ``dtype`` holds what is known of each new entry's dtype (None: not known); ``cast_source`` maps an entry
    made by :meth:`cast` back to the entry it cast, so a cast of a cast reads the original tensor.
    """

    def __init__(self, names: Iterable[str]):
        self.nodes = []
        self.num_outputs = []
        self.dtype = {}        # new entry -> dtype name or None
        self.cast_source = {}  # new entry produced by amp_cast -> the entry it cast
        self.memo = {}
        self.names = set(names)
        self.stats = RewriteStats()
        self.mode = None       # the entry of mode_flag(), once made

    def add(self, node: dict, num_outputs: int, dtypes: Sequence[Optional[str]] = ()) -> int:
        self.nodes.append(node)
        self.num_outputs.append(num_outputs)
        nid = len(self.nodes) - 1
        for idx, dtype in enumerate(dtypes):
            self.dtype[(nid, idx)] = dtype
        return nid

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = "%s%d" % (base, k), k + 1
        self.names.add(name)
        return name

    def cast(self, entry: Entry, dtype: str) -> Entry:
        """Return an entry holding ``entry`` as ``dtype`` (float types only; others pass through).

        A cast of a cast reads the original tensor instead (no fp32 -> lp16 -> fp32 chains).
        """
        entry = self.cast_source.get(entry, entry)
        have = self.dtype.get(entry)
        if have == dtype or (have is not None and have not in FLOAT_RANK) or have == "float64":
            return entry
        key = (entry, dtype)
        if key not in self.memo:
            self.memo[key] = self._add_cast(entry, dtype)
            self.cast_source[self.memo[key]] = entry
        return self.memo[key]

    def _add_cast(self, entry: Entry, dtype: str) -> Entry:
        src = self.nodes[entry[0]]["name"]
        nid = self.add({"op": "amp_cast", "name": self.unique("%s_amp_cast_%s" % (src, dtype)),
                        "attrs": {"dtype": dtype}, "inputs": [[entry[0], entry[1], 0]]}, 1, (dtype,))
        self.stats.casts += 1
        return (nid, 0)

    def mode_flag(self) -> Entry:
        """The graph's mode as a float32 (1,) tensor: ``Dropout(p=0.5)`` of a tensor of ones, which MXNet runs
        with the training flag it runs every op of the call with: exactly 1 in inference (Dropout is then the
        identity), 0 or 2 in training. lib_api tells a library op nothing about the mode; this input does (one
        per graph; it draws one random number per training call)."""
        if self.mode is None:
            ones = self.add({"op": "_ones", "name": self.unique(MODE_NODE + "_ones"),
                             "attrs": {"shape": "(1,)", "dtype": "float32"}, "inputs": []}, 1, ("float32",))
            drop = self.add({"op": "Dropout", "name": self.unique(MODE_NODE), "attrs": {"p": "0.5"},
                             "inputs": [[ones, 0, 0]]}, 2, ("float32", "float32"))
            self.mode = (drop, 0)
        return self.mode

    def is_low(self, entry: Entry, dtype: str) -> bool:
        """Whether ``entry`` is known to hold ``dtype`` values: of that dtype, or rounded to it (emulation)."""
        node = self.nodes[entry[0]]
        return self.dtype.get(entry) == dtype or (node["op"] == "amp_round" and node["attrs"]["dtype"] == dtype)

    def round_trip(self, entry: Entry, dtype: str) -> Entry:
        """Return ``entry`` rounded to ``dtype`` but stored as float32 (emulated low precision).

        Float32 tensors go through one ``amp_round``; low precision ones are cast to float32 (and rounded
        unless already in ``dtype``); tensors of unknown dtype go through ``amp_cast`` to ``dtype`` and back
        (which leaves non-float tensors alone); other dtypes pass unchanged.
        """
        entry = self.cast_source.get(entry, entry)
        key = (entry, "round", dtype)
        if key in self.memo:
            return self.memo[key]
        have = self.dtype.get(entry)
        if have == "float32":
            name = self.unique("%s_amp_round_%s" % (self.nodes[entry[0]]["name"], dtype))
            nid = self.add({"op": "amp_round", "name": name, "attrs": {"dtype": dtype},
                            "inputs": [[entry[0], entry[1], 0]]}, 1, ("float32",))
            rounded = (nid, 0)
            self.stats.casts += 1
        elif have == dtype:
            rounded = self.cast(entry, "float32")
        elif have in FLOAT_RANK and FLOAT_RANK[have] == 1:
            rounded = self.round_trip(self.cast(entry, "float32"), dtype)
        elif have is None:  # unknown dtype: amp_cast there and back (non-float tensors pass unchanged)
            rounded = self._add_cast(self._add_cast(entry, dtype), "float32")
        else:
            rounded = entry
        self.memo[key] = rounded
        self.memo[(rounded, "round", dtype)] = rounded
        return rounded

    def widest(self, entries: Sequence[Entry]) -> List[Entry]:
        """Return ``entries`` routed through one ``amp_multicast`` unless their dtypes already agree."""
        entries = [self.cast_source.get(e, e) for e in entries]
        dtypes = [self.dtype.get(e) for e in entries]
        floats = [i for i, d in enumerate(dtypes) if d is None or d in FLOAT_RANK]
        if len(floats) < 2 or (None not in dtypes and len({dtypes[i] for i in floats}) == 1):
            return entries
        key = ("widest", tuple(entries[i] for i in floats))
        if key not in self.memo:
            known = [dtypes[i] for i in floats if dtypes[i] is not None]
            out = None
            if len(known) == len(floats):
                ranks = {FLOAT_RANK[d] for d in known}
                out = "float32" if ranks == {1} and len(set(known)) > 1 else max(known, key=FLOAT_RANK.get)
            src = self.nodes[entries[floats[0]][0]]["name"]
            nid = self.add({"op": "amp_multicast", "name": self.unique("%s_amp_multicast" % src),
                            "attrs": {"num_outputs": str(len(floats)), "cast_narrow": "False"},
                            "inputs": [[entries[i][0], entries[i][1], 0] for i in floats]},
                           len(floats), (out,) * len(floats))
            self.memo[key] = nid
            self.stats.multicasts += 1
        nid = self.memo[key]
        routed = list(entries)
        for k, i in enumerate(floats):
            routed[i] = (nid, k)
        return routed
