"""``convert_bucketing_module``: inference conversion of a Module-API ``BucketingModule`` (``mxnet.contrib.amp``'s API).

Every bucket's symbol is converted by :func:`mxnet.amp.convert.convert` with the same settings when the bucket
is first used; the parameters are converted once, with the default bucket's graph. As in
``mxnet.contrib.amp``, the result holds the converted parameters and is not bound yet:

>>> low = amp.convert_bucketing_module(mod, "bfloat16", cast_params_offline=True)
>>> low.bind(data_shapes=..., for_training=False)
>>> low.forward(batch, is_train=False)
"""
import warnings
from typing import Any, Optional, Sequence, Tuple

import mxnet as mx

from ..core.compat import renamed_keywords
from .convert import convert

__all__ = ["convert_bucketing_module"]


def convert_bucketing_module(bucketing_mod: mx.mod.BucketingModule, target_dtype: Any = "float16",
                             target_dtype_ops: Optional[Sequence[str]] = None,
                             fp32_ops: Optional[Sequence[str]] = None,
                             conditional_fp32_ops: Optional[Sequence[Tuple[str, str, Sequence[str]]]] = None,
                             excluded_sym_names: Optional[Sequence[str]] = None, cast_params_offline: bool = False,
                             *, ctx: Optional[mx.Context] = None, fuse: Optional[bool] = None,
                             emulate: Optional[bool] = None, extra_lp16_ops: Optional[Sequence[str]] = None,
                             extra_fp32_ops: Optional[Sequence[str]] = None,
                             **deprecated: Any) -> mx.mod.BucketingModule:
    """Return a new ``BucketingModule`` whose buckets run the converted symbols, with converted parameters.

    Parameters
    ----------
    bucketing_mod : mx.mod.BucketingModule
        Bound, with initialized parameters; not modified.
    ctx : Context, optional
        Device the model will run on (decides emulation and fusion); default: the module's first context.

    See :func:`mxnet.amp.convert.convert` for the other parameters (each bucket's data and label names are
    its inputs). ``cast_optional_params`` (``mxnet.contrib.amp``'s name of ``cast_params_offline``) is
    accepted with a ``DeprecationWarning``.

    Returns
    -------
    mx.mod.BucketingModule
        Unbound, parameters initialized: call ``bind`` (then ``forward``/``score``) as with the original.

    Raises
    ------
    TypeError, ValueError
        ``bucketing_mod`` is not a BucketingModule; it is not bound or its parameters are not initialized.
    """
    offline = renamed_keywords("convert_bucketing_module", deprecated,
                               {"cast_params_offline": cast_params_offline})["cast_params_offline"]
    if not isinstance(bucketing_mod, mx.mod.BucketingModule):
        raise TypeError("convert_bucketing_module: expected an mx.mod.BucketingModule, got %s"
                        % type(bucketing_mod).__name__)
    if not (bucketing_mod.binded and bucketing_mod.params_initialized):
        raise ValueError("convert_bucketing_module: the module must be bound and its parameters initialized "
                         "(binded=%s, params_initialized=%s)" % (bucketing_mod.binded,
                                                                 bucketing_mod.params_initialized))
    context = bucketing_mod._context
    ctx = ctx or (context[0] if isinstance(context, (list, tuple)) else context)
    options = dict(target_dtype=target_dtype, target_dtype_ops=target_dtype_ops, fp32_ops=fp32_ops,
                   conditional_fp32_ops=conditional_fp32_ops, excluded_sym_names=excluded_sym_names,
                   cast_params_offline=offline, ctx=ctx, fuse=fuse, emulate=emulate,
                   extra_lp16_ops=extra_lp16_ops, extra_fp32_ops=extra_fp32_ops)
    arg_params, aux_params = bucketing_mod.get_params()
    sym_gen = bucketing_mod._sym_gen
    key = bucketing_mod._default_bucket_key

    def converted_sym_gen(bucket_key):
        sym, data_names, label_names = sym_gen(bucket_key)
        names = list(data_names or ()) + list(label_names or ())
        params = {k: v for k, v in arg_params.items() if k in set(sym.list_arguments())}
        aux = {k: v for k, v in aux_params.items() if k in set(sym.list_auxiliary_states())}
        with warnings.catch_warnings():  # the emulation warning was given once, for the default bucket
            warnings.simplefilter("ignore", UserWarning)
            return convert(sym, params, aux, input_names=names, **options).symbol, data_names, label_names

    sym, data_names, label_names = sym_gen(key)
    names = list(data_names or ()) + list(label_names or ())
    res = convert(sym, arg_params, aux_params, input_names=names, **options)
    out = mx.mod.BucketingModule(converted_sym_gen, default_bucket_key=key, logger=bucketing_mod.logger,
                                 context=context, work_load_list=bucketing_mod._work_load_list,
                                 fixed_param_names=bucketing_mod._fixed_param_names,
                                 state_names=bucketing_mod._state_names, group2ctxs=bucketing_mod._group2ctxs,
                                 compression_params=bucketing_mod._compression_params)
    # An unbound BucketingModule reads its parameters from the default bucket's module (what bind() copies).
    default = mx.mod.Module(res.symbol, data_names, label_names, logger=bucketing_mod.logger, context=context,
                            work_load_list=bucketing_mod._work_load_list,
                            fixed_param_names=bucketing_mod._fixed_param_names,
                            state_names=bucketing_mod._state_names, group2ctxs=bucketing_mod._group2ctxs,
                            compression_params=bucketing_mod._compression_params)
    default._arg_params, default._aux_params = res.arg_params, res.aux_params
    default.params_initialized = True
    out._buckets[key], out._curr_module, out._curr_bucket_key = default, default, key
    out.params_initialized = True
    return out
