"""Operators that commute with rounding to a low precision dtype.

Given values already rounded to float16 or bfloat16, these operators only move, select or take the maximum
of them, so their float32 output is rounded too: running them on rounded inputs equals rounding their output.
Emulated low precision (float32 kernels on rounded values, see :meth:`mxnet.amp.policy.Policy.emulates`) uses
this to round after them rather than before, where rounding is cheaper: after a max pooling the tensor is
smaller, and on CPU a oneDNN convolution feeding a pooling keeps its fast memory layout.

Plain data; :func:`mxnet.amp.lists.commutes_with_rounding` answers the query.
"""

#: Operators that only move values: their gradient commutes with rounding too (training graphs may defer).
MOVES = (
    "Flatten", "Reshape", "SwapAxis", "expand_dims", "squeeze", "transpose",
    "_np_reshape", "_np_squeeze", "_np_transpose", "_npi_expand_dims", "_npx_reshape",
)

#: Operators that select values: their output commutes with rounding, their gradient does not (which input
#: a max pooling's gradient goes to depends on ties that rounding creates). Inference graphs only.
SELECTS = ("relu", "_npx_relu")

#: ``(operator, attribute, values, default)``: selects values when the attribute (``default`` when absent) is
#: one of the values. Max pooling is monotone; ReLU is ``max(x, 0)``.
SELECTS_WHEN = (
    ("Activation", "act_type", ("relu",), None),
    ("Pooling", "pool_type", ("max",), "max"),
    ("_npx_activation", "act_type", ("relu",), None),
    ("_npx_pooling", "pool_type", ("max",), "max"),
)
