//===- Attention.cpp - The attention kernels: CUDA C++ and launches -------===//
//
// The hand-written attention (cuDNN's fused SDPA is the CUDA backend's
// first choice; this runs where it cannot). Tensors are
// [batch, seq, heads, dim] (lse and the backward's D: [batch, heads, seq]);
// a query head h reads kv head h / (qHeads / kvHeads) (GQA). Tiles are T
// query rows by T keys, T chosen by the launches below so
// that a block's tiles fit 48 KiB of shared memory; all arithmetic is f32
// in shared memory, no tensor cores (untuned).
//
// Forward (flash style): a block per (batch, query head, query tile) loops
// over the key tiles its rows see (causal: up to its last row), with an
// online softmax per row (running max and sum), O rescaled per tile.
//
// Backward, deterministic without atomics: D = rowsum(dout * out) per row;
// a block per (batch, kv head, key tile) owns its dK and dV and loops over
// the group's query heads and the query tiles that see its keys; a block
// per (batch, query head, query tile) owns its dQ and loops over key
// tiles. Both recompute p = exp(scale s - lse) with the CPU backend's exp
// and sum each product in the CPU backend's order (increasing d; then
// query heads, query rows, or keys in increasing order; masked terms are
// +0), so the gradients are the CPU's bits.
//
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
#define KILN_TYPE(packed, k) ((int)(((packed) >> (4 * (k))) & 15))

// dst[r * ld + d] = x[b, s0 + r, h, d] for r < T, zero past seq.
__device__ __forceinline__ void kiln_load_rows(float *dst, int ld,
                                               const void *x, int t,
                                               kiln_i64 b, kiln_i64 s0,
                                               kiln_i64 heads, kiln_i64 h,
                                               kiln_i64 seq, int dim, int T) {
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
    int r = e / dim, d = e % dim;
    kiln_i64 s = s0 + r;
    dst[r * ld + d] =
        s < seq ? kiln_load(x, t, ((b * seq + s) * heads + h) * dim + d) : 0.0f;
  }
}

// v[r] = x[b, h, s0 + r] for r < T ([batch, heads, seq] rows), zero past
// seq.
__device__ __forceinline__ void kiln_load_stat(float *v, const void *x, int t,
                                               kiln_i64 row0, kiln_i64 s0,
                                               kiln_i64 seq, int T) {
  for (int r = threadIdx.x; r < T; r += blockDim.x)
    v[r] = s0 + r < seq ? kiln_load(x, t, row0 + s0 + r) : 0.0f;
}

