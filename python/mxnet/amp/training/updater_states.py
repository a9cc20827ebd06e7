"""Updater states read without running code: what a trainer state file may hold, checked, and installed.

``Updater.get_states`` pickles ``(states, optimizer)`` (what ``gluon.Trainer.save_states`` writes) or the
``states`` dict alone (``Module.save_optimizer_states``), and MXNet's ``Updater.set_states`` reads them back with
``pickle.loads``, which calls whatever the file names: ``os.system``, ``builtins.eval``... :func:`loads` reads
the same bytes with the allow-listed reader of :mod:`.pickle_reader`, allowing only what MXNet 1.9.1's updaters
and this package's trainers write:

* ``NDArray`` states (``mxnet.numpy.ndarray`` too), alone or ``None``, in tuples and lists (multi-precision pairs
  nest), in a dict keyed by parameter index or name. Their bytes are read by :mod:`.ndarray_bytes`; MXNet's C++
  loader never sees them. The arrays are made on ``mx.cpu()`` once the whole file checked out; the updater moves
  each to its parameter's device on first use, as it does after MXNet's own loader;
* the optimizers MXNet and this package register in ``mx.optimizer``, the learning-rate schedulers of
  ``mx.lr_scheduler``, rebuilt the way pickle rebuilds them (``cls.__new__`` then their state; ``__init__``
  never runs), and the old class paths of :data:`LEGACY_OPTIMIZERS`;
* numpy scalars and dtypes of bool, integer, float and complex types; ``None``, bools, numbers, strings,
  bytes, tuples, lists, dicts and sets.

Anything else is refused with a ValueError: a global (named ``module.name``, e.g. ``'posix.system'``) outside the
list, by a first pass over the opcodes (:func:`check_globals`) before any object is built; then, as the reader
reaches it and before it is called, a call of an allowed class (that would run its ``__init__``), persistent ids,
extension codes, protocol 0/1 opcodes, and any object or state of a kind the files never hold. Nesting is
bounded (:data:`MAX_DEPTH`) and shared objects are walked once, so no file makes the reader hang; error messages
never print what the file holds. ``trusted=True`` reads with ``pickle`` itself (mapping the legacy class paths),
for files of custom optimizers: only for files you trust.
"""
from functools import partial
import io
import pickle
from typing import Any, Optional, Tuple

from mxnet import lr_scheduler
from mxnet import ndarray as nd
from mxnet import util
from mxnet.context import cpu
from mxnet.optimizer import Optimizer

from . import ndarray_bytes, pickle_reader
from .pickle_reader import LEAVES, Allowlist, DtypeStub, Global, Invalid, Reader, Refused, Stub, short

__all__ = ["LEGACY_OPTIMIZERS", "UpdaterStates", "check_globals", "loads", "install"]

#: Globals that pickled arrays name, and which array type they become ("nd": NDArray, "np": mxnet.numpy.ndarray).
ARRAY_GLOBALS = {"mxnet.ndarray.ndarray.NDArray": "nd", "mxnet.numpy.ndarray": "np",
                 "mxnet.numpy.multiarray.ndarray": "np"}
#: Class paths files written by earlier versions of this package name -> the optimizer's ``mx.optimizer`` name.
#: (``mxnet.amp.adamw.AdamW``: AdamW before mxnet.amp moved into subpackages.)
LEGACY_OPTIMIZERS = {"mxnet.amp.adamw.AdamW": "adamw"}
#: Deepest nesting of containers and objects a file may hold (real files nest 4 levels).
MAX_DEPTH = 32
_TRUST_HINT = ("nothing was built from it. If you trust the file (e.g. it holds a custom optimizer), pass "
               "trusted=True to trainer.load_states or amp.load_states.")
_REFUSAL = ("a trainer state file never holds (it holds NDArray states, the optimizers of mx.optimizer and the "
            "schedulers of mx.lr_scheduler, numpy scalars and plain containers)")


