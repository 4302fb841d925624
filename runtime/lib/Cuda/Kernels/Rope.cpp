//===- Rope.cpp - The RoPE kernels: CUDA C++ and launches -----------------===//
//
// Rotate-half rotary embedding and its backward (the same rotation with
// the sine negated) over [batch, seq, heads, dim]. The cos/sin table is
// computed on the device in double, once per step, into scratch.
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// The cos and sin of s * theta^(-2i/dim) for s < seq, i < dim/2, in
// double, rounded to float: cos at table[s * half + i], sin half * seq
// further. 0 table, 1 seq, 2 dim, 3 theta.
extern "C" __global__ void kiln_rope_table(KilnOpArgs a) {
  float *table = (float *)a.s[0].p;
  kiln_i64 seq = a.s[1].i, dim = a.s[2].i, half = dim / 2;
  double theta = a.s[3].f;
  for (kiln_i64 e = kiln_thread(); e < seq * half; e += kiln_threads()) {
    kiln_i64 s = e / half, i = e % half;
    double freq = pow(theta, -2.0 * (double)i / (double)dim);
    double angle = (double)s * freq;
    table[e] = (float)cos(angle);
    table[seq * half + e] = (float)sin(angle);
  }
}

// Rotate-half RoPE over [batch, seq, heads, dim] (sign -1: its backward).
// 0 x, 1 dtype, 2 y, 3 dtype, 4 table, 5 batch * seq, 6 seq, 7 heads,
// 8 dim, 9 sign.
extern "C" __global__ void kiln_rope(KilnOpArgs a) {
  const float *table = (const float *)a.s[4].p;
  int xt = (int)a.s[1].i, yt = (int)a.s[3].i;
  kiln_i64 seq = a.s[6].i, heads = a.s[7].i, dim = a.s[8].i, half = dim / 2;
  kiln_i64 n = a.s[5].i * heads * half;
  float sign = (float)a.s[9].f;
  for (kiln_i64 e = kiln_thread(); e < n; e += kiln_threads()) {
    kiln_i64 i = e % half, rowHead = e / half, row = rowHead / heads;
    kiln_i64 s = row % seq, base = rowHead * dim;
    float c = table[s * half + i], si = sign * table[seq * half + s * half + i];
    float lo = kiln_load(a.s[0].p, xt, base + i);
    float hi = kiln_load(a.s[0].p, xt, base + i + half);
    kiln_store(a.s[2].p, yt, base + i, lo * c - hi * si);
    kiln_store(a.s[2].p, yt, base + i + half, hi * c + lo * si);
  }
}
)";

} // namespace

const char *ropeSource() { return kSource; }

Result rope(StepReader &r, float sign) {
  if (!r.counts(1, 1) || !r.floats({0}, {0}))
    return r.takeError();
  const std::vector<int64_t> &s = r.in(0).shape;
  if (s.size() != 4 || s[3] % 2 != 0 || r.out(0).shape != s) {
    r.fail("needs [batch, seq, heads, dim] tensors with an even dim");
    return r.takeError();
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

} // namespace kiln::runtime::cuda::kernels
