// RFC 4180 record splitting with record start lines (see delimited.h). A small state machine over
// the whole text: plain fields up to the next separator or line end, quoted fields up to the
// closing quote that is not doubled.
#include "data/delimited.h"

#include <fmt/format.h>

namespace ftune::data {

std::vector<DelimitedRecord> parse_delimited(std::string_view text, char separator) {
  std::vector<DelimitedRecord> records;
  size_t i = 0;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
  const size_t n = text.size();
  int64_t line = 1;
  auto at_line_end = [&](size_t p) {
    return p >= n || text[p] == '\n' || (text[p] == '\r' && (p + 1 >= n || text[p + 1] == '\n'));
  };
  // Moves past the line end at p (LF, CRLF or end of text); counts the line.
  auto skip_line_end = [&](size_t p) {
    if (p < n && text[p] == '\r') ++p;
    if (p < n && text[p] == '\n') {
      ++p;
      ++line;
    }
    return p;
  };
  while (i < n) {
    if (at_line_end(i)) {  // blank line
      i = skip_line_end(i);
      continue;
    }
    DelimitedRecord rec;
    rec.line = line;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (i < n && text[i] == '"') {
        const int64_t quote_line = line;
        ++i;
        bool closed = false;
        while (i < n) {
          const char c = text[i];
          if (c == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            closed = true;
            break;
          }
          if (c == '\n') ++line;
          field += c;
          ++i;
        }
        if (!closed) {
          rec.error = fmt::format("quoted field {} opened on line {} is never closed",
                                  rec.fields.size() + 1, quote_line);
          records.push_back(std::move(rec));
          return records;
        }
        if (!at_line_end(i) && text[i] != separator) {
          rec.error = fmt::format("unexpected character '{}' after the closing quote of field {}",
                                  text[i], rec.fields.size() + 1);
          while (!at_line_end(i)) ++i;
          i = skip_line_end(i);
          rec.fields.clear();
          records.push_back(std::move(rec));
          break;
        }
      } else {
        const size_t start = i;
        while (!at_line_end(i) && text[i] != separator) ++i;
        field.assign(text.substr(start, i - start));
      }
      rec.fields.push_back(std::move(field));
      if (at_line_end(i)) {
        i = skip_line_end(i);
        end_of_record = true;
        records.push_back(std::move(rec));
      } else {
        ++i;  // separator
      }
    }
  }
  return records;
}

}  // namespace ftune::data
