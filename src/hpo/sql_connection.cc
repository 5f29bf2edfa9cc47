// Typed access to the cells of a result row.
#include "hpo/sql_connection.h"

#include <fmt/format.h>

#include <limits>

namespace ftune::hpo {

int64_t SqlRow::get_int(size_t i) const {
  const SqlValue& v = cells.at(i);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) return static_cast<int64_t>(*p);
  if (auto p = std::get_if<std::string>(&v)) return std::stoll(*p);
  throw InternalError(fmt::format("SQL result column {} is NULL, expected an integer", i));
}

double SqlRow::get_double(size_t i) const {
  const SqlValue& v = cells.at(i);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
  if (auto p = std::get_if<std::string>(&v)) return std::stod(*p);
  return std::numeric_limits<double>::quiet_NaN();
}

std::string SqlRow::get_text(size_t i) const {
  const SqlValue& v = cells.at(i);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return std::to_string(*p);
  if (auto p = std::get_if<double>(&v)) return fmt::format("{}", *p);
  return "";
}

}  // namespace ftune::hpo
