// Planning of the adapted linear block's adapter buffers (see adapter_buffers.h).
#include "models/layers/adapter_buffers.h"

#include <algorithm>
#include <utility>

namespace ftune {

void add_adapter_site_buffers(BufferTable& t, const std::string& u_name, const std::string& z_name,
                              int64_t rows, int64_t out, const AdapterConfig& adapters,
                              const std::vector<AdapterSiteBuffers*>& views) {
  t.add(u_name, DType::F32, {rows, adapters.r});
  for (AdapterSiteBuffers* v : views) t.also(u_name, &v->u);
  if (!adapters.dora()) return;
  t.add(z_name, DType::F32, {rows, out});
  for (AdapterSiteBuffers* v : views) t.also(z_name, &v->z);
}

void add_adapter_h(BufferTable& t, const std::string& name, int64_t rows,
                   const AdapterConfig& adapters, AdapterScratch& scratch) {
  if (adapters.enabled()) t.add(name, DType::F32, {rows, adapters.r}, &scratch.h);
}

void add_adapter_dropout(BufferTable& t, const std::string& name, Shape shape,
                         const AdapterConfig& adapters, AdapterScratch& scratch) {
  if (adapters.enabled() && adapters.dropout > 0)
    t.add(name, DType::F32, std::move(shape), &scratch.dropout);
}

void add_adapter_stages(BufferTable& t, const std::string& prefix,
                        const std::vector<AdapterStageNeed>& sites, bool training,
                        AdapterScratch& scratch) {
  int64_t x = 0, y = 0, dx = 0;
  for (const AdapterStageNeed& s : sites) x = std::max(x, s.x), y = std::max(y, s.y), dx = std::max(dx, s.dx);
  if (x > 0) t.add(prefix + "lora_stage_x", DType::F32, {x}, &scratch.stage_x);
  if (y > 0) t.add(prefix + "lora_stage_y", DType::F32, {y}, &scratch.stage_y);
  if (training && dx > 0) t.add(prefix + "lora_stage_dx", DType::F32, {dx}, &scratch.stage_dx);
}

}  // namespace ftune
