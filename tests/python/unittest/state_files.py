"""Shared by the tests of trainer state files (test_updater_states.py, the checkpoint fuzz): trainers that write
real files, exact snapshots of what a load restores, malicious pickles, and a reference reading of a pickle.

Everything here is independent of :mod:`mxnet.amp.training.pickle_reader`, :mod:`mxnet.amp.training.updater_states`
and :mod:`mxnet.amp.training.ndarray_bytes`, the code under test: snapshots read arrays through MXNet, and the
reference decoder parses NDArray bytes on its own.
"""
import importlib
import math
import os
import pickle
import pickletools
import struct
import subprocess
import sys

import numpy as np

import mxnet as mx
from mxnet import amp, autograd, gluon

BFLOAT16 = np.dtype([("bfloat16", np.uint16)])  # MXNet's bfloat16 as NumPy sees it
SHAPES = ((3, 4), (2, 4))  # two 2-D parameters: GroupAdaGrad takes only 2-D weights


# --- trainers that write real files ---------------------------------------------------------------------------

def scheduler(kind):
    """A fresh learning-rate scheduler of ``kind`` ('factor', 'cosine', 'multifactor', 'poly') or None."""
    return {None: lambda: None,
            "factor": lambda: mx.lr_scheduler.FactorScheduler(step=2, factor=0.7, base_lr=0.05),
            "cosine": lambda: mx.lr_scheduler.CosineScheduler(max_update=20, base_lr=0.02, final_lr=0.001),
            "multifactor": lambda: mx.lr_scheduler.MultiFactorScheduler(step=[1, 3], factor=0.5, base_lr=0.04),
            "poly": lambda: mx.lr_scheduler.PolyScheduler(max_update=30, base_lr=0.03, pwr=2)}[kind]()


#: name -> (optimizer, its arguments, parameter dtype, scheduler kind): what the fuzz and the tests train.
CONFIGS = {
    "sgd_momentum": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}, "float32", None),
    "adam": ("adam", {"learning_rate": 0.01}, "float32", "factor"),
    "adamw": ("adamw", {"learning_rate": np.float32(0.01), "wd": 0.01}, "float32", "cosine"),
    "sgd_multi_precision": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True}, "float16",
                            "multifactor"),
    "adam_multi_precision": ("adam", {"learning_rate": 0.01, "multi_precision": True}, "float16", None),
}


def make_params(dtype="float32", ctx=None, value=0.5):
    params = []
    for index, shape in enumerate(SHAPES):
        param = gluon.Parameter("p%d" % index, shape=shape, dtype=dtype, init=mx.init.Constant(value))
        param.initialize(ctx=ctx or [mx.cpu()])
        params.append(param)
    return params


def make_trainer(optimizer, optimizer_params, dtype="float32", schedule=None, with_amp=True, ctx=None,
                 value=0.5, **kwargs):
    """``(trainer, params)``: a Trainer over two fresh parameters; with ``with_amp``, ``amp.init_trainer``'d."""
    params = make_params(dtype, ctx, value)
    optimizer_params = dict(optimizer_params)
    if schedule is not None:
        optimizer_params["lr_scheduler"] = scheduler(schedule)
        if "learning_rate" in optimizer_params:  # MXNet prints a warning unless they agree
            optimizer_params["lr_scheduler"].base_lr = optimizer_params["learning_rate"]
    trainer = gluon.Trainer(params, optimizer, optimizer_params, **kwargs)
    if with_amp:
        amp.init_trainer(trainer, amp.LossScaler(init_scale=2.0 ** 4, growth_interval=2))
    return trainer, params


def make_config(name, with_amp=True, **kwargs):
    optimizer, optimizer_params, dtype, schedule = CONFIGS[name]
    return make_trainer(optimizer, optimizer_params, dtype, schedule, with_amp, **kwargs)


