//===- OpKernelLaunches.cpp - The launches of each library op -------------===//
//
// For a plan step: which kernels of the op library run, on what grid, with
// which argument slots, how much scratch. Shapes and dtypes are checked
// here, once per step, so that a kernel never meets a layout it does not
// handle: an unsupported one is an error line, never a bad launch.
//
//===----------------------------------------------------------------------===//

#include "OpLaunchArgs.h"

#include <algorithm>

namespace kiln::runtime::cuda {

// The kernels take DType's values as their dtype codes (KILN_F32, ...).
static_assert(static_cast<int>(DType::F32) == 0 &&
              static_cast<int>(DType::BF16) == 1 &&
              static_cast<int>(DType::F8E4M3) == 6 &&
              static_cast<int>(DType::F8E5M2) == 7);

namespace {

using namespace launch;

/// The shared memory of one block, at most: the default without opting in.
constexpr int64_t kMaxSharedBytes = 48 * 1024;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A grid-stride kernel over n items: blocks of 256, at most 4096 of them.
OpKernelLaunch elementwise(const std::string &kernel, int64_t n,
                           std::vector<Arg> args) {
  return {kernel, std::clamp<int64_t>(ceilDiv(n, 256), 1, 4096), 256, 0,
          std::move(args)};
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::BF16 || isFp8(t);
}

/// Reads one step's values and says what is wrong with them.
class StepReader {
public:
  StepReader(const Plan &plan, const PlanStep &step, std::string &error)
      : plan(plan), step(step), error(error) {}

  const PlanValue &in(size_t i) const {
    return plan.values[step.operands[i]];
  }
  const PlanValue &out(size_t i) const {
    return plan.values[step.results[i]];
  }

  /// False (with the error) unless the step has these counts.
  bool counts(size_t operands, size_t results, size_t maxOperands = 0) {
    size_t most = std::max(operands, maxOperands);
    if (step.operands.size() >= operands && step.operands.size() <= most &&
        step.results.size() == results)
      return true;
    return fail("has " + std::to_string(step.operands.size()) +
                " operands and " + std::to_string(step.results.size()) +
                " results");
  }
  /// False unless every operand and result listed is a float dtype the
  /// kernels read (f32, bf16, FP8).
  bool floats(std::initializer_list<int> operands,
              std::initializer_list<int> results) {
    for (int i : operands)
      if (!isFloat(in(i).dtype))
        return fail(std::string("operand ") + std::to_string(i) + " is " +
                    dtypeName(in(i).dtype));
    for (int i : results)
      if (!isFloat(out(i).dtype))
        return fail(std::string("result ") + std::to_string(i) + " is " +
                    dtypeName(out(i).dtype));
    return true;
  }
  bool is(const PlanValue &v, DType t, const char *what) {
    return v.dtype == t ||
           fail(std::string(what) + " is " + dtypeName(v.dtype) + ", not " +
                dtypeName(t));
  }
  bool fail(const std::string &why) {
    error = step.op + ": " + why;
    return false;
  }

