// The study views (`ftune report --storage URL --study NAME`, the dashboard's study page):
// optimisation history with the best-so-far line, the best value against compute and wall time
// (hpo/study_cost.h), intermediate values per trial (pruned trials
// marked), per-fold values, parallel coordinates, a slice plot per parameter, PED-ANOVA
// importances, the state counts and a sortable, filterable trials table.
#pragma once

#include <vector>

#include "report/html_page.h"
#include "report/study_data.h"

namespace ftune::report {

std::vector<Section> study_sections(const StudyData& study);
Page study_page(const StudyData& study);

// The parts, one job each (study_view.cc: charts; study_table.cc: counts and the table).
Section study_overview(const StudyData& study);
Section study_trials_table(const StudyData& study);

}  // namespace ftune::report