def optimizer_classes() -> dict:
    """The optimizer classes a state file may hold, by the global name pickle gives them.

    Returns
    -------
    dict
        ``{'module.qualname': class}`` of the classes registered in ``mx.optimizer`` that MXNet or this package
        define (a custom optimizer registered by user code is not among them: load its files with
        ``trusted=True``), plus :data:`LEGACY_OPTIMIZERS`.
    """
    registry = Optimizer.opt_registry
    out = {"%s.%s" % (cls.__module__, cls.__qualname__): cls for cls in registry.values()
           if cls.__module__.startswith("mxnet.")}
    out.update({old: registry[name] for old, name in LEGACY_OPTIMIZERS.items() if name in registry})
    return out


def scheduler_classes() -> dict:
    """``{'mxnet.lr_scheduler.Name': class}``: the learning-rate schedulers ``mx.lr_scheduler`` defines."""
    return {"%s.%s" % (cls.__module__, cls.__qualname__): cls for cls in vars(lr_scheduler).values()
            if isinstance(cls, type) and issubclass(cls, lr_scheduler.LRScheduler)
            and cls.__module__ == lr_scheduler.__name__}


class ArrayStub(Stub):
    """Stands for an NDArray while a pickle is read: REDUCE makes it, BUILD gives it its checked bytes (``raw``,
    a :class:`~mxnet.amp.training.ndarray_bytes.RawArray`; None until then)."""

    def __init__(self, kind: str, count: int, pos: int):
        self.kind, self.what, self.raw = kind, "NDArray %d (byte %d)" % (count, pos), None

    def build(self, state: Any) -> None:
        """Check the BUILD state of a pickled NDArray (``{'handle': raw bytes}``) and parse its bytes."""
        if self.raw is not None:
            raise Invalid("%s gets its data twice" % self.what)
        if not isinstance(state, dict) or set(state) != {"handle"}:
            found = ("{%s}" % ", ".join(short(key, 40) for key, _ in zip(state, range(3)))
                     if isinstance(state, dict) else "a " + type(state).__name__)
            raise Invalid("%s has state %s; an NDArray's is {'handle': bytes}" % (self.what, found))
        if state["handle"] is None:
            raise Invalid("%s has no data (handle None); states are never empty arrays" % self.what)
        try:
            self.raw = ndarray_bytes.parse(state["handle"], self.what)
        except (TypeError, ValueError) as err:
            raise Invalid(str(err)) from None
        if (self.raw.data.ndim == 0 or self.raw.data.size == 0) and not util.is_np_shape():
            raise Invalid("%s has shape %s, which needs numpy shape semantics; load the file after "
                          "mx.npx.set_np()" % (self.what, self.raw.data.shape))

    def real(self) -> nd.NDArray:
        """A new array on ``mx.cpu()`` with the values read (``mxnet.numpy.ndarray`` for the ``'np'`` kind)."""
        array = nd.array(self.raw.data, ctx=cpu(), dtype=self.raw.data.dtype)
        return array.as_np_ndarray() if self.kind == "np" else array


def _allowlist(optimizers):
    """What :class:`~.pickle_reader.Reader` may build from a state file, given its optimizer classes."""
    stubs = {name: partial(ArrayStub, kind) for name, kind in ARRAY_GLOBALS.items()}
    return Allowlist(dict(optimizers, **scheduler_classes()), stubs, _REFUSAL)


def check_globals(data: bytes, source: str = "<bytes>") -> None:
    """Refuse ``data`` if the pickle it starts with names a global a state file never holds; runs nothing.

    A first pass over the opcodes (:func:`.pickle_reader.check_globals`), before any object is built: so a global
    is named even where the file breaks off or uses a refused opcode before it (the protocol 0 ``STRING`` of
    most published exploits), and :mod:`.checkpoint` names it before checking a file's framing.

    Raises
    ------
    ValueError
        Naming the first such global (``module.name``) and ``trusted=True``.
    """
    try:
        pickle_reader.check_globals(data, _allowlist(optimizer_classes()))
    except Refused as err:
        raise ValueError("%s %s; %s" % (source, err, _TRUST_HINT)) from None


