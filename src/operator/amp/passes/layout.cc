/*!
 * \file layout.cc
 * \brief amp_layout: graph pass that rewrites 2-D/3-D Convolution and Deconvolution to channels-last
 * (NHWC / NDHWC) and carries that layout through the ops that can follow it.
 *
 * The pass walks the graph once in topological order and keeps, for every tensor, where it now lives
 * and whether it is channels-last. A transpose is inserted only where a tensor crosses from one layout
 * to the other, at most once per tensor and direction, so no inverse pair can arise; graph outputs get
 * their original layout back. Convolution weights get a transpose node (training graphs; a Reshape,
 * which moves no data, for 1x1 and depthwise kernels) or are transposed offline into a new argument
 * `<weight>_amp_nhwc` (`offline_weights=1`, when the pass is given the values on CPU). Every
 * Convolution/Deconvolution node is stamped with `__amp_layout__`: the layout it runs in, or
 * "unchanged: <reason>".
 *
 * The rewritten graph stays valid for other input sizes than the ones the pass saw: decisions use
 * ranks, never extents, except that Flatten/FullyConnected read a channels-last map directly only
 * when it is 1x1 for any input size (global pooling, then 1x1 convolutions or per-element ops).
 * Transposes the graph already has that undo a layout change of the pass cancel with it.
 * Needs the shapes inferred by MXNet (`__ext_shape__`): call it with the input arrays given.
 *
 * Options (flags, "0"/"1"): emulate runs each channels-last convolution as transpose -> channels-first
 * convolution -> transpose, and each channels-last BatchNorm as BatchNorm(axis=1) between Reshapes
 * (CPU proof of the rewrite; everything else is rewritten for real);
 * offline_weights as above; allow_3d also rewrites 3-D convolutions, which MXNet 1.9.1 cannot run in
 * NDHWC (its cuDNN convolution takes 3-D data in NCDHW only), so they are left unchanged by default.
 */
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "layout_attrs.h"
#include "layout_ops.h"
#include "mxnet/lib_api.h"

namespace mxnet_amp {
namespace layout {
namespace {

using mxnet::ext::Graph;
using mxnet::ext::MXReturnValue;
using mxnet::ext::Node;
using mxnet::ext::NodeEntry;

constexpr char kStamp[] = "__amp_layout__";
using Key = std::pair<Node*, int>;  // an output of a node: (node, output index)

struct Options {
  bool emulate = false;
  bool offline_weights = false;
  bool allow_3d = false;
};

/*! \brief Where a tensor of the original graph now lives, and in which layout. */
struct Where {
  NodeEntry entry;
  bool last;
};

class LayoutPass {
 public:
  LayoutPass(Graph* g, const Options& opts)
      : g_(g), emulate_(opts.emulate), offline_(opts.offline_weights), allow_3d_(opts.allow_3d) {}

  void Run() {
    std::vector<Node*> order = g_->topological_sort();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if ((*it)->op != "null") Visit(*it);
    }
    for (NodeEntry& out : g_->outputs) {
      Where w = Find(out);
      out = w.last ? Transposed(w.entry, RankOf(out), false) : w.entry;
    }
    // Shapes and types inferred before the pass no longer hold for channels-last tensors.
    for (size_t i = 0; i < g_->size(); ++i) {
      g_->getNode(i)->attrs.erase(MX_STR_SHAPE);
      g_->getNode(i)->attrs.erase(MX_STR_DTYPE);
    }
  }

 private:
  // ---- bookkeeping ------------------------------------------------------------------------------
  Where Find(const NodeEntry& e) {
    auto it = where_.find(Key(e.node, e.entry));
    return it == where_.end() ? Where{e, false} : it->second;
  }

  int RankOf(const NodeEntry& e) {
    auto it = shapes_.find(e.node);
    if (it == shapes_.end()) it = shapes_.emplace(e.node, OutputShapes(e.node)).first;
    if (e.entry >= static_cast<int>(it->second.size())) return -1;
    const Shape& s = it->second[e.entry];
    return s.empty() ? -1 : static_cast<int>(s.size());
  }

