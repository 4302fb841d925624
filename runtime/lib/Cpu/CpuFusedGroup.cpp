//===- CpuFusedGroup.cpp - Interpreting a fused group in one pass ---------===//
//
// Instructions are split by kind. Scalar and column values are the same for
// every row, so they are computed once, before the rows. Row and element
// values are computed per tile: a whole row when the group has row values,
// column values, or per-row stores; otherwise kFlatTile consecutive
// elements. Each instruction is a loop over the tile into its own buffer
// (one per instruction and thread, so the working set is body length x tile
// length floats); an f32 element load points into the tensor itself.
//
// Compiled with -ffp-contract=off: every a*b+c rounds twice, as the plan's
// semantics say.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/CpuFusedGroup.h"
#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Fp8.h"

#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kiln::runtime {

namespace {

using Op = GroupInstr::Op;
using Store = GroupOutput::Store;

/// Elements per tile when no instruction depends on rows.
constexpr int64_t kFlatTile = 4096;
/// Elements of work worth starting a thread for.
constexpr int64_t kGrainElements = 1 << 15;

/// A value over the current tile: an array, or one number for all of it.
struct Reg {
  const float *p = nullptr;
  float s = 0;
};

/// Writes `x`, already a value of `r`'s type, as element `i` of `r`.
void storeScalar(const View &r, int64_t i, float x) {
  switch (r.dtype) {
  case DType::F32:
    r.f32()[i] = x;
    break;
  case DType::F8E4M3:
    static_cast<uint8_t *>(r.data)[i] = cpu::toE4m3(x);
    break;
  case DType::F8E5M2:
    static_cast<uint8_t *>(r.data)[i] = cpu::toE5m2(x);
    break;
  default:
    static_cast<uint16_t *>(r.data)[i] = cpu::toBf16Bits(x);
  }
}

/// `n` elements of `v` from `begin`, as f32: the tensor itself when it is
/// f32, else widened into `buf`.
const float *loadRange(const View &v, int64_t begin, int64_t n, float *buf) {
  if (v.dtype == DType::F32)
    return v.f32() + begin;
  if (v.dtype == DType::BF16) {
    const uint16_t *bits = static_cast<const uint16_t *>(v.data) + begin;
    for (int64_t i = 0; i < n; ++i)
      buf[i] = cpu::fromBf16Bits(bits[i]);
    return buf;
  }
  for (int64_t i = 0; i < n; ++i)
    buf[i] = loadScalar(v, begin + i);
  return buf;
}

/// `x` rounded to a value of `type` (f32: itself).
float roundTo(DType type, float x) {
  switch (type) {
  case DType::BF16:
    return cpu::roundToBf16(x);
  case DType::F8E4M3:
    return cpu::fromE4m3(cpu::toE4m3(x));
  case DType::F8E5M2:
    return cpu::fromE5m2(cpu::toE5m2(x));
  default:
    return x;
  }
}

/// 2^floor(log2(x)) for a positive finite x: its exponent bits alone
/// (subnormals: the highest set bit). Anything else is returned as it is.
float pow2Floor(float x) {
  if (!(x > 0) || !std::isfinite(x))
    return x;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (bits & 0x7f800000u)
    bits &= 0xff800000u;
  else
    bits = 1u << (31 - __builtin_clz(bits));
  std::memcpy(&x, &bits, 4);
  return x;
}

template <typename F> Reg unary(Reg a, float *out, int64_t n, F f) {
  if (!a.p)
    return {nullptr, f(a.s)};
  for (int64_t i = 0; i < n; ++i)
    out[i] = f(a.p[i]);
  return {out, 0};
}

template <typename F> Reg binary(Reg a, Reg b, float *out, int64_t n, F f) {
  if (!a.p && !b.p)
    return {nullptr, f(a.s, b.s)};
  if (a.p && b.p) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = f(a.p[i], b.p[i]);
  } else if (a.p) {
    float s = b.s;
    for (int64_t i = 0; i < n; ++i)
      out[i] = f(a.p[i], s);
  } else {
    float s = a.s;
    for (int64_t i = 0; i < n; ++i)
      out[i] = f(s, b.p[i]);
  }
  return {out, 0};
}

float nanOr(float a, float b, float pick) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN()
                                        : pick;
}

