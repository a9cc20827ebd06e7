"""A pickle reader that runs no code: an interpreter of the pickle opcodes that builds only the globals it is given.

``pickle`` calls whatever a file names (``os.system``, ``builtins.eval``...). :class:`Reader` runs the opcodes of
protocols 2 to 5 (``pickletools.genops``) on a stack, as ``pickle``'s pure-Python reader does, and builds only
the classes an :class:`Allowlist` names (rebuilt as pickle rebuilds them: ``cls.__new__``, then their state;
``__init__`` never runs), stubs (:class:`Stub`) for the objects it names that pickle rebuilds from
``(global, (None,), state)`` (MXNet's arrays: the caller's stand-ins check their state), numpy scalars of
:data:`SCALAR_DTYPES`, bytearrays and sets (:data:`CALLABLES`: stand-ins that check their arguments), ``None``,
numbers, strings, bytes, tuples, lists and dicts with plain keys.

Anything else raises :class:`Refused` before it is built or called: a global the allowlist lacks, a call of an
allowed class, persistent ids, extension codes, protocol 0/1 opcodes. A pickle that makes no sense raises
:class:`Invalid`, saying where. Sizes are checked against the bytes that hold them (a falsified length allocates
nothing); frames are read as ``pickle``'s pure-Python reader reads them. :func:`check_globals`, a first pass,
names the first global outside the allowlist even where the pickle breaks off or uses a refused opcode first.
What the built objects mean, and checking their shape, is the caller's (:mod:`.updater_states`).
"""
from dataclasses import dataclass
from functools import partialmethod
import io
import pickletools
from typing import Any, BinaryIO, Callable, Dict, Iterator, Tuple

import numpy as np

__all__ = ["LEAVES", "Refused", "Invalid", "Allowlist", "Global", "Stub", "DtypeStub", "Reader", "check_globals",
           "short"]

#: The pickle opcodes (protocols 2 to 5) the reader runs; any other is refused.
OPCODES = frozenset((
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "NONE", "NEWTRUE", "NEWFALSE", "BININT",
    "BININT1", "BININT2", "LONG1", "LONG4", "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_DICT", "SETITEM", "SETITEMS", "DICT",
    "EMPTY_SET", "ADDITEMS", "FROZENSET", "BINPUT", "LONG_BINPUT", "MEMOIZE", "BINGET", "LONG_BINGET",
    "GLOBAL", "STACK_GLOBAL", "REDUCE", "NEWOBJ", "BUILD"))
#: ``numpy.dtype`` pickle arguments a numpy scalar may carry.
SCALAR_DTYPES = ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16")
#: The values a reader builds that hold nothing else.
LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, np.bool_, np.number)
_KEYS = (type(None), bool, int, float, str, bytes)
_STRINGS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING")
#: The opcodes that push a new empty (or constant) object.
_MAKERS = {"NONE": lambda: None, "NEWTRUE": lambda: True, "NEWFALSE": lambda: False, "EMPTY_TUPLE": tuple,
           "EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_SET": set}


