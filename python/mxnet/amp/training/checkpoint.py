"""Trainer state files with a versioned AMP section, atomic writes and reading of plain (pre-AMP) files.

File layout (version 1)::

    <optimizer bytes> <AMP JSON> <JSON length: uint64 LE> <JSON crc32: uint32 LE> <MAGIC>

``<optimizer bytes>`` is exactly what a plain ``gluon.Trainer.save_states`` writes (the updater's pickled
``(states, optimizer)``). ``pickle.loads`` ignores bytes after the pickle's STOP opcode, so a plain trainer (or a
kvstore) loads an AMP file unchanged and never sees the AMP section. The AMP JSON is::

    {"format": "mxnet.amp.trainer_states", "version": 1,
     "optimizer_bytes": <int>, "optimizer_crc32": <int>,
     "amp": {"version": 3, "target_dtype": "float16" | "bfloat16" | null, "loss_scaler": {...},
             "weights": {"dtype": "float32" | "bfloat16", "rounding": null | "kahan" | "stochastic",
                         "seed": null | <int>, "compensation": {...}}}}

so the AMP state lives in its own namespaced, versioned section and is never mixed into the optimizer's
fields. Both parts carry a CRC-32, so a truncated or corrupted file is detected. A file without the trailer
(written by a plain trainer or by ``mxnet.contrib.amp``, which saves no scaler state) reads with ``amp=None``.

Reading never runs what a file names: the optimizer bytes are read by the allow-listed reader of
:mod:`.updater_states` (``trusted=True`` hands them to ``pickle`` instead). A CRC only detects accidents; anyone
can write a matching one.
"""
from collections import namedtuple
import json
import struct
import zlib

from . import updater_states

__all__ = ["MAGIC", "AMP_SECTION_VERSION", "pack", "unpack", "read", "read_file"]

#: Last bytes of every file written by an AMP trainer.
MAGIC = b"\x00MXNET.AMP.STATES\x00"
FORMAT_VERSION = 1
AMP_SECTION_VERSION = 3
#: The AMP section versions this reader accepts (1: written before bf16-true weights, no "weights" entry; 2: before
#: stochastic rounding, "weights" without "rounding" and "seed").
READABLE_SECTION_VERSIONS = (1, 2, 3)
_FORMAT_NAME = "mxnet.amp.trainer_states"
_TRAILER = struct.Struct("<QI")  # JSON length, JSON crc32


def pack(optimizer_bytes, amp_section):
    """Return the file content holding ``optimizer_bytes`` and the JSON-safe dict ``amp_section``.

    Parameters
    ----------
    optimizer_bytes : bytes
        Pickled updater states, as ``Updater.get_states(dump_optimizer=True)`` returns them.
    amp_section : dict
        JSON-safe AMP state (see the module docstring).

    Returns
    -------
    bytes
    """
    header = {"format": _FORMAT_NAME, "version": FORMAT_VERSION, "optimizer_bytes": len(optimizer_bytes),
              "optimizer_crc32": zlib.crc32(optimizer_bytes), "amp": amp_section}
    blob = json.dumps(header, sort_keys=True, allow_nan=False).encode("utf-8")
    return b"".join((optimizer_bytes, blob, _TRAILER.pack(len(blob), zlib.crc32(blob)), MAGIC))


StateFile = namedtuple("StateFile", ["optimizer_bytes", "updater_states", "amp"])
StateFile.__doc__ = """A trainer state file, read and checked: its optimizer bytes, the
:class:`~mxnet.amp.training.updater_states.UpdaterStates` they hold, and the ``"amp"`` section (None in files of
plain trainers and ``mxnet.contrib.amp``)."""


