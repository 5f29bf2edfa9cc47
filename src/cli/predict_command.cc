// `ftune predict` — filled in with the model (see models/).
#include "cli/commands.h"

namespace ftune::cli {

void add_predict_command(CLI::App& app) { (void)app; }

}  // namespace ftune::cli
