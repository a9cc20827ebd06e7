"""Probe MXNet's operator kernels in low precision on this machine: which accept bfloat16 / float16, and
which compute the right values in bfloat16.

Two probes, both running the ops in child processes so that a kernel that kills its process (oneDNN's
bfloat16 ``transpose`` on AVX-512 CPUs, say) only marks that op:

* :func:`probe` (dtype acceptance): every op invoked on small inputs in float32, float16 and bfloat16; an op
  "supports" a dtype when the float32 and the low precision calls both succeed (``unprobed`` when the float32
  call fails). oneDNN is off by default (the native kernels are probed); with ``mkldnn=True`` an op whose
  bf16 call reaches a oneDNN primitive this CPU cannot create (bf16 primitives need AVX-512) is reported as
  ``onednn:...``.
* :func:`probe_values` (values, for CPUs where oneDNN runs bfloat16): each op on bfloat16 inputs with oneDNN
  on, for several shapes and ranks (:data:`VALUE_CASES`) with positive and signed inputs, compared with its
  float32 kernel on the same bfloat16-rounded values; verdicts in :data:`EVIDENCE_VERDICTS`. Its results
  for the ops the bfloat16 lists feed bfloat16 natively are the evidence file
  ``mxnet/amp/lists/native_bf16_cpu.json`` (``tools/probe_bf16.py --values --out ...``).

``python tools/probe_bf16.py`` and ``python -m mxnet.amp hardware --probe`` are the command lines.
"""
import json
import os
import subprocess
import sys
from typing import List

import mxnet as mx
from mxnet.ndarray._internal import _imperative_invoke
import numpy as np

from ..base.dtypes import BFLOAT16, dtype_name
from ..base.registry import group_by_operator, op_handle, registered_ops
from .probe_specs import DEFAULT_SHAPES, DTYPES, NCHW, SPECS, VALUE_CASES, VALUE_TOLERANCE

__all__ = ["op_groups", "op_spec", "probe", "probe_values"]


def op_groups() -> List[List[str]]:
    """Return a list of alias groups (first name is the probed one) of forward ops."""
    return [list(group) for group in group_by_operator(n for n in registered_ops() if not n.startswith("_backward"))]


def op_spec(group: List[str]):
    """Return (inputs, attrs) for an alias group, or None when the op needs attrs SPECS lacks: the probe's call,
    which ``bench/bench_op_speed.py`` times at larger shapes."""
    for name in group:
        if name in SPECS:
            return SPECS[name]
    args = mx.operator.get_operator_arguments(group[0])
    if any("required" in t for t in args.types):
        return None
    n_in = sum(t.startswith("NDArray") for t in args.types)
    return [NCHW] * max(n_in, 1), {}


def _invoke(name, shapes, attrs, dtype):
    """Run op ``name`` once with inputs in ``dtype``; return the output dtype names."""
    rng = np.random.RandomState(0)
    target = BFLOAT16 if dtype == "bfloat16" else dtype
    inputs = []
    for shape in shapes:
        in_dtype, shape = shape if isinstance(shape[0], str) else (target, shape)
        values = mx.nd.array(rng.uniform(0.1, 0.9, shape))
        if in_dtype == "lengths":
            in_dtype, values = target, mx.nd.array(rng.randint(1, 4, shape))
        if in_dtype in ("int32", "bool"):
            inputs.append(values.astype(in_dtype))
        else:
            inputs.append(mx.nd.amp_cast(values, dtype=in_dtype))
    out = _imperative_invoke(op_handle(name), inputs, list(attrs), [str(v) for v in attrs.values()], None, False,
                             True)
    outs = out if isinstance(out, (list, tuple)) else [out]
    for o in outs:
        o.wait_to_read()
    return [dtype_name(o.dtype) for o in outs]