  const Shape* ShapeOf(const NodeEntry& e) {
    RankOf(e);
    const std::vector<Shape>& v = shapes_[e.node];
    return e.entry < static_cast<int>(v.size()) ? &v[e.entry] : nullptr;
  }

  static void Rewire(Node* consumer, int j, NodeEntry src) {
    NodeEntry old = consumer->inputs[j];
    auto& outs = old.node->outputs;
    for (auto it = outs.begin(); it != outs.end(); ++it) {
      if (it->node == consumer && it->entry == j) { outs.erase(it); break; }
    }
    consumer->inputs[j] = src;
    src.node->outputs.push_back({consumer, j});
  }

  Node* AddNode(const std::string& name, const std::string& op, const std::vector<NodeEntry>& in) {
    Node* n = g_->addNode(name, op);
    for (size_t j = 0; j < in.size(); ++j) {
      n->inputs.push_back(in[j]);
      in[j].node->outputs.push_back({n, static_cast<int>(j)});
    }
    return n;
  }

  std::string EntryName(const NodeEntry& e) {
    return e.entry == 0 ? e.node->name : e.node->name + "_out" + std::to_string(e.entry);
  }

  /*!
   * \brief A node giving the rank-r tensor at src in the other layout: a transpose, or a Reshape
   * for a weight of known shape whose axes other than size-1 ones keep their order (no data moves).
   */
  Node* Permute(const NodeEntry& src, int rank, bool to_last, const std::string& name,
                const Shape* weight_shape) {
    if (weight_shape && static_cast<int>(weight_shape->size()) == rank) {
      const Shape& s = *weight_shape;
      bool pure = s[1] == 1;
      pure = pure || std::all_of(s.begin() + 2, s.end(), [](int64_t d) { return d == 1; });
      if (pure) {
        Shape target = s;
        if (to_last) {
          target.erase(target.begin() + 1);
          target.push_back(s[1]);
        }
        std::ostringstream os;
        os << "(";
        for (size_t a = 0; a < target.size(); ++a) os << (a ? ", " : "") << target[a];
        os << ")";
        Node* r = AddNode(name, "Reshape", {src});
        r->attrs["shape"] = os.str();
        return r;
      }
    }
    Node* t = AddNode(name, "transpose", {src});
    t->attrs["axes"] = Axes(rank, to_last);
    return t;
  }

  /*! \brief The tensor at e in the other layout; one node per tensor and direction. */
  NodeEntry Transposed(const NodeEntry& e, int rank, bool to_last,
                       const Shape* weight_shape = nullptr) {
    auto& cache = to_last ? to_last_ : to_first_;
    Key key(e.node, e.entry);
    auto it = cache.find(key);
    if (it != cache.end()) return {it->second, 0};
    // The graph's own transpose the other way: its input already is the tensor wanted.
    if (IsLayoutTranspose(e.node, rank, !to_last)) return e.node->inputs[0];
    std::string name = EntryName(e) + (to_last ? "_amp_to_nhwc" : "_amp_to_nchw");
    Node* t = Permute(e, rank, to_last, name, weight_shape);
    cache[key] = t;
    return {t, 0};
  }

  /*! \brief Rewires input j of n to the current location of its tensor in the wanted layout. */
  void Use(Node* n, int j, bool want_last, int rank) {
    Where w = Find(n->inputs[j]);
    NodeEntry src = w.entry;
    if (w.last != want_last) src = Transposed(w.entry, rank, want_last);
    if (src.node != n->inputs[j].node || src.entry != n->inputs[j].entry) Rewire(n, j, src);
  }

  void SetOutputs(Node* n, const std::vector<bool>& last) {
    for (size_t i = 0; i < last.size(); ++i) {
      if (last[i]) where_[Key(n, static_cast<int>(i))] = Where{{n, static_cast<int>(i)}, true};
    }
  }

  size_t NumOutputs(Node* n) {
    RankOf({n, 0});
    return shapes_[n].size();
  }