def train(trainer, params, steps, start=0, poison=()):
    """``steps`` steps of a loss quadratic in the parameters (any dtype on CPU, every device, numpy mode too);
    steps in ``poison`` overflow."""
    with_amp = hasattr(trainer, "_mxnet_amp")
    for step in range(start, start + steps):
        with autograd.record():
            losses = []
            for device in range(len(params[0].list_data())):
                for index, param in enumerate(params):
                    data = param.list_data()[device]
                    values = np.cos(np.arange(data.size) + 3 * step + index + device).reshape(data.shape) * 0.5
                    make = mx.np.array if isinstance(data, mx.np.ndarray) else mx.nd.array
                    coef = make(values, dtype=data.dtype, ctx=data.context)
                    losses.append((data * data * coef).sum())
            if with_amp:
                with amp.scale_loss(losses, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                autograd.backward(losses)
        if step in poison:
            params[0].grad()[0] = np.inf
        trainer.step(1)


# --- exact snapshots ------------------------------------------------------------------------------------------

def describe(obj):
    """A comparable, exact image of an object tree: arrays by dtype, shape and bytes, floats by their bits,
    objects by class and attributes (``param_dict``, which files never hold, left out)."""
    if isinstance(obj, (mx.nd.NDArray, RefArray)):
        data = obj.asnumpy()
        return ("array", type(obj).__name__ if isinstance(obj, mx.nd.NDArray) else obj.kind,
                str(np.dtype(obj.dtype)), tuple(obj.shape), data.tobytes())
    if isinstance(obj, float):
        return ("float", struct.pack("<d", obj))
    if isinstance(obj, (bool, int, str, bytes, type(None))):
        return (type(obj).__name__, obj)
    if isinstance(obj, (bytearray, complex)):
        return (type(obj).__name__, repr(obj))
    if isinstance(obj, np.generic):
        return ("numpy", obj.dtype.str, obj.tobytes())
    if isinstance(obj, np.dtype):
        return ("dtype", obj.str)
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, tuple(describe(item) for item in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((describe(k), describe(v)) for k, v in obj.items()))
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, tuple(sorted(repr(describe(item)) for item in obj)))
    if isinstance(obj, RefDtype):
        return ("dtype", obj.resolve().str)
    attrs = {k: v for k, v in vars(obj).items() if k != "param_dict"}
    return ("object", "%s.%s" % (type(obj).__module__, type(obj).__qualname__), describe(attrs))


def updaters(trainer):
    return [trainer._kvstore._updater] if trainer._update_on_kvstore else list(trainer._updaters)


def snapshot(trainer):
    """Everything a load may change, exactly: each updater's states and sync flags, which optimizer object each
    updater and the trainer hold and its attributes, and the AMP state."""
    out = {"updaters": [(describe(u.states), dict(u.states_synced), id(u.optimizer)) for u in updaters(trainer)],
           "optimizer": (id(trainer._optimizer), describe(trainer._optimizer))}
    if hasattr(trainer, "_mxnet_amp"):
        out["amp"] = amp.state_dict(trainer)
    return out


def saved(trainer):
    """What a file written now by ``trainer`` holds: its first updater's states and its optimizer."""
    return describe(updaters(trainer)[0].states), describe(trainer._optimizer)


def restored(trainer):
    """The same image of what a load put in ``trainer`` (every updater must hold the same)."""
    images = {describe(u.states) for u in updaters(trainer)}
    assert len(images) == 1, "updaters hold different states after a load"
    return images.pop(), describe(trainer._optimizer)


# --- malicious pickles ----------------------------------------------------------------------------------------