// 0 q, 1 k, 2 v, 3 out, 4 lse, 5 dtypes (4 bits each: q k v out lse),
// 6 seq, 7 qHeads, 8 kvHeads, 9 dim, 10 T, 11 causal, 12 scale.
extern "C" __global__ void kiln_attention(KilnOpArgs a) {
  KILN_DYNAMIC_SHARED(float, smem);
  const kiln_i64 types = a.s[5].i, seq = a.s[6].i, qHeads = a.s[7].i,
                 kvHeads = a.s[8].i;
  const int dim = (int)a.s[9].i, T = (int)a.s[10].i, kld = dim + 1;
  const bool causal = a.s[11].i != 0;
  const float scale = (float)a.s[12].f;
  const kiln_i64 tiles = (seq + T - 1) / T, qt = blockIdx.x % tiles,
                 bh = blockIdx.x / tiles, h = bh % qHeads, b = bh / qHeads,
                 kh = h / (qHeads / kvHeads), q0 = qt * T;
  float *Qs = smem, *Ks = Qs + T * dim, *Vs = Ks + T * kld, *Os = Vs + T * dim,
        *Ss = Os + T * dim, *mS = Ss + T * T, *lS = mS + T, *aS = lS + T;

  kiln_load_rows(Qs, dim, a.s[0].p, KILN_TYPE(types, 0), b, q0, qHeads, h, seq,
                 dim, T);
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x)
    Os[e] = 0.0f;
  for (int r = threadIdx.x; r < T; r += blockDim.x) {
    mS[r] = KILN_NEG_INF;
    lS[r] = 0.0f;
  }
  const kiln_i64 last = q0 + T < seq ? q0 + T : seq; // rows [q0, last)
  const kiln_i64 keyEnd = causal ? last : seq;
  for (kiln_i64 k0 = 0; k0 < keyEnd; k0 += T) {
    __syncthreads(); // the previous tile's readers are done
    kiln_load_rows(Ks, kld, a.s[1].p, KILN_TYPE(types, 1), b, k0, kvHeads, kh,
                   seq, dim, T);
    kiln_load_rows(Vs, dim, a.s[2].p, KILN_TYPE(types, 2), b, k0, kvHeads, kh,
                   seq, dim, T);
    __syncthreads();
    for (int e = threadIdx.x; e < T * T; e += blockDim.x) {
      int r = e / T, c = e % T;
      float s = 0.0f;
      for (int d = 0; d < dim; ++d)
        s += Qs[r * dim + d] * Ks[c * kld + d];
      bool visible = k0 + c < seq && (!causal || k0 + c <= q0 + r);
      Ss[e] = visible ? s * scale : KILN_NEG_INF;
    }
    __syncthreads();
    // Online softmax, a thread per row: the new running max, the tile's
    // probabilities against it, the old sum rescaled.
    for (int r = threadIdx.x; r < T; r += blockDim.x) {
      float m = mS[r];
      for (int c = 0; c < T; ++c)
        m = Ss[r * T + c] > m ? Ss[r * T + c] : m;
      float alpha = m == KILN_NEG_INF ? 1.0f : kiln_exp(mS[r] - m);
      float sum = 0.0f;
      for (int c = 0; c < T; ++c) {
        float s = Ss[r * T + c];
        float p = s == KILN_NEG_INF ? 0.0f : kiln_exp(s - m);
        Ss[r * T + c] = p;
        sum += p;
      }
      lS[r] = lS[r] * alpha + sum;
      mS[r] = m;
      aS[r] = alpha;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
      int r = e / dim, d = e % dim;
      float o = Os[e] * aS[r];
      for (int c = 0; c < T; ++c)
        o += Ss[r * T + c] * Vs[c * dim + d];
      Os[e] = o;
    }
  }
  __syncthreads();
  const int outType = KILN_TYPE(types, 3), lseType = KILN_TYPE(types, 4);
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
    int r = e / dim, d = e % dim;
    if (q0 + r < seq)
      kiln_store(a.s[3].p, outType, ((b * seq + q0 + r) * qHeads + h) * dim + d,
                 Os[e] * (1.0f / lS[r]));
  }
  for (int r = threadIdx.x; r < T; r += blockDim.x)
    if (q0 + r < seq)
      kiln_store(a.s[4].p, lseType, (b * qHeads + h) * seq + q0 + r,
                 mS[r] + logf(lS[r]));
}

// D[b, h, s] = sum_d dout[b, s, h, d] out[b, s, h, d], in increasing d.
// 0 dout, 1 out, 2 dtypes (dout out), 3 D (f32), 4 rows, 5 dim, 6 seq,
// 7 qHeads.
extern "C" __global__ void kiln_attention_row_dot(KilnOpArgs a) {
  const int gt = KILN_TYPE(a.s[2].i, 0), ot = KILN_TYPE(a.s[2].i, 1);
  const kiln_i64 dim = a.s[5].i, seq = a.s[6].i, qHeads = a.s[7].i;
  for (kiln_i64 row = kiln_thread(); row < a.s[4].i; row += kiln_threads()) {
    float sum = 0.0f;
    for (kiln_i64 d = 0; d < dim; ++d)
      sum += kiln_load(a.s[0].p, gt, row * dim + d) *
             kiln_load(a.s[1].p, ot, row * dim + d);
    kiln_i64 h = row % qHeads, s = (row / qHeads) % seq, b = row / qHeads / seq;
    ((float *)a.s[3].p)[(b * qHeads + h) * seq + s] = sum;
  }
}

