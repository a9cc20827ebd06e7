"""Fuzz the trainer state-file loader; run by test_checkpoint_fuzz.py in a child process, or alone::

    python tests/python/unittest/checkpoint_fuzz.py --seed 7 --cases 100000

Genuine files of SGD momentum, Adam, AdamW and multi-precision (float16) trainers, written by AMP and by plain
trainers, are mutated (bytes flipped; truncated at every opcode and section boundary; sections swapped; lengths
falsified in the trailer, the JSON, the pickle's opcodes and the NDArray headers; opcodes replaced; bytes inserted
or removed; AMP sections forged with valid CRCs; malicious pickles inserted) and loaded into AMP trainers
(``trainer.load_states``) and plain ones (``amp.load_states``). Every load must either raise ValueError and
leave the trainer exactly as it was, or restore exactly:

* what the genuine file held, while the file's checksums still hold (an AMP file whose CRCs were not forged);
* else what ``pickle`` itself reads from the bytes (restricted to the genuine file's globals, with NDArray bytes
  parsed by the reference in state_files.py): nothing checks such bytes, so the loader must be faithful to them,
  and may only be stricter.

Malicious pickles must be refused with the global they ask for named, and their marker file must not exist (each
payload kind is first shown to create its marker under ``pickle``). Any other exception, a changed trainer after
a refusal or a load slower than ``--case-timeout`` is a failure. The last line printed is a JSON summary.
"""
import argparse
import json
import logging
import os
import pickle
import pickletools
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import warnings
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mxnet as mx  # noqa: E402
from mxnet import amp  # noqa: E402
from mxnet.amp.training import checkpoint  # noqa: E402  (the writer: pack; the loader is what is fuzzed)

import state_files as sf  # noqa: E402

DEFAULT_CASES = 12000
MAGIC = b"\x00MXNET.AMP.STATES\x00"
TRAILER = struct.Struct("<QI")
V2, V3 = 0xF993FAC9, 0xF993FACA


class Hang(BaseException):
    """A load took longer than --case-timeout (raised by SIGALRM; the loader catches Exception only)."""


class Sample:
    """A genuine file and what it holds."""

    def __init__(self, config, with_amp, folder):
        self.config, self.with_amp = config, with_amp
        self.trainer, params = sf.make_config(config, with_amp=with_amp)
        sf.train(self.trainer, params, 4, poison={1} if with_amp else ())
        path = os.path.join(folder, "%s_%s.states" % (config, "amp" if with_amp else "plain"))
        self.trainer.save_states(path)
        with open(path, "rb") as src:
            self.data = src.read()
        self.expected = sf.saved(self.trainer)
        self.amp_state = amp.state_dict(self.trainer) if with_amp else None
        if with_amp:  # split by the documented layout, independently of the loader
            length, _ = TRAILER.unpack(self.data[-len(MAGIC) - TRAILER.size:-len(MAGIC)])
            self.json_end = len(self.data) - len(MAGIC) - TRAILER.size
            self.opt_end = self.json_end - length
            self.optimizer_bytes = self.data[:self.opt_end]
            self.header = json.loads(self.data[self.opt_end:self.json_end])
        else:
            self.opt_end = self.json_end = len(self.data)
            self.optimizer_bytes, self.header = self.data, None
        self.amp_section = self.header["amp"] if with_amp else None  # plain samples get one for forgeries
        self.globals = sf.globals_of(self.optimizer_bytes)
        self.ops = [(op.name, arg, pos) for op, arg, pos in pickletools.genops(self.optimizer_bytes)]
        assert sf.reference_read(self.optimizer_bytes, self.globals) == self.expected, "reference reader"

    def seal(self, optimizer_bytes, header=None):
        """An AMP file around ``optimizer_bytes`` with valid checksums (a forgery or a fresh write)."""
        if header is None:
            return checkpoint.pack(optimizer_bytes, self.amp_section)
        blob = json.dumps(header, sort_keys=True).encode()
        return optimizer_bytes + blob + TRAILER.pack(len(blob), zlib.crc32(blob)) + MAGIC

    def blobs(self):
        """``(opcode position, op name, payload)`` of the NDArray byte strings of the pickle."""
        return [(pos, name, arg) for name, arg, pos in self.ops
                if name in ("SHORT_BINBYTES", "BINBYTES", "BINBYTES8") and len(arg) >= 4
                and struct.unpack_from("<I", arg)[0] in (V2, V3)]


