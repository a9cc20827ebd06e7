"""``python -m mxnet.amp convert``: convert a saved float32 model and report what changed.

Loads ``NET-symbol.json`` + ``NET-0000.params``, converts with :func:`mxnet.amp.convert.convert`, saves
``OUT-symbol.json`` + ``OUT-0000.params`` (and optionally an ONNX file), and prints the conversion summary and
the largest deviation from the float32 model on one random input. Every input is checked before anything is
written; outputs are written to temporary files and renamed at the end, so a failure leaves nothing behind.
"""
import json
import os
import sys
import warnings

import numpy as np

__all__ = ["add_arguments", "run", "parse_shape", "shape_arg", "deviation", "load_model"]


def add_arguments(parser):
    """Options of ``python -m mxnet.amp convert``."""
    parser.add_argument("--symbol", required=True, help="NET-symbol.json of the float32 model")
    parser.add_argument("--params", required=True, help="NET-0000.params of the float32 model")
    parser.add_argument("--dtype", required=True,
                        help="bfloat16, float16, or auto (bfloat16 on CPUs with bf16 arithmetic, else float32)")
    parser.add_argument("--out", required=True, help="output prefix: writes OUT-symbol.json, OUT-0000.params")
    parser.add_argument("--input-shape", action="append", type=shape_arg, default=None,
                        help="shape of one input, e.g. 1,3,224,224 (repeat for several inputs); "
                             "needed for the deviation check and --onnx")
    parser.add_argument("--onnx", default=None, help="also export the converted model to this ONNX file")
    parser.add_argument("--no-fuse", action="store_true", help="skip oneDNN fusion before converting")
    parser.add_argument("--emulate", choices=("auto", "yes", "no"), default="auto",
                        help="emulated low precision (float32 kernels, rounded values); 'no' for a graph "
                             "that needs native kernels (e.g. to deploy on an AVX-512 CPU)")
    parser.add_argument("--keep-param-dtype", action="store_true",
                        help="keep parameters in float32 (default: cast them offline)")


def parse_shape(text):
    """Parse '1,3,224,224' into a tuple of positive ints; ValueError naming the text otherwise."""
    try:
        shape = tuple(int(p) for p in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise ValueError("bad --input-shape %r: expected positive integers separated by commas, e.g. 1,3,224,224"
                         % text)
    return shape


def shape_arg(text):
    """:func:`parse_shape` as an argparse ``type`` (a bad shape is a usage error)."""
    import argparse
    try:
        return parse_shape(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err))