  // ---- per-op rules ---------------------------------------------------------------------------
  void Visit(Node* n) {
    if (ConvOps().count(n->op)) return VisitConv(n);
    int rank = LastRank(n);
    if (rank >= 0 && IsLayoutTranspose(n, rank, true)) {
      // The graph's own NCHW -> NHWC transpose of a tensor that is channels-last already: no-op.
      where_[Key(n, 0)] = Where{Find(n->inputs[0]).entry, false};
      return;
    }
    if (rank < 0 || !Follows(n, rank)) return Fallback(n);
  }

  /*! \brief Rank of the channels-last inputs of n, or -1 if it has none. */
  int LastRank(Node* n) {
    for (NodeEntry& e : n->inputs) {
      if (Find(e).last) return RankOf(e);
    }
    return -1;
  }

  /*! \brief Puts every channels-last input of n back to channels-first. */
  void Fallback(Node* n) {
    for (size_t j = 0; j < n->inputs.size(); ++j) Use(n, static_cast<int>(j), false,
                                                       RankOf(n->inputs[j]));
  }

  /*! \brief Rewrites n to consume channels-last inputs when its op allows; false if it does not. */
  bool Follows(Node* n, int rank) {
    size_t num_outputs = NumOutputs(n);
    if (num_outputs == 0) return false;  // output shapes unknown: cannot tell which go channels-last
    for (size_t i = 0; i < num_outputs; ++i) {
      if (RankOf({n, static_cast<int>(i)}) < 0) return false;
    }
    const std::string& op = n->op;
    if (FollowOps().count(op)) return FollowPerIndex(n, rank);
    if (ElementwiseOps().count(op)) return FollowAllOfRank(n, rank, nullptr);
    if (op == "Pooling") return FollowPooling(n, rank);
    if (op == "Flatten" || op == "flatten") return FollowFlatten(n, rank);
    if (op == "FullyConnected" && IsTrue(Attr(n, "flatten", "True"))) return FollowFlatten(n, rank);
    AxisOp axis_op;
    if (!FindAxisOp(op, &axis_op)) return false;
    if (op == "BatchNorm" && emulate_) return EmulateBatchNorm(n, rank, &axis_op);
    return FollowAllOfRank(n, rank, &axis_op);
  }

  /*!
   * \brief Emulation: BatchNorm over the channels of a channels-last tensor as BatchNorm(axis=1) of
   * its (-1, C, 1, 1) Reshape, reshaped back (to (-1, C), then like the input): the same values.
   * MXNet 1.9.1's oneDNN BatchNorm makes that reshape itself for axis != 1, as views of its input and
   * output, and can then reuse a primitive cached for a tensor of those dims in oneDNN's nhwc layout
   * (an earlier channels-first BatchNorm after a convolution with a 1x1 map, on CPUs where oneDNN
   * picks nhwc: AVX-512); the process crashes. Reshape nodes give BatchNorm its own tensors. A
   * BatchNorm over another axis stays channels-first.
   */
  bool EmulateBatchNorm(Node* n, int rank, const AxisOp* axis_op) {
    int axis = std::stoi(Attr(n, axis_op->attr, std::to_string(axis_op->default_axis)));
    const Shape* shape = ShapeOf(n->inputs[0]);
    if ((axis != 1 && axis != 1 - rank) || !shape || static_cast<int>(shape->size()) != rank ||
        !FollowAllOfRank(n, rank, axis_op)) {
      return false;
    }
    NodeEntry in = n->inputs[0];
    Node* rows = AddNode(n->name + "_amp_emul_in0", "Reshape", {in});
    rows->attrs["shape"] = "(-1, " + std::to_string((*shape)[1]) + ", 1, 1)";
    Rewire(n, 0, {rows, 0});
    n->attrs[axis_op->attr] = "1";
    // Reshape, unlike reshape_like, reads an output left in a oneDNN layout (by a cached primitive).
    Node* flat = AddNode(n->name + "_amp_emul_flat", "Reshape", {{n, 0}});
    flat->attrs["shape"] = "(-1, " + std::to_string((*shape)[1]) + ")";
    Node* back = AddNode(n->name + "_amp_emul_out", "reshape_like", {{flat, 0}, in});
    where_[Key(n, 0)] = Where{{back, 0}, true};
    return true;
  }

