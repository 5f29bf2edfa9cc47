// The run views (`ftune report RUN_DIR`, the dashboard's run page): loss, learning rate and
// gradient norm per logged step; evaluation metrics per evaluation; samples/s and real tokens/s
// per log interval; the input-wait fraction; planned vs measured memory by category; NVML GPU
// statistics; the resolved config. Views whose numbers the run did not record say so.
#pragma once

#include <vector>

#include "report/html_page.h"
#include "report/run_data.h"

namespace ftune::report {

std::vector<Section> run_sections(const RunData& run);
Page run_page(const RunData& run);

}  // namespace ftune::report