def _check(obj, instances, heights, depth=0):
    """Check that ``obj`` holds only what a state file may hold, at most MAX_DEPTH levels deep; its height.

    Each object is checked once (``heights``), so shared objects cost nothing more; a cycle is too deep.
    """
    if depth > MAX_DEPTH:
        raise Invalid("objects nest deeper than %d levels (or one contains itself)" % MAX_DEPTH)
    if isinstance(obj, LEAVES):
        return 0
    height = heights.get(id(obj))
    if height is None:
        if isinstance(obj, Global):
            raise Refused("holds the global %s itself, which a trainer state file never does" % short(obj.name))
        if isinstance(obj, ArrayStub):
            if obj.raw is None:
                raise Invalid("%s has no data" % obj.what)
            children = ()
        elif isinstance(obj, DtypeStub):
            obj.resolve()
            children = ()
        elif isinstance(obj, dict):
            children = list(obj.values())
        elif isinstance(obj, (tuple, list, set, frozenset)):
            children = obj
        elif id(obj) in instances:
            children = list(vars(obj).values())
        else:
            raise Invalid("%s objects are never part of updater states" % type(obj).__name__)
        height = 1 + max((_check(child, instances, heights, depth + 1) for child in children), default=0)
        heights[id(obj)] = height
    if depth + height > MAX_DEPTH:
        raise Invalid("objects nest deeper than %d levels" % MAX_DEPTH)
    return height


def _check_state(value, where, depth=0):
    """An updater state: None, an array, or a tuple or list of states (multi-precision pairs nest)."""
    if value is None or isinstance(value, ArrayStub):
        return
    if isinstance(value, (tuple, list)) and depth < 4:
        for item in value:
            _check_state(item, where, depth + 1)
        return
    raise Invalid("parameter %s has a %s as its state; states are NDArrays, None, or tuples of them"
                  % (short(where, 40), type(value).__name__))


def _split(top, is_optimizer):
    """``(states, optimizer or None)`` as ``Updater.set_states`` splits them, checked."""
    states, optimizer = top if isinstance(top, tuple) and len(top) == 2 else (top, None)
    if not isinstance(states, dict) or (isinstance(top, tuple) and not is_optimizer(optimizer)):
        raise Invalid("expected pickled updater states (a dict or a (dict, Optimizer) tuple), found %s" % (
            "(%s, %s)" % (type(states).__name__, type(optimizer).__name__) if isinstance(top, tuple)
            else type(top).__name__))
    return states, optimizer


class _Real:
    """Turns the stand-ins of a checked tree into MXNet arrays and numpy dtypes, keeping shared objects shared."""

    def __init__(self):
        self.memo = {}

    def __call__(self, obj):
        if isinstance(obj, LEAVES):
            return obj
        if id(obj) in self.memo:
            return self.memo[id(obj)]
        if isinstance(obj, ArrayStub):
            out = obj.real()
        elif isinstance(obj, DtypeStub):
            out = obj.resolve()
        elif isinstance(obj, tuple):
            out = tuple(self(item) for item in obj)
        elif isinstance(obj, (set, frozenset)):
            out = type(obj)(self(item) for item in obj)
        elif isinstance(obj, list):
            out = self.memo[id(obj)] = []
            out.extend(self(item) for item in obj)
        elif isinstance(obj, dict):
            out = self.memo[id(obj)] = {}
            for key, value in obj.items():
                out[key] = self(value)  # keys are plain values (the reader checked them)
        else:  # an optimizer or scheduler: its attributes are made real in place, once
            self.memo[id(obj)] = obj
            attrs = vars(obj)
            for key, value in list(attrs.items()):
                attrs[key] = self(value)
            return obj
        self.memo[id(obj)] = out
        return out


class UpdaterStates:
    """The updater states and optimizer a state file holds, as :func:`loads` read and checked them.

    Attributes
    ----------
    optimizer : mx.optimizer.Optimizer or None
        The pickled optimizer (``gluon.Trainer`` files), None for a states-only file (``Module`` files).
    length : int
        Bytes the pickle took (a file may go on after it: the AMP section).
    trusted : bool
        Whether it was read with ``pickle`` itself.
    """

    def __init__(self, states, optimizer, length, trusted, data=None):
        self.optimizer, self.length, self.trusted = optimizer, length, trusted
        self._states, self._data = states, data
        self._optimizer_real = False
        self._first = True

    def materialize(self) -> Tuple[dict, Optional[Optimizer]]:
        """A new states dict with new arrays (each updater owns its own), and the one optimizer.

        Returns
        -------
        tuple of (dict, mx.optimizer.Optimizer or None)
            The arrays are on ``mx.cpu()`` (``Updater`` moves them to the parameters' devices on first use).
        """
        if self.trusted:
            if self._first:
                self._first = False
                return self._states, self.optimizer
            return _split(_TrustedUnpickler(io.BytesIO(self._data)).load(), _is_optimizer)[0], self.optimizer
        real = _Real()
        states = real(self._states)
        if self.optimizer is not None and not self._optimizer_real:
            real(self.optimizer)
            self._optimizer_real = True
        return states, self.optimizer


