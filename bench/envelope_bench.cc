// Envelope costs on the enqueue and delivery paths: parsing, validating and
// serialising the SPEC 1 reference envelope, and generating job ids.
#include <benchmark/benchmark.h>

#include <string>

#include "jobpact/job.h"

namespace jobpact {
namespace {

constexpr const char* kReferenceEnvelope = R"json({
  "job_id": "job_01HXYZ...",
  "job_type": "invoice.generate",
  "tenant_id": "tenant_123",
  "payload": { "order_id": "ord_987", "customer_id": "cus_456" },
  "idempotency_key": "invoice.generate:ord_987",
  "attempt": 1,
  "max_attempts": 5,
  "scheduled_at": "2026-08-17T10:00:00Z",
  "created_at": "2026-08-17T09:58:00Z",
  "trace_id": "trc_abcd1234",
  "timeout_seconds": 30,
  "visibility_timeout_seconds": 45,
  "lock_key": "order:ord_987",
  "dedup_key": "invoice.generate:ord_987",
  "retry_policy": { "backoff": "exponential", "base_delay_seconds": 5,
                    "max_delay_seconds": 300, "jitter": true }
})json";

Envelope ReferenceEnvelope() { return *ParseEnvelope(kReferenceEnvelope); }

void BM_ParseEnvelope(benchmark::State& state) {
  const std::string json = kReferenceEnvelope;
  for (auto _ : state) {
    Result<Envelope> env = ParseEnvelope(json);
    benchmark::DoNotOptimize(env);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * json.size()));
}
BENCHMARK(BM_ParseEnvelope);

void BM_ValidateEnvelope(benchmark::State& state) {
  const Envelope env = ReferenceEnvelope();
  for (auto _ : state) {
    std::vector<FieldError> errors = ValidateEnvelope(env);
    benchmark::DoNotOptimize(errors);
  }
}
BENCHMARK(BM_ValidateEnvelope);

void BM_SerializeEnvelope(benchmark::State& state) {
  const Envelope env = ReferenceEnvelope();
  for (auto _ : state) {
    std::string json = SerializeEnvelope(env);
    benchmark::DoNotOptimize(json);
  }
}
BENCHMARK(BM_SerializeEnvelope);

void BM_NewJobId(benchmark::State& state) {
  const TimePoint now = *ParseRfc3339("2026-08-17T10:00:00Z");
  for (auto _ : state) {
    std::string id = NewJobId(now);
    benchmark::DoNotOptimize(id);
  }
}
BENCHMARK(BM_NewJobId);
BENCHMARK(BM_NewJobId)->Threads(2);

void BM_FormatRfc3339(benchmark::State& state) {
  const TimePoint t = *ParseRfc3339("2026-08-17T10:00:00.250Z");
  for (auto _ : state) {
    std::string text = FormatRfc3339(t);
    benchmark::DoNotOptimize(text);
  }
}
BENCHMARK(BM_FormatRfc3339);

void BM_ParseRfc3339(benchmark::State& state) {
  for (auto _ : state) {
    Result<TimePoint> t = ParseRfc3339("2026-08-17T12:30:00.250+02:30");
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_ParseRfc3339);

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