def reframe(data):
    """Fix the length of a protocol-4 pickle's single frame after an edit that changed its size."""
    if data[2:3] == b"\x95" and len(data) >= 11:
        return data[:3] + struct.pack("<Q", len(data) - 11) + data[11:]
    return data


def replace_blob(data, pos, name, blob):
    """The pickle with the byte string at opcode ``pos`` replaced by ``blob`` (as BINBYTES), frame fixed."""
    head = {"SHORT_BINBYTES": 2, "BINBYTES": 5, "BINBYTES8": 9}[name]
    old_len = {"SHORT_BINBYTES": lambda: data[pos + 1],
               "BINBYTES": lambda: struct.unpack_from("<I", data, pos + 1)[0],
               "BINBYTES8": lambda: struct.unpack_from("<Q", data, pos + 1)[0]}[name]()
    return reframe(data[:pos] + b"B" + struct.pack("<I", len(blob)) + blob + data[pos + head + old_len:])


# --- mutations: each returns (label, data, oracle); oracle "sealed", "ref" or "refuse" -------------------------

class Mutator:
    def __init__(self, rng, samples):
        self.rng, self.samples = rng, samples

    def pick(self, seq):
        return seq[self.rng.randint(len(seq))]

    def unsealed_or_resealed(self, sample, optimizer_bytes, label):
        """A mutated pickle as a plain file, an AMP file with the genuine (now wrong) trailer, or resealed."""
        if not sample.with_amp:
            return label, optimizer_bytes, "ref"
        if self.rng.rand() < 0.5:
            return label + " (resealed)", sample.seal(optimizer_bytes), "ref"
        return label, optimizer_bytes + sample.data[sample.opt_end:], "sealed"

    def flip(self, sample):
        data = bytearray(sample.data)
        for _ in range(self.rng.randint(1, 4)):
            data[self.rng.randint(len(data))] ^= self.rng.randint(1, 256)
        return "flip", bytes(data), "sealed" if sample.with_amp else "ref"

    def flip_optimizer(self, sample):
        data = bytearray(sample.optimizer_bytes)
        for _ in range(self.rng.randint(1, 4)):
            data[self.rng.randint(len(data))] ^= self.rng.randint(1, 256)
        return self.unsealed_or_resealed(sample, bytes(data), "flip optimizer bytes")

    def array_field(self, sample):
        pos, name, blob = self.pick(sample.blobs())
        ndim = struct.unpack_from("<i", blob, 8)[0]
        fields = {"magic": (0, "<I", [V2, V3, 0, 0xF993FAC8, self.rng.randint(2 ** 32)]),
                  "stype": (4, "<i", [1, 2, -1, self.rng.randint(-2 ** 31, 2 ** 31)]),
                  "ndim": (8, "<i", [0, ndim - 1, ndim + 1, -1, 33, 2 ** 31 - 1, self.rng.randint(-2 ** 31, 2 ** 31)]),
                  "dev_type": (12 + 8 * ndim, "<i", [0, 2, 3, 4, 5, -1]),
                  "dev_id": (16 + 8 * ndim, "<i", [-1, 1, 7, 2 ** 31 - 1]),
                  "type_flag": (20 + 8 * ndim, "<i", list(range(-1, 14)) + [255])}
        for axis in range(ndim):
            dim = struct.unpack_from("<q", blob, 12 + 8 * axis)[0]
            fields["dim%d" % axis] = (12 + 8 * axis, "<q", [0, dim - 1, dim + 1, -1, 2 ** 31, 2 ** 62, 2 ** 63 - 1,
                                                            -2 ** 63])
        key = self.pick(sorted(fields) + ["data"])
        if key == "data":
            cut = self.rng.randint(1, 9)
            extra = bytes(self.rng.randint(256, size=cut, dtype=np.uint8))
            new = blob[:-cut] if self.rng.rand() < 0.5 else blob + extra
        else:
            offset, fmt, values = fields[key]
            new = bytearray(blob)
            struct.pack_into(fmt, new, offset, self.pick(values))
            new = bytes(new)
        return self.unsealed_or_resealed(sample, replace_blob(sample.optimizer_bytes, pos, name, new),
                                         "NDArray %s falsified" % key)

    def pickle_length(self, sample):
        sized = {"SHORT_BINUNICODE": "<B", "SHORT_BINBYTES": "<B", "BINUNICODE": "<I", "BINBYTES": "<I",
                 "BINBYTES8": "<Q", "FRAME": "<Q", "LONG1": "<B"}
        ops = [(name, pos) for name, _, pos in sample.ops if name in sized]
        name, pos = self.pick(ops)
        fmt = sized[name]
        old = struct.unpack_from(fmt, sample.optimizer_bytes, pos + 1)[0]
        top = 2 ** (8 * struct.calcsize(fmt)) - 1
        value = self.pick([0, max(old - 1, 0), min(old + 1, top), top, self.rng.randint(min(top, 2 ** 31))])
        data = bytearray(sample.optimizer_bytes)
        struct.pack_into(fmt, data, pos + 1, value)
        return self.unsealed_or_resealed(sample, bytes(data), "%s length falsified" % name)

    def trailer_length(self, sample):
        if not sample.with_amp:
            return self.flip(sample)
        length = sample.json_end - sample.opt_end
        value = self.pick([0, length - 1, length + 1, len(sample.data), 2 ** 63, 2 ** 64 - 1,
                           self.rng.randint(2 ** 31)])
        data = bytearray(sample.data)
        struct.pack_into("<Q", data, sample.json_end, value)
        return "AMP section length falsified", bytes(data), "sealed"

    def json_field(self, sample):
        """The AMP JSON changed so that it must be refused, then resealed (valid CRC)."""
        if not sample.with_amp:
            return self.flip(sample)
        header = json.loads(json.dumps(sample.header))
        amp_section = header["amp"]
        choice = self.rng.randint(9)
        if choice == 0:
            header["optimizer_bytes"] = self.pick([0, header["optimizer_bytes"] - 1, header["optimizer_bytes"] + 1,
                                                   2 ** 63])
        elif choice == 1:
            header["optimizer_crc32"] ^= 1 << self.rng.randint(32)
        elif choice == 2:
            header["version"] = self.pick([0, 2, "1", None])
        elif choice == 3:
            header["format"] = "mxnet.amp.trainer_state"
        elif choice == 4:
            amp_section["version"] = self.pick([0, 1, 4, None])  # 1 lacks "weights"; 4 does not exist
        elif choice == 5:
            del amp_section[self.pick(sorted(amp_section))]
        elif choice == 6:
            amp_section["extra"] = 1
        elif choice == 7:
            amp_section["loss_scaler"] = dict(amp_section["loss_scaler"], scale=self.pick([-1.0, 0.0, "big"]))
        else:
            header.pop(self.pick(sorted(header)))
        return "AMP JSON field %d falsified (resealed)" % choice, sample.seal(sample.optimizer_bytes, header), \
            "refuse"

    def swap_sections(self, sample):
        if not sample.with_amp:
            return self.swap_chunks(sample)
        opt, blob = sample.data[:sample.opt_end], sample.data[sample.opt_end:sample.json_end]
        trailer, magic = sample.data[sample.json_end:-len(MAGIC)], sample.data[-len(MAGIC):]
        others = [s for s in self.samples if s.with_amp and s is not sample]
        other = self.pick(others)
        choice = self.rng.randint(6)
        length, crc = TRAILER.unpack(trailer)
        variants = [
            ("JSON before the optimizer bytes", blob + opt + trailer + magic),
            ("trailer fields swapped", opt + blob + TRAILER.pack(crc, length & 0xFFFFFFFF) + magic),
            ("end marker first", magic + opt + blob + trailer),
            ("another file's AMP section", opt + other.data[other.opt_end:]),
            ("another file's optimizer bytes", other.optimizer_bytes + sample.data[sample.opt_end:]),
            ("two files in one", sample.data + other.data),
        ]
        label, data = variants[choice]
        return "sections swapped: " + label, data, "sealed"

    def swap_chunks(self, sample):
        """Two NDArray payloads of one length, or two opcode-aligned chunks, swapped in the pickle."""
        blobs = sample.blobs()
        pairs = [(a, b) for a in blobs for b in blobs if a[0] < b[0] and len(a[2]) == len(b[2]) and a[2] != b[2]]
        data = sample.optimizer_bytes
        if pairs and self.rng.rand() < 0.5:
            (pos_a, name_a, a), (pos_b, name_b, b) = self.pick(pairs)
            body = replace_blob(data, pos_b, name_b, a)
            body = replace_blob(body, pos_a, name_a, b)
            label = "NDArray payloads swapped"
        else:
            cuts = sorted(self.rng.choice([pos for _, _, pos in sample.ops], 4, replace=False))
            body = data[:cuts[0]] + data[cuts[2]:cuts[3]] + data[cuts[1]:cuts[2]] + data[cuts[0]:cuts[1]] + \
                data[cuts[3]:]
            label = "pickle chunks swapped"
            body = reframe(body)
        return self.unsealed_or_resealed(sample, body, label)

    def splice(self, sample):
        data = sample.optimizer_bytes
        pos = self.pick([pos for _, _, pos in sample.ops])
        choice = self.rng.randint(3)
        if choice == 0:
            extra = bytes(self.rng.randint(256, size=self.rng.randint(1, 40), dtype=np.uint8))
            body, label = data[:pos] + extra + data[pos:], "bytes inserted"
        elif choice == 1:
            body, label = data[:pos] + data[pos + self.rng.randint(1, 40):], "bytes removed"
        else:
            end = min(len(data), pos + self.rng.randint(1, 60))
            body, label = data[:end] + data[pos:end] + data[end:], "bytes duplicated"
        if self.rng.rand() < 0.5:
            body = reframe(body)
        return self.unsealed_or_resealed(sample, body, label)

    def opcode(self, sample):
        data = bytearray(sample.optimizer_bytes)
        pos = self.pick([pos for _, _, pos in sample.ops])
        data[pos] = ord(self.pick([op.code for op in pickletools.opcodes]))
        return self.unsealed_or_resealed(sample, bytes(data), "opcode replaced")

    def garbage(self, sample):
        choice = self.rng.randint(5)
        if choice == 0:  # (a few random bytes may well be a pickle: "}." is {})
            return "random bytes", bytes(self.rng.randint(256, size=self.rng.randint(0, 2000), dtype=np.uint8)), \
                "ref"
        if choice == 1:
            return "empty", b"", "refuse"
        if choice == 2:
            return "end marker alone", MAGIC, "refuse"
        if choice == 3:
            return "zero trailer", bytes(TRAILER.size) + MAGIC, "refuse"
        head = bytes(self.rng.randint(256, size=self.rng.randint(1, 300), dtype=np.uint8))
        return "random bytes before a genuine file", head + sample.data, "sealed" if sample.with_amp else "ref"

    KINDS = (("flip", 3), ("flip_optimizer", 3), ("array_field", 4), ("pickle_length", 3), ("trailer_length", 1),
             ("json_field", 1), ("swap_sections", 2), ("swap_chunks", 2), ("splice", 2), ("opcode", 2),
             ("garbage", 1))

    def random_case(self, sample):
        names = [name for name, _ in self.KINDS]
        weights = np.array([weight for _, weight in self.KINDS], dtype=float)
        return getattr(self, names[self.rng.choice(len(names), p=weights / weights.sum())])(sample)


