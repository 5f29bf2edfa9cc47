// Gated activation on the CPU: rows split across threads (ops/glu.h).
#include "core/thread_pool.h"
#include "ops/glu.h"
#include "ops/glu_math.h"

namespace ftune::cpu {

void glu_forward(float* out, const float* gu, int64_t N, int64_t F, GluAct act) {
  parallel_for(N, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* g = gu + n * 2 * F;
      const float* u = g + F;
      float* o = out + n * F;
      for (int64_t f = 0; f < F; ++f) o[f] = glu_act_value(g[f], act) * u[f];
    }
  });
}

void glu_backward(float* dgu, const float* gu, const float* dout, int64_t N, int64_t F,
                  GluAct act) {
  parallel_for(N, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* g = gu + n * 2 * F;
      const float* u = g + F;
      const float* dy = dout + n * F;
      float* dg = dgu + n * 2 * F;
      float* du = dg + F;
      for (int64_t f = 0; f < F; ++f) {
        dg[f] = dy[f] * u[f] * glu_act_grad(g[f], act);
        du[f] = dy[f] * glu_act_value(g[f], act);
      }
    }
  });
}

}  // namespace ftune::cpu