class Payload:
    """Pickles as a call of ``func(*args)``: a state file that runs code when ``pickle`` reads it."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def evil_module(folder, marker, index):
    """Write a module that creates ``marker`` when imported; return its name (``folder`` goes on sys.path)."""
    name = "evil_state_module_%d" % index
    with open(os.path.join(folder, name + ".py"), "w") as out:
        out.write("open(%r, 'w').close()\n" % marker)
    return name


#: The kinds of :func:`payloads`, for parametrising without writing a module anywhere.
PAYLOAD_KINDS = ("builtins.eval", "builtins.exec", "importlib.import_module", "os.system", "subprocess.call")


def payloads(marker, folder, index=0):
    """``{kind: (object that runs code creating marker when unpickled, the global a loader must name)}`` (writes the
    importable module of ``importlib.import_module`` into ``folder``)."""
    touch = "open(%r, 'w').close()" % marker
    return {
        "os.system": (Payload(os.system, "touch %s" % marker), "%s.system" % os.system.__module__),
        "subprocess.call": (Payload(subprocess.call, ["touch", marker]), "subprocess.call"),
        "builtins.eval": (Payload(eval, touch), "builtins.eval"),
        "builtins.exec": (Payload(exec, touch), "builtins.exec"),
        "importlib.import_module": (Payload(importlib.import_module, evil_module(folder, marker, index)),
                                    "importlib.import_module"),
    }


def protocol0_payload(marker):
    """A hand-written protocol-0 pickle calling os.system (GLOBAL opcode), the form of most published exploits."""
    return b"cos\nsystem\n(S'touch %s'\ntR." % marker.encode()


def inst_payload(marker):
    """The INST opcode: instantiate os.system with arguments, protocol 0."""
    return b"(S'touch %s'\nios\nsystem\n." % marker.encode()


# --- a reference reading of a pickle --------------------------------------------------------------------------

class RefArray:
    """The reference's NDArray: parses MXNet's raw bytes on its own (struct and NumPy), leniently about devices."""

    _DTYPES = {0: "<f4", 1: "<f8", 2: "<f2", 3: "u1", 4: "<i4", 5: "i1", 6: "<i8", 7: "?", 12: BFLOAT16}

    def __init__(self, *args):
        if args != (None,):
            raise pickle.UnpicklingError("NDArray rebuilt from %r" % (args,))
        self.kind, self.data = "NDArray", None

    def __setstate__(self, state):
        raw = state["handle"]
        if not isinstance(raw, (bytes, bytearray)) or len(state) != 1:
            raise pickle.UnpicklingError("bad NDArray state")
        magic, stype, ndim = struct.unpack_from("<Iii", raw, 0)
        if magic not in (0xF993FAC9, 0xF993FACA) or stype != 0 or not 0 <= ndim <= 32:
            raise pickle.UnpicklingError("bad NDArray header")
        shape = struct.unpack_from("<%dq" % ndim, raw, 12)
        if any(d < 0 for d in shape) or (magic == 0xF993FAC9 and (ndim == 0 or 0 in shape)):
            raise pickle.UnpicklingError("bad NDArray shape")
        offset = 12 + 8 * ndim + 8  # the device type and id are not checked
        flag, = struct.unpack_from("<i", raw, offset)
        dtype = np.dtype(self._DTYPES[flag])
        count = math.prod(shape)
        if len(raw) - offset - 4 != count * dtype.itemsize:
            raise pickle.UnpicklingError("NDArray data of the wrong length")
        self.data = np.frombuffer(bytes(raw), dtype=dtype, count=count, offset=offset + 4).reshape(shape)

    def asnumpy(self):
        return self.data

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def shape(self):
        return self.data.shape


class RefDtype:
    """The reference's numpy.dtype: its state must be the canonical one."""

    def __init__(self, *args):
        self.dtype, self.state = np.dtype(args[0]), None

    def __setstate__(self, state):
        self.state = state

    def resolve(self):
        if self.state != self.dtype.__reduce__()[2]:
            raise pickle.UnpicklingError("bad dtype state")
        return self.dtype


def _ref_scalar(dtype, data):
    real = dtype.resolve()
    if not isinstance(data, bytes) or len(data) != real.itemsize:
        raise pickle.UnpicklingError("bad scalar")
    return np.frombuffer(data, dtype=real)[0]


def globals_of(data):
    """The set of ``module.name`` globals a pickle names (GLOBAL and STACK_GLOBAL of string constants)."""
    names, strings = set(), []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"):
            strings.append(arg)
        elif opcode.name == "STACK_GLOBAL":
            names.add("%s.%s" % (strings[-2], strings[-1]))
        elif opcode.name == "GLOBAL":
            names.add(arg.replace(" ", "."))
        if opcode.name == "STOP":
            break
    return names


class RefUnpickler(pickle._Unpickler):  # pylint: disable=protected-access
    """``pickle``'s pure-Python reader (its memo is a dict, its frames strict), restricted to the globals of a
    genuine file, with NDArray and numpy dtypes as above."""

    def __init__(self, stream, allowed):
        super().__init__(stream)
        self.allowed = allowed

    def find_class(self, module, name):
        full = "%s.%s" % (module, name)
        if full not in self.allowed:
            raise pickle.UnpicklingError("global %s is not in the genuine file" % full)
        if full == "mxnet.ndarray.ndarray.NDArray":
            return RefArray
        if full == "numpy.dtype":
            return RefDtype
        if full.endswith("multiarray.scalar"):
            return _ref_scalar
        return super().find_class(module, name)

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent id")


def reference_read(data, allowed):
    """``(states image, optimizer image or None)`` as ``pickle`` reads ``data`` (restricted as above), or raises.

    What the allow-listed unpickler accepts must read the same here (it may refuse more)."""
    import io
    top = RefUnpickler(io.BytesIO(data), allowed).load()
    states, optimizer = top if isinstance(top, tuple) and len(top) == 2 else (top, None)
    if not isinstance(states, dict):
        raise pickle.UnpicklingError("not a states dict")
    return describe(states), (None if optimizer is None else describe(optimizer))


def run_pickle_in_child(data_files, timeout=240):
    """``pickle.load`` each file in a fresh process (the way MXNet's loaders read them); returns the exit code."""
    code = ("import pickle, sys\nfor path in sys.argv[1:]:\n    try:\n        pickle.load(open(path, 'rb'))\n"
            "    except Exception:\n        pass\n")
    return subprocess.run([sys.executable, "-c", code] + list(data_files), timeout=timeout,
                          capture_output=True).returncode