def deviation(reference, value):
    """Return ``(max abs, max rel)`` deviation of ``value`` from ``reference``; rel is scaled by max |ref|."""
    reference = np.asarray(reference, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    err = float(np.max(np.abs(value - reference))) if reference.size else 0.0
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    return err, (err / scale if scale > 0 else err)


def load_model(symbol_path, params_path):
    """Load ``NET-symbol.json`` + ``NET-0000.params`` as saved by ``HybridBlock.export`` (legacy or numpy
    mode) or ``Module.save_checkpoint``; return ``(sym, arg_params, aux_params)``.

    A numpy-mode export (``"is_np_shape"`` in the symbol file) comes back as a numpy-mode symbol, its
    parameters read with NumPy shape semantics; run it inside ``mx.util.np_shape(True)``. Missing or unreadable
    files raise FileNotFoundError / ValueError naming the file.
    """
    import mxnet as mx
    for path in (symbol_path, params_path):
        if not os.path.isfile(path):
            raise FileNotFoundError("no such file: %s" % path)
    try:
        with open(symbol_path) as f:
            is_np = bool(json.load(f).get("attrs", {}).get("is_np_shape", ["int", 0])[1])
        sym = mx.sym.load(symbol_path)
    except (ValueError, mx.base.MXNetError) as err:
        raise ValueError("cannot read symbol file %s: %s" % (symbol_path, str(err).strip().splitlines()[0]))
    try:
        with mx.util.np_shape(is_np):
            saved = mx.nd.load(params_path)
    except mx.base.MXNetError as err:
        raise ValueError("cannot read params file %s: %s" % (params_path, str(err).strip().splitlines()[-1]))
    if not isinstance(saved, dict):
        raise ValueError("params file %s holds a list, not named parameters" % params_path)
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    plain = {k: v for k, v in saved.items() if ":" not in k}
    args.update({k: v for k, v in plain.items() if k in sym.list_arguments()})
    aux.update({k: v for k, v in plain.items() if k in sym.list_auxiliary_states()})
    return (sym.as_np_ndarray() if is_np else sym), args, aux


def _forward(sym, args, aux, data):
    import mxnet as mx
    feed = dict(args, **{n: mx.nd.array(d) for n, d in data.items()})
    exe = sym.bind(mx.cpu(), feed, aux_states=dict(aux), grad_req="null")
    return [o.astype("float32").asnumpy() for o in exe.forward(is_train=False)]


def run(args, out=None):
    """Run the command from parsed arguments; return the exit status (user mistakes raise ValueError).

    The report goes to ``out`` (default: ``sys.stdout`` at the time of the call).
    """
    import mxnet as mx
    out = out or sys.stdout
    from .. import lists
    dtype = args.dtype if args.dtype == "auto" else lists.normalize_dtype(args.dtype)
    sym, arg_params, aux_params = load_model(args.symbol, args.params)
    with mx.util.np_shape(isinstance(sym, mx.sym.np._Symbol)):  # a numpy-mode export runs in its semantics
        return _convert_and_report(args, out, dtype, sym, arg_params, aux_params)


def _convert_and_report(args, out, dtype, sym, arg_params, aux_params):
    from ..inference.convert import convert
    inputs = [n for n in sym.list_inputs() if n not in arg_params and n not in aux_params]
    shapes = args.input_shape or []
    _check_request(args, sym, dict(arg_params, **aux_params), inputs, shapes)
    options = dict(cast_params_offline=not args.keep_param_dtype,
                   emulate={"auto": None, "yes": True, "no": False}[args.emulate])
    with warnings.catch_warnings(record=True) as notes:  # the emulation warning, printed once as a note
        warnings.simplefilter("always")
        result = convert(sym, arg_params, aux_params, dtype, fuse=False if args.no_fuse else None, **options)
        # ONNX has no oneDNN fused ops: export an unfused conversion.
        for_onnx = convert(sym, arg_params, aux_params, dtype, fuse=False, **options) \
            if args.onnx and result.summary.fused else result
    print(result.summary.format(), file=out)
    ours = {str(n.message) for n in notes if str(n.message).startswith("convert: ")}  # not others' deprecations
    for note in sorted(m.replace("convert: ", "", 1) for m in ours):
        print("note:             %s" % note.replace("emulate=False", "--emulate no")
              .replace("emulate=True", "--emulate yes"), file=out)
    _print_deviation((sym, arg_params, aux_params), result, dict(zip(inputs, shapes)), out)
    _save_all(result, for_onnx, args.out, args.onnx, shapes)
    print("saved:            %s-symbol.json, %s-0000.params%s"
          % (args.out, args.out, (", " + args.onnx) if args.onnx else ""), file=out)
    return 0


def _check_request(args, sym, params, inputs, shapes):
    """Raise ValueError/FileNotFoundError for inconsistent options before any work is done."""
    import mxnet as mx
    if shapes and len(shapes) != len(inputs):
        raise ValueError("%d --input-shape given but the model has %d inputs (%s)"
                         % (len(shapes), len(inputs), ", ".join(inputs)))
    if args.onnx and not shapes:
        raise ValueError("--onnx needs --input-shape for every input (%s)" % ", ".join(inputs))
    if not os.path.basename(args.out):
        raise ValueError("--out must name a file prefix, not a folder: %r" % args.out)
    for what, path in (("--out", args.out), ("--onnx", args.onnx)):
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError("%s: folder does not exist: %s" % (what, folder))
        if os.path.isdir(path):
            raise ValueError("%s: %s is a folder; give a file path" % (what, path))
    if shapes:
        try:
            sym.infer_shape(**dict({k: v.shape for k, v in params.items()}, **dict(zip(inputs, shapes))))
        except mx.base.MXNetError as err:
            raise ValueError("--input-shape %s does not fit the model: %s"
                             % (" ".join(",".join(map(str, s)) for s in shapes), str(err).splitlines()[0]))


def _print_deviation(original, result, shapes, out):
    """Print the max deviation of the converted model from float32 on one random input (when it can run)."""
    import mxnet as mx
    from ..core.support import native_support
    summary = result.summary
    if not shapes:
        print("deviation:        not measured (pass --input-shape)", file=out)
        return
    if summary.target_dtype != "float32" and not summary.emulated and not native_support(summary.target_dtype, "cpu"):
        print("deviation:        not measured: the graph needs native %s kernels, which this CPU lacks"
              % summary.target_dtype, file=out)
        return
    rng = np.random.RandomState(0)
    data = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in shapes.items()}
    ref = _forward(*original, data)
    try:
        low = _forward(result.symbol, result.arg_params, result.aux_params, data)
    except mx.base.MXNetError as err:
        print("deviation:        not measured: the converted model cannot run here (%s)"
              % str(err).strip().splitlines()[0][:200], file=out)
        return
    for i, (r, v) in enumerate(zip(ref, low)):
        err, rel = deviation(r, v)
        print("deviation:        output %d: max abs %.3g, max rel %.3g (vs float32, random input)"
              % (i, err, rel), file=out)


def _save_all(result, for_onnx, prefix, onnx_path, shapes):
    """Write every output to a temporary file beside its final path; rename them only when all were written.

    If a rename fails, the files already renamed are put back as they were (previous versions restored,
    new ones removed), so a failed run leaves the output paths untouched.
    """
    import mxnet as mx
    from ..base.files import finish, temporary_beside
    from ..inference.onnx import export_onnx
    final = ([onnx_path] if onnx_path else []) + ["%s-symbol.json" % prefix, "%s-0000.params" % prefix]
    tmp, backups, done = {}, {}, []
    try:
        for path in final:
            tmp[path] = temporary_beside(path)
        if onnx_path:
            try:
                export_onnx(for_onnx.symbol, (for_onnx.arg_params, for_onnx.aux_params), shapes, tmp[onnx_path])
            except AttributeError as err:  # how MXNet's exporter reports an op it has no converter for
                raise ValueError("--onnx: MXNet's ONNX exporter cannot export this model: %s (nothing written)"
                                 % (err.args[0] if err.args else err))
        result.symbol.save(tmp[final[-2]], remove_amp_cast=False)
        saved = {"arg:%s" % k: v for k, v in result.arg_params.items()}
        saved.update({"aux:%s" % k: v for k, v in result.aux_params.items()})
        mx.nd.save(tmp[final[-1]], saved)
        for path in final:
            if os.path.exists(path):
                backups[path] = path + ".amp-backup"
                os.replace(path, backups[path])
            finish(tmp[path], path)
            del tmp[path]
            done.append(path)
    except BaseException:
        for path in done:
            os.remove(path)
        for path, backup in backups.items():
            os.replace(backup, path)
        raise
    finally:
        for name in tmp.values():
            if os.path.exists(name):
                os.remove(name)
    for backup in backups.values():
        os.remove(backup)