/// Applies an arithmetic instruction to `a` (and `b`) over `n` elements,
/// rounding to the instruction's type.
Reg apply(const GroupInstr &in, Reg a, Reg b, float *out, int64_t n) {
  Reg r;
  switch (in.op) {
  case Op::Neg:
    r = unary(a, out, n, [](float x) { return -x; });
    break;
  case Op::Exp:
    r = unary(a, out, n, [](float x) { return std::exp(x); });
    break;
  case Op::Log:
    r = unary(a, out, n, [](float x) { return std::log(x); });
    break;
  case Op::Sqrt:
    r = unary(a, out, n, [](float x) { return std::sqrt(x); });
    break;
  case Op::Rsqrt:
    r = unary(a, out, n, [](float x) { return 1.0f / std::sqrt(x); });
    break;
  case Op::Sigmoid:
    r = unary(a, out, n, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    break;
  case Op::Convert:
    r = unary(a, out, n, [](float x) { return x; });
    break;
  case Op::Abs:
    r = unary(a, out, n, [](float x) { return std::fabs(x); });
    break;
  case Op::Pow2Floor:
    r = unary(a, out, n, pow2Floor);
    break;
  case Op::Add:
    r = binary(a, b, out, n, [](float x, float y) { return x + y; });
    break;
  case Op::Sub:
    r = binary(a, b, out, n, [](float x, float y) { return x - y; });
    break;
  case Op::Mul:
    r = binary(a, b, out, n, [](float x, float y) { return x * y; });
    break;
  case Op::Div:
    r = binary(a, b, out, n, [](float x, float y) { return x / y; });
    break;
  case Op::Max:
    r = binary(a, b, out, n,
               [](float x, float y) { return nanOr(x, y, x > y ? x : y); });
    break;
  case Op::Min:
    r = binary(a, b, out, n,
               [](float x, float y) { return nanOr(x, y, x < y ? x : y); });
    break;
  case Op::Load:
  case Op::Const:
  case Op::RowSum:
  case Op::RowMax:
    break; // handled by the callers
  }
  if (in.type != DType::F32) {
    if (r.p)
      for (int64_t i = 0; i < n; ++i)
        out[i] = roundTo(in.type, out[i]);
    else
      r.s = roundTo(in.type, r.s);
  }
  return r;
}

bool uniform(GroupKind kind) {
  return kind == GroupKind::Scalar || kind == GroupKind::Col;
}

/// The first non-finite value a block stored: (output, element).
struct BadValue {
  int64_t output = std::numeric_limits<int64_t>::max(), element = 0;
  bool operator<(const BadValue &o) const {
    return output != o.output ? output < o.output : element < o.element;
  }
};

class Interpreter {
public:
  Interpreter(const FusedGroup &g, const std::vector<View> &in,
              const std::vector<View> &out, bool check)
      : g(g), in(in), out(out), check(check) {
    byRow = false;
    for (const GroupInstr &i : g.body)
      byRow |= i.kind == GroupKind::Row || i.kind == GroupKind::Col;
    for (const GroupOutput &o : g.outputs)
      byRow |= o.store != Store::Elem && o.store != Store::Amax &&
               o.store != Store::Scalar;
    total = g.rows * g.cols;
    tileLen = byRow ? g.cols : std::min(kFlatTile, total);
    tiles = byRow ? g.rows : (total + kFlatTile - 1) / kFlatTile;
    tilesPerBlock = byRow ? kColSumBlockRows : 1;
    blocks = (tiles + tilesPerBlock - 1) / tilesPerBlock;
  }

  Error run();

private:
  void computeUniform();
  void runBlock(int64_t block, std::vector<float> &storage,
                std::vector<Reg> &regs);
  void store(int64_t tile, int64_t begin, int64_t n, const std::vector<Reg> &regs,
             int64_t block);

  const FusedGroup &g;
  const std::vector<View> &in, &out;
  bool check;
  bool byRow;
  int64_t total, tileLen, tiles, tilesPerBlock, blocks;

  std::vector<Reg> uniformRegs;              // per instruction
  std::vector<std::vector<float>> colValues; // per instruction (col kind)
  // Per output and block: col_sum partial sums, amax.
  std::vector<std::vector<double>> colPartials;
  std::vector<std::vector<float>> amaxPartials;
  std::vector<BadValue> firstBad; // per block
};

void Interpreter::computeUniform() {
  uniformRegs.assign(g.body.size(), Reg{});
  colValues.assign(g.body.size(), {});
  for (size_t i = 0; i < g.body.size(); ++i) {
    const GroupInstr &ins = g.body[i];
    if (!uniform(ins.kind))
      continue;
    int64_t n = ins.kind == GroupKind::Col ? g.cols : 1;
    std::vector<float> &buf = colValues[i];
    buf.resize(n);
    if (ins.op == Op::Load) {
      const View &v = in[ins.operand];
      if (ins.kind == GroupKind::Col)
        uniformRegs[i] = {loadRange(v, 0, n, buf.data()), 0};
      else
        uniformRegs[i] = {nullptr, loadScalar(v, 0)};
      continue;
    }
    if (ins.op == Op::Const) {
      float c = static_cast<float>(ins.value);
      uniformRegs[i] = {nullptr, roundTo(ins.type, c)};
      continue;
    }
    Reg a = uniformRegs[ins.args[0]];
    Reg b = ins.args.size() > 1 ? uniformRegs[ins.args[1]] : Reg{};
    uniformRegs[i] = apply(ins, a, b, buf.data(), n);
  }
}

void Interpreter::runBlock(int64_t block, std::vector<float> &storage,
                           std::vector<Reg> &regs) {
  int64_t firstTile = block * tilesPerBlock;
  int64_t lastTile = std::min(tiles, firstTile + tilesPerBlock);
  for (int64_t t = firstTile; t < lastTile; ++t) {
    int64_t begin = byRow ? t * g.cols : t * kFlatTile;
    int64_t n = byRow ? g.cols : std::min(kFlatTile, total - begin);
    for (size_t i = 0; i < g.body.size(); ++i) {
      const GroupInstr &ins = g.body[i];
      if (uniform(ins.kind)) {
        regs[i] = uniformRegs[i];
        continue;
      }
      float *buf = storage.data() + i * tileLen;
      if (ins.op == Op::Load) {
        const View &v = in[ins.operand];
        regs[i] = ins.kind == GroupKind::Row
                      ? Reg{nullptr, loadScalar(v, t)}
                      : Reg{loadRange(v, begin, n, buf), 0};
        continue;
      }
      if (ins.op == Op::RowSum) {
        double sum = rowSum(regs[ins.args[0]].p, n);
        regs[i] = {nullptr, roundTo(ins.type, static_cast<float>(sum))};
        continue;
      }
      if (ins.op == Op::RowMax) {
        // Of +0 and -0, +0: so the maximum is one value in any order.
        const float *x = regs[ins.args[0]].p;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < n; ++c)
          m = std::isnan(x[c]) || std::isnan(m)         ? x[c] + m
              : x[c] > m || (x[c] == m && std::signbit(m)) ? x[c]
                                                           : m;
        regs[i] = {nullptr, roundTo(ins.type, m)};
        continue;
      }
      Reg a = regs[ins.args[0]];
      Reg b = ins.args.size() > 1 ? regs[ins.args[1]] : Reg{};
      regs[i] = apply(ins, a, b, buf, n);
    }
    store(t, begin, n, regs, block);
  }
}