  const Plan &plan;
  const PlanStep &step;
  std::string &error;
};

using Result = std::optional<OpLaunchPlan>;

Result copyLike(StepReader &r, int64_t srcOffset) {
  if (!r.counts(1, 1) || !r.floats({0}, {0}))
    return std::nullopt;
  int64_t n = r.out(0).numElements();
  if (srcOffset < 0 || srcOffset + n > r.in(0).numElements()) {
    r.fail("reads past its operand");
    return std::nullopt;
  }
  OpLaunchPlan p;
  p.launches.push_back(elementwise(
      "kiln_copy", n,
      {operand(0), code(r.in(0).dtype), result(0), code(r.out(0).dtype),
       integer(n), integer(srcOffset), integer(0)}));
  return p;
}

Result flatten(StepReader &r) {
  const auto &offsets =
      std::get<std::vector<int64_t>>(r.step.attrs.at("offsets"));
  if (!r.counts(1, 1, 1 << 20) || !r.floats({}, {0}))
    return std::nullopt;
  if (offsets.size() != r.step.operands.size()) {
    r.fail("needs an offset per operand");
    return std::nullopt;
  }
  OpLaunchPlan p;
  p.zeroResults = {0}; // the padding
  for (size_t i = 0; i < offsets.size(); ++i) {
    int64_t n = r.in(i).numElements();
    if (!r.floats({static_cast<int>(i)}, {}))
      return std::nullopt;
    if (offsets[i] < 0 || offsets[i] + n > r.out(0).numElements()) {
      r.fail("operand " + std::to_string(i) + " does not fit the result");
      return std::nullopt;
    }
    if (n > 0)
      p.launches.push_back(elementwise(
          "kiln_copy", n,
          {operand(i), code(r.in(i).dtype), result(0), code(r.out(0).dtype),
           integer(n), integer(0), integer(offsets[i])}));
  }
  return p;
}

Result transpose(StepReader &r) {
  if (!r.counts(1, 1) || !r.floats({0}, {0}))
    return std::nullopt;
  const auto &perm =
      std::get<std::vector<int64_t>>(r.step.attrs.at("permutation"));
  const std::vector<int64_t> &shape = r.in(0).shape;
  size_t rank = shape.size();
  if (perm.size() != rank || rank > 5 || r.out(0).shape.size() != rank) {
    r.fail("takes a permutation of rank at most 5 matching its operand");
    return std::nullopt;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * shape[d];
  int64_t n = r.out(0).numElements();
  std::vector<Arg> args = {operand(0), code(r.in(0).dtype), result(0),
                           code(r.out(0).dtype), integer(n),
                           integer(static_cast<int64_t>(rank))};
  for (size_t d = 0; d < 5; ++d)
    args.push_back(integer(d < rank ? r.out(0).shape[d] : 1));
  for (size_t d = 0; d < 5; ++d) {
    if (d < rank && (perm[d] < 0 || perm[d] >= static_cast<int64_t>(rank))) {
      r.fail("has a permutation entry out of range");
      return std::nullopt;
    }
    args.push_back(integer(d < rank ? stride[perm[d]] : 0));
  }
  OpLaunchPlan p;
  p.launches.push_back(elementwise("kiln_transpose", n, std::move(args)));
  return p;
}

Result embedding(StepReader &r) {
  if (!r.counts(2, 1) || !r.floats({0}, {0}) ||
      !r.is(r.in(1), DType::I32, "the token ids"))
    return std::nullopt;
  const PlanValue &table = r.in(0);
  if (table.shape.size() != 2) {
    r.fail("needs a [vocab, dim] table");
    return std::nullopt;
  }
  int64_t tokens = r.in(1).numElements(), dim = table.shape[1];
  OpLaunchPlan p;
  p.launches.push_back(elementwise(
      "kiln_embedding", tokens * dim,
      {operand(0), code(table.dtype), operand(1), result(0),
       code(r.out(0).dtype), integer(tokens), integer(table.shape[0]),
       integer(dim)}));
  return p;
}

Result embeddingGrad(StepReader &r) {
  if (!r.counts(2, 1) || !r.floats({0}, {0}) ||
      !r.is(r.in(1), DType::I32, "the token ids"))
    return std::nullopt;
  const PlanValue &table = r.out(0);
  if (table.shape.size() != 2) {
    r.fail("needs a [vocab, dim] result");
    return std::nullopt;
  }
  int64_t tokens = r.in(1).numElements(), vocab = table.shape[0],
          dim = table.shape[1];
  // The sums run in f32: in the result itself, or in scratch rounded to
  // the result's dtype afterwards.
  bool direct = table.dtype == DType::F32;
  OpLaunchPlan p;
  if (direct)
    p.zeroResults = {0};
  else
    p.scratchBytes = vocab * dim * 4;
  Arg acc = direct ? result(0) : scratch(0);
  p.launches.push_back({"kiln_embedding_grad",
                        std::max<int64_t>(1, ceilDiv(dim, 128)), 128, 0,
                        {operand(0), code(r.in(0).dtype), operand(1), acc,
                         integer(tokens), integer(vocab), integer(dim)}});
  if (!direct)
    p.launches.push_back(elementwise(
        "kiln_copy", vocab * dim,
        {scratch(0), code(DType::F32), result(0), code(table.dtype),
         integer(vocab * dim), integer(0), integer(0)}));
  return p;
}

Result rope(StepReader &r, float sign) {
  if (!r.counts(1, 1) || !r.floats({0}, {0}))
    return std::nullopt;
  const std::vector<int64_t> &s = r.in(0).shape;
  if (s.size() != 4 || s[3] % 2 != 0 || r.out(0).shape != s) {
    r.fail("needs [batch, seq, heads, dim] tensors with an even dim");
    return std::nullopt;
  }
  int64_t seq = s[1], half = s[3] / 2;
  OpLaunchPlan p;
  p.scratchBytes = 2 * seq * half * 4;
  p.launches.push_back(elementwise("kiln_rope_table", seq * half,
                                   {scratch(0), integer(seq), integer(s[3]),
                                    real(r.step.f64("theta"))}));
  p.launches.push_back(elementwise(
      "kiln_rope", s[0] * seq * s[2] * half,
      {operand(0), code(r.in(0).dtype), result(0), code(r.out(0).dtype),
       scratch(0), integer(s[0] * seq), integer(seq), integer(s[2]),
       integer(s[3]), real(sign)}));
  return p;
}

/// Dtype codes packed 4 bits each, first value lowest.
int64_t packTypes(std::initializer_list<DType> types) {
  int64_t packed = 0, shift = 0;
  for (DType t : types) {
    packed |= static_cast<int64_t>(t) << shift;
    shift += 4;
  }
  return packed;
}

/// The largest tile (32, 16 or 8 rows) whose shared memory, by `bytes`,
/// fits; 0 when none does.
template <typename Bytes> int chooseTile(Bytes bytes) {
  for (int t : {32, 16, 8})
    if (bytes(t) <= kMaxSharedBytes)
      return t;
  return 0;
}

/// Checks q [b, s, hq, d] and k, v [b, s, hk, d] with hk dividing hq.
bool attentionShapes(StepReader &r, const PlanValue &q, const PlanValue &k,
                     const PlanValue &v) {
  const auto &qs = q.shape, &ks = k.shape;
  if (qs.size() != 4 || ks.size() != 4 || v.shape != ks || qs[0] != ks[0] ||
      qs[1] != ks[1] || qs[3] != ks[3] || ks[2] <= 0 || qs[2] % ks[2] != 0)
    return r.fail("needs q [b, s, h, d] and k, v [b, s, kv heads, d], the kv "
                  "heads dividing h");
  return true;
}

Result attention(StepReader &r) {
  if (!r.counts(3, 2) || !r.floats({0, 1, 2}, {0, 1}) ||
      !attentionShapes(r, r.in(0), r.in(1), r.in(2)))
    return std::nullopt;
  const std::vector<int64_t> &qs = r.in(0).shape;
  int64_t b = qs[0], seq = qs[1], hq = qs[2], dim = qs[3];
  auto bytes = [&](int64_t t) {
    return 4 * (3 * t * dim + t * (dim + 1) + t * t + 3 * t);
  };
  int tile = chooseTile(bytes);
  if (tile == 0) {
    r.fail("head dim " + std::to_string(dim) + " is too large");
    return std::nullopt;
  }
  OpLaunchPlan p;
  if (b * hq * seq == 0)
    return p;
  p.launches.push_back(
      {"kiln_attention", b * hq * ceilDiv(seq, tile), 128,
       static_cast<int>(bytes(tile)),
       {operand(0), operand(1), operand(2), result(0), result(1),
        integer(packTypes({r.in(0).dtype, r.in(1).dtype, r.in(2).dtype,
                           r.out(0).dtype, r.out(1).dtype})),
        integer(seq), integer(hq), integer(r.in(1).shape[2]), integer(dim),
        integer(tile), integer(r.step.flag("causal")),
        real(r.step.f64("scale"))}});
  return p;
}

Result attentionGrad(StepReader &r) {
  // Operands: dout, q, k, v, out, lse; results: dq, dk, dv.
  if (!r.counts(6, 3) || !r.floats({0, 1, 2, 3, 4, 5}, {0, 1, 2}) ||
      !attentionShapes(r, r.in(1), r.in(2), r.in(3)))
    return std::nullopt;
  const std::vector<int64_t> &qs = r.in(1).shape;
  int64_t b = qs[0], seq = qs[1], hq = qs[2], hk = r.in(2).shape[2],
          dim = qs[3];
  auto dkdvBytes = [&](int64_t t) {
    return 4 * (2 * t * (dim + 1) + 4 * t * dim + 2 * t * t + 2 * t);
  };
  auto dqBytes = [&](int64_t t) {
    return 4 * (2 * t * (dim + 1) + 3 * t * dim + 2 * t * t + 2 * t);
  };
  int tile = chooseTile(dkdvBytes); // the larger of the two
  if (tile == 0) {
    r.fail("head dim " + std::to_string(dim) + " is too large");
    return std::nullopt;
  }
  OpLaunchPlan p;
  int64_t rows = b * seq * hq;
  if (rows == 0)
    return p;
  p.scratchBytes = rows * 4; // D
  DType q = r.in(1).dtype, k = r.in(2).dtype, v = r.in(3).dtype,
        dout = r.in(0).dtype, lse = r.in(5).dtype;
  p.launches.push_back(elementwise(
      "kiln_attention_row_dot", rows,
      {operand(0), operand(4), integer(packTypes({dout, r.in(4).dtype})),
       scratch(0), integer(rows), integer(dim), integer(seq), integer(hq)}));
  int64_t tiles = ceilDiv(seq, tile);
  Arg causal = integer(r.step.flag("causal"));
  Arg scale = real(r.step.f64("scale"));
  p.launches.push_back(
      {"kiln_attention_dkdv", b * hk * tiles, 128,
       static_cast<int>(dkdvBytes(tile)),
       {operand(1), operand(2), operand(3), operand(0), operand(5), scratch(0),
        result(1), result(2),
        integer(packTypes(
            {q, k, v, dout, lse, r.out(1).dtype, r.out(2).dtype})),
        integer(seq), integer(hq), integer(hk), integer(dim), integer(tile),
        causal, scale}});
  p.launches.push_back(
      {"kiln_attention_dq", b * hq * tiles, 128,
       static_cast<int>(dqBytes(tile)),
       {operand(1), operand(2), operand(3), operand(0), operand(5), scratch(0),
        result(0), integer(packTypes({q, k, v, dout, lse, r.out(0).dtype})),
        integer(seq), integer(hq), integer(hk), integer(dim), integer(tile),
        causal, scale}});
  return p;
}

} // namespace

/// The rest of the ops (OpKernelLaunchesOptim.cpp).
std::optional<OpLaunchPlan> optimLaunchPlan(const Plan &plan,
                                            const PlanStep &step, int rank,
                                            std::string &error);

bool isKernelOp(plan::Op op) {
  using plan::Op;
  switch (op) {
  case Op::Embedding:
  case Op::EmbeddingGrad:
  case Op::Rope:
  case Op::RopeGrad:
  case Op::Attention:
  case Op::AttentionGrad:
  case Op::CrossEntropy:
  case Op::CrossEntropyGrad:
  case Op::Reshape:
  case Op::Transpose:
  case Op::Flatten:
  case Op::Unflatten:
  case Op::DelayedAmax:
  case Op::AmaxHistoryUpdate:
  case Op::GradNorm:
  case Op::LrSchedule:
  case Op::AdamW:
  case Op::ShardAmax:
  case Op::ShardQuantize:
    return true;
  // cuBLASLt runs the GEMMs, NCCL the collectives; init runs at load, fused
  // groups are generated kernels, and group-only ops never stand alone.
  case Op::Init:
  case Op::Linear:
  case Op::LinearGradInput:
  case Op::LinearGradWeight:
  case Op::ScaledMatmul:
  case Op::AllGatherStart:
  case Op::ReduceScatterStart:
  case Op::AllReduceStart:
  case Op::Wait:
  case Op::Fused:
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
    return false;
  }
  return false;
}

std::optional<OpLaunchPlan> opLaunchPlan(const Plan &plan,
                                         const PlanStep &step,
                                         std::string &error, int rank) {
  StepReader r(plan, step, error);
  switch (step.kind) {
  case plan::Op::Embedding:
    return embedding(r);
  case plan::Op::EmbeddingGrad:
    return embeddingGrad(r);
  case plan::Op::Rope:
    return rope(r, 1.0f);
  case plan::Op::RopeGrad:
    return rope(r, -1.0f);
  case plan::Op::Attention:
    return attention(r);
  case plan::Op::AttentionGrad:
    return attentionGrad(r);
  case plan::Op::Reshape:
    return copyLike(r, 0);
  case plan::Op::Unflatten:
    return copyLike(r, step.i64("offset"));
  case plan::Op::Flatten:
    return flatten(r);
  case plan::Op::Transpose:
    return transpose(r);
  default:
    // The loss, optimizer and FP8 ops; it says which ops it does not run.
    return optimLaunchPlan(plan, step, rank, error);
  }
}

OpLaunchPlan meanDivideLaunch(DType dtype, int64_t n, int64_t divisor) {
  OpLaunchPlan p;
  p.launches.push_back(elementwise(
      "kiln_mean_divide", n,
      {result(0), code(dtype), integer(n),
       real(static_cast<double>(static_cast<float>(divisor)))}));
  return p;
}

namespace {
// The key of a non-finite value: step (20 bits), result (6), element (37),
// NaN or infinity (1).
constexpr int kKeyStepShift = 44, kKeyResultShift = 38;
constexpr int64_t kKeyMostElement = (int64_t{1} << 37) - 1;
} // namespace

std::optional<OpKernelLaunch> nonFiniteCheckLaunch(DType dtype, int64_t n,
                                                   int64_t step, int result) {
  if (step < 0 || step >= (int64_t{1} << 20) || result < 0 || result >= 64 ||
      !isFloat(dtype))
    return std::nullopt;
  int64_t key = (step << kKeyStepShift) |
                (static_cast<int64_t>(result) << kKeyResultShift);
  return elementwise("kiln_check_finite", n,
                     {operand(0), operand(1), code(dtype), integer(n),
                      integer(key), integer(kKeyMostElement)});
}

std::optional<NonFinite> decodeNonFinite(uint64_t flag) {
  if (flag == 0)
    return std::nullopt;
  uint64_t key = ~flag;
  NonFinite f;
  f.step = static_cast<int64_t>(key >> kKeyStepShift);
  f.result = static_cast<int>((key >> kKeyResultShift) & 63);
  f.element = static_cast<int64_t>((key >> 1) & kKeyMostElement);
  f.nan = (key & 1) == 0;
  return f;
}

std::string NonFinite::describe() const {
  return std::string(nan ? "NaN" : "infinity") + " in its result " +
         std::to_string(result) + " at element " + std::to_string(element);
}

} // namespace kiln::runtime::cuda