class _TrustedUnpickler(pickle.Unpickler):
    """``pickle`` itself, with the class paths of :data:`LEGACY_OPTIMIZERS` mapped to today's classes."""

    def find_class(self, module, name):
        legacy = LEGACY_OPTIMIZERS.get("%s.%s" % (module, name))
        if legacy is not None and legacy in Optimizer.opt_registry:
            return Optimizer.opt_registry[legacy]
        return super().find_class(module, name)


def _is_optimizer(obj):
    return isinstance(obj, Optimizer)


def loads(data: bytes, source: str = "<bytes>", trusted: bool = False) -> UpdaterStates:
    """Read pickled updater states from the start of ``data`` without running anything the file names.

    Parameters
    ----------
    data : bytes
        Starts with what ``Updater.get_states`` returned; bytes after the pickle's STOP are left alone (their
        count is ``data`` length minus ``UpdaterStates.length``).
    source : str
        Names the file in error messages.
    trusted : bool
        Read with ``pickle`` itself, which runs whatever the file names: only for files you trust (custom
        optimizers, sparse states).

    Returns
    -------
    UpdaterStates

    Raises
    ------
    TypeError
        ``trusted`` is not a bool.
    ValueError
        The file asks for a global, an object or an opcode a state file never holds (the message names it, and
        ``trusted=True``), or is not well-formed updater states (the message says where). Nothing the file
        names has been called.

    Example
    -------
    >>> loaded = loads(trainer._updaters[0].get_states(dump_optimizer=True))
    >>> states, optimizer = loaded.materialize()
    """
    if not isinstance(trusted, bool):
        raise TypeError("trusted must be True or False, got %r" % (trusted,))
    if not trusted:
        check_globals(data, source)
    stream = io.BytesIO(data)
    try:
        if trusted:
            states, optimizer = _split(_TrustedUnpickler(stream).load(), _is_optimizer)
            return UpdaterStates(states, optimizer, stream.tell(), True, data=data[:stream.tell()])
        optimizers = optimizer_classes()
        reader = Reader(_allowlist(optimizers), len(data))
        top = reader.run(stream)
        _check(top, reader.instances, {})
        states, optimizer = _split(top, lambda obj: type(obj) in optimizers.values())
        for key, value in states.items():
            if type(key) not in (int, str):
                raise Invalid("a state is stored under a %s key; keys are parameter indices (int) or names (str)"
                              % type(key).__name__)
            _check_state(value, key)
        if optimizer is not None and not vars(optimizer):
            raise Invalid("the %s optimizer has no attributes" % type(optimizer).__name__)
        return UpdaterStates(states, optimizer, stream.tell(), False)
    except Refused as err:
        raise ValueError("%s %s; %s" % (source, err, _TRUST_HINT)) from None
    except Invalid as err:
        raise ValueError("%s is not a trainer state file (optimizer states: %s)" % (source, err)) from None
    except Exception as err:  # garbage raises many types in pickle and genops: report them all the same way
        raise ValueError("%s is not a trainer state file (optimizer states do not unpickle: %s: %s)"
                         % (source, type(err).__name__, err)) from err


def install(updaters: list, loaded: UpdaterStates) -> None:
    """Give each updater the loaded states as ``Updater.set_states`` would, without ``pickle``.

    Every array is made before the first updater changes; each updater gets its own arrays (as each
    ``set_states`` call unpickles its own), marked not yet synced to a device, and the file's optimizer (when it
    holds one; the same object for all).

    Parameters
    ----------
    updaters : list of mx.optimizer.Updater
    loaded : UpdaterStates
    """
    prepared = [loaded.materialize() for _ in updaters]
    for updater, (states, optimizer) in zip(updaters, prepared):
        updater.states = states
        updater.states_synced = dict.fromkeys(states, False)
        if optimizer is not None:
            updater.optimizer = optimizer
