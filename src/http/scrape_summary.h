// Private: what the dashboard shows per job type and per queue, read from
// the PrometheusMetricsSink's own scrape (the text /metrics serves), so
// the numbers on the page are those of /metrics by construction: the same
// counters summed over the same labels, and latency percentiles computed
// from the same buckets as Prometheus' histogram_quantile() computes them.
#ifndef JOBPACT_SRC_HTTP_SCRAPE_SUMMARY_H_
#define JOBPACT_SRC_HTTP_SCRAPE_SUMMARY_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jobpact {
namespace internal {

// A histogram summed over every series of one job type (all queues):
// (upper bound, cumulative count) ascending, the last bound +Inf.
struct HistogramSum {
  std::vector<std::pair<double, double>> buckets;
  double count = 0;
  double sum = 0;
};

// Prometheus' histogram_quantile(q) over `h`: linear interpolation inside
// the bucket that holds rank q * count (from 0 for the first bucket); the
// highest finite bound when the rank falls in the +Inf bucket; nullopt for
// an empty histogram. REQUIRES: 0 <= q <= 1.
std::optional<double> HistogramQuantile(const HistogramSum& h, double q);

struct TypeSummary {
  // Counters summed over every label but job_type (metric name without
  // "jobpact_" and "_total": "jobs_succeeded", "job_retries", ...).
  std::map<std::string, double, std::less<>> counters;
  HistogramSum duration;       // jobpact_job_duration_seconds
  HistogramSum queue_latency;  // jobpact_job_queue_latency_seconds
};

struct QueueSummary {
  std::map<std::string, double, std::less<>> counters;  // As TypeSummary's, by queue.
  std::optional<double> depth;                          // jobpact_queue_depth
  std::optional<double> oldest_age_seconds;             // jobpact_queue_oldest_job_age_seconds
};

struct ScrapeSummary {
  std::map<std::string, TypeSummary, std::less<>> types;
  std::map<std::string, QueueSummary, std::less<>> queues;
  double workers_busy = 0;
  double workers_hung = 0;
  double hung_workers_total = 0;  // Summed over job types.
};

// Reads Prometheus text format 0.0.4 as PrometheusMetricsSink::Scrape()
// writes it (jobpact_* series; comment lines skipped; a line that does not
// parse is skipped too, the summary is for display).
ScrapeSummary SummarizeScrape(std::string_view scrape);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_HTTP_SCRAPE_SUMMARY_H_
