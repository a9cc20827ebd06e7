"""Trainer state files with a versioned AMP section, atomic writes and reading of plain (pre-AMP) files.

File layout (version 1)::

    <optimizer bytes> <AMP JSON> <JSON length: uint64 LE> <JSON crc32: uint32 LE> <MAGIC>

``<optimizer bytes>`` is exactly what a plain ``gluon.Trainer.save_states`` writes (the updater's pickled
``(states, optimizer)``). ``pickle.loads`` ignores bytes after the pickle's STOP opcode, so a plain trainer (or a
kvstore) loads an AMP file unchanged and never sees the AMP section. The AMP JSON is::

    {"format": "mxnet.amp.trainer_states", "version": 1,
     "optimizer_bytes": <int>, "optimizer_crc32": <int>,
     "amp": {"version": 1, "target_dtype": "float16" | "bfloat16" | null, "loss_scaler": {...}}}

so the AMP state lives in its own namespaced, versioned section and is never mixed into the optimizer's
fields. Both parts carry a CRC-32, so a truncated or corrupted file is detected. A file without the trailer
(written by a plain trainer or by ``mxnet.contrib.amp``, which saves no scaler state) reads with ``amp=None``.
"""
import io
import json
import pickle
import struct
import zlib

__all__ = ["MAGIC", "AMP_SECTION_VERSION", "pack", "unpack", "read_file"]

#: Last bytes of every file written by an AMP trainer.
MAGIC = b"\x00MXNET.AMP.STATES\x00"
FORMAT_VERSION = 1
AMP_SECTION_VERSION = 1
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


def _check_optimizer_pickle(data, source):
    """Unpickle the updater states once to prove they load; return the pickle's length in bytes."""
    stream = io.BytesIO(data)
    try:
        states = pickle.Unpickler(stream).load()
    except Exception as err:  # pickle raises many types on garbage: report them all the same way
        raise ValueError("%s is not a trainer state file (optimizer states do not unpickle: %s: %s)"
                         % (source, type(err).__name__, err)) from err
    if isinstance(states, tuple) and len(states) == 2:
        states = states[0]
    if not isinstance(states, dict):
        raise ValueError("%s is not a trainer state file: expected pickled updater states (a dict or a "
                         "(dict, Optimizer) tuple), found %s" % (source, type(states).__name__))
    return stream.tell()


def unpack(data, source="<bytes>"):
    """Split file content into optimizer bytes and the AMP section, validating both.

    Parameters
    ----------
    data : bytes
        Content of a trainer state file.
    source : str
        Name used in error messages (usually the file name).

    Returns
    -------
    tuple of (bytes, dict or None)
        Optimizer bytes and the ``"amp"`` section; None for files without one (plain or contrib trainers).

    Raises
    ------
    ValueError
        Truncated, corrupt or foreign content, or an unsupported version; the message says which.
    """
    if not data.endswith(MAGIC):
        end = _check_optimizer_pickle(data, source)
        if end != len(data):
            raise ValueError("%s is corrupt or truncated: %d unexpected bytes after the optimizer states "
                             "(an AMP section without its end marker?)" % (source, len(data) - end))
        return data, None
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
    _check_optimizer_pickle(optimizer_bytes, source)
    amp = header.get("amp")
    if not isinstance(amp, dict) or amp.get("version") != AMP_SECTION_VERSION:
        raise ValueError("%s has an unsupported AMP section %r; expected a dict with version %d"
                         % (source, amp if not isinstance(amp, dict) else amp.get("version"), AMP_SECTION_VERSION))
    return optimizer_bytes, amp


def read_file(fname):
    """Read a trainer state file and return ``unpack(content)``; see :func:`unpack` for errors."""
    with open(fname, "rb") as src:
        data = src.read()
    return unpack(data, source=repr(fname))
