#include "src/cli/output.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "jobpact/job.h"

namespace jobpact {
namespace cli {

void Table::Print(std::FILE* out) const {
  std::vector<std::size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    std::fprintf(out, "%s\n", line.c_str());
  };
  print(header_);
  for (const auto& r : rows_) print(r);
}

std::string HumanTime(TimePoint t) {
  if (t == TimePoint{}) return "-";
  return FormatRfc3339(std::chrono::time_point_cast<std::chrono::seconds>(t));
}

std::string HumanDuration(Duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[64];
  if (s < 0) return "-" + HumanDuration(-d);
  if (s < 10 && s != static_cast<long long>(s)) {
    std::snprintf(buf, sizeof buf, "%.2gs", s);
    return buf;
  }
  const long long total = static_cast<long long>(s);
  if (total < 60) {
    std::snprintf(buf, sizeof buf, "%llds", total);
  } else if (total < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", total / 60, total % 60);
  } else if (total < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", total / 3600, total % 3600 / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", total / 86400, total % 86400 / 3600);
  }
  return buf;
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace cli
}  // namespace jobpact