  bool FollowPerIndex(Node* n, int rank) {
    if (n->op == "Dropout" && TupleLength(n, "axes") > 0) return false;
    if (n->op == "LeakyReLU" && Attr(n, "act_type", "leaky") == "prelu") return false;
    std::vector<bool> last(NumOutputs(n), false);
    for (size_t i = 0; i < last.size(); ++i) {
      const NodeEntry& in = n->inputs[i < n->inputs.size() ? i : 0];
      if (Find(in).last && RankOf({n, static_cast<int>(i)}) != rank) return false;
    }
    for (size_t i = 0; i < last.size(); ++i) {
      const NodeEntry& in = n->inputs[i < n->inputs.size() ? i : 0];
      last[i] = Find(in).last;
      if (last[i] && unit_spatial_.count(Key(in.node, in.entry))) {
        unit_spatial_.insert(Key(n, static_cast<int>(i)));
      }
    }
    for (size_t j = 0; j < n->inputs.size(); ++j) {
      Use(n, static_cast<int>(j), Find(n->inputs[j]).last, rank);
    }
    SetOutputs(n, last);
    return true;
  }

  /*!
   * \brief Every input of the channels-last rank goes channels-last, so do outputs of that rank;
   * with axis_op, its axis attribute is moved (inputs of other ranks, e.g. BatchNorm's gamma, stay).
   */
  bool FollowAllOfRank(Node* n, int rank, const AxisOp* axis_op) {
    if (!axis_op) {
      for (NodeEntry& e : n->inputs) {
        if (RankOf(e) != rank) return false;
      }
    } else {
      if (IsTrue(Attr(n, "squeeze_axis", "0"))) return false;
      int axis = std::stoi(Attr(n, axis_op->attr, std::to_string(axis_op->default_axis)));
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return false;
      if (RankOf(n->inputs[0]) != rank) return false;
      if (n->op == "Concat" || n->op == "concat") {
        for (NodeEntry& e : n->inputs) {
          if (RankOf(e) != rank) return false;
        }
      }
      n->attrs[axis_op->attr] = std::to_string(MovedAxis(axis, rank));
    }
    for (size_t j = 0; j < n->inputs.size(); ++j) {
      int r = RankOf(n->inputs[j]);
      Use(n, static_cast<int>(j), r == rank, r);
    }
    std::vector<bool> last(NumOutputs(n), false);
    for (size_t i = 0; i < last.size(); ++i) last[i] = RankOf({n, static_cast<int>(i)}) == rank;
    SetOutputs(n, last);
    return true;
  }

  bool FollowPooling(Node* n, int rank) {
    std::string layout = Attr(n, "layout", "None");
    if (layout != "None" && layout != LayoutName(rank, false)) return false;
    int kdims = TupleLength(n, "kernel");
    if (!IsTrue(Attr(n, "global_pool", "0")) && kdims != rank - 2) return false;
    n->attrs["layout"] = LayoutName(rank, true);
    Use(n, 0, true, rank);
    SetOutputs(n, {true});
    if (IsTrue(Attr(n, "global_pool", "0"))) unit_spatial_.insert(Key(n, 0));
    return true;
  }

  /*!
   * \brief Flatten (or a flattening FullyConnected) of a channels-last tensor that is 1x1 for every
   * input size (global pooling, then only per-element ops): the order of the axes does not matter.
   * A map that is 1x1 only for the shapes given to the pass is not enough: the graph may later run
   * on larger inputs. Inputs other than 0 (FullyConnected's weight) stay as they are.
   */
  bool FollowFlatten(Node* n, int rank) {
    const NodeEntry& in = n->inputs[0];
    if (!Find(in).last || !unit_spatial_.count(Key(in.node, in.entry))) return false;
    Use(n, 0, true, rank);
    for (size_t j = 1; j < n->inputs.size(); ++j) {
      Use(n, static_cast<int>(j), false, RankOf(n->inputs[j]));
    }
    return true;
  }

