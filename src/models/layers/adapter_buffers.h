// The buffers of the adapted linear block's adapters (models/layers/adapted_linear.h), and how a
// model plans them: each adapted site's own u and z, and the scratch all sites of a pass share
// (the backward's h, adapter dropout's dropped-out input, and mixed precision's fp32 staging of a
// site's 16-bit x, y and dx). A family says where each buffer goes in its plan (its names, its
// layer slots, in its table order) and what its sites need; the sizes, the DoRA-only and
// dropout-only buffers and the widest-site staging rules are here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer_table.h"
#include "models/adapter_config.h"

namespace ftune {

// One site's own adapter buffers: u = x_d A^T (N, r) and DoRA's z = x W^T + s u B^T (N, out).
struct AdapterSiteBuffers {
  TensorView u, z;
};

// The adapter buffers shared by every site of a pass.
struct AdapterScratch {
  TensorView h;                           // (N, r) backward scratch
  TensorView dropout;                     // adapter dropout's dropped-out input (N, widest in)
  TensorView stage_x, stage_y, stage_dx;  // mixed precision: fp32 copies of x, y and dx
};

// A site's u (rows, r) and, for DoRA, z (rows, out), named u_name / z_name; each of `views` (the
// layers that share an activation slot) points at them.
void add_adapter_site_buffers(BufferTable& t, const std::string& u_name, const std::string& z_name,
                              int64_t rows, int64_t out, const AdapterConfig& adapters,
                              const std::vector<AdapterSiteBuffers*>& views);
// The backward's h (rows, r), when adapters are on.
void add_adapter_h(BufferTable& t, const std::string& name, int64_t rows,
                   const AdapterConfig& adapters, AdapterScratch& scratch);
// Adapter dropout's scratch of `shape` (as wide as the widest adapted input), when adapters are on
// with dropout.
void add_adapter_dropout(BufferTable& t, const std::string& name, Shape shape,
                         const AdapterConfig& adapters, AdapterScratch& scratch);

// What one adapted site needs of the fp32 staging, in elements: copies of its x, y and dx when
// they are 16 bits (0: already fp32, or not needed).
struct AdapterStageNeed {
  int64_t x = 0, y = 0, dx = 0;
};
// prefix + "lora_stage_x" / "_y" / "_dx" (dx only in training), each as large as the neediest
// site's (none when no site needs it).
void add_adapter_stages(BufferTable& t, const std::string& prefix,
                        const std::vector<AdapterStageNeed>& sites, bool training,
                        AdapterScratch& scratch);

}  // namespace ftune
