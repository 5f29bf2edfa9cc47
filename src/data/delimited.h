// Splitting TSV and CSV text into records (RFC 4180): fields separated by one character, records
// by LF or CRLF; a field that starts with '"' is quoted and may hold separators, newlines and
// doubled quotes ("" for "). A quote inside an unquoted field is kept as an ordinary character
// (as Python's csv module does). Each record carries the 1-based line where it starts, so errors
// name the line a user sees in an editor even when earlier records span several lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ftune::data {

struct DelimitedRecord {
  std::vector<std::string> fields;
  int64_t line = 0;   // 1-based line of the record's first character
  std::string error;  // non-empty: the record is malformed (the reason; fields are unusable)
};

// All records of `text`, in order. Blank lines are skipped. A malformed record (an unterminated
// quoted field, a character other than a separator or line end after a closing quote) is returned
// with `error` set; parsing resumes at the next line, so one bad row does not hide the others.
// A UTF-8 byte-order mark at the start is ignored.
std::vector<DelimitedRecord> parse_delimited(std::string_view text, char separator);

}  // namespace ftune::data