  /*! \brief Why a convolution node cannot go channels-last; empty when it can. */
  std::string ConvRefusal(Node* n) {
    int kdims = TupleLength(n, "kernel");
    if (kdims != 2 && kdims != 3) {
      return "unchanged: " + std::to_string(kdims) + "-D kernel; only 2-D and 3-D are rewritten";
    }
    if (kdims == 3 && !allow_3d_) {
      return "unchanged: 3-D; MXNet 1.9.1 runs 3-D convolutions only in NCDHW (allow_3d=1 rewrites "
             "them anyway)";
    }
    int rank = kdims + 2;
    std::string layout = Attr(n, "layout", "None");
    if (layout != "None" && layout != LayoutName(rank, false)) {
      return "unchanged: layout is already " + layout;
    }
    if (n->inputs.size() < 2) return "unchanged: no weight input";
    if (RankOf(n->inputs[0]) != rank || RankOf(n->inputs[1]) != rank) {
      return "unchanged: input shapes unknown; give the input shapes to the pass";
    }
    return "";
  }

  void VisitConv(Node* n) {
    std::string refusal = ConvRefusal(n);
    if (!refusal.empty()) {
      n->attrs[kStamp] = refusal;
      return Fallback(n);
    }
    int rank = TupleLength(n, "kernel") + 2;
    if (n->op == "Convolution" && unit_spatial_.count(Key(n->inputs[0].node, n->inputs[0].entry))) {
      // A 1x1 convolution without padding keeps a 1x1 map 1x1.
      std::vector<int64_t> kernel = TupleValues(n, "kernel"), pad = TupleValues(n, "pad");
      auto one = [](int64_t v) { return v == 1; };
      auto zero = [](int64_t v) { return v == 0; };
      if (std::all_of(kernel.begin(), kernel.end(), one) && std::all_of(pad.begin(), pad.end(), zero)) {
        unit_spatial_.insert(Key(n, 0));
      }
    }
    for (size_t j = 2; j < n->inputs.size(); ++j) Use(n, static_cast<int>(j), false, 1);
    Use(n, 0, true, rank);
    const Shape* weight_shape = ShapeOf(n->inputs[1]);
    NodeEntry weight = WeightLast(n->inputs[1], rank, weight_shape);
    if (weight.node != n->inputs[1].node || weight.entry != n->inputs[1].entry) {
      Rewire(n, 1, weight);
    }
    if (!emulate_) {
      n->attrs["layout"] = LayoutName(rank, true);
      n->attrs[kStamp] = LayoutName(rank, true);
      SetOutputs(n, {true});
      return;
    }
    // Emulation: channels-first convolution between transposes, fed from the channels-last tensors.
    n->attrs[kStamp] = LayoutName(rank, true) + " (emulated)";
    for (int j = 0; j < 2; ++j) {
      Node* t = Permute(n->inputs[j], rank, false, n->name + "_amp_emul_in" + std::to_string(j),
                        j == 1 ? weight_shape : nullptr);
      Rewire(n, j, {t, 0});
    }
    Node* back = AddNode(n->name + "_amp_emul_out", "transpose", {{n, 0}});
    back->attrs["axes"] = Axes(rank, true);
    where_[Key(n, 0)] = Where{{back, 0}, true};
  }

