// metrics.jsonl and TensorBoard logging (see run_log.h).
#include "train/run_log.h"

#include <fmt/format.h>

#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/tensorboard_writer.h"

namespace ftune {

namespace fs = std::filesystem;

struct RunLog::TensorBoard {
  explicit TensorBoard(const std::string& dir) : writer(dir) {}
  io::TensorBoardWriter writer;
};

RunLog::RunLog(const std::string& run_dir, std::optional<int64_t> resume_step, bool tensorboard)
    : path_((fs::path(run_dir) / "metrics.jsonl").string()) {
  if (resume_step && fs::exists(path_)) {
    // Keep the complete lines logged up to the checkpoint's step; a torn last line is dropped.
    std::istringstream in(io::read_file(path_));
    std::string kept;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("step") || j.value("split", "") == "test") continue;
      if (j["step"].get<int64_t>() <= *resume_step) kept += line + "\n";
    }
    io::write_file_atomic(path_, kept);
    out_.open(path_, std::ios::app);
  } else {
    out_.open(path_, std::ios::trunc);
  }
  if (!out_) throw InputError(fmt::format("{}: cannot open for writing", path_));
  if (tensorboard) tb_ = std::make_unique<TensorBoard>(run_dir);
}

RunLog::~RunLog() = default;

void RunLog::write(const nlohmann::json& line) {
  out_ << line.dump() << "\n" << std::flush;
  if (tb_ && line.contains("step")) {
    nlohmann::json numbers = line;
    numbers.erase("step");
    tb_->writer.add_scalars(line["step"].get<int64_t>(),
                            io::scalars_from_json(line.value("split", "train") + "/", numbers));
  }
}

}  // namespace ftune