def truncations(sample):
    """Every opcode boundary of the pickle and every section boundary of the file (and one byte either side)."""
    cuts = {0, sample.opt_end, sample.json_end, len(sample.data) - len(MAGIC), len(sample.data) - 1}
    cuts |= {sample.json_end + 8}  # between the trailer's length and CRC
    for _, _, pos in sample.ops:
        cuts |= {pos, pos + 1}
    cuts = sorted({c + d for c in cuts for d in (-1, 0, 1)} & set(range(len(sample.data))))
    for cut in cuts:
        yield "truncated at byte %d" % cut, sample.data[:cut], "sealed" if sample.with_amp else "ref"
    if sample.with_amp:
        for _, _, pos in sample.ops:
            yield "optimizer bytes truncated at %d (resealed)" % pos, sample.seal(sample.optimizer_bytes[:pos]), "ref"


# --- the run ----------------------------------------------------------------------------------------------------

class Target:
    """A trainer loads go into, with its own genuine file to go back to after an accepted load."""

    def __init__(self, config, with_amp, folder):
        self.with_amp = with_amp
        self.trainer, params = sf.make_config(config, with_amp=with_amp, value=0.25)
        sf.train(self.trainer, params, 1, start=9)
        self.reset_path = os.path.join(folder, "target_%s_%s.states" % (config, with_amp))
        self.trainer.save_states(self.reset_path)
        self.load(self.reset_path)
        self.before = sf.snapshot(self.trainer)

    def load(self, path):
        if self.with_amp:
            self.trainer.load_states(path)
        else:
            amp.load_states(self.trainer, path)

    def reset(self):
        self.load(self.reset_path)
        self.before = sf.snapshot(self.trainer)  # a new optimizer object: new ids


