"""The public surface: ``mxnet.amp.__all__`` is the API, every function and method of it carries type hints, and
the module paths of mxnet.amp 0.1 give a clear error that names where each went."""
import inspect

import pytest
from mxnet import amp


def _unannotated(func):
    """The parameters (and ``->`` for the return) of ``func`` without a type hint."""
    sig = inspect.signature(func)
    missing = [n for n, p in sig.parameters.items() if n not in ("self", "cls") and p.annotation is p.empty]
    if sig.return_annotation is sig.empty and func.__name__ != "__init__":
        missing.append("->")
    return missing


def _public_callables():
    for name in amp.__all__:
        obj = getattr(amp, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__.startswith("mxnet.amp"):
            for attr, value in vars(obj).items():
                if isinstance(value, (classmethod, staticmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if inspect.isfunction(value) and (not attr.startswith("_") or attr == "__init__"):
                    yield "%s.%s" % (name, attr), value
    for name in amp.lists.__all__:
        obj = getattr(amp.lists, name)
        if inspect.isfunction(obj):
            yield "lists." + name, obj


def test_every_public_function_and_method_has_type_hints():
    bad = {name: _unannotated(func) for name, func in _public_callables() if _unannotated(func)}
    assert bad == {}


def test_the_api_is_all_and_every_name_resolves():
    assert len(amp.__all__) == len(set(amp.__all__))
    for name in amp.__all__:
        assert getattr(amp, name) is not None, name
    assert "init" in amp.__all__ and "lists" in amp.__all__


@pytest.mark.parametrize("old", sorted(amp.MOVED))
def test_old_module_paths_name_their_new_home(old):
    with pytest.raises(ImportError, match=r"mxnet\.amp\.%s moved to mxnet\.amp\." % old):
        getattr(amp, old)
    with pytest.raises(ImportError, match="moved to"):
        exec("from mxnet.amp import %s" % old, {})  # pylint: disable=exec-used


def test_upstream_list_module_paths_stay():
    from mxnet.amp.lists import symbol_bf16, symbol_fp16
    assert symbol_fp16.FP16_FUNCS and symbol_bf16.BF16_FUNCS
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        amp.nothing_here