// p and scale * ds of query rows i0.. against keys j0.. into P and dS
// (T x T, row-major by query row); +0 where masked or past seq.
__device__ __forceinline__ void kiln_attention_probs(
    const float *Qs, const float *Gs, const float *Ks, const float *Vs,
    const float *lseS, const float *dS_, float *P, float *dS, kiln_i64 i0,
    kiln_i64 j0, kiln_i64 seq, int dim, int T, bool causal, float scale) {
  const int kld = dim + 1;
  for (int e = threadIdx.x; e < T * T; e += blockDim.x) {
    int r = e / T, c = e % T;
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < dim; ++d)
      s += Qs[r * dim + d] * Ks[c * kld + d];
    for (int d = 0; d < dim; ++d)
      dp += Gs[r * dim + d] * Vs[c * kld + d];
    bool visible = i0 + r < seq && j0 + c < seq && (!causal || j0 + c <= i0 + r);
    float p = visible ? kiln_exp(scale * s - lseS[r]) : 0.0f;
    P[e] = p;
    dS[e] = visible ? scale * (p * (dp - dS_[r])) : 0.0f;
  }
}

// dK and dV of a key tile. 0 q, 1 k, 2 v, 3 dout, 4 lse, 5 D, 6 dk, 7 dv,
// 8 dtypes (q k v dout lse dk dv), 9 seq, 10 qHeads, 11 kvHeads, 12 dim,
// 13 T, 14 causal, 15 scale.
extern "C" __global__ void kiln_attention_dkdv(KilnOpArgs a) {
  KILN_DYNAMIC_SHARED(float, smem);
  const kiln_i64 types = a.s[8].i, seq = a.s[9].i, qHeads = a.s[10].i,
                 kvHeads = a.s[11].i;
  const int dim = (int)a.s[12].i, T = (int)a.s[13].i, kld = dim + 1;
  const bool causal = a.s[14].i != 0;
  const float scale = (float)a.s[15].f;
  const kiln_i64 tiles = (seq + T - 1) / T, kt = blockIdx.x % tiles,
                 bk = blockIdx.x / tiles, kh = bk % kvHeads, b = bk / kvHeads,
                 group = qHeads / kvHeads, j0 = kt * T;
  float *Ks = smem, *Vs = Ks + T * kld, *Qs = Vs + T * kld, *Gs = Qs + T * dim,
        *dKs = Gs + T * dim, *dVs = dKs + T * dim, *P = dVs + T * dim,
        *dS = P + T * T, *lseS = dS + T * T, *DS = lseS + T;

  kiln_load_rows(Ks, kld, a.s[1].p, KILN_TYPE(types, 1), b, j0, kvHeads, kh,
                 seq, dim, T);
  kiln_load_rows(Vs, kld, a.s[2].p, KILN_TYPE(types, 2), b, j0, kvHeads, kh,
                 seq, dim, T);
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
    dKs[e] = 0.0f;
    dVs[e] = 0.0f;
  }
  for (kiln_i64 h = kh * group; h < (kh + 1) * group; ++h) {
    for (kiln_i64 i0 = causal ? j0 : 0; i0 < seq; i0 += T) {
      __syncthreads(); // the previous tile's readers are done
      kiln_load_rows(Qs, dim, a.s[0].p, KILN_TYPE(types, 0), b, i0, qHeads, h,
                     seq, dim, T);
      kiln_load_rows(Gs, dim, a.s[3].p, KILN_TYPE(types, 3), b, i0, qHeads, h,
                     seq, dim, T);
      kiln_load_stat(lseS, a.s[4].p, KILN_TYPE(types, 4),
                     (b * qHeads + h) * seq, i0, seq, T);
      kiln_load_stat(DS, a.s[5].p, KILN_F32, (b * qHeads + h) * seq, i0, seq, T);
      __syncthreads();
      kiln_attention_probs(Qs, Gs, Ks, Vs, lseS, DS, P, dS, i0, j0, seq, dim,
                           T, causal, scale);
      __syncthreads();
      for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
        int c = e / dim, d = e % dim;
        float dk = dKs[e], dv = dVs[e];
        for (int r = 0; r < T; ++r) {
          dk += dS[r * T + c] * Qs[r * dim + d];
          dv += P[r * T + c] * Gs[r * dim + d];
        }
        dKs[e] = dk;
        dVs[e] = dv;
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
    int c = e / dim, d = e % dim;
    if (j0 + c < seq) {
      kiln_i64 at = ((b * seq + j0 + c) * kvHeads + kh) * dim + d;
      kiln_store(a.s[6].p, KILN_TYPE(types, 5), at, dKs[e]);
      kiln_store(a.s[7].p, KILN_TYPE(types, 6), at, dVs[e]);
    }
  }
}

