// What the dashboard's routes answer (server.h): pages built from src/report's views with the
// live-update script, and the JSON of their sections for the pages' polls. Every call reads the
// storage or the run directory afresh; an error becomes the page's banner and the JSON's "error"
// field and is logged once per change (a page polling a locked database does not flood the log).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftune::dashboard {

struct ViewResult {
  int status = 200;
  std::string body;
};

class Views {
 public:
  Views(std::string storage, std::vector<std::string> runs, int poll_ms);

  std::string index_page() const;
  ViewResult study_page(const std::string& name) const;
  ViewResult run_page(const std::string& id) const;
  // {"subtitle": ..., "sections": [{"id": ..., "html": ...}], "error": ""}
  nlohmann::json study_sections(const std::string& name) const;
  nlohmann::json run_sections(const std::string& id) const;
  // How many views' last errors are remembered (bounded: requests for new names cannot grow it).
  size_t remembered_views() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ftune::dashboard
