// `ftune report RUN_DIR --output report.html` and `ftune report --storage URL [--study NAME]
// --output report.html`: a run's views (report/run_view.h) or a study's (report/study_view.h) as
// one self-contained HTML file — stylesheet, script and SVG charts inline, nothing fetched from
// the network — to attach to a paper or a ticket. Only reads the run directory or the storage;
// the file is written atomically (a failure leaves no partial file and any previous one
// untouched).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "hpo/storage.h"
#include "io/atomic_file.h"
#include "io/path_guard.h"
#include "io/signal_cleanup.h"
#include "report/run_view.h"
#include "report/study_view.h"

namespace ftune::cli {
namespace {

struct ReportArgs {
  std::string run_dir;
  std::string storage;
  std::string study;
  std::string output;
};

void run_report(const ReportArgs& a) {
  if (a.run_dir.empty() == a.storage.empty())
    throw InputError(
        "ftune report: name a run directory or a study storage, one of them (ftune report "
        "RUN_DIR --output FILE, or ftune report --storage URL --study NAME --output FILE)");
  if (!a.study.empty() && a.storage.empty())
    throw InputError("ftune report: --study needs --storage URL");
  // The report never replaces what it reads: the study's SQLite file, a run directory's files.
  std::vector<io::NamedPath> inputs = {{"--storage", hpo::storage_file(a.storage)}};
  for (const char* f : {"config.yaml", "metrics.jsonl", "summary.json", "op_profile.json"})
    if (!a.run_dir.empty())
      inputs.push_back(
          {"the run's " + std::string(f), (std::filesystem::path(a.run_dir) / f).string()});
  io::refuse_output_over_inputs({"--output", a.output}, inputs, false);
  io::remove_temporaries_on_signals();
  const report::Page page = a.storage.empty()
                                ? report::run_page(report::read_run_dir(a.run_dir))
                                : report::study_page(report::read_study(a.storage, a.study));
  const std::string html = report::render_page(page);
  io::AtomicFileWriter out(a.output);
  out.write(html);
  out.commit();
  spdlog::info("report of {} written to {} ({} bytes)", page.title, a.output, html.size());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write a run's or a study's views as one self-contained HTML file (no network needed)");
  cmd->add_option("run_dir", args->run_dir, "Run directory (output.dir of `ftune train`)");
  cmd->add_option("--storage", args->storage,
                  "Study storage: sqlite:///study.db, a .db path or postgresql://... (read only)");
  cmd->add_option("--study", args->study, "Study name (default: the storage's only study)");
  cmd->add_option("--output,-o", args->output, "HTML file to write")->required();
  cmd->callback([args] { run_report(*args); });
}

}  // namespace ftune::cli