def _first_error_line(err):
    """The informative line of an MXNet error message (they start with a C++ traceback)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for line in lines:
        if "Check failed" in line or ("Error" in line and not line.startswith("Traceback")):
            return line[:200]
    return lines[-1][:200] if lines else type(err).__name__


def _child(names):
    """Probe each alias group named on the command line, one JSON line per op."""
    groups = {g[0]: g for g in op_groups()}
    for name in names:
        spec = op_spec(groups[name])
        row = {"op": name}
        if spec is None:
            row.update({d: "unprobed" for d in DTYPES})
        else:
            for dtype in DTYPES:
                try:
                    row[dtype] = "ok:" + ",".join(_invoke(name, spec[0], spec[1], dtype))
                except Exception as err:  # any MXNetError/TypeError is a result here
                    line = _first_error_line(err)
                    # oneDNN took the op but this CPU lacks the ISA (bf16 primitives need AVX-512)
                    row[dtype] = ("onednn:" if "primitive descriptor" in line else "error:") + line
            if not row["float32"].startswith("ok"):
                row.update({d: "unprobed" for d in DTYPES[1:]})
        print(json.dumps(row), flush=True)


def _arrays(shapes, dtype, signed, seed):
    """Inputs for one call: (bfloat16 inputs, float32 inputs holding the same values).

    Values are uniform in (0.1, 0.9), the first input's in (-0.9, 0.9) when ``signed``."""
    rng = np.random.RandomState(seed)
    low, ref = [], []
    for k, shape in enumerate(shapes):
        in_dtype, shape = shape if isinstance(shape[0], str) else (dtype, shape)
        # signed values for the data (first input) only: others may be lengths, indices or scales
        values = mx.nd.array(rng.uniform(-0.9 if signed and k == 0 else 0.1, 0.9, shape))
        if in_dtype == "lengths":
            in_dtype, values = dtype, mx.nd.array(rng.randint(1, 4, shape))
        if in_dtype in ("int32", "bool"):
            low.append(values.astype(in_dtype))
            ref.append(low[-1])
        elif in_dtype == "float32":
            low.append(values)
            ref.append(values)
        else:
            low.append(mx.nd.amp_cast(values, dtype=BFLOAT16))
            ref.append(mx.nd.amp_cast(low[-1], dtype="float32"))
    return low, ref


def _call(name, inputs, attrs):
    """Run op ``name`` on ``inputs``; return its outputs as float64 NumPy arrays (bfloat16 read via amp_cast)."""
    mx.random.seed(0)
    out = _imperative_invoke(op_handle(name), inputs, list(attrs), [str(v) for v in attrs.values()], None, False,
                             True)
    outs = out if isinstance(out, (list, tuple)) else [out]
    result = []
    for o in outs:
        if dtype_name(o.dtype) == "bfloat16":  # amp_cast infers no shape for 0-d arrays
            o = mx.nd.amp_cast(o.reshape((1,)) if o.ndim == 0 else o, dtype="float32").reshape(o.shape)
        result.append(o.asnumpy().astype(np.float64))
    return result


def _value_cases(group):
    """(inputs, attrs) cases for an alias group: SPECS' (or the default) plus VALUE_CASES."""
    spec = op_spec(group)
    if spec is None:
        return []
    cases = [spec]
    if not any(name in SPECS for name in group):
        args = mx.operator.get_operator_arguments(group[0])
        n_in = max(sum(t.startswith("NDArray") for t in args.types), 1)
        cases = [([shape] * n_in, {}) for shape in DEFAULT_SHAPES]
    return cases + [c for name in group for c in VALUE_CASES.get(name, ())]