void Interpreter::store(int64_t tile, int64_t begin, int64_t n,
                        const std::vector<Reg> &regs, int64_t block) {
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const GroupOutput &go = g.outputs[o];
    const View &r = out[o];
    Reg v = regs[go.value];
    bool bf16 = r.dtype == DType::BF16;
    uint16_t *bits = static_cast<uint16_t *>(r.data);
    auto noteBad = [&](int64_t element) {
      BadValue bad{static_cast<int64_t>(o), element};
      if (bad < firstBad[block])
        firstBad[block] = bad;
    };
    switch (go.store) {
    case Store::Elem:
      if (bf16)
        for (int64_t i = 0; i < n; ++i)
          bits[begin + i] = cpu::toBf16Bits(v.p[i]);
      else if (r.dtype != DType::F32)
        for (int64_t i = 0; i < n; ++i)
          storeScalar(r, begin + i, v.p[i]);
      else if (r.f32() + begin != v.p)
        std::memcpy(r.f32() + begin, v.p, n * sizeof(float));
      if (check)
        for (int64_t i = 0; i < n; ++i)
          if (!std::isfinite(v.p[i])) {
            noteBad(begin + i);
            break;
          }
      break;
    case Store::Transpose:
      for (int64_t c = 0; c < n; ++c) {
        int64_t at = c * g.rows + tile;
        storeScalar(r, at, v.p[c]);
        if (check && !std::isfinite(v.p[c]))
          noteBad(at);
      }
      break;
    case Store::Row:
      storeScalar(r, tile, v.s);
      if (check && !std::isfinite(v.s))
        noteBad(tile);
      break;
    case Store::Scalar:
      if (tile == 0) {
        storeScalar(r, 0, v.s);
        if (check && !std::isfinite(v.s))
          noteBad(0);
      }
      break;
    case Store::ColSum: {
      double *partial = colPartials[o].data() + block * g.cols;
      for (int64_t c = 0; c < n; ++c)
        partial[c] += v.p[c];
      break;
    }
    case Store::Amax: {
      float &m = amaxPartials[o][block];
      for (int64_t i = 0; i < n; ++i) {
        float a = std::fabs(v.p[i]);
        m = std::isnan(a) || std::isnan(m) ? a + m : std::max(m, a);
      }
      break;
    }
    }
  }
}