def short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` of a plain value from a file, cut to ``limit`` characters (messages never print more)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...(%d characters)" % len(text)


class Refused(Exception):
    """The pickle asks for something the allowlist does not hold (the message says what)."""


class Invalid(Exception):
    """The pickle is not well-formed, or not what the caller reads (the message says where)."""


@dataclass(frozen=True)
class Allowlist:
    """The globals a :class:`Reader` builds, besides :data:`CALLABLES`.

    Attributes
    ----------
    classes : dict
        ``{'module.qualname': class}``: classes rebuilt without calling them (NEWOBJ with no arguments, BUILD).
    stubs : dict
        ``{'module.qualname': make}``: objects pickled as ``(global, (None,), state)``: REDUCE calls
        ``make(count, byte)`` (count: the how-manieth stub) for a :class:`Stub`, and BUILD gives it its state.
    refusal : str
        What follows "which" in a refusal: e.g. ``"a trainer state file never holds (it holds ...)"``.
    """

    classes: Dict[str, type]
    stubs: Dict[str, Callable[[int, int], "Stub"]]
    refusal: str

    def names(self) -> frozenset:
        """Every global name the reader builds."""
        return frozenset(self.classes) | frozenset(self.stubs) | frozenset(CALLABLES)


class Global:
    """What GLOBAL / STACK_GLOBAL push: an allowed name, until REDUCE or NEWOBJ uses it; ``kind`` is ``"class"``,
    ``"call"`` (a function of :data:`CALLABLES`) or ``"stub"`` (``target`` makes a :class:`Stub`)."""

    def __init__(self, name: str, kind: str, target: Any):
        self.name, self.kind, self.target = name, kind, target


class Stub:
    """Stands for an object while a pickle is read, until its BUILD state is checked (by :meth:`build`)."""

    def build(self, state: Any) -> None:
        """Take and check the state BUILD gives; raise Invalid when it is not what the object holds."""
        raise NotImplementedError


class DtypeStub(Stub):
    """Stands for ``numpy.dtype(*args)`` until its BUILD state is checked against the canonical one."""

    def __init__(self, *args):
        if len(args) != 3 or args[0] not in SCALAR_DTYPES or args[1:] != (False, True):
            raise Refused("calls numpy.dtype(%s); the numpy scalars read have dtypes %s" % (
                repr(args[0]) if args and type(args[0]) is str else ", ".join(type(arg).__name__ for arg in args),
                ", ".join(SCALAR_DTYPES)))
        self.dtype, self.state = np.dtype(args[0]), None

    def build(self, state: Any) -> None:
        self.state = state  # checked by resolve, once the whole pickle is read

    def resolve(self) -> np.dtype:
        """The dtype, once its state is checked; Invalid when the state is not the dtype's own."""
        if self.state != self.dtype.__reduce__()[2]:  # never repr'd: it may be a huge shared tuple
            raise Invalid("numpy dtype %s has a state that is not its own (%r)"
                          % (self.dtype, self.dtype.__reduce__()[2]))
        return self.dtype


def _numpy_scalar(dtype, data=None):
    if not isinstance(dtype, DtypeStub) or not isinstance(data, bytes):
        raise Refused("calls numpy.core.multiarray.scalar(%s, %s); a numpy scalar is (numeric dtype, bytes)"
                      % (type(dtype).__name__, type(data).__name__))
    real = dtype.resolve()
    if len(data) != real.itemsize:
        raise Invalid("numpy %s scalar has %d bytes, not %d" % (real, len(data), real.itemsize))
    return np.frombuffer(data, dtype=real)[0]


def _bytearray(*args):
    if args == ():
        return bytearray()
    if len(args) == 1 and isinstance(args[0], bytes):
        return bytearray(args[0])
    if len(args) == 2 and isinstance(args[0], str) and args[1] == "latin-1":  # protocol 2
        return bytearray(args[0].encode("latin-1"))
    raise Refused("calls builtins.bytearray with (%s); bytearrays are made from bytes"
                  % ", ".join(type(arg).__name__ for arg in args))


def _container(kind):
    def make(*args):
        if len(args) > 1 or (args and not isinstance(args[0], (list, tuple))):
            raise Refused("calls builtins.%s with (%s); sets are made from a list"
                          % (kind.__name__, ", ".join(type(arg).__name__ for arg in args)))
        return kind(*args)
    return make


#: Functions a pickle may call (REDUCE) by global name: their stand-ins check what they are given.
CALLABLES = {"builtins.bytearray": _bytearray, "builtins.set": _container(set),
             "builtins.frozenset": _container(frozenset), "numpy.dtype": DtypeStub,
             "numpy.core.multiarray.scalar": _numpy_scalar, "numpy._core.multiarray.scalar": _numpy_scalar}


def _keys(items, pos):
    """Dict keys and set items: plain values only (hashing a deep shared tuple would take forever)."""
    for item in items:
        if type(item) not in _KEYS:
            raise Invalid("a %s is used (byte %d) as a dict key or set item; keys are %s"
                          % (type(item).__name__, pos, ", ".join(kind.__name__ for kind in _KEYS)))
    return items


class Reader:
    """Runs the allowed pickle opcodes on a stack, for ``allow``, over ``size`` bytes (frames are checked
    against it); what it builds is checked as it is built.

    The stack is kept in segments, as ``pickle`` keeps it: MARK starts a new one, and no opcode reaches below
    the last mark. ``instances`` holds the objects NEWOBJ made, by id (kept alive, so the ids stay unique).
    """

    def __init__(self, allow: Allowlist, size: int):
        self.allow, self.size = allow, size
        self.stack, self.metastack, self.memo = [], [], {}
        self.instances = {}
        self.stubs, self.last, self.frame_end = 0, 0, 0

    def run(self, stream: BinaryIO) -> Any:
        """Read one pickle from ``stream`` (left just after its STOP) and return its object, stand-ins and all.

        Raises
        ------
        Refused, Invalid
            Before anything refused is built or called.
        """
        for opcode, arg, pos in pickletools.genops(stream):
            name = opcode.name
            self._check_frame(pos)
            if name not in OPCODES:
                if name == "INST":
                    self._resolve(arg.replace(" ", ".", 1))
                raise Refused("uses pickle opcode %s (byte %d), which %s" % (name, pos, self.allow.refusal))
            if name == "STOP":
                self._check_frame(pos + 1)
                if len(self.stack) != 1 or self.metastack:
                    raise Invalid("the pickle ends (byte %d) with %d objects on its stack, not 1"
                                  % (pos, len(self.stack) + sum(map(len, self.metastack))))
                return self.stack.pop()
            if name in _MAKERS:
                self.stack.append(_MAKERS[name]())
            else:
                getattr(self, "op_" + name.lower())(arg, pos)
        raise Invalid("the pickle ends before its STOP opcode")

    # --- stack and frames -----------------------------------------------------------------------------------
    def _push(self, arg, pos):
        self.stack.append(arg)

    # the opcodes that push their argument: ints, floats, strings, bytes
    op_binint = op_binint1 = op_binint2 = op_long1 = op_long4 = op_binfloat = _push
    op_binunicode = op_short_binunicode = op_binunicode8 = op_binbytes = op_short_binbytes = op_binbytes8 = _push

    def _pop_mark(self):
        items, self.stack = self.stack, self.metastack.pop()
        return items

    def op_proto(self, arg, pos):
        if not 2 <= arg <= 5:
            raise Invalid("pickle protocol %d; this reader reads protocols 2 to 5" % arg)

    def _check_frame(self, pos):
        """Frames as ``pickle``'s pure-Python reader takes them: no opcode (the one ending at ``pos``) crosses a
        frame's end. Where one would, pickle's readers disagree with each other about what the bytes mean."""
        if self.last < self.frame_end < pos:
            raise Invalid("the opcode at byte %d crosses the end of its frame (byte %d)"
                          % (self.last, self.frame_end))
        self.last = pos

    def op_frame(self, arg, pos):
        if arg > self.size - (pos + 9):
            raise Invalid("a frame of %d bytes announced at byte %d runs past the end" % (arg, pos))
        if pos < self.frame_end:
            raise Invalid("a frame begins (byte %d) before the previous one ends (byte %d)" % (pos, self.frame_end))
        self.frame_end = pos + 9 + arg

    def op_bytearray8(self, arg, pos):
        self.stack.append(bytearray(arg))

    def op_mark(self, arg, pos):
        self.metastack.append(self.stack)
        self.stack = []

    def op_pop(self, arg, pos):
        if self.stack:
            self.stack.pop()
        else:
            self._pop_mark()

    def op_pop_mark(self, arg, pos):
        self._pop_mark()

    def op_dup(self, arg, pos):
        self.stack.append(self.stack[-1])

    # --- containers -----------------------------------------------------------------------------------------
    def op_tuple(self, arg, pos):
        items = tuple(self._pop_mark())  # first: it changes self.stack
        self.stack.append(items)

    def _tuple_n(self, count, arg, pos):
        if len(self.stack) < count:
            raise Invalid("a %d-tuple is built (byte %d) from %d objects" % (count, pos, len(self.stack)))
        items = tuple(self.stack[len(self.stack) - count:])
        del self.stack[len(self.stack) - count:]
        self.stack.append(items)

    op_tuple1 = partialmethod(_tuple_n, 1)
    op_tuple2 = partialmethod(_tuple_n, 2)
    op_tuple3 = partialmethod(_tuple_n, 3)

    def op_list(self, arg, pos):
        items = self._pop_mark()
        self.stack.append(items)

    def op_dict(self, arg, pos):
        items = self._pop_mark()
        self.stack.append(self._setitems({}, items, pos))

    def op_frozenset(self, arg, pos):
        items = frozenset(_keys(self._pop_mark(), pos))
        self.stack.append(items)

    def _target(self, kind, opcode, pos):
        target = self.stack[-1]
        if type(target) is not kind:
            raise Invalid("%s (byte %d) is applied to a %s, not a %s" % (opcode, pos, type(target).__name__,
                                                                         kind.__name__))
        return target

    def op_append(self, arg, pos):
        value = self.stack.pop()
        self._target(list, "APPEND", pos).append(value)

    def op_appends(self, arg, pos):
        items = self._pop_mark()
        self._target(list, "APPENDS", pos).extend(items)

    def op_additems(self, arg, pos):
        items = self._pop_mark()
        self._target(set, "ADDITEMS", pos).update(_keys(items, pos))

    def _setitems(self, target, items, pos):
        if len(items) % 2:
            raise Invalid("dict items are set (byte %d) from an odd number of objects" % pos)
        for key, value in zip(_keys(items[::2], pos), items[1::2]):
            target[key] = value
        return target

    def op_setitem(self, arg, pos):
        value, key = self.stack.pop(), self.stack.pop()
        self._setitems(self._target(dict, "SETITEM", pos), [key, value], pos)

    def op_setitems(self, arg, pos):
        items = self._pop_mark()
        self._setitems(self._target(dict, "SETITEMS", pos), items, pos)

    # --- memo -----------------------------------------------------------------------------------------------
    def op_binput(self, arg, pos):
        self.memo[arg] = self.stack[-1]

    op_long_binput = op_binput

    def op_memoize(self, arg, pos):
        self.memo[len(self.memo)] = self.stack[-1]

    def op_binget(self, arg, pos):
        if arg not in self.memo:
            raise Invalid("memo entry %d is read (byte %d) but was never stored" % (arg, pos))
        self.stack.append(self.memo[arg])

    op_long_binget = op_binget

    # --- globals and objects --------------------------------------------------------------------------------
    def _resolve(self, name):
        if name in self.allow.classes:
            return Global(name, "class", self.allow.classes[name])
        if name in self.allow.stubs:
            return Global(name, "stub", self.allow.stubs[name])
        if name in CALLABLES:
            return Global(name, "call", CALLABLES[name])
        raise Refused("asks for global %s, which %s" % (short(name), self.allow.refusal))

    def op_global(self, arg, pos):
        self.stack.append(self._resolve(arg.replace(" ", ".", 1)))

    def op_stack_global(self, arg, pos):
        name, module = self.stack.pop(), self.stack.pop()
        if not isinstance(module, str) or not isinstance(name, str):
            raise Invalid("a global is named (byte %d) by a %s and a %s, not two strings"
                          % (pos, type(module).__name__, type(name).__name__))
        self.stack.append(self._resolve(module + "." + name))

    def op_reduce(self, arg, pos):
        args, func = self.stack.pop(), self.stack.pop()
        if not isinstance(func, Global) or not isinstance(args, tuple):
            raise Invalid("a %s is called (byte %d) with a %s; only allowed globals are called, with a tuple"
                          % (type(func).__name__, pos, type(args).__name__))
        if func.kind == "class":
            raise Refused("calls class %s (byte %d), which would run its __init__; allowed classes are rebuilt "
                          "without calling them (NEWOBJ)" % (short(func.name), pos))
        if func.kind == "call":
            self.stack.append(func.target(*args))
            return
        if args != (None,):
            raise Invalid("%s is called (byte %d) with %d arguments; a pickled array is rebuilt from (None,)"
                          % (func.name, pos, len(args)))
        self.stubs += 1
        self.stack.append(func.target(self.stubs, pos))

    def op_newobj(self, arg, pos):
        args, cls = self.stack.pop(), self.stack.pop()
        if not isinstance(cls, Global) or cls.kind != "class" or args != ():
            raise Refused("creates (NEWOBJ, byte %d) %s with %s; allowed classes are created with no arguments"
                          % (pos, repr(cls.name) if isinstance(cls, Global) else "a " + type(cls).__name__,
                             type(args).__name__))
        obj = cls.target.__new__(cls.target)
        self.instances[id(obj)] = obj
        self.stack.append(obj)

    def op_build(self, arg, pos):
        state, target = self.stack.pop(), self.stack[-1]
        if isinstance(target, Stub):
            target.build(state)
        elif id(target) in self.instances:
            if not isinstance(state, dict) or not all(type(key) is str for key in state):
                raise Invalid("a %s gets a state (byte %d) that is not a dict of attributes: %s"
                              % (type(target).__name__, pos, type(state).__name__))
            setstate = getattr(type(target), "__setstate__", None)
            if setstate is not None:
                setstate(target, state)
            else:
                vars(target).update(state)
        else:
            raise Invalid("the state of a %s is set (BUILD, byte %d)" % (type(target).__name__, pos))


def _named_globals(stream: BinaryIO) -> Iterator[Tuple[str, int]]:
    """``(name, byte)`` of each global a pickle names, found by following its stack symbolically (only strings
    are tracked; nothing is built). Stops quietly where the pickle stops making sense: running it reports that."""
    mark, stack, memo = object(), [], {}
    try:
        for opcode, arg, pos in pickletools.genops(stream):
            name = opcode.name
            if name in ("GLOBAL", "INST"):
                yield arg.replace(" ", ".", 1), pos
            if name == "STOP":
                return
            if name == "STACK_GLOBAL":
                module, attr = stack[-2], stack[-1]
                if isinstance(module, str) and isinstance(attr, str):
                    yield module + "." + attr, pos
            if name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[arg if name != "MEMOIZE" else len(memo)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET"):
                stack.append(memo.get(arg))
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "MARK":
                stack.append(mark)
            else:
                before = opcode.stack_before
                if pickletools.markobject in before:
                    while stack.pop() is not mark:
                        pass
                    before = before[:before.index(pickletools.markobject)]
                del stack[len(stack) - len(before):]
                stack.extend([arg if name in _STRINGS else None] * len(opcode.stack_after))
    except Exception:  # pylint: disable=broad-except  (garbage: the reader says what is wrong)
        return


def check_globals(data: bytes, allow: Allowlist) -> None:
    """Refuse ``data`` if the pickle it starts with names a global ``allow`` lacks; builds and runs nothing.

    A first pass over the opcodes, before any object is built: so a global is named even where the pickle
    breaks off or uses a refused opcode before it (the protocol 0 ``STRING`` of most published exploits).

    Raises
    ------
    Refused
        Naming the first such global (``module.name``) and its byte.
    """
    allowed = allow.names()
    for name, pos in _named_globals(io.BytesIO(data)):
        if name not in allowed:
            raise Refused("asks for global %s (byte %d), which %s" % (short(name), pos, allow.refusal))