def _value_child(names):
    """Value-probe each alias group named on the command line: one JSON line per op, after a start line."""
    groups = {g[0]: g for g in op_groups()}
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        row, worst, checked = {"op": name}, 0.0, 0
        for case, (shapes, attrs) in enumerate(_value_cases(groups[name])):
            for signed in (False, True):
                low, ref = _arrays(shapes, "bfloat16", signed, case)
                try:
                    expected = _call(name, ref, attrs)
                except Exception:  # no valid float32 call for this case: nothing to compare
                    continue
                if not all(np.isfinite(e).all() for e in expected):
                    continue
                try:
                    got = _call(name, low, attrs)
                except Exception as err:
                    row.update(verdict="error", why=_first_error_line(err))
                    break
                checked += 1
                for g, e in zip(got, expected):
                    if g.shape != e.shape:
                        row.update(verdict="mismatch", why="shape %s, float32 %s" % (g.shape, e.shape))
                        break
                    scale = max(float(np.abs(e).max()), 1e-30) if e.size else 1.0
                    worst = max(worst, float(np.abs(g - e).max()) / scale if e.size else 0.0)
            if "verdict" in row:
                break
        if "verdict" not in row:
            if not checked:
                row.update(verdict="skip", why="no case with a valid float32 call")
            else:
                row.update(verdict="ok" if worst <= VALUE_TOLERANCE else "mismatch", rel=worst)
        row["cases"] = checked
        print(json.dumps(row), flush=True)


def probe_values(names, batch=25, timeout=300):
    """Value-probe ops ``names`` in child processes (oneDNN on); return ``{name: row}``.

    Aliases of one operator are probed once. A row has ``verdict`` (:data:`EVIDENCE_VERDICTS`), ``cases``
    (calls compared), ``rel`` (the largest relative deviation) or ``why``.
    """
    canonical = {name: group[0] for group in op_groups() for name in group}
    unknown = sorted(set(names) - set(canonical))
    if unknown:
        raise ValueError("not registered forward operators: %s" % ", ".join(unknown))
    rows = _probe_canonical(sorted({canonical[n] for n in names}), batch, timeout)
    return {name: {k: v for k, v in rows[canonical[name]].items() if k != "op"} for name in names}


def _probe_canonical(names, batch, timeout):
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1", OMP_NUM_THREADS="1")
    results, pending = {}, list(names)
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        started, lines = None, []
        try:
            proc = subprocess.run([sys.executable, "-m", __name__, "--value-child", ",".join(chunk)], env=env,
                                  capture_output=True, text=True, check=False, timeout=timeout)
            lines, failure = proc.stdout.splitlines(), "crash"
            why = "exit %d: %s" % (proc.returncode, (proc.stderr.strip().splitlines() or ["?"])[-1][:160])
        except subprocess.TimeoutExpired as err:
            out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
            lines, failure, why = out.splitlines(), "hang", "no answer within %d s" % timeout
        for line in lines:
            if line.startswith("{"):
                row = json.loads(line)
                if "start" in row:
                    started = row["start"]
                else:
                    results[row["op"]] = row
        started = started if started is not None else chunk[0]  # died before its first op: blame that one
        if started not in results:  # the child died (or hung) in this op
            results[started] = {"op": started, "verdict": failure, "why": why, "cases": 0}
        pending = [n for n in chunk if n not in results] + pending
    return results


def probe(names, mkldnn=False, batch=40):
    """Run the probe for ``names`` in child processes; return ``{op: row}``."""
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1" if mkldnn else "0", OMP_NUM_THREADS="1")
    results = {}
    pending = list(names)
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        proc = subprocess.run([sys.executable, "-m", __name__, "--child", ",".join(chunk)],
                              env=env, capture_output=True, text=True, check=False, timeout=600)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                results[row["op"]] = row
        done = [n for n in chunk if n in results]
        if len(done) < len(chunk):          # the child died on chunk[len(done)]
            crashed = chunk[len(done)]
            results[crashed] = {"op": crashed, "float32": "crash", "float16": "crash",
                                "bfloat16": "crash"}
            pending = chunk[len(done) + 1:] + pending
    return results


if __name__ == "__main__":  # a child process of probe() / probe_values()
    {"--child": _child, "--value-child": _value_child}[sys.argv[1]](sys.argv[2].split(","))