Error Interpreter::run() {
  computeUniform();
  colPartials.assign(g.outputs.size(), {});
  amaxPartials.assign(g.outputs.size(), {});
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    if (g.outputs[o].store == Store::ColSum)
      colPartials[o].assign(blocks * g.cols, 0.0);
    if (g.outputs[o].store == Store::Amax)
      amaxPartials[o].assign(blocks, 0.0f);
  }
  firstBad.assign(blocks, BadValue{});

  int64_t blockElements = tilesPerBlock * tileLen;
  int64_t grain = std::max<int64_t>(1, kGrainElements / blockElements);
  cpu::detail::parallelFor(blocks, grain, [&](int64_t b, int64_t e) {
    std::vector<float> storage(g.body.size() * tileLen);
    std::vector<Reg> regs(g.body.size());
    for (int64_t block = b; block < e; ++block)
      runBlock(block, storage, regs);
  });

  BadValue bad;
  for (const BadValue &b : firstBad)
    bad = std::min(bad, b);
  // Reductions over blocks, in block order.
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const View &r = out[o];
    auto put = [&](int64_t i, double value) {
      storeScalar(r, i, static_cast<float>(value));
      float stored = loadScalar(r, i);
      if (check && !std::isfinite(stored))
        bad = std::min(bad, BadValue{static_cast<int64_t>(o), i});
    };
    if (g.outputs[o].store == Store::ColSum)
      for (int64_t c = 0; c < g.cols; ++c) {
        double sum = 0;
        for (int64_t k = 0; k < blocks; ++k)
          sum += colPartials[o][k * g.cols + c];
        put(c, sum);
      }
    if (g.outputs[o].store == Store::Amax) {
      float m = 0;
      for (float a : amaxPartials[o])
        m = std::isnan(a) || std::isnan(m) ? a + m : std::max(m, a);
      put(0, m);
    }
  }
  if (!check || bad.output == std::numeric_limits<int64_t>::max())
    return Error::success();
  float value = loadScalar(out[bad.output], bad.element);
  return Error(std::string(std::isnan(value) ? "NaN" : "infinity") +
               " in its result " + std::to_string(bad.output) + " at element " +
               std::to_string(bad.element));
}

} // namespace

float loadScalar(const View &v, int64_t i) {
  switch (v.dtype) {
  case DType::F32:
    return v.f32()[i];
  case DType::F8E4M3:
    return cpu::fromE4m3(static_cast<const uint8_t *>(v.data)[i]);
  case DType::F8E5M2:
    return cpu::fromE5m2(static_cast<const uint8_t *>(v.data)[i]);
  default:
    return cpu::fromBf16Bits(static_cast<const uint16_t *>(v.data)[i]);
  }
}

double rowSum(const float *x, int64_t n) {
  const int partials = rowSumPartials(n);
  double partial[kRowSumMaxPartials] = {};
  for (int64_t k = 0; k * kRowSumChunk < n; ++k) {
    double &p = partial[k % partials];
    for (int64_t c = k * kRowSumChunk; c < std::min(n, (k + 1) * kRowSumChunk);
         ++c)
      p += x[c];
  }
  // Each warp's partials pairwise, then the warps' totals pairwise.
  for (int w = 0; w < partials; w += kRowSumWarp)
    for (int apart = kRowSumWarp / 2; apart > 0; apart /= 2)
      for (int l = 0; l < apart; ++l)
        partial[w + l] += partial[w + l + apart];
  for (int apart = partials / 2; apart >= kRowSumWarp; apart /= 2)
    for (int w = 0; w < apart; w += kRowSumWarp)
      partial[w] += partial[w + apart];
  return partial[0];
}

Error runFusedGroup(const FusedGroup &group, const std::vector<View> &operands,
                    const std::vector<View> &results, bool checkNumerics) {
  return Interpreter(group, operands, results, checkNumerics).run();
}

} // namespace kiln::runtime
