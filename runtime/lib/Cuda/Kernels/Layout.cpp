//===- Layout.cpp - The layout kernels: CUDA C++ and launches -------------===//
//
// Reshape, flatten, unflatten and transpose move elements without
// arithmetic (a dtype change goes through f32), so they are the CPU
// backend's bits. Reshape and unflatten also move token ids (i32). kiln_copy is
// also the last step of the embedding gradient (its f32 accumulator to the
// gradient's dtype).
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// dst[dstOff + i] = src[srcOff + i] for i < n (reshape, flatten, unflatten,
// a dtype change, the embedding gradient's f32 accumulator to its dtype).
// 0 src, 1 src dtype, 2 dst, 3 dst dtype, 4 n, 5 srcOff, 6 dstOff.
extern "C" __global__ void kiln_copy(KilnOpArgs a) {
  int st = (int)a.s[1].i, dt = (int)a.s[3].i;
  kiln_i64 n = a.s[4].i, so = a.s[5].i, dOff = a.s[6].i;
  for (kiln_i64 i = kiln_thread(); i < n; i += kiln_threads())
    kiln_move(a.s[0].p, st, so + i, a.s[2].p, dt, dOff + i);
}

// out[o] = in[sum_d index_d(o) * stride_d]: 0 src, 1 src dtype, 2 dst,
// 3 dst dtype, 4 n, 5 rank (<= 5), 6-10 the result's dims, 11-15 the
// source's strides in the result's dimension order.
extern "C" __global__ void kiln_transpose(KilnOpArgs a) {
  int st = (int)a.s[1].i, dt = (int)a.s[3].i, rank = (int)a.s[5].i;
  kiln_i64 n = a.s[4].i;
  for (kiln_i64 o = kiln_thread(); o < n; o += kiln_threads()) {
    kiln_i64 rest = o, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
      kiln_i64 dim = a.s[6 + d].i;
      src += (rest % dim) * a.s[11 + d].i;
      rest /= dim;
    }
    kiln_move(a.s[0].p, st, src, a.s[2].p, dt, o);
  }
}
)";

} // namespace

const char *layoutSource() { return kSource; }

Result copyLike(StepReader &r, int64_t srcOffset) {
  // Token ids (i32, a microbatch's rows: kiln-grad-accum) move as they are.
  bool ids = r.in(0).dtype == DType::I32 && r.out(0).dtype == DType::I32;
  if (!r.counts(1, 1) || (!ids && !r.floats({0}, {0})))
    return r.takeError();
  int64_t n = r.out(0).numElements();
  if (srcOffset < 0 || srcOffset + n > r.in(0).numElements()) {
    r.fail("reads past its operand");
    return r.takeError();
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
    return r.takeError();
  if (offsets.size() != r.step.operands.size()) {
    r.fail("needs an offset per operand");
    return r.takeError();
  }
  OpLaunchPlan p;
  p.zeroResults = {0}; // the padding
  for (size_t i = 0; i < offsets.size(); ++i) {
    int64_t n = r.in(i).numElements();
    if (!r.floats({static_cast<int>(i)}, {}))
      return r.takeError();
    if (offsets[i] < 0 || offsets[i] + n > r.out(0).numElements()) {
      r.fail("operand " + std::to_string(i) + " does not fit the result");
      return r.takeError();
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
    return r.takeError();
  const auto &perm =
      std::get<std::vector<int64_t>>(r.step.attrs.at("permutation"));
  const std::vector<int64_t> &shape = r.in(0).shape;
  size_t rank = shape.size();
  if (perm.size() != rank || rank > 5 || r.out(0).shape.size() != rank) {
    r.fail("takes a permutation of rank at most 5 matching its operand");
    return r.takeError();
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
      return r.takeError();
    }
    args.push_back(integer(d < rank ? stride[perm[d]] : 0));
  }
  OpLaunchPlan p;
  p.launches.push_back(elementwise("kiln_transpose", n, std::move(args)));
  return p;
}

} // namespace kiln::runtime::cuda::kernels
