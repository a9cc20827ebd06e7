"""BERT-base inference and a fine-tuning step: GluonNLP 0.10 on MXNet (float32, mxnet.amp and mxnet.contrib.amp
bfloat16) side by side with HuggingFace transformers on PyTorch (float32 and autocast bfloat16).

The model: BERT-base (``--layers`` 12 layers of 768 units, 12 heads, FFN 3072, GELU (erf), LayerNorm eps 1e-12,
vocabulary 30522, 512 positions, 2 token types), random weights (normal, std 0.02), nothing downloaded.
MXNet: ``gluonnlp.model.bert.BERTEncoder`` + ``BERTModel`` (what ``get_model('bert_12_768_12',
pretrained=False)`` builds), hybridized with static_alloc and static_shape (``--hybridize plain``: neither).
PyTorch: ``transformers.BertModel`` of a ``BertConfig`` of the same sizes, attention ``--attn`` (``sdpa`` by
default, set explicitly). The input: ``--batch`` sequences of ``--seq`` tokens, valid lengths drawn between seq/2
and seq (seed 0), the same token ids, token types and lengths in both frameworks (MXNet: ``valid_length``;
PyTorch: ``attention_mask``).

Workloads (``--workloads inference,train``):
- inference (dropout off: MXNet outside ``autograd.record``, PyTorch ``eval()`` under ``torch.inference_mode()``):
  ``mx_fp32``; ``amp_bf16``: ``amp.convert_hybrid_block(net, [ids, types, lengths], "bfloat16")`` with default
  settings; ``amp_bf16_offline``: the same with ``cast_params_offline=True, fold_params=True`` (the serving
  conversion: weights stored in bfloat16, the query/key/value concatenation computed once); ``torch_fp32``;
  ``torch_bf16``: ``torch.autocast("cpu", torch.bfloat16)``. Each low-precision row prints its deviation from its
  own framework's float32 output on the same weights: max |error| / max |float32| over the sequence output's valid
  tokens.
- train: a 2-class classifier on the pooled output (dropout ``--dropout``, then a dense layer), softmax cross
  entropy, Adam (lr 1e-4) in both frameworks, dropout ``--dropout`` everywhere BERT has it (0.1 as in BERT):
  ``mx_fp32``; ``contrib_bf16``: ``mxnet.contrib.amp.init("bfloat16")`` (may fail on a CPU: reported as a row);
  ``amp_bf16``: ``amp.init("bfloat16")`` + ``amp.init_trainer`` + ``amp.scale_loss``; ``torch_fp32``;
  ``torch_bf16`` (autocast). Each row prints the mean loss of the first and of the last step, a sanity check: the
  labels are random, so about ln 2 = 0.69 at first, and float32 memorises the batch within a few steps (with
  ``--dropout 0`` a low-precision run should follow its float32 closely; one whose loss rises is updating
  with wrong gradients).

Each configuration runs in a child process of its own (``mxnet.contrib.amp.init`` cannot be undone; PyTorch's
children never import MXNet, which would cut PyTorch to one thread); the configurations alternate, ``--repeats``
rounds. A child times ``--steps`` steps after ``--warmup``; the table shows the median of the rounds' medians, the
range of the round medians, the speed-up over the same framework's float32, the threads and the process's CPU
time over wall time while timed. PyTorch rows run only where torch and transformers import, MXNet rows only where
gluonnlp does; otherwise they are skipped with the reason.

    python bench/bench_bert.py [--workloads inference,train] [--configs mx_fp32,amp_bf16,...] [--batch 8]
        [--seq 128] [--layers 12] [--steps 3] [--warmup 1] [--repeats 3] [--dropout 0.1] [--attn sdpa|eager]
        [--hybridize static|plain]

``--layers 2 --steps 1 --repeats 1`` is a quick smoke run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import child_json  # noqa: E402

WORKLOADS = ("inference", "train")
CONFIGS = {"inference": ("mx_fp32", "amp_bf16", "amp_bf16_offline", "torch_fp32", "torch_bf16"),
           "train": ("mx_fp32", "contrib_bf16", "amp_bf16", "torch_fp32", "torch_bf16")}
TORCH_CONFIGS = ("torch_fp32", "torch_bf16")
VOCAB, TYPES, POSITIONS, UNITS, HEADS, HIDDEN, LN_EPS = 30522, 2, 512, 768, 12, 3072, 1e-12
LEARNING_RATE = 1e-4


def inputs(batch, seq):
    """Token ids, token types, valid lengths (seq/2..seq) and labels as NumPy arrays, seed 0: both frameworks'."""
    rs = np.random.RandomState(0)
    lengths = rs.randint(max(1, seq // 2), seq + 1, size=batch)
    ids = rs.randint(0, VOCAB, size=(batch, seq))
    types = np.zeros((batch, seq), dtype=np.int64)
    types[:, seq // 4:] = 1  # two segments
    labels = rs.randint(0, 2, size=batch)
    return ids, types, lengths, labels


def _deviation(ref, out, lengths):
    """max |out - ref| / max |ref| over the valid tokens of (batch, seq, units) outputs."""
    mask = np.arange(ref.shape[1])[None, :] < np.asarray(lengths)[:, None]
    ref, out = ref[mask], out[mask]
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def _timed(step, warmup, steps):
    """Per-step seconds of ``steps`` calls after ``warmup`` calls, and the process's CPU time / wall time."""
    for _ in range(warmup):
        step()
    times = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times, (time.process_time() - cpu0) / (time.perf_counter() - wall0)


def _mx_child(config, workload, args):
    """One MXNet configuration; returns its row (seconds, threads, deviation or losses)."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.amp.core import library
    if workload == "train" and config == "contrib_bf16":
        from mxnet.contrib import amp
        amp.init(target_dtype="bfloat16")
    elif config.startswith("amp_bf16"):
        from mxnet import amp
        if workload == "train":
            amp.init("bfloat16")
    from gluonnlp.model.bert import BERTEncoder, BERTModel

    class Classifier(gluon.HybridBlock):
        """BERT, dropout on the pooled output, a 2-class dense layer."""

        def __init__(self, bert, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.bert = bert
                self.dropout = gluon.nn.Dropout(args.dropout)
                self.out = gluon.nn.Dense(2)

        def hybrid_forward(self, F, ids, types, lengths):  # pylint: disable=arguments-differ
            return self.out(self.dropout(self.bert(ids, types, lengths)[1]))

    mx.random.seed(0)
    encoder = BERTEncoder(num_layers=args.layers, units=UNITS, hidden_size=HIDDEN, max_length=POSITIONS,
                          num_heads=HEADS, dropout=args.dropout, activation="gelu", layer_norm_eps=LN_EPS)
    bert = BERTModel(encoder, VOCAB, token_type_vocab_size=TYPES, units=UNITS, embed_size=UNITS, use_pooler=True,
                     use_decoder=False, use_classifier=False)
    net = Classifier(bert) if workload == "train" else bert
    net.initialize(mx.init.Normal(0.02))
    static = {"static_alloc": True, "static_shape": True} if args.hybridize == "static" else {}
    net.hybridize(**static)
    ids, types, lengths, labels = inputs(args.batch, args.seq)
    data = [mx.nd.array(ids), mx.nd.array(types), mx.nd.array(lengths)]
    row = {"threads": "OMP_NUM_THREADS=%s, oneDNN 3 team %s" % (os.environ.get("OMP_NUM_THREADS", "(unset)"),
                                                                library.onednn_threads())}
    if workload == "inference":
        run = net
        if config.startswith("amp_bf16"):
            ref = net(*data)[0].asnumpy()
            run = amp.convert_hybrid_block(net, data, "bfloat16",
                                           **({"cast_params_offline": True, "fold_params": True}
                                              if config.endswith("offline") else {}))
            run.hybridize(**static)
            row["deviation"] = _deviation(ref, run(*data)[0].asnumpy(), lengths)

        def step():
            run(*data)[0].wait_to_read()
        row["seconds"], row["cpu_per_wall"] = _timed(step, args.warmup, args.steps)
        return row
    y = mx.nd.array(labels)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": LEARNING_RATE})
    if config != "mx_fp32":
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []

    def train_step():
        with autograd.record():
            loss = loss_fn(net(*data), y)
            if config == "mx_fp32":
                loss.backward()
            else:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
        trainer.step(args.batch)
        losses.append(float(loss.mean().asscalar()))  # waits for the step
    row["seconds"], row["cpu_per_wall"] = _timed(train_step, args.warmup, args.steps)
    row["losses"] = losses
    return row


def _torch_child(config, workload, args):
    """One PyTorch configuration (this process never imports MXNet); returns its row."""
    import contextlib
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=UNITS, num_hidden_layers=args.layers, num_attention_heads=HEADS,
                     intermediate_size=HIDDEN, hidden_act="gelu", max_position_embeddings=POSITIONS,
                     type_vocab_size=TYPES, layer_norm_eps=LN_EPS, hidden_dropout_prob=args.dropout,
                     attention_probs_dropout_prob=args.dropout, initializer_range=0.02,
                     attn_implementation=args.attn)
    bert = BertModel(cfg)
    ids, types, lengths, labels = (torch.from_numpy(a) for a in inputs(args.batch, args.seq))
    mask = (torch.arange(args.seq)[None, :] < lengths[:, None]).long()
    feed = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if config == "torch_bf16" else \
        contextlib.nullcontext
    row = {"threads": "torch %d threads, attention %s" % (torch.get_num_threads(), bert.config._attn_implementation)}
    if workload == "inference":
        bert.eval()
        if config == "torch_bf16":
            with torch.inference_mode():
                ref = bert(**feed).last_hidden_state.numpy()
                with autocast():
                    out = bert(**feed).last_hidden_state.float().numpy()
            row["deviation"] = _deviation(ref, out, lengths.numpy())

        def step():
            with torch.inference_mode(), autocast():
                bert(**feed)
        row["seconds"], row["cpu_per_wall"] = _timed(step, args.warmup, args.steps)
        return row
    net = torch.nn.ModuleDict({"bert": bert, "dropout": torch.nn.Dropout(args.dropout),
                               "out": torch.nn.Linear(UNITS, 2)})
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE)
    losses = []

    def train_step():
        opt.zero_grad()
        with autocast():
            logits = net["out"](net["dropout"](net["bert"](**feed).pooler_output))
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    row["seconds"], row["cpu_per_wall"] = _timed(train_step, args.warmup, args.steps)
    row["losses"] = losses
    return row


def _probe(code):
    """Run ``code`` (which prints one JSON line) in a fresh interpreter: ``(dict, None)`` or ``(None, why)``."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0 and proc.stdout.strip():
        return json.loads(proc.stdout.strip().splitlines()[-1]), None
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return None, (lines[-1] if lines else "exit status %d" % proc.returncode)[:160]


_TORCH_PROBE = ("import json, torch, transformers; print(json.dumps({'torch': torch.__version__, "
                "'transformers': transformers.__version__, 'threads': torch.get_num_threads()}))")
_GLUONNLP_PROBE = "import json, gluonnlp; print(json.dumps({'gluonnlp': gluonnlp.__version__}))"


def _print_table(workload, configs, results, errors, args):
    what = "inference" if workload == "inference" else "training step (classifier on the pooled output, Adam)"
    print("\nBERT-base %s, %d layers, batch %d x %d tokens (valid lengths %d..%d), dropout %g, %d rounds x %d "
          "steps after %d warm-up, %s" % (what, args.layers, args.batch, args.seq, max(1, args.seq // 2), args.seq,
                                          args.dropout, args.repeats, args.steps, args.warmup,
                                          time.strftime("%Y-%m-%d")))
    extra = "deviation" if workload == "inference" else "loss first -> last"
    print("%-17s %9s %17s %8s %19s %8s  %s" % ("config", "median s", "round range s", "vs fp32", extra, "cpu/wall",
                                               "threads"))
    for config in configs:
        rows = results[config]
        if not rows:
            print("%-17s %9s  %s" % (config, "-", errors.get(config, "not run")))
            continue
        medians = [statistics.median(r["seconds"]) for r in rows]
        med = statistics.median(medians)
        base_rows = results.get("torch_fp32" if config in TORCH_CONFIGS else "mx_fp32")
        ratio = ("%.2fx" % (statistics.median(statistics.median(r["seconds"]) for r in base_rows) / med)
                 if base_rows else "-")
        if workload == "inference":
            extra = "%.2e" % rows[0]["deviation"] if "deviation" in rows[0] else "-"
        else:
            extra = "%.3f -> %.3f" % (rows[0]["losses"][0], rows[0]["losses"][-1])
        print("%-17s %9.3f %8.3f..%-8.3f %8s %19s %8.2f  %s" % (
            config, med, min(medians), max(medians), ratio, extra,
            statistics.median(r["cpu_per_wall"] for r in rows), rows[0]["threads"]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="inference,train (default: both)")
    parser.add_argument("--configs", help="a subset of the configurations (default: all of each workload)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (2 for a quick run)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per child process")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per child process first")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of alternated child processes")
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout everywhere BERT has it (both frameworks)")
    parser.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa",
                        help="transformers' attention implementation")
    parser.add_argument("--hybridize", choices=("static", "plain"), default="static",
                        help="MXNet blocks' hybridize(): static_alloc and static_shape (default), or neither")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per child process")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, config = args.child
        try:
            row = (_torch_child if config in TORCH_CONFIGS else _mx_child)(config, workload, args)
        except Exception as err:  # pylint: disable=broad-except  (a failing peer is a row, not a traceback)
            why = re.sub(r"\[[\d:]+\] \S+:\d+: ", "", " ".join(str(err).split()))  # MXNet's time and source line
            why = "%s: %s" % (type(err).__name__, why)
            row = {"error": why if len(why) <= 240 else why[:100] + " ... " + why[-135:]}
        print(json.dumps(row))
        return 0
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error("unknown workload(s) %s; choose from %s" % (", ".join(unknown), ", ".join(WORKLOADS)))
    wanted = args.configs.split(",") if args.configs else None
    known = set(CONFIGS["inference"]) | set(CONFIGS["train"])
    if wanted and set(wanted) - known:
        parser.error("unknown config(s) %s; choose from %s" % (", ".join(sorted(set(wanted) - known)),
                                                               ", ".join(sorted(known))))
    from timing import cpu_banner
    cpu_banner()
    torch_info, torch_why = _probe(_TORCH_PROBE)
    nlp_info, nlp_why = _probe(_GLUONNLP_PROBE)
    print("gluonnlp %s; torch %s; MXNet children: OMP_NUM_THREADS=%s, MXNET_CPU_WORKER_NTHREADS=%s" % (
        nlp_info["gluonnlp"] if nlp_info else "missing", "%s, transformers %s, %d threads in a process without "
        "MXNet" % (torch_info["torch"], torch_info["transformers"], torch_info["threads"]) if torch_info
        else "missing", os.environ.get("OMP_NUM_THREADS", "(unset: every core)"),
        os.environ.get("MXNET_CPU_WORKER_NTHREADS", "(unset: 1)")))
    print("PyTorch attention implementation: %s; MXNet hybridize: %s; a child process per configuration and round, "
          "alternated" % (args.attn, "static_alloc, static_shape" if args.hybridize == "static" else "plain"))
    for workload in workloads:
        configs = [c for c in CONFIGS[workload] if not wanted or c in wanted]
        skipped = {c: "skipped: torch/transformers do not import (%s)" % torch_why
                   for c in configs if c in TORCH_CONFIGS and torch_info is None}
        skipped.update({c: "skipped: gluonnlp does not import (%s)" % nlp_why
                        for c in configs if c not in TORCH_CONFIGS and nlp_info is None})
        results, errors = {c: [] for c in configs}, dict(skipped)
        for _ in range(args.repeats):
            for config in configs:
                if config in skipped:
                    continue
                cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, config]
                for flag in ("batch", "seq", "layers", "steps", "warmup", "dropout", "attn", "hybridize"):
                    cmd += ["--" + flag, str(getattr(args, flag))]
                row = child_json(cmd, args.timeout)
                if "error" in row:
                    errors[config] = "failed: %s" % row["error"]
                else:
                    results[config].append(row)
        _print_table(workload, configs, results, errors, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
