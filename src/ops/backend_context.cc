// The backend context (see backend_context.h): forwards to the GEMM wrapper's TF32 switch.
#include "ops/backend_context.h"

#ifdef FTUNE_WITH_CUDA
#include "cuda/gemm.h"
#endif

namespace ftune {

void set_backend_context(Device device, const BackendContext& context) {
#ifdef FTUNE_WITH_CUDA
  if (!device.is_cpu()) cuda::set_gemm_tf32(context.tf32);
#endif
}

BackendContext backend_context() {
  BackendContext c;
#ifdef FTUNE_WITH_CUDA
  c.tf32 = cuda::gemm_tf32();
#endif
  return c;
}

std::string gemm_autotune_report() {
#ifdef FTUNE_WITH_CUDA
  return cuda::gemm_autotune_summary();
#else
  return "";
#endif
}

void gemm_autotune_save() {
#ifdef FTUNE_WITH_CUDA
  cuda::gemm_autotune_save();
#endif
}

size_t gemm_workspace_bytes(Device device) {
#ifdef FTUNE_WITH_CUDA
  if (!device.is_cpu()) return cuda::kGemmWorkspaceBytes;
#endif
  return 0;
}

}  // namespace ftune