  /*!
   * \brief The weight in channels-last order. Offline: a transposed copy of the variable, read through
   * the per-element casts (amp_cast, ...) that lead from it to this convolution alone. Otherwise, or
   * when the values are not on CPU: a transpose node.
   */
  NodeEntry WeightLast(const NodeEntry& w, int rank, const Shape* shape) {
    Where cur = Find(w);
    if (cur.last) return cur.entry;
    if (offline_) {
      Node* head = nullptr;  // the cast nearest the variable, if any
      Node* v = w.node;
      while (v->op != "null" && FollowOps().count(v->op) && v->inputs.size() == 1 &&
             v->outputs.size() == 1) {
        head = v;
        v = v->inputs[0].node;
      }
      if (v->op == "null" && v->tensor && v->tensor->ctx.dev_type == "cpu" &&
          static_cast<int>(v->tensor->shape.size()) == rank) {
        auto it = offline_nodes_.find(v);
        if (it == offline_nodes_.end()) it = offline_nodes_.emplace(v, OfflineTranspose(v, rank)).first;
        if (!head) return {it->second, 0};
        Rewire(head, 0, {it->second, 0});
        return w;
      }
    }
    return Transposed(cur.entry, rank, true, shape);
  }

  Node* OfflineTranspose(Node* v, int rank) {
    const mxnet::ext::MXTensor& src = *v->tensor;
    const Shape& s = src.shape;
    Shape out_shape = {s[0]};
    for (int a = 2; a < rank; ++a) out_shape.push_back(s[a]);
    out_shape.push_back(s[1]);
    Node* copy = g_->addNode(v->name + "_amp_nhwc", "null");
    g_->inputs.push_back(copy);
    copy->alloc_arg(out_shape, src.ctx, src.dtype);
    for (auto& kv : v->attrs) {
      if (kv.first.rfind("__", 0) == 0 && kv.first != "__shape__" && kv.first != MX_STR_SHAPE) {
        copy->attrs[kv.first] = kv.second;
      }
    }
    size_t es = ElementSize(src.dtype);
    int64_t outer = s[0], chan = s[1], inner = 1;
    for (int a = 2; a < rank; ++a) inner *= s[a];
    const char* in = static_cast<const char*>(src.data_ptr);
    char* out = static_cast<char*>(copy->tensor->data_ptr);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < chan; ++c) {
        for (int64_t i = 0; i < inner; ++i) {
          std::memcpy(out + ((o * inner + i) * chan + c) * es, in + ((o * chan + c) * inner + i) * es,
                      es);
        }
      }
    }
    return copy;
  }

  Graph* g_;
  bool emulate_;
  bool offline_;
  bool allow_3d_;
  std::map<Key, Where> where_;
  std::set<Key> unit_spatial_;  // channels-last tensors that are 1x1(x1) whatever the input size
  std::map<Key, Node*> to_last_, to_first_;
  std::map<Node*, Node*> offline_nodes_;
  std::unordered_map<Node*, std::vector<Shape>> shapes_;
};

/*! \brief Reads the options into opts; false, with an error message, for a bad key or value. */
bool ParseOptions(const std::unordered_map<std::string, std::string>& options, Options* opts) {
  const std::map<std::string, bool*> flags = {{"allow_3d", &opts->allow_3d},
                                              {"emulate", &opts->emulate},
                                              {"offline_weights", &opts->offline_weights}};
  for (const auto& kv : options) {
    auto flag = flags.find(kv.first);
    if (flag == flags.end()) {
      MX_ERROR_MSG << "amp_layout: unknown option '" << kv.first
                   << "'; valid options: allow_3d, emulate, offline_weights";
      return false;
    }
    const std::string& v = kv.second;
    if (v == "1" || v == "True" || v == "true") {
      *flag->second = true;
    } else if (v == "0" || v == "False" || v == "false") {
      *flag->second = false;
    } else {
      MX_ERROR_MSG << "amp_layout: option " << kv.first << "='" << v
                   << "' is not a flag; use 0/1 or False/True";
      return false;
    }
  }
  return true;
}

MXReturnValue AmpLayoutPass(Graph* g, const std::unordered_map<std::string, std::string>& options) {
  Options opts;
  if (!ParseOptions(options, &opts)) return mxnet::ext::MX_FAIL;
  LayoutPass(g, opts).Run();
  return mxnet::ext::MX_SUCCESS;
}

}  // namespace

REGISTER_PASS(amp_layout).setBody(AmpLayoutPass);

}  // namespace layout
}  // namespace mxnet_amp
