"""What the rewrite does at one node: the policy's decision, resolved against the dtypes that arrive there.

:func:`plan_node` is pure given its inputs: the node, the policy, the device, whether the graph only runs
forward, and what is known of the node's inputs. The rewrite loop (:mod:`.rewrite`) computes those facts,
asks for the plan and carries it out: it routes the inputs through casts and records the statistics.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

from .. import lists
from ..core.policy import EMULATED, FLOAT32, FOLLOW, FP32, LP16, NATIVE, NEUTRAL, WIDEST, Policy
from .symbol_json import CAST_OPS, FALSE_VALUES, is_mode_node

__all__ = ["NodePlan", "plan_node", "kernel_op"]


@dataclass(frozen=True)
class NodePlan:
    """How the rewrite treats one op node.

    Attributes
    ----------
    action : str
        ``LP16``, ``FP32``, ``NEUTRAL`` or ``WIDEST``: the policy's action with ``FOLLOW`` resolved by the
        inputs, and ``LP16`` ops that have no low precision kernel on the device (mode ``FLOAT32``) made ``FP32``.
    mode : str or None
        How an op the policy made low precision runs (:meth:`~mxnet.amp.core.policy.Policy.lp16_mode`),
        ``FLOAT32`` included; None for the other actions.
    op : str
        The op the new node runs: a library kernel, a faster substitute, or the node's own op.
    attrs : dict
        Attributes added to the node's: a substitute's, or ``param_dtype="float32"`` where a library kernel of a
        training graph reads its float32 parameters as they are (``lists.reads_float32_params``).
    removed_attrs : tuple of str
        Attributes of the node the new op does not take (a transpose's ``axes``, run as an axis swap).
    followed : bool
        ``FOLLOW`` resolved to ``LP16`` (a low precision input arrived).
    neutral_kernel : bool
        The op runs on a library kernel told the graph's mode (training or not) by the mode flag, its last input:
        a dtype-neutral op on low precision data (``amp_batch_norm``, float32 parameters; in inference graphs too),
        or in training graphs a float32-list op on data of the target dtype or float32 (``amp_dropout``), in the
        data's dtype.
    float32_island : bool
        A dtype-neutral op whose low precision kernel is slow runs in float32 between casts; its first output is cast
        back to the target dtype. (A ``storage`` policy's islands are made after the fusions:
        :func:`~mxnet.amp.graph.postops.float32_islands`.)
    stats_kernel : bool
        A float32-list op runs on a library kernel that reads the target dtype or float32 and keeps float32
        statistics (``amp_layer_norm``, ``amp_softmax``): its data input stays as it arrives, its float parameters
        are float32, its output has the dtype ``attrs`` gives (the data's, the node's own, or float32).
    """

    action: str
    mode: Optional[str]
    op: str
    attrs: Dict[str, str] = field(default_factory=dict)
    removed_attrs: Tuple[str, ...] = ()
    followed: bool = False
    neutral_kernel: bool = False
    float32_island: bool = False
    stats_kernel: bool = False

    @property
    def emulated(self) -> bool:
        """Whether the node runs its float32 kernel on values rounded to the target dtype."""
        return self.action == LP16 and self.mode == EMULATED


def kernel_op(op: str, policy: Policy, device_type: str, mode: str) -> str:
    """The op that runs low precision ``op`` in ``mode``: the library's kernel where the policy picks one."""
    return policy.kernel(op, device_type, mode) or op


def _stats_plan(node: dict, policy: Policy, device_type: str, data_dtype: Optional[str],
                inference: bool) -> Optional[NodePlan]:
    """The plan of a float32-list node that runs on its float32-statistics kernel (``lists.stats_kernels``), or None.

    The node must normalise over the last axis (``axis`` -1, the default), have no extra outputs
    (``output_mean_var``) and want an output the kernel writes (``dtype`` None or float32); its data must arrive in
    the target dtype (the output is then in the target dtype: no float32 island) or in float32 (a float32
    residual stream: the output stays float32, as before, from the faster kernel); log-softmax always writes float32
    (``lists.stats_output_dtype``).
    """
    attrs = node.get("attrs", {})
    if (data_dtype not in (policy.target_dtype, "float32") or attrs.get("axis", "-1") != "-1"
            or attrs.get("output_mean_var", "False") not in FALSE_VALUES
            or attrs.get("dtype", "None") not in ("None", "float32")):
        return None
    kernel = policy.stats_kernel(node["op"], device_type, node["name"])
    if kernel is None:
        return None
    own = attrs.get("dtype", "None")
    written = data_dtype if inference else policy.target_dtype
    dtype = lists.stats_output_dtype(policy.target_dtype, kernel, written) if own == "None" else own
    return NodePlan(FP32, None, kernel, attrs={"dtype": dtype}, stats_kernel=True)


def _swap_plan(node: dict, policy: Policy, device_type: str, data_dtype: Optional[str]) -> Optional[NodePlan]:
    """The plan of a transpose of target-dtype data that swaps two axes, run as the op swapping them
    (``lists.transpose_swaps``), or None."""
    swap = policy.transpose_swap(node["op"], device_type)
    if swap is None or data_dtype != policy.target_dtype:
        return None
    text = node.get("attrs", {}).get("axes", "()").strip("()[] ")
    try:
        axes = [int(a) for a in text.split(",") if a.strip()]
    except ValueError:
        return None
    moved = [i for i, a in enumerate(axes) if a != i]
    if sorted(axes) != list(range(len(axes))) or len(moved) != 2:
        return None
    return NodePlan(NEUTRAL, None, swap, attrs={"dim1": str(moved[0]), "dim2": str(moved[1])},
                    removed_attrs=("axes",))


def plan_node(node: dict, policy: Policy, device_type: str, inference: bool,
              input_dtypes: Sequence[Optional[str]], any_low: bool) -> NodePlan:
    """Plan one op node (not a variable).

    Parameters
    ----------
    node : dict
        The symbol-JSON node.
    policy : Policy
    device_type : {'cpu', 'gpu'}
    inference : bool
        The graph only runs forward (library kernels for dtype-neutral ops serve training graphs).
    input_dtypes : sequence of str or None
        What is known of the dtype of each input as it arrives (None: not known).
    any_low : bool
        Whether an input holds low precision values (of the target dtype, or rounded to it).
    """
    op, attrs = node["op"], node.get("attrs", {})
    target = policy.target_dtype
    if op in CAST_OPS:
        return NodePlan(NEUTRAL, None, op)
    action = policy.action(op, attrs, node["name"])
    stats = (_stats_plan(node, policy, device_type, input_dtypes[0], inference) if action == FP32 and input_dtypes
             else None)
    if stats is not None:
        return stats
    swap = _swap_plan(node, policy, device_type, input_dtypes[0]) if action == FP32 and input_dtypes else None
    if swap is not None:
        return swap
    if (action == FP32 and not inference and input_dtypes and input_dtypes[0] in (target, "float32")
            and attrs.get("axes", "()") in ("()", "[]") and not is_mode_node(node)):
        kernel = policy.neutral_kernel(op, device_type, node["name"])  # Dropout: no float32 island, no casts
        if kernel is not None:
            return NodePlan(action, None, kernel, neutral_kernel=True)
    followed = action == FOLLOW and any_low
    if action == FOLLOW:
        action = LP16 if any_low else NEUTRAL
    if action == LP16:
        mode = policy.lp16_mode(op, device_type)
        if mode == FLOAT32:
            return NodePlan(FP32, mode, op, followed=followed)
        kernel = kernel_op(op, policy, device_type, mode)
        float32_params = (not inference and mode == NATIVE and len(input_dtypes) > 1
                          and all(d == "float32" for d in input_dtypes[1:])
                          and lists.reads_float32_params(target, kernel))
        return NodePlan(action, mode, kernel, attrs={"param_dtype": "float32"} if float32_params else {},
                        followed=followed)
    if inference and input_dtypes and all(d == target for d in input_dtypes):
        kernel = policy.inference_kernel(op, device_type)  # Concat: amp_concat's row copies
        if kernel is not None and action in (NEUTRAL, WIDEST):
            return NodePlan(action, None, kernel)
    if action != NEUTRAL or not input_dtypes:
        return NodePlan(action, None, op)
    kernel = (policy.neutral_kernel(op, device_type, node["name"], inference)
              if input_dtypes[0] == target and attrs.get("output_mean_var", "False") in FALSE_VALUES else None)
    if kernel is not None:
        return NodePlan(action, None, kernel, neutral_kernel=True)
    if any_low and policy.neutral_in_float32(op, device_type):
        return NodePlan(action, None, op, float32_island=True)
    substitute = policy.native_substitute(op, device_type) if all(d == target for d in input_dtypes) else None
    if substitute is not None:  # the same function, a faster low precision kernel (lists.native_substitutes)
        return NodePlan(action, None, substitute[0], attrs=dict(substitute[1]))
    return NodePlan(action, None, op)
