//===- AttentionPlan.h - A plan of one attention step, for checks -*- C++
//-*-===//
//
// The CUDA checks of attention (SdpaConfigTest, the op check's cuDNN path)
// need attention steps of shapes the preset plans lack: a plan whose entry
// holds an attention step (step 0) and its attention_grad (step 1), q, out,
// dout and dq [B, S, H, D], k, v, dk and dv [B, S, Hkv, D], lse [B, H, S]
// in f32, the values one after another in the arena (64-byte aligned).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CUDA_ATTENTIONPLAN_H
#define KILN_RUNTIME_TESTS_CUDA_ATTENTIONPLAN_H

#include "kiln/Runtime/Plan.h"

#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime::checks {

struct AttentionShape {
  int64_t batch, seq, heads, kvHeads, dim;
};

/// Every tensor of `dtype` but lse (f32) and dq (`dqType`), in entry
/// `entry`.
inline Plan attentionPlan(const AttentionShape &x, DType dtype, bool causal,
                          double scale, DType dqType,
                          const std::string &entry) {
  Plan p;
  auto value = [&](std::vector<int64_t> shape, DType t) {
    PlanValue v;
    v.id = static_cast<int64_t>(p.values.size());
    v.shape = std::move(shape);
    v.dtype = t;
    v.offset = p.arenaBytes;
    p.arenaBytes += (v.bytes() + 63) / 64 * 64;
    p.values.push_back(v);
    return v.id;
  };
  std::vector<int64_t> qs = {x.batch, x.seq, x.heads, x.dim},
                       ks = {x.batch, x.seq, x.kvHeads, x.dim};
  int64_t q = value(qs, dtype), k = value(ks, dtype), v = value(ks, dtype),
          out = value(qs, dtype),
          lse = value({x.batch, x.heads, x.seq}, DType::F32),
          dout = value(qs, dtype), dq = value(qs, dqType),
          dk = value(ks, dtype), dv = value(ks, dtype);
  PlanStep fwd;
  fwd.op = "attention";
  fwd.kind = plan::Op::Attention;
  fwd.operands = {q, k, v};
  fwd.results = {out, lse};
  fwd.attrs["causal"] = causal;
  fwd.attrs["scale"] = scale;
  fwd.loc = "a synthetic plan";
  PlanStep bwd = fwd;
  bwd.op = "attention_grad";
  bwd.kind = plan::Op::AttentionGrad;
  bwd.operands = {dout, q, k, v, out, lse};
  bwd.results = {dq, dk, dv};
  p.entries[entry].steps = {fwd, bwd};
  return p;
}

} // namespace kiln::runtime::checks

#endif // KILN_RUNTIME_TESTS_CUDA_ATTENTIONPLAN_H
