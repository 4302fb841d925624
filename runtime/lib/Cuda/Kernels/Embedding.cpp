//===- Embedding.cpp - The embedding kernels: CUDA C++ and launches -------===//
//
// The forward gathers rows; the backward accumulates each element in f32
// over the tokens in order, so its sums are the CPU backend's (no
// atomics). The backward's threads are (column, slice of the vocabulary)
// pairs: enough of them to fill the GPU however narrow the model, each
// summing only the tokens whose ids fall in its slice.
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

#include <algorithm>

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// out[t, c] = table[ids[t] - start, c]; a row of zeros for an id outside
// the table's rows [start, start + rows): another tp rank's slice (or an
// id outside the vocabulary, which the CPU backend refuses). 0 table,
// 1 dtype, 2 ids (i32), 3 out, 4 dtype, 5 tokens, 6 rows, 7 dim, 8 start.
extern "C" __global__ void kiln_embedding(KilnOpArgs a) {
  const int *ids = (const int *)a.s[2].p;
  int tt = (int)a.s[1].i, ot = (int)a.s[4].i;
  kiln_i64 rows = a.s[6].i, dim = a.s[7].i, n = a.s[5].i * dim;
  kiln_i64 start = a.s[8].i;
  for (kiln_i64 e = kiln_thread(); e < n; e += kiln_threads()) {
    kiln_i64 t = e / dim, c = e % dim;
    kiln_i64 row = (kiln_i64)ids[t] - start;
    if (row < 0 || row >= rows)
      kiln_store(a.s[3].p, ot, e, 0.0f);
    else
      kiln_move(a.s[0].p, tt, row * dim + c, a.s[3].p, ot, e);
  }
}

// acc[ids[t] - start, c] += dout[t, c] for every token t in order, as the
// CPU kernel does: each sum has the CPU's order, and no two threads touch
// one element. Thread (c, part) owns column c of the rows in
// [part * rows / parts, (part + 1) * rows / parts): it reads every id (the
// warp's threads read the same one) but dout only for its own; ids outside
// the table's rows [start, start + rows) add nothing.
// 0 dout, 1 dtype, 2 ids, 3 acc (f32, zeroed), 4 tokens, 5 rows, 6 dim,
// 7 parts, 8 start.
extern "C" __global__ void kiln_embedding_grad(KilnOpArgs a) {
  const int *ids = (const int *)a.s[2].p;
  float *acc = (float *)a.s[3].p;
  int gt = (int)a.s[1].i;
  kiln_i64 tokens = a.s[4].i, rows = a.s[5].i, dim = a.s[6].i;
  kiln_i64 parts = a.s[7].i, start = a.s[8].i;
  kiln_i64 e = kiln_thread();
  if (e >= dim * parts)
    return;
  kiln_i64 c = e % dim, part = e / dim;
  kiln_i64 lo = part * rows / parts, hi = (part + 1) * rows / parts;
  for (kiln_i64 t = 0; t < tokens; ++t) {
    kiln_i64 row = (kiln_i64)ids[t] - start;
    if (row >= lo && row < hi)
      acc[row * dim + c] += kiln_load(a.s[0].p, gt, t * dim + c);
  }
}
)";

} // namespace

const char *embeddingSource() { return kSource; }

Result embedding(StepReader &r) {
  if (!r.counts(2, 1) || !r.floats({0}, {0}) ||
      !r.is(r.in(1), DType::I32, "the token ids"))
    return r.takeError();
  const PlanValue &table = r.in(0);
  if (table.shape.size() != 2) {
    r.fail("needs a [vocab, dim] table");
    return r.takeError();
  }
  int64_t tokens = r.in(1).numElements(), dim = table.shape[1];
  OpLaunchPlan p;
  p.launches.push_back(elementwise(
      "kiln_embedding", tokens * dim,
      {operand(0), code(table.dtype), operand(1), result(0),
       code(r.out(0).dtype), integer(tokens), integer(table.shape[0]),
       integer(dim), integer(r.step.i64Or("vocab_start", 0))}));
  return p;
}

Result embeddingGrad(StepReader &r) {
  if (!r.counts(2, 1) || !r.floats({0}, {0}) ||
      !r.is(r.in(1), DType::I32, "the token ids"))
    return r.takeError();
  const PlanValue &table = r.out(0);
  if (table.shape.size() != 2) {
    r.fail("needs a [vocab, dim] result");
    return r.takeError();
  }
  int64_t tokens = r.in(1).numElements(), vocab = table.shape[0],
          dim = table.shape[1];
  // The sums run in f32: in the result itself (direct: an f32 gradient,
  // which the compiler gives a bf16 dout under the default policy, f32
  // reduce), or in scratch rounded to the result's dtype afterwards (a bf16
  // gradient: bf16 compute with mixed_precision.reduce = "bfloat16").
  bool direct = table.dtype == DType::F32;
  OpLaunchPlan p;
  if (direct)
    p.zeroResults = {0};
  else
    p.scratchBytes = vocab * dim * 4;
  Arg acc = direct ? result(0) : scratch(0);
  // Enough (column, vocabulary slice) threads to fill an H100 (132 SMs of
  // 2048 threads), no more slices than ids, at most 64: each thread reads
  // every id, so more slices cost more id reads than they gain.
  int64_t parts =
      std::clamp<int64_t>(ceilDiv(int64_t(132) * 2048, dim), 1,
                          std::min<int64_t>(64, std::max<int64_t>(vocab, 1)));
  p.launches.push_back(
      {"kiln_embedding_grad",
       std::max<int64_t>(1, ceilDiv(dim * parts, 128)),
       128,
       0,
       {operand(0), code(r.in(0).dtype), operand(1), acc, integer(tokens),
        integer(vocab), integer(dim), integer(parts),
        integer(r.step.i64Or("vocab_start", 0))}});
  if (!direct)
    p.launches.push_back(elementwise(
        "kiln_copy", vocab * dim,
        {scratch(0), code(DType::F32), result(0), code(table.dtype),
         integer(vocab * dim), integer(0), integer(0)}));
  return p;
}

} // namespace kiln::runtime::cuda::kernels
