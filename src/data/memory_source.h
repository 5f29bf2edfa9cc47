// Data held in memory under a name, for callers that have their rows in memory rather than in a
// file (the Python package's ftune.train(train=rows)). The text of a JSONL, TSV or CSV file is
// registered under "memory:NAME" (NAME with its extension, e.g. "memory:train.jsonl"), and that
// name goes where a file path goes (data.train, data.validation, data.test): everything that reads
// a data file reads the registered text instead, so formats, bad rows (named
// "memory:train.jsonl:LINE", the line being the row's number), groups, splits and the resume
// fingerprint work as for a file. A name is registered while its MemorySource lives; a
// "memory:" path nobody registered is an error naming it (never a file of that name). Registered
// texts are shared by the threads of the process (one run's rows stay until its source is
// released); ranks of a data-parallel run are processes and do not see each other's sources.
#pragma once

#include <memory>
#include <string>

namespace ftune::data {

// Whether `path` names in-memory data ("memory:" followed by a name).
bool is_memory_path(const std::string& path);

class MemorySource {
 public:
  // Registers `text` under "memory:" + name; InputError when the name is empty or already held
  // (another run of this process holds rows under it).
  MemorySource(const std::string& name, std::string text);
  ~MemorySource();
  MemorySource(const MemorySource&) = delete;
  MemorySource& operator=(const MemorySource&) = delete;

  const std::string& path() const { return path_; }  // "memory:NAME"
  // Unregisters now (the destructor does it otherwise); a run reading it later fails.
  void release();

 private:
  std::string path_;
  bool held_ = false;
};

// The registered text of a memory path; InputError naming it when none is registered.
std::shared_ptr<const std::string> memory_text(const std::string& path);
// The contents of a data source: a memory path's text or the file's bytes (io::read_file).
std::string read_data_source(const std::string& path);
// Whether a data source can be read: a registered memory path, or an existing file.
bool data_source_exists(const std::string& path);

}  // namespace ftune::data
