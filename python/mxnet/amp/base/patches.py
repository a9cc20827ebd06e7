"""Every change mxnet.amp makes to objects it does not own, recorded so that ``amp.reset()`` puts each back.

``amp.init`` wraps MXNet's operator front ends and a few methods of ``Block``, ``HybridBlock`` and ``Symbol``;
``amp.init_trainer(optimizer)`` wraps ``Module.update`` and ``Module.backward``;
``amp.init_trainer(trainer, weights="bfloat16")`` casts parameters (recorded as a function that casts them back);
importing the package registers ONNX converters with MXNet's exporter. All of them go through :data:`PATCHES`, and :func:`mxnet.amp.reset`
restores them, newest first, to the very objects they replaced. A Gluon trainer given to ``init_trainer`` is
changed on the instance only (its wrapped methods live in the instance's ``__dict__``), never on its class.
"""
from typing import Any, Callable, List, MutableMapping, Optional, Tuple

__all__ = ["Patches", "PATCHES"]

_MISSING = object()


class Patch:
    """One recorded change: attribute ``name`` of ``owner`` (or key ``name`` of a mapping ``owner``), the value
    it had, and the group it belongs to."""

    __slots__ = ("owner", "name", "original", "item", "group")

    def __init__(self, owner: Any, name: Any, original: Any, item: bool, group: str):
        self.owner, self.name, self.original, self.item, self.group = owner, name, original, item, group

    def current(self) -> Any:
        """What the patched place holds now."""
        if self.item:
            return self.owner.get(self.name, _MISSING)
        return self.owner.__dict__.get(self.name, _MISSING) if isinstance(self.owner, type) else \
            getattr(self.owner, self.name, _MISSING)

    def undo(self) -> None:
        """Put the original back (remove what was added where there was nothing)."""
        if self.item:
            if self.original is _MISSING:
                self.owner.pop(self.name, None)
            else:
                self.owner[self.name] = self.original
        elif self.original is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.original)

    def __repr__(self) -> str:
        where = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", type(self.owner).__name__)
        return "Patch(%s, %s%r, group=%r)" % (where, "[" if self.item else ".", self.name, self.group)


class _Callback:
    """A recorded change undone by calling a function (see :meth:`Patches.call_on_restore`)."""

    __slots__ = ("undo", "group")

    def __init__(self, undo: Callable[[], None], group: str):
        self.undo, self.group = undo, group

    def current(self) -> Any:
        """The function that undoes the change."""
        return self.undo

    def __repr__(self) -> str:
        return "Patch(%s(), group=%r)" % (getattr(self.undo, "__qualname__", "callback"), self.group)


class Patches:
    """A list of :class:`Patch` es, undone together, or a group at a time."""

    def __init__(self):
        self._patches: List[Patch] = []

    def set_attr(self, owner: Any, name: str, value: Any, group: str) -> Any:
        """Set ``owner.name = value`` and record the old value (a class's own attribute: ``owner.__dict__``).

        Returns ``value``.
        """
        original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        self._patches.append(Patch(owner, name, original, False, group))
        setattr(owner, name, value)
        return value

    def wrap(self, owner: Any, name: str, make: Callable[[Callable], Callable], group: str) -> Callable:
        """Replace method or function ``owner.name`` by ``make(original)`` and record it; returns the wrapper."""
        return self.set_attr(owner, name, make(getattr(owner, name)), group)

    def set_item(self, mapping: MutableMapping, key: Any, value: Any, group: str) -> Any:
        """Set ``mapping[key] = value`` and record the old value (or its absence). Returns ``value``."""
        self._patches.append(Patch(mapping, key, mapping.get(key, _MISSING), True, group))
        mapping[key] = value
        return value

    def call_on_restore(self, undo: Callable[[], None], group: str) -> None:
        """Record ``undo``, a function that puts back a change no attribute holds (e.g. casts parameters back)."""
        self._patches.append(_Callback(undo, group))

    def holds(self, group: str) -> bool:
        """Whether patches of ``group`` are in place."""
        return any(p.group == group for p in self._patches)

    def entries(self, group: Optional[str] = None) -> Tuple[Patch, ...]:
        """The patches in place (of ``group``, or all), oldest first."""
        return tuple(p for p in self._patches if group is None or p.group == group)

    def restore(self, group: Optional[str] = None) -> int:
        """Undo the patches (of ``group``, or all), newest first; returns how many were undone."""
        undo = [p for p in self._patches if group is None or p.group == group]
        for patch in reversed(undo):
            patch.undo()
        self._patches = [p for p in self._patches if p not in undo]
        return len(undo)


#: The process's record of every change mxnet.amp made outside its own objects.
PATCHES = Patches()
