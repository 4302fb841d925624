//===- Rope.cpp - Rotary position embedding (rotate-half) -----------------===//
//
// The cos and sin of every (position, frequency) pair are tabulated once per
// call (angles in double, values rounded to float), then every (batch,
// position) row of heads is rotated; rows are independent, so threads split
// them. The backward is the same rotation with the sine negated.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Rope.h"

#include "Parallel.h"

#include <cmath>
#include <vector>

namespace kiln::runtime::cpu {

using detail::parallelFor;

namespace {

/// cos and sin of s * theta^(-2i/dim) for s < seq, i < dim/2, laid out
/// [seq, dim/2].
struct RopeTable {
  std::vector<float> cos, sin;
  RopeTable(int64_t seq, int64_t dim, double theta) {
    int64_t half = dim / 2;
    cos.resize(seq * half);
    sin.resize(seq * half);
    std::vector<double> freq(half);
    for (int64_t i = 0; i < half; ++i)
      freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) /
                                    static_cast<double>(dim));
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t i = 0; i < half; ++i) {
        double angle = static_cast<double>(s) * freq[i];
        cos[s * half + i] = static_cast<float>(std::cos(angle));
        sin[s * half + i] = static_cast<float>(std::sin(angle));
      }
  }
};

/// Rotates x into y by the tabulated angles, or by their negatives when
/// `sign` is -1.
void rotate(const float *x, float *y, int64_t batch, int64_t seq,
            int64_t heads, int64_t dim, double theta, float sign) {
  if (batch <= 0 || seq <= 0 || heads <= 0 || dim <= 0)
    return;
  RopeTable table(seq, dim, theta);
  int64_t half = dim / 2, rowSize = heads * dim;
  const float *cosTab = table.cos.data(), *sinTab = table.sin.data();
  int64_t grain = std::max<int64_t>(1, (1 << 15) / rowSize);
  parallelFor(batch * seq, grain, [=](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t s = row % seq;
      const float *c = cosTab + s * half;
      const float *sn = sinTab + s * half;
      for (int64_t h = 0; h < heads; ++h) {
        const float *xh = x + row * rowSize + h * dim;
        float *yh = y + row * rowSize + h * dim;
        for (int64_t i = 0; i < half; ++i) {
          float lo = xh[i], hi = xh[i + half];
          float si = sign * sn[i];
          yh[i] = lo * c[i] - hi * si;
          yh[i + half] = hi * c[i] + lo * si;
        }
      }
    }
  });
}

} // namespace

void rope(const float *x, float *y, int64_t batch, int64_t seq,
          int64_t heads, int64_t dim, double theta) {
  rotate(x, y, batch, seq, heads, dim, theta, 1.0f);
}

void ropeBackward(const float *dy, float *dx, int64_t batch, int64_t seq,
                  int64_t heads, int64_t dim, double theta) {
  rotate(dy, dx, batch, seq, heads, dim, theta, -1.0f);
}

} // namespace kiln::runtime::cpu
