"""PNG plots for the demo report: loss curves, loss-scale history, and the precision map of a graph
(:mod:`mxnet.amp.graph.precision_map`)."""
from collections import Counter

from ..graph.precision_map import ROLES, data_path, stage_summary

__all__ = ["plot_losses", "plot_loss_scale", "plot_precision_map"]


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_losses(histories, path):
    """Training loss and test accuracy per epoch for each run in ``{label: history}``."""
    plt = _pyplot()
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for label, hist in histories.items():
        epochs = range(1, len(hist["loss"]) + 1)
        ax_loss.plot(epochs, hist["loss"], marker="o", label=label)
        ax_acc.plot(epochs, hist["accuracy"], marker="o", label=label)
    ax_loss.set(title="training loss", xlabel="epoch", ylabel="mean cross-entropy")
    ax_acc.set(title="test accuracy", xlabel="epoch", ylabel="accuracy", ylim=(0, 1))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_loss_scale(scales, skipped, path, resumed_at=None):
    """Loss scale per step (log scale), skipped steps marked, the checkpoint resume shown."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.6))
    ax.step(range(len(scales)), scales, where="post", label="loss scale")
    if skipped:
        ax.scatter(skipped, [scales[i] for i in skipped], color="#e15759", zorder=3, label="skipped step (inf/nan)")
    if resumed_at is not None:
        ax.axvline(resumed_at, color="gray", linestyle="--", label="checkpoint saved, resumed in a new Trainer")
    ax.set_yscale("log", base=2)
    ax.set(title="loss scale (%d skipped steps)" % len(skipped), xlabel="step", ylabel="scale")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: Graphs with more data-path nodes than this are drawn as a per-block summary (one row per stage).
DETAIL_LIMIT = 48


def plot_precision_map(nodes, path, title, columns=12):
    """Draw a graph from :func:`precision_map` along the data path, coloured by how each node runs.

    Parameters and their casts are left out of the picture and counted in the title. A small graph is drawn
    node by node (placed by depth, wrapped every ``columns`` levels); a larger one (more than
    :data:`DETAIL_LIMIT` nodes: a ResNet) as one row per block (:func:`stage_summary`) listing its ops by
    precision with their counts.
    """
    kept, n_params, n_param_casts = data_path(nodes)
    subtitle = "(not drawn: %d parameters, %d casts of parameters)" % (n_params, n_param_casts)
    if len(kept) > DETAIL_LIMIT:
        _plot_summary(stage_summary(nodes), path, title, subtitle)
    else:
        _plot_nodes(kept, path, title, subtitle, columns)


def _legend(ax, counts):
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(fc=c, ec="#555555", label="%s (%d)" % (r, counts[r])) for r, c in ROLES if counts[r]],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def _plot_summary(groups, path, title, subtitle):
    """One row per block: its ops as chips coloured by precision, ``op xN``, blocks joined top to bottom."""
    plt = _pyplot()
    colours = dict(ROLES)
    prefix = _common_prefix([g for g, _ in groups])
    rows = []  # per row: [(x centre, label, role)]
    for _, ops in groups:
        x, chips = 0.0, []
        for (op, role), count in ops.items():
            label = op.replace("_sg_mkldnn_", "onednn_") + (" x%d" % count if count > 1 else "")
            step = max(1.1, 0.085 * len(label) + 0.3)
            chips.append((x + step / 2 - 0.05, label, role))
            x += step
        rows.append((chips, x))
    width = max(x for _, x in rows)
    fig, ax = plt.subplots(figsize=(4.5 + 0.95 * width, 1.4 + 0.62 * len(groups)))
    for row, ((block, ops), (chips, _)) in enumerate(zip(groups, rows)):
        y = -row
        ax.text(-0.2, y, block[len(prefix):] or block, ha="right", va="center", fontsize=9, fontweight="bold")
        ax.text(-0.2, y - 0.28, "%d ops" % sum(ops.values()), ha="right", va="center", fontsize=7,
                color="#555555")
        for x, label, role in chips:
            ax.text(x, y, label, ha="center", va="center", fontsize=7.5,
                    bbox={"boxstyle": "round4" if role == "cast" else "round", "fc": colours[role],
                          "ec": "#555555", "lw": 0.5})
        if row:
            ax.annotate("", xy=(-0.05, y + 0.22), xytext=(-0.05, y + 0.78),
                        arrowprops={"arrowstyle": "->", "color": "#999999", "lw": 0.8})
    ax.set_xlim(-2.6, width)
    ax.set_ylim(-len(groups) + 0.4, 0.6)
    ax.axis("off")
    counts = Counter()
    for _, ops in groups:
        for (_, role), count in ops.items():
            counts[role] += count
    _legend(ax, counts)
    ax.set_title("%s\none row per block%s, in graph order; %s"
                 % (title, " (%s...)" % prefix if prefix else "", subtitle.strip("()")), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _common_prefix(names):
    """The longest ``_``-separated prefix all ``names`` share, with its trailing ``_``."""
    split = [n.split("_") for n in names]
    common = []
    for parts in zip(*split):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    if common and all(len(s) == len(common) for s in split):
        common.pop()  # a name that is the prefix itself keeps a label
    return "_".join(common) + "_" if common else ""


def _plot_nodes(nodes, path, title, subtitle, columns):
    """Every data-path node placed by depth, wrapped every ``columns`` levels."""
    plt = _pyplot()
    depth = []
    for _, _, _, inputs in nodes:
        depth.append(1 + max((depth[i] for i in inputs), default=-1))
    lanes, pos = {}, []
    for d in depth:
        pos.append((d % columns, (d // columns) * 3 + lanes.get(d, 0)))
        lanes[d] = lanes.get(d, 0) + 1
    colours = dict(ROLES)
    height = max(y for _, y in pos) + 1
    fig, ax = plt.subplots(figsize=(2 + 1.25 * columns, 1.2 + 0.7 * height))
    for (_, _, _, inputs), (x, y) in zip(nodes, pos):
        for i in inputs:
            ax.annotate("", xy=(x, -y), xytext=(pos[i][0], -pos[i][1]),
                        arrowprops={"arrowstyle": "->", "color": "#999999", "lw": 0.7})
    for (name, op, role, _), (x, y) in zip(nodes, pos):
        label = name if op == "null" else op.replace("_sg_mkldnn_", "onednn_")
        ax.text(x, -y, label[:16], ha="center", va="center", fontsize=7, zorder=3,
                bbox={"boxstyle": "round4" if role == "cast" else "round", "fc": colours[role], "ec": "#555555",
                      "lw": 0.5})
    ax.set_xlim(-0.7, columns - 0.3)
    ax.set_ylim(-height + 0.4, 0.7)
    ax.axis("off")
    _legend(ax, Counter(n[2] for n in nodes))
    ax.set_title("%s\n%s" % (title, subtitle))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