class Fuzz:
    def __init__(self, seed, cases, folder, case_timeout):
        self.seed, self.cases, self.folder, self.case_timeout = seed, cases, folder, case_timeout
        self.rng = np.random.RandomState(seed)
        self.samples = [Sample(config, with_amp, folder) for config in sf.CONFIGS for with_amp in (True, False)]
        for sample in self.samples:
            sample.amp_section = sample.amp_section or self.samples[0].amp_section
        # the reference may build any class the loader may (a mutation could turn one name into another)
        self.allowed = {"%s.%s" % (cls.__module__, cls.__qualname__)
                        for cls in list(mx.optimizer.Optimizer.opt_registry.values()) + list(
                            vars(mx.lr_scheduler).values())
                        if isinstance(cls, type) and cls.__module__.startswith("mxnet.")}
        self.targets = {(config, with_amp): Target(config, with_amp, folder)
                        for config in sf.CONFIGS for with_amp in (True, False)}
        self.mutator = Mutator(self.rng, self.samples)
        self.failures, self.counts, self.slowest = [], {}, (0.0, None)
        self.path = os.path.join(folder, "case.states")
        sys.path.insert(0, folder)  # for the importlib payload's module
        self.live_payloads()

    def live_payloads(self):
        """Each payload kind creates its marker when ``pickle`` reads it: the markers below can tell."""
        for index, (kind, (payload, _)) in enumerate(sorted(sf.payloads("", self.folder).items())):
            marker = os.path.join(self.folder, "LIVE_%d" % index)
            payload, _ = sf.payloads(marker, self.folder, 1000 + index)[kind]
            pickle.loads(pickle.dumps(payload))
            assert os.path.exists(marker), "payload %s did not run under pickle" % kind
            os.remove(marker)

    def fail(self, label, message):
        """Record a failure; the file that caused it is kept as failure_N.states in the folder."""
        kept = os.path.join(self.folder, "failure_%d.states" % len(self.failures))
        if os.path.exists(self.path):
            shutil.copyfile(self.path, kept)
        self.failures.append("%s: %s (file: %s)" % (label, message, kept))

    def count(self, label, outcome):
        key = label.split(" at ")[0].split(" (")[0]
        self.counts.setdefault(key, {}).setdefault(outcome, 0)
        self.counts[key][outcome] += 1

    def run_case(self, base, sample, data, oracle, target_amp, marker=None, global_name=None):
        target = self.targets[(sample.config, target_amp)]
        label = "%s [%s %s file -> %s trainer]" % (base, sample.config, "AMP" if sample.with_amp else "plain",
                                                   "AMP" if target_amp else "plain")
        with open(self.path, "wb") as out:
            out.write(data)
        signal.setitimer(signal.ITIMER_REAL, self.case_timeout)
        start = time.perf_counter()
        try:
            target.load(self.path)
        except ValueError as err:
            outcome = "refused"
            message = str(err)
        except Hang:
            self.fail(label, "no answer within %g s" % self.case_timeout)
            return
        except Exception as err:  # pylint: disable=broad-except
            self.fail(label, "raised %s, not ValueError: %s" % (type(err).__name__, str(err)[:300]))
            outcome, message = "other", None
        else:
            outcome, message = "accepted", None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            elapsed = time.perf_counter() - start
            if elapsed > self.slowest[0]:
                self.slowest = (elapsed, label)
        self.count(base, outcome)
        if marker is not None:
            if os.path.exists(marker):
                self.fail(label, "THE PAYLOAD RAN (marker %s exists)" % marker)
                os.remove(marker)
            if outcome != "refused" or "asks for global %r" % global_name not in message:
                self.fail(label, "malicious file not refused with its global %r named: %s %s"
                          % (global_name, outcome, message))
        if outcome == "refused":
            if sf.snapshot(target.trainer) != target.before:
                self.fail(label, "a refused load changed the trainer")
                self.reset(label, target)
            return
        if outcome == "accepted":
            self.check_accepted(label, sample, data, oracle, target)
        self.reset(label, target)

    def reset(self, label, target):
        try:
            target.reset()
        except Exception as err:  # pylint: disable=broad-except
            self.fail(label, "after it, the target's own genuine file did not load: %s: %s"
                      % (type(err).__name__, str(err)[:200]))
            key = next(key for key, value in self.targets.items() if value is target)
            self.targets[key] = Target(key[0], key[1], self.folder)

    def check_accepted(self, label, sample, data, oracle, target):
        if oracle == "refuse":
            self.fail(label, "accepted a file that must be refused")
            return
        if oracle == "sealed":
            want = sample.expected
        else:
            pickled = data
            if data.endswith(MAGIC):  # a resealed file: its optimizer part
                json_end = len(data) - len(MAGIC) - TRAILER.size
                pickled = data[:json_end - TRAILER.unpack(data[json_end:json_end + TRAILER.size])[0]]
            try:
                want = sf.reference_read(pickled, sample.globals | self.allowed)
            except Exception as err:  # pylint: disable=broad-except
                self.fail(label, "accepted what pickle refuses (%s: %s)" % (type(err).__name__, str(err)[:200]))
                return
            if want[1] is None:  # a states-only file keeps the optimizer
                want = (want[0], target.before["optimizer"][1])
        try:
            got = sf.restored(target.trainer)
        except AssertionError as err:
            self.fail(label, str(err))
            return
        if got != want:
            self.fail(label, "accepted, but restored %s than the file holds" % (
                "other states" if got[0] != want[0] else "another optimizer"))
        if target.with_amp:
            want_amp = sample.amp_state if data.endswith(MAGIC) and sample.with_amp else target.before["amp"]
            if amp.state_dict(target.trainer) != want_amp:
                self.fail(label, "accepted, but the loss scaler is not the file's")

    def malicious_case(self, sample):
        index = sum(self.counts.get("malicious", {}).values())
        marker = os.path.join(self.folder, "MARKER_%d" % index)
        kinds = sf.payloads(marker, self.folder, index)
        kind = self.mutator.pick(sorted(kinds))
        payload, name = kinds[kind]
        trainer = sample.trainer
        states = dict(sf.updaters(trainer)[0].states)
        optimizer = pickle.loads(pickle.dumps(trainer._optimizer))
        place = self.mutator.pick(["top", "states", "tuple", "optimizer", "scheduler", "after_genuine", "sealed"])
        if place == "top":
            data = pickle.dumps(payload)
        elif place == "after_genuine":
            data = pickle.dumps(payload) + sample.data
        else:
            if place == "states":
                states[self.rng.randint(2, 1000)] = payload
            elif place == "tuple":
                key = self.mutator.pick(sorted(states))
                value = states[key]
                states[key] = (payload,) if value is None else tuple(value if isinstance(value, tuple) else (value,)) \
                    + (payload,)
            elif place == "scheduler" and optimizer.lr_scheduler is not None:
                optimizer.lr_scheduler.payload = payload
            else:
                optimizer.payload = payload
            data = pickle.dumps((states, optimizer))
            if place == "sealed" or (sample.with_amp and self.rng.rand() < 0.5):
                data = sample.seal(data)
        self.run_case("malicious (%s at %s)" % (kind, place), sample, data, "refuse",
                      self.rng.rand() < 0.5, marker, name)
        self.count("malicious", "run")

    def run(self):
        signal.signal(signal.SIGALRM, self._alarm)
        start, done = time.perf_counter(), 0
        fixed = [(sample, case) for sample in self.samples for case in truncations(sample)]
        for sample, (label, data, oracle) in fixed[:self.cases]:
            self.run_case(label, sample, data, oracle, self.rng.rand() < 0.5)
            done += 1
        while done < self.cases:
            sample = self.mutator.pick(self.samples)
            if self.rng.rand() < 0.08:
                self.malicious_case(sample)
            else:
                label, data, oracle = self.mutator.random_case(sample)
                self.run_case(label, sample, data, oracle, self.rng.rand() < 0.5)
            done += 1
        return {"seed": self.seed, "cases": done, "truncation_cases": min(len(fixed), self.cases),
                "seconds": round(time.perf_counter() - start, 1),
                "refused": sum(c.get("refused", 0) for c in self.counts.values()),
                "accepted": sum(c.get("accepted", 0) for c in self.counts.values()),
                "malicious": self.counts.get("malicious", {}).get("run", 0),
                "slowest_load": [round(self.slowest[0], 3), self.slowest[1]],
                "max_rss_mb": peak_rss_mb(),
                "by_mutation": self.counts, "failure_count": len(self.failures), "failures": self.failures[:40]}

    @staticmethod
    def _alarm(signum, frame):
        raise Hang()


def peak_rss_mb():
    """This process's peak resident memory in MB.

    Linux's ``VmHWM`` belongs to the process image: ``ru_maxrss`` would survive ``exec`` and report the parent's
    size at ``fork`` (the whole pytest process) instead of the loader's.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of every mutation (default 0)")
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help="number of loads (default %(default)d)")
    parser.add_argument("--case-timeout", type=float, default=20.0, help="seconds one load may take")
    parser.add_argument("--folder", help="where the files go (default: a new temporary folder)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.getLogger("mxnet.amp.trainer").setLevel(logging.ERROR)
    folder = args.folder or tempfile.mkdtemp(prefix="checkpoint_fuzz_")
    print("checkpoint fuzz: seed %d, %d cases, files in %s" % (args.seed, args.cases, folder), flush=True)
    summary = Fuzz(args.seed, args.cases, folder, args.case_timeout).run()
    print(json.dumps(summary, sort_keys=True))
    return 1 if summary["failure_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
