#include "src/http/scrape_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace jobpact {
namespace internal {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string, std::less<>> labels;
  double value = 0;
};

// One `name{k="v",...} value` line; false if it is not one.
bool ParseLine(std::string_view line, Sample& out) {
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  out.name = std::string(line.substr(0, i));
  out.labels.clear();
  if (out.name.empty()) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const std::size_t eq = line.find('=', i);
      if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
        return false;
      }
      std::string key(line.substr(i, eq - i));
      std::string value;
      std::size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) {
          ++j;
          value += line[j] == 'n' ? '\n' : line[j];
        } else {
          value += line[j];
        }
      }
      if (j >= line.size()) return false;
      out.labels[std::move(key)] = std::move(value);
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  while (i < line.size() && line[i] == ' ') ++i;
  const std::string number(line.substr(i));
  if (number.empty()) return false;
  if (number == "+Inf") {
    out.value = std::numeric_limits<double>::infinity();
    return true;
  }
  char* end = nullptr;
  out.value = std::strtod(number.c_str(), &end);
  return end != number.c_str();
}

std::string_view Label(const Sample& s, std::string_view key) {
  auto it = s.labels.find(key);
  return it == s.labels.end() ? std::string_view() : std::string_view(it->second);
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

void AddBucket(HistogramSum& h, double le, double count) {
  for (auto& [bound, c] : h.buckets) {
    if (bound == le) {
      c += count;
      return;
    }
  }
  h.buckets.emplace_back(le, count);
}

// The histogram of `type`, if `name` is one of the two the page shows.
HistogramSum* HistogramOf(TypeSummary& t, std::string_view base) {
  if (base == "jobpact_job_duration_seconds") return &t.duration;
  if (base == "jobpact_job_queue_latency_seconds") return &t.queue_latency;
  return nullptr;
}

}  // namespace

std::optional<double> HistogramQuantile(const HistogramSum& h, double q) {
  if (h.buckets.empty()) return std::nullopt;
  const double total = h.buckets.back().second;
  if (!(total > 0)) return std::nullopt;
  const double rank = q * total;
  double lower = 0;
  double below = 0;
  for (std::size_t i = 0; i < h.buckets.size(); ++i) {
    const auto& [upper, count] = h.buckets[i];
    if (count >= rank) {
      if (std::isinf(upper)) return i == 0 ? std::nullopt : std::optional<double>(lower);
      if (count == below) return upper;
      return lower + (upper - lower) * (rank - below) / (count - below);
    }
    lower = upper;
    below = count;
  }
  return lower;
}

ScrapeSummary SummarizeScrape(std::string_view scrape) {
  ScrapeSummary out;
  Sample s;
  std::size_t pos = 0;
  while (pos < scrape.size()) {
    std::size_t nl = scrape.find('\n', pos);
    if (nl == std::string_view::npos) nl = scrape.size();
    const std::string_view line = scrape.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#' || !ParseLine(line, s)) continue;
    if (!StartsWith(s.name, "jobpact_")) continue;
    const std::string_view type = Label(s, "job_type");
    const std::string_view queue = Label(s, "queue");
    if (EndsWith(s.name, "_total")) {
      const std::string key =
          s.name.substr(std::string_view("jobpact_").size(),
                        s.name.size() - std::string_view("jobpact_").size() - 6);
      if (!type.empty()) out.types[std::string(type)].counters[key] += s.value;
      if (!queue.empty()) out.queues[std::string(queue)].counters[key] += s.value;
      if (s.name == "jobpact_hung_workers_total") out.hung_workers_total += s.value;
      continue;
    }
    if (s.name == "jobpact_workers_busy") {
      out.workers_busy = s.value;
    } else if (s.name == "jobpact_workers_hung") {
      out.workers_hung = s.value;
    } else if (s.name == "jobpact_queue_depth" && !queue.empty()) {
      out.queues[std::string(queue)].depth = s.value;
    } else if (s.name == "jobpact_queue_oldest_job_age_seconds" && !queue.empty()) {
      out.queues[std::string(queue)].oldest_age_seconds = s.value;
    } else if (!type.empty()) {
      std::string_view name = s.name;
      if (EndsWith(name, "_bucket")) {
        HistogramSum* h = HistogramOf(out.types[std::string(type)], name.substr(0, name.size() - 7));
        const std::string_view le = Label(s, "le");
        if (h != nullptr && !le.empty()) {
          const double bound = le == "+Inf" ? std::numeric_limits<double>::infinity()
                                            : std::strtod(std::string(le).c_str(), nullptr);
          AddBucket(*h, bound, s.value);
        }
      } else if (EndsWith(name, "_count")) {
        HistogramSum* h = HistogramOf(out.types[std::string(type)], name.substr(0, name.size() - 6));
        if (h != nullptr) h->count += s.value;
      } else if (EndsWith(name, "_sum")) {
        HistogramSum* h = HistogramOf(out.types[std::string(type)], name.substr(0, name.size() - 4));
        if (h != nullptr) h->sum += s.value;
      }
    }
  }
  for (auto& [name, t] : out.types) {
    for (HistogramSum* h : {&t.duration, &t.queue_latency}) {
      std::sort(h->buckets.begin(), h->buckets.end());
    }
  }
  return out;
}

}  // namespace internal
}  // namespace jobpact
