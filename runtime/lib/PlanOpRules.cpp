//===- PlanOpRules.cpp - Each op's dtypes and shapes ----------------------===//
//
// The per-op part of the plan's verification: what every backend's kernel
// for an op assumes of its operands and results (docs/plan.md, "Ops"). One
// case per plan::Op, so that an op added to the table (plan/Format.h) does
// not compile without its rule. The counts of operands and results, and the
// attributes' types and ranges, are checked from the table before this runs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Plan.h"

#include <algorithm>

namespace kiln::runtime {

namespace {

using Shape = std::vector<int64_t>;

std::string show(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// One step's values, and the first problem found with them.
class StepRules {
public:
  StepRules(const Plan &plan, const PlanStep &step) : plan(plan), s(step) {}

  const PlanValue &in(size_t i) const { return plan.values[s.operands[i]]; }
  const PlanValue &out(size_t i) const { return plan.values[s.results[i]]; }

  /// Records `problem` about `what` unless one is recorded already.
  bool fail(const std::string &what, const std::string &problem) {
    if (error.empty())
      error = what + " " + problem;
    return false;
  }
  static std::string operandName(size_t i) {
    return "operand " + std::to_string(i);
  }
  static std::string resultName(size_t i) {
    return "result " + std::to_string(i);
  }

  // Dtype classes.
  bool floating(const PlanValue &v, const std::string &what) {
    return v.dtype == DType::F32 || v.dtype == DType::BF16 ||
           fail(what, std::string("is ") + dtypeName(v.dtype) +
                          "; it must be f32 or bf16");
  }
  /// A tensor a layout op moves: the compute types or FP8 codes.
  bool stored(const PlanValue &v, const std::string &what) {
    return v.dtype == DType::F32 || v.dtype == DType::BF16 ||
           isFp8(v.dtype) ||
           fail(what, std::string("is ") + dtypeName(v.dtype) +
                          "; it must be f32, bf16 or FP8");
  }
  /// What reshape and unflatten move: a stored float, or token ids.
  bool movable(const PlanValue &v, const std::string &what) {
    return v.dtype == DType::I32 || stored(v, what);
  }
  bool dtype(const PlanValue &v, DType want, const std::string &what) {
    return v.dtype == want || fail(what, std::string("is ") +
                                             dtypeName(v.dtype) +
                                             "; it must be " + dtypeName(want));
  }
  bool scalar(const PlanValue &v, DType want, const std::string &what) {
    return dtype(v, want, what) &&
           (v.numElements() == 1 ||
            fail(what, "has " + std::to_string(v.numElements()) +
                           " elements; it must be one"));
  }
  // Shapes.
  bool rank(const PlanValue &v, size_t r, const std::string &what) {
    return v.shape.size() == r ||
           fail(what, "has shape " + show(v.shape) + "; it must have rank " +
                          std::to_string(r));
  }
  /// At least rank 1 and no empty dimension: a [rows, last] matrix.
  bool matrix(const PlanValue &v, const std::string &what) {
    if (v.shape.empty())
      return fail(what, "is a scalar; it must have a last dimension");
    if (v.numElements() == 0)
      return fail(what, "has shape " + show(v.shape) + ", with no elements");
    return true;
  }
  bool shape(const PlanValue &v, const Shape &want, const std::string &what) {
    return v.shape == want ||
           fail(what, "has shape " + show(v.shape) + "; it must be " +
                          show(want));
  }
  bool elements(const PlanValue &v, int64_t want, const std::string &what) {
    return v.numElements() == want ||
           fail(what, "has " + std::to_string(v.numElements()) +
                          " elements; it must have " + std::to_string(want));
  }
  bool equal(int64_t a, int64_t b, const std::string &what) {
    return a == b || fail(what, "is " + std::to_string(a) + "; it must be " +
                                    std::to_string(b));
  }
  static int64_t last(const PlanValue &v) { return v.shape.back(); }
  static int64_t rows(const PlanValue &v) {
    return v.numElements() / v.shape.back();
  }
  const std::vector<int64_t> &list(const char *name) const {
    return std::get<std::vector<int64_t>>(s.attrs.at(name));
  }
  int64_t integer(const char *name) const {
    return std::get<int64_t>(s.attrs.at(name));
  }
  /// The FP8 all-gather's casts: `ranks` is the mesh's dp_shard (the
  /// ranks the flat buffer is sharded over).
  bool planRanks() {
    return equal(integer("ranks"), plan.mesh.dpShard, "attribute 'ranks'");
  }
  /// A collective's `ranks` is the size of its `axis` in the plan's mesh.
  bool axisRanks() {
    std::optional<plan::Axis> axis =
        plan::parseAxis(std::get<std::string>(s.attrs.at("axis")));
    int64_t size = plan.mesh.axisSize(*axis);
    return integer("ranks") == size ||
           fail("attribute 'ranks'", "is " + std::to_string(integer("ranks")) +
                                         ", but the mesh's " +
                                         plan::axisName(*axis) + " axis has " +
                                         std::to_string(size));
  }

  bool check();

  const Plan &plan;
  const PlanStep &s;
  std::string error;

private:
  bool linear();
  bool attention(bool grad);
  bool shardCast();
  bool flatten();
  bool transpose();
  bool vocabParallel();
  bool vocabSlice(int64_t rows);
};

/// A tp rank's slice [vocab_start, vocab_start + rows) of a vocabulary of
/// vocab_size: both attributes or neither (an embedding's whole table);
/// the slice is the plan's tp position's, and the mesh's tp slices cover
/// the vocabulary with less than a slice of padding.
bool StepRules::vocabSlice(int64_t rows) {
  bool start = s.attrs.count("vocab_start"), size = s.attrs.count("vocab_size");
  if (start != size)
    return fail("attributes 'vocab_start' and 'vocab_size'",
                "must be given together");
  if (!start)
    return true;
  int64_t vocab = integer("vocab_size"), tp = plan.mesh.tp;
  if (integer("vocab_start") != plan.tpIndex * rows)
    return fail("attribute 'vocab_start'",
                "is " + std::to_string(integer("vocab_start")) +
                    "; tp position " + std::to_string(plan.tpIndex) +
                    "'s slice of " + std::to_string(rows) + " starts at " +
                    std::to_string(plan.tpIndex * rows));
  if (vocab <= (tp - 1) * rows || vocab > tp * rows)
    return fail("attribute 'vocab_size'",
                "is " + std::to_string(vocab) + "; " + std::to_string(tp) +
                    " slices of " + std::to_string(rows) +
                    " must cover it with less than a slice to spare");
  return true;
}

/// vocab_parallel_max: logits -> max; _stats: logits, max, targets ->
/// stats [rows, 2]; _stats_grad: dstats, logits, max, targets -> dlogits.
/// The slice [vocab_start, vocab_start + V/tp) starts inside the vocabulary.
bool StepRules::vocabParallel() {
  bool grad = s.kind == plan::Op::VocabParallelStatsGrad;
  size_t l = grad ? 1 : 0;
  const PlanValue &logits = in(l);
  if (!floating(logits, operandName(l)) || !matrix(logits, operandName(l)) ||
      !vocabSlice(last(logits)))
    return false;
  int64_t n = rows(logits);
  if (s.kind == plan::Op::VocabParallelMax)
    return dtype(out(0), DType::F32, resultName(0)) &&
           elements(out(0), n, resultName(0));
  for (size_t i = l + 1; i < l + 3; ++i)
    if (!dtype(in(i), DType::F32, operandName(i)) ||
        !elements(in(i), n, operandName(i)))
      return false;
  if (grad)
    return dtype(in(0), DType::F32, operandName(0)) &&
           elements(in(0), 2 * n, operandName(0)) &&
           floating(out(0), resultName(0)) &&
           shape(out(0), logits.shape, resultName(0));
  return dtype(out(0), DType::F32, resultName(0)) &&
         elements(out(0), 2 * n, resultName(0));
}

/// x [..., K], W [N, K] -> y [..., N]; its gradients.
bool StepRules::linear() {
  const PlanValue &a = in(0), &b = in(1), &r = out(0);
  if (!floating(a, operandName(0)) || !floating(b, operandName(1)) ||
      !floating(r, resultName(0)) || !matrix(a, operandName(0)) ||
      !matrix(b, operandName(1)) || !matrix(r, resultName(0)))
    return false;
  switch (s.kind) {
  case plan::Op::Linear:
    // x [T, K], W [N, K] -> [T, N].
    return rank(b, 2, "operand 1 (the weight)") &&
           equal(last(a), b.shape[1], "operand 0's last dimension") &&
           equal(last(r), b.shape[0], "result 0's last dimension") &&
           elements(r, rows(a) * b.shape[0], resultName(0));
  case plan::Op::LinearGradInput:
    // dy [T, N], W [N, K] -> dx [T, K].
    return rank(b, 2, "operand 1 (the weight)") &&
           equal(last(a), b.shape[0], "operand 0's last dimension") &&
           equal(last(r), b.shape[1], "result 0's last dimension") &&
           elements(r, rows(a) * b.shape[1], resultName(0));
  default:
    // dy [T, N], x [T, K] -> dW [N, K].
    return equal(rows(b), rows(a), "operand 1's row count") &&
           shape(r, {last(a), last(b)}, resultName(0));
  }
}

/// q [B, S, Hq, D], k, v [B, S, Hkv, D] -> out like q, lse [B, Hq, S] f32;
/// the gradient: dout, q, k, v, out, lse -> dq, dk, dv.
bool StepRules::attention(bool grad) {
  size_t q = grad ? 1 : 0;
  const PlanValue &query = in(q), &key = in(q + 1), &value = in(q + 2);
  for (size_t i = 0; i < s.operands.size(); ++i) {
    if (grad && i == 5)
      continue; // lse, below
    if (!floating(in(i), operandName(i)) || !rank(in(i), 4, operandName(i)))
      return false;
  }
  const Shape &qs = query.shape, &ks = key.shape;
  if (!shape(value, ks, "operand " + std::to_string(q + 2) + " (v)"))
    return false;
  if (ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3])
    return fail("operand " + std::to_string(q + 1) + " (k)",
                "has shape " + show(ks) + "; it must match q " + show(qs) +
                    " except in its head count");
  if (ks[2] < 1 || qs[2] % ks[2] != 0)
    return fail("operand " + std::to_string(q + 1) + " (k)",
                "has " + std::to_string(ks[2]) +
                    " heads, which must divide q's " + std::to_string(qs[2]));
  if (qs[3] < 1)
    return fail("operand " + std::to_string(q), "has head dimension 0");
  Shape lse = {qs[0], qs[2], qs[1]};
  if (!grad)
    return floating(out(0), resultName(0)) && shape(out(0), qs, resultName(0)) &&
           dtype(out(1), DType::F32, resultName(1)) &&
           shape(out(1), lse, "result 1 (lse)");
  return shape(in(0), qs, "operand 0 (dout)") &&
         shape(in(4), qs, "operand 4 (out)") &&
         dtype(in(5), DType::F32, "operand 5 (lse)") &&
         shape(in(5), lse, "operand 5 (lse)") &&
         floating(out(0), resultName(0)) && shape(out(0), qs, resultName(0)) &&
         floating(out(1), resultName(1)) && shape(out(1), ks, resultName(1)) &&
         floating(out(2), resultName(2)) && shape(out(2), ks, resultName(2));
}

/// shard_amax (shard -> amaxes) and shard_quantize (shard, amaxes -> codes,
/// scales): one offset and one size per weight, each inside the flat
/// buffer of `ranks` shards.
bool StepRules::shardCast() {
  const std::vector<int64_t> &offsets = list("offsets"), &sizes = list("sizes");
  if (!planRanks() || !floating(in(0), operandName(0)) ||
      !rank(in(0), 1, operandName(0)))
    return false;
  int64_t weights = static_cast<int64_t>(offsets.size());
  if (sizes.size() != offsets.size())
    return fail("attribute 'sizes'",
                "has " + std::to_string(sizes.size()) + " entries for " +
                    std::to_string(weights) + " offsets");
  // Both factors are at most 2^48 and 2^20: the product is below 2^68, so
  // compare without forming it.
  int64_t shard = in(0).numElements();
  for (int64_t w = 0; w < weights; ++w) {
    int64_t end = offsets[w] + sizes[w]; // each at most 2^48
    if (shard == 0 ? end > 0 : (end + shard - 1) / shard > plan.mesh.dpShard)
      return fail("weight " + std::to_string(w),
                  "ends at element " + std::to_string(end) +
                      ", past the flat buffer of " +
                      std::to_string(plan.mesh.dpShard) + " shards of " +
                      std::to_string(shard));
  }
  if (s.kind == plan::Op::ShardAmax)
    return dtype(out(0), DType::F32, resultName(0)) &&
           shape(out(0), {weights}, resultName(0));
  return dtype(in(1), DType::F32, operandName(1)) &&
         shape(in(1), {weights}, operandName(1)) &&
         dtype(out(0), DType::F8E4M3, resultName(0)) &&
         shape(out(0), in(0).shape, resultName(0)) &&
         dtype(out(1), DType::F32, resultName(1)) &&
         shape(out(1), {weights}, resultName(1));
}

/// parts... -> flat [M]: part i at offsets[i].
bool StepRules::flatten() {
  const std::vector<int64_t> &offsets = list("offsets");
  const PlanValue &flat = out(0);
  if (offsets.size() != s.operands.size())
    return fail("attribute 'offsets'",
                "has " + std::to_string(offsets.size()) + " entries for " +
                    std::to_string(s.operands.size()) + " operands");
  if (!rank(flat, 1, resultName(0)) || !stored(flat, resultName(0)))
    return false;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (!stored(in(i), operandName(i)))
      return false;
    if (offsets[i] + in(i).numElements() > flat.numElements())
      return fail(operandName(i),
                  "at offset " + std::to_string(offsets[i]) + " with " +
                      std::to_string(in(i).numElements()) +
                      " elements passes the end of the " +
                      std::to_string(flat.numElements()) + "-element result");
  }
  return true;
}

bool StepRules::transpose() {
  const std::vector<int64_t> &perm = list("permutation");
  const Shape &x = in(0).shape;
  if (!stored(in(0), operandName(0)) ||
      !dtype(out(0), in(0).dtype, resultName(0)))
    return false;
  if (perm.size() != x.size())
    return fail("attribute 'permutation'",
                "has " + std::to_string(perm.size()) +
                    " entries for an operand of rank " +
                    std::to_string(x.size()));
  std::vector<bool> seen(x.size(), false);
  Shape want;
  for (int64_t d : perm) {
    if (d >= static_cast<int64_t>(x.size()) || seen[d])
      return fail("attribute 'permutation'", "is not a permutation");
    seen[d] = true;
    want.push_back(x[d]);
  }
  return shape(out(0), want, resultName(0));
}

bool StepRules::check() {
  using plan::Op;
  switch (s.kind) {
  case Op::Init:
    return scalar(in(0), DType::I64, "operand 0 (the seed)") &&
           (in(0).kind == PlanValue::Input && in(0).name == "seed"
                ? true
                : fail(operandName(0), "must be the input 'seed'")) &&
           (out(0).kind == PlanValue::State
                ? true
                : fail(resultName(0), "must be a state"));
  case Op::Embedding:
    // table [V, E], tokens -> [..., E], one row per token.
    return rank(in(0), 2, "operand 0 (the table)") &&
           vocabSlice(in(0).shape[0]) &&
           floating(in(0), "operand 0 (the table)") &&
           dtype(in(1), DType::I32, "operand 1 (the tokens)") &&
           floating(out(0), resultName(0)) && matrix(out(0), resultName(0)) &&
           equal(last(out(0)), in(0).shape[1], "result 0's last dimension") &&
           elements(out(0), in(1).numElements() * in(0).shape[1],
                    resultName(0));
  case Op::EmbeddingGrad:
    // dy [..., E], tokens -> table [V, E].
    return rank(out(0), 2, "result 0 (the table)") &&
           vocabSlice(out(0).shape[0]) &&
           floating(out(0), "result 0 (the table)") &&
           dtype(in(1), DType::I32, "operand 1 (the tokens)") &&
           floating(in(0), operandName(0)) && matrix(in(0), operandName(0)) &&
           equal(last(in(0)), out(0).shape[1], "operand 0's last dimension") &&
           elements(in(0), in(1).numElements() * out(0).shape[1],
                    operandName(0));
  case Op::Linear:
  case Op::LinearGradInput:
  case Op::LinearGradWeight:
    return linear();
  case Op::ScaledMatmul: {
    // a [M, K] FP8, a_scale (scalar or [M]), b [N, K] FP8, b_scale -> [M, N].
    const PlanValue &a = in(0), &b = in(2);
    for (size_t i : {0, 2})
      if (!isFp8(in(i).dtype))
        return fail(operandName(i), std::string("is ") +
                                        dtypeName(in(i).dtype) +
                                        "; it must be FP8");
    if (!rank(a, 2, operandName(0)) || !rank(b, 2, operandName(2)) ||
        !equal(b.shape[1], a.shape[1], "operand 2's last dimension"))
      return false;
    for (size_t i : {1, 3}) {
      int64_t rows = in(i - 1).shape[0];
      if (!dtype(in(i), DType::F32, operandName(i)))
        return false;
      if (!in(i).shape.empty() && in(i).shape != Shape{rows})
        return fail(operandName(i), "has shape " + show(in(i).shape) +
                                        "; a scale is a scalar or [" +
                                        std::to_string(rows) + "]");
    }
    return floating(out(0), resultName(0)) &&
           shape(out(0), {a.shape[0], b.shape[0]}, resultName(0));
  }
  case Op::Rope:
  case Op::RopeGrad:
    return floating(in(0), operandName(0)) && rank(in(0), 4, operandName(0)) &&
           (in(0).shape[3] % 2 == 0 ||
            fail(operandName(0), "has an odd head dimension")) &&
           floating(out(0), resultName(0)) &&
           shape(out(0), in(0).shape, resultName(0));
  case Op::Attention:
    return attention(false);
  case Op::AttentionGrad:
    return attention(true);
  case Op::CrossEntropy:
    // logits [..., V], targets (one per row) -> the mean loss.
    return floating(in(0), operandName(0)) && matrix(in(0), operandName(0)) &&
           dtype(in(1), DType::I32, "operand 1 (the targets)") &&
           elements(in(1), rows(in(0)), "operand 1 (the targets)") &&
           scalar(out(0), DType::F32, resultName(0));
  case Op::CrossEntropyGrad:
    // dloss, logits, targets -> dlogits.
    return scalar(in(0), DType::F32, operandName(0)) &&
           floating(in(1), operandName(1)) && matrix(in(1), operandName(1)) &&
           dtype(in(2), DType::I32, "operand 2 (the targets)") &&
           elements(in(2), rows(in(1)), "operand 2 (the targets)") &&
           floating(out(0), resultName(0)) &&
           shape(out(0), in(1).shape, resultName(0));
  case Op::IndexToFloat:
    return dtype(in(0), DType::I32, operandName(0)) &&
           dtype(out(0), DType::F32, resultName(0)) &&
           shape(out(0), in(0).shape, resultName(0));
  case Op::VocabParallelMax:
  case Op::VocabParallelStats:
  case Op::VocabParallelStatsGrad:
    return vocabParallel();
  case Op::VocabParallelLoss:
    // stats [..., 2], max [...] -> the mean loss.
    return dtype(in(0), DType::F32, "operand 0 (the statistics)") &&
           (in(0).shape.size() >= 1 && in(0).shape.back() == 2 ||
            fail("operand 0 (the statistics)", "must be [..., 2]")) &&
           dtype(in(1), DType::F32, "operand 1 (the max)") &&
           elements(in(1), rows(in(0)), "operand 1 (the max)") &&
           scalar(out(0), DType::F32, resultName(0));
  case Op::VocabParallelLossGrad:
    // dloss, stats -> dstats.
    return scalar(in(0), DType::F32, operandName(0)) &&
           dtype(in(1), DType::F32, "operand 1 (the statistics)") &&
           dtype(out(0), DType::F32, resultName(0)) &&
           shape(out(0), in(1).shape, resultName(0));
  case Op::Reshape:
    return movable(in(0), operandName(0)) &&
           dtype(out(0), in(0).dtype, resultName(0)) &&
           elements(out(0), in(0).numElements(), resultName(0));
  case Op::Transpose:
    return transpose();
  case Op::Flatten:
    return flatten();
  case Op::Unflatten:
    return movable(in(0), operandName(0)) && rank(in(0), 1, operandName(0)) &&
           dtype(out(0), in(0).dtype, resultName(0)) &&
           (integer("offset") + out(0).numElements() <= in(0).numElements() ||
            fail("attribute 'offset'",
                 "with the result's " + std::to_string(out(0).numElements()) +
                     " elements passes the end of the operand"));
  case Op::DelayedAmax:
    return dtype(in(0), DType::F32, "operand 0 (the history)") &&
           rank(in(0), 1, "operand 0 (the history)") &&
           (in(0).numElements() > 0 ||
            fail("operand 0 (the history)", "is empty")) &&
           (s.operands.size() < 2 ||
            scalar(in(1), DType::F32, "operand 1 (the current amax)")) &&
           scalar(out(0), DType::F32, resultName(0));
  case Op::AmaxHistoryUpdate:
    return dtype(in(0), DType::F32, "operand 0 (the history)") &&
           rank(in(0), 1, "operand 0 (the history)") &&
           (in(0).numElements() > 0 ||
            fail("operand 0 (the history)", "is empty")) &&
           scalar(in(1), DType::F32, "operand 1 (the amax)") &&
           dtype(out(0), DType::F32, resultName(0)) &&
           shape(out(0), in(0).shape, resultName(0));
  case Op::GradNorm:
    for (size_t i = 0; i < s.operands.size(); ++i)
      if (!floating(in(i), operandName(i)))
        return false;
    return scalar(out(0), DType::F32, resultName(0));
  case Op::LrSchedule:
    return scalar(in(0), DType::I64, "operand 0 (the step)") &&
           scalar(out(0), DType::F32, resultName(0));
  case Op::AdamW: {
    // param, grad, exp_avg, exp_avg_sq, grad_norm, lr, step -> param,
    // exp_avg, exp_avg_sq, written over the states read.
    int64_t n = in(0).numElements();
    static const char *names[] = {"the parameter", "the gradient",
                                  "exp_avg", "exp_avg_sq"};
    for (size_t i = 0; i < 4; ++i) {
      std::string what = operandName(i) + " (" + names[i] + ")";
      if (!floating(in(i), what) || !elements(in(i), n, what))
        return false;
    }
    for (size_t r = 0; r < 3; ++r) {
      size_t from = r == 0 ? 0 : r + 1;
      if (s.results[r] != s.operands[from])
        return fail(resultName(r),
                    "must be operand " + std::to_string(from) +
                        ": AdamW writes over the state it reads");
      if (out(r).kind != PlanValue::State)
        return fail(resultName(r), "must be a state");
    }
    return scalar(in(4), DType::F32, "operand 4 (the gradient norm)") &&
           scalar(in(5), DType::F32, "operand 5 (the learning rate)") &&
           scalar(in(6), DType::I64, "operand 6 (the step)");
  }
  case Op::ShardAmax:
  case Op::ShardQuantize:
    return shardCast();
  case Op::SendRecvStart: {
    const PlanValue &a = in(0);
    return axisRanks() && floating(a, operandName(0)) &&
           rank(a, 1, operandName(0)) &&
           dtype(out(0), a.dtype, resultName(0)) &&
           shape(out(0), a.shape, resultName(0)) &&
           (integer("shift") < integer("ranks") ||
            fail("attribute 'shift'", "must be below 'ranks'"));
  }
  case Op::PipeSendStart:
  case Op::PipeRecvStart: {
    // A send's result is its token (a scalar f32), a receive's the data.
    bool send = s.kind == Op::PipeSendStart;
    const PlanValue &data = send ? in(0) : out(0);
    return floating(data, send ? operandName(0) : resultName(0)) &&
           (!send ||
            scalar(out(0), DType::F32, resultName(0) + " (the token)")) &&
           (integer("peer") < integer("ranks") ||
            fail("attribute 'peer'", "must be below 'ranks'"));
  }
  case Op::AllGatherStart:
  case Op::ReduceScatterStart:
  case Op::AllReduceStart: {
    const PlanValue &a = in(0), &r = out(0);
    // FP8 codes and token ids are gathered as they are.
    bool bytes = s.kind == Op::AllGatherStart &&
                 (a.dtype == DType::F8E4M3 || a.dtype == DType::I32);
    if (!axisRanks() || (!bytes && !floating(a, operandName(0))) ||
        !dtype(r, a.dtype, resultName(0)))
      return false;
    if (s.kind == Op::AllReduceStart)
      return shape(r, a.shape, resultName(0));
    const PlanValue &shard = s.kind == Op::AllGatherStart ? a : r;
    const PlanValue &whole = s.kind == Op::AllGatherStart ? r : a;
    int64_t n = integer("ranks");
    return rank(shard, 1, "the shard") && rank(whole, 1, "the whole buffer") &&
           (whole.shape[0] / n == shard.shape[0] && whole.shape[0] % n == 0
                ? true
                : fail("the whole buffer",
                       "has " + std::to_string(whole.shape[0]) +
                           " elements; it must be " + std::to_string(n) +
                           " shards of " + std::to_string(shard.shape[0])));
  }
  case Op::Wait:
    return s.results[0] == s.operands[0] ||
           fail(resultName(0), "must be the collective's own result, its "
                               "operand");
  case Op::Fused:
    // checkFusedGroup checked the group against its values at parse time.
    return true;
  case Op::Add:
  case Op::Mul:
  case Op::Silu:
  case Op::SiluGrad:
  case Op::Sqrt:
  case Op::Cast:
  case Op::RmsNorm:
  case Op::RmsNormGrad:
  case Op::Amax:
  case Op::Quantize:
    return fail("the op", "only appears inside fused groups");
  }
  return fail("the op", "has no rule");
}

} // namespace

Error checkStepShapes(const Plan &plan, const PlanStep &step) {
  StepRules rules(plan, step);
  rules.check();
  return Error(std::move(rules.error));
}

} // namespace kiln::runtime