def load(data: bytes, source: str = "<bytes>", trusted: bool = False) -> StateFile:
    """Split file content into optimizer states and the AMP section, validating both; nothing in it runs.

    Parameters
    ----------
    data : bytes
        Content of a trainer state file.
    source : str
        Name used in error messages (usually the file name).
    trusted : bool
        Read the optimizer states with ``pickle`` itself, which runs whatever the file names (only for files
        you trust, e.g. of a custom optimizer); by default they are read by
        :func:`mxnet.amp.training.updater_states.loads`, which refuses anything a state file never holds.

    Returns
    -------
    StateFile

    Raises
    ------
    ValueError
        Truncated, corrupt or foreign content, an unsupported version, or optimizer states that ask for
        something a state file never holds; the message says which.
    """
    if not trusted:
        updater_states.check_globals(data, source)  # first, so that a forged file names what it asks for
    if not data.endswith(MAGIC):
        states = updater_states.loads(data, source=source, trusted=trusted)
        if states.length != len(data):
            raise ValueError("%s is corrupt or truncated: %d unexpected bytes after the optimizer states "
                             "(an AMP section without its end marker?)" % (source, len(data) - states.length))
        return StateFile(data, states, None)
    body = data[:-len(MAGIC)]
    if len(body) < _TRAILER.size:
        raise ValueError("%s is truncated: no room for the AMP section length" % source)
    length, crc = _TRAILER.unpack(body[-_TRAILER.size:])
    body = body[:-_TRAILER.size]
    if length > len(body) or zlib.crc32(body[len(body) - length:]) != crc:
        raise ValueError("%s is truncated or corrupt: the AMP section does not match its recorded length/checksum"
                         % source)
    try:
        header = json.loads(body[len(body) - length:].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError("%s is corrupt: the AMP section is not valid JSON (%s)" % (source, err)) from err
    if not isinstance(header, dict) or header.get("format") != _FORMAT_NAME:
        raise ValueError("%s is not an AMP trainer state file (format %r)"
                         % (source, header.get("format") if isinstance(header, dict) else None))
    if header.get("version") != FORMAT_VERSION:
        raise ValueError("%s has unsupported AMP file version %r; supported: %d"
                         % (source, header.get("version"), FORMAT_VERSION))
    optimizer_bytes = body[:len(body) - length]
    if len(optimizer_bytes) != header.get("optimizer_bytes") or \
            zlib.crc32(optimizer_bytes) != header.get("optimizer_crc32"):
        raise ValueError("%s is corrupt: optimizer states do not match their recorded length/checksum" % source)
    states = updater_states.loads(optimizer_bytes, source=source, trusted=trusted)
    if states.length != len(optimizer_bytes):
        raise ValueError("%s is corrupt: %d unexpected bytes between the optimizer states and the AMP section"
                         % (source, len(optimizer_bytes) - states.length))
    amp = header.get("amp")
    if not isinstance(amp, dict) or isinstance(amp.get("version"), bool) or \
            amp.get("version") not in READABLE_SECTION_VERSIONS:
        raise ValueError("%s has an unsupported AMP section %r; expected a dict with version %s"
                         % (source, amp if not isinstance(amp, dict) else amp.get("version"),
                            " or ".join(map(str, READABLE_SECTION_VERSIONS))))
    return StateFile(optimizer_bytes, states, amp)


def unpack(data: bytes, source: str = "<bytes>") -> tuple:
    """The optimizer bytes and the ``"amp"`` section of file content, validated as :func:`load` does.

    Returns
    -------
    tuple of (bytes, dict or None)
        Optimizer bytes and the ``"amp"`` section; None for files without one (plain or contrib trainers).
    """
    loaded = load(data, source)
    return loaded.optimizer_bytes, loaded.amp


def read(fname: str, trusted: bool = False) -> StateFile:
    """Read a trainer state file and return ``load(content)``; see :func:`load` for ``trusted`` and errors."""
    with open(fname, "rb") as src:
        data = src.read()
    return load(data, source=repr(fname), trusted=trusted)


def read_file(fname: str) -> tuple:
    """Read a trainer state file and return ``(optimizer_bytes, amp)`` as :func:`unpack` does."""
    loaded = read(fname)
    return loaded.optimizer_bytes, loaded.amp
