// What `ftune doctor` says about optimisations: for a training device (its capabilities) and a
// configuration, each optimisation's state (on, off, auto, unknown, unavailable, error, not implemented)
// and the reason, derived in one place from the facts so that the rules can be tested on any
// machine with made-up devices.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "train/train_config.h"

namespace ftune::cli {

// The facts the states follow from.
struct DoctorFacts {
  Device device = Device::cpu();  // the training device
  // A CUDA device that is visible: its compute capability and tensor-core support.
  bool device_visible = false;
  int sm_major = 0, sm_minor = 0;
  bool bf16 = false, tf32 = false, fp16 = false;
  bool nvml_available = false;       // NVML loaded and the device found in it
  std::string nvml_reason;           // why not
  bool cudnn_sdpa_compiled = false;  // FTUNE_WITH_CUDNN_SDPA
  std::string cudnn_sdpa_note;       // what the build found or missed
  bool cudnn_runtime = false;        // libcudnn.so.9 loaded
  std::string cudnn_detail;          // its version, or why not
};

struct OptimisationState {
  std::string name;    // "bf16 mixed precision"
  std::string state;   // "on", "off", "auto", "planned", "unavailable", "not implemented"
  std::string reason;  // why, naming the config key or the capability it follows from
};

std::vector<OptimisationState> optimisation_states(const DoctorFacts& facts,
                                                   const TrainConfig& config);

// "  name ......... state   (reason)" lines, names padded to one column.
std::string format_optimisations(const std::vector<OptimisationState>& states);

}  // namespace ftune::cli