// dQ of a query tile. 0 q, 1 k, 2 v, 3 dout, 4 lse, 5 D, 6 dq, 7 dtypes
// (q k v dout lse dq), 8 seq, 9 qHeads, 10 kvHeads, 11 dim, 12 T,
// 13 causal, 14 scale.
extern "C" __global__ void kiln_attention_dq(KilnOpArgs a) {
  KILN_DYNAMIC_SHARED(float, smem);
  const kiln_i64 types = a.s[7].i, seq = a.s[8].i, qHeads = a.s[9].i,
                 kvHeads = a.s[10].i;
  const int dim = (int)a.s[11].i, T = (int)a.s[12].i, kld = dim + 1;
  const bool causal = a.s[13].i != 0;
  const float scale = (float)a.s[14].f;
  const kiln_i64 tiles = (seq + T - 1) / T, qt = blockIdx.x % tiles,
                 bh = blockIdx.x / tiles, h = bh % qHeads, b = bh / qHeads,
                 kh = h / (qHeads / kvHeads), i0 = qt * T;
  float *Qs = smem, *Gs = Qs + T * dim, *Ks = Gs + T * dim, *Vs = Ks + T * kld,
        *dQs = Vs + T * kld, *P = dQs + T * dim, *dS = P + T * T,
        *lseS = dS + T * T, *DS = lseS + T;

  kiln_load_rows(Qs, dim, a.s[0].p, KILN_TYPE(types, 0), b, i0, qHeads, h, seq,
                 dim, T);
  kiln_load_rows(Gs, dim, a.s[3].p, KILN_TYPE(types, 3), b, i0, qHeads, h, seq,
                 dim, T);
  kiln_load_stat(lseS, a.s[4].p, KILN_TYPE(types, 4), (b * qHeads + h) * seq,
                 i0, seq, T);
  kiln_load_stat(DS, a.s[5].p, KILN_F32, (b * qHeads + h) * seq, i0, seq, T);
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x)
    dQs[e] = 0.0f;
  const kiln_i64 last = i0 + T < seq ? i0 + T : seq;
  const kiln_i64 keyEnd = causal ? last : seq;
  for (kiln_i64 j0 = 0; j0 < keyEnd; j0 += T) {
    __syncthreads();
    kiln_load_rows(Ks, kld, a.s[1].p, KILN_TYPE(types, 1), b, j0, kvHeads, kh,
                   seq, dim, T);
    kiln_load_rows(Vs, kld, a.s[2].p, KILN_TYPE(types, 2), b, j0, kvHeads, kh,
                   seq, dim, T);
    __syncthreads();
    kiln_attention_probs(Qs, Gs, Ks, Vs, lseS, DS, P, dS, i0, j0, seq, dim, T,
                         causal, scale);
    __syncthreads();
    for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
      int r = e / dim, d = e % dim;
      float dq = dQs[e];
      for (int c = 0; c < T; ++c)
        dq += dS[r * T + c] * Ks[c * kld + d];
      dQs[e] = dq;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < T * dim; e += blockDim.x) {
    int r = e / dim, d = e % dim;
    if (i0 + r < seq)
      kiln_store(a.s[6].p, KILN_TYPE(types, 5),
                 ((b * seq + i0 + r) * qHeads + h) * dim + d, dQs[e]);
  }
}
)";

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

} // namespace

const char *attentionSource() { return kSource; }

Result attention(StepReader &r) {
  if (!r.counts(3, 2) || !r.floats({0, 1, 2}, {0, 1}) ||
      !attentionShapes(r, r.in(0), r.in(1), r.in(2)))
    return r.takeError();
  const std::vector<int64_t> &qs = r.in(0).shape;
  int64_t b = qs[0], seq = qs[1], hq = qs[2], dim = qs[3];
  auto bytes = [&](int64_t t) {
    return 4 * (3 * t * dim + t * (dim + 1) + t * t + 3 * t);
  };
  int tile = chooseTile(bytes);
  if (tile == 0) {
    r.fail("head dim " + std::to_string(dim) + " is too large");
    return r.takeError();
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
    return r.takeError();
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
    return r.takeError();
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

} // namespace kiln::runtime::cuda::kernels
