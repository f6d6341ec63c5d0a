// Issue 12: is the hand-written JSON pre-scan (IsCertainlyValidJson, the
// fast path of the payload check in ParseEnvelope / ValidateEnvelope) worth
// its upkeep beside the libraries that do the same job? The check: valid
// JSON, nested at most 65 levels (the payload bound plus the envelope), no
// key repeated within an object.
//
//   BM_CheckPrescan/P      IsCertainlyValidJson (hand-written, one pass)
//   BM_CheckNlohmannSax/P  nlohmann's SAX parser with the bound and the
//                          duplicate-key check (what runs when the pre-scan
//                          is not sure)
//   BM_CheckSimdjson/P     simdjson's on-demand parser (Debian's
//                          libsimdjson-dev; its max_depth is the bound),
//                          walking every value and comparing each object's
//                          keys; built only when CMake finds simdjson
//
// P: 0 the SPEC 1 payload (two string fields, 51 B); 1 a 1 KiB order with
// nested items; 2 a 64 KiB array of such orders. bytes_per_second is the
// input scanned.
//
// Run: build/bench/json_check_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#ifdef JOBPACT_BENCH_WITH_SIMDJSON
#include <simdjson.h>
#endif

#include "src/core/bounded_json.h"

namespace jobpact {
namespace {

constexpr int kLevels = internal::kMaxPayloadDepth + 1;

std::string Order(int i) {
  std::string s = R"({"order_id":"ord_)" + std::to_string(i) +
                  R"(","customer":{"id":"cus_456","name":"Zoë Müller","tier":"gold"},"items":[)";
  for (int k = 0; k < 6; ++k) {
    if (k > 0) s += ',';
    s += R"({"sku":"SKU-)" + std::to_string(1000 + k) +
         R"(","qty":)" + std::to_string(k + 1) + R"(,"price":19.95,"tags":["a","b"]})";
  }
  s += R"(],"notes":"leave at the door","paid":true,"coupon":null})";
  return s;
}

std::string Payload(int which) {
  if (which == 0) return R"({"order_id":"ord_987","customer_id":"cus_456"})";
  if (which == 1) return Order(1);
  std::string s = "[";
  for (int i = 0; s.size() < 64 * 1024; ++i) {
    if (i > 0) s += ',';
    s += Order(i);
  }
  return s + "]";
}

template <typename Check>
void Run(benchmark::State& state, Check check) {
  const std::string text = Payload(static_cast<int>(state.range(0)));
  if (!check(text)) return state.SkipWithError("the payload was not accepted");
  for (auto _ : state) {
    bool ok = check(text);
    benchmark::DoNotOptimize(ok);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

void BM_CheckPrescan(benchmark::State& state) {
  Run(state, [](std::string_view t) { return internal::IsCertainlyValidJson(t, kLevels); });
}
BENCHMARK(BM_CheckPrescan)->Arg(0)->Arg(1)->Arg(2);

void BM_CheckNlohmannSax(benchmark::State& state) {
  Run(state, [](std::string_view t) { return internal::IsValidBoundedByParser(t, kLevels); });
}
BENCHMARK(BM_CheckNlohmannSax)->Arg(0)->Arg(1)->Arg(2);

#ifdef JOBPACT_BENCH_WITH_SIMDJSON
// Walks `v` whole (on demand, simdjson validates what is visited): false on
// a syntax error or a key repeated within an object. Keys are compared
// unescaped; objects are small, so a sorted vector of views is cheap.
bool WalkValid(simdjson::ondemand::value v, std::vector<std::string_view>& keys) {
  simdjson::ondemand::json_type type;
  if (v.type().get(type) != simdjson::SUCCESS) return false;
  switch (type) {
    case simdjson::ondemand::json_type::object: {
      simdjson::ondemand::object obj;
      if (v.get_object().get(obj) != simdjson::SUCCESS) return false;
      const std::size_t first = keys.size();
      for (auto field : obj) {
        std::string_view key;
        if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
        keys.push_back(key);
        if (!WalkValid(field.value(), keys)) return false;
      }
      const auto begin = keys.begin() + static_cast<std::ptrdiff_t>(first);
      std::sort(begin, keys.end());
      const bool unique = std::adjacent_find(begin, keys.end()) == keys.end();
      keys.resize(first);
      return unique;
    }
    case simdjson::ondemand::json_type::array: {
      simdjson::ondemand::array arr;
      if (v.get_array().get(arr) != simdjson::SUCCESS) return false;
      for (auto element : arr) {
        simdjson::ondemand::value e;
        if (element.get(e) != simdjson::SUCCESS || !WalkValid(e, keys)) return false;
      }
      return true;
    }
    case simdjson::ondemand::json_type::number: {
      simdjson::ondemand::number n;
      return v.get_number().get(n) == simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::string: {
      std::string_view s;
      return v.get_string().get(s) == simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::boolean: {
      bool b;
      return v.get_bool().get(b) == simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::null: {
      bool is_null = false;
      return v.is_null().get(is_null) == simdjson::SUCCESS && is_null;
    }
  }
  return false;
}

void BM_CheckSimdjson(benchmark::State& state) {
  // simdjson's on-demand parser, reused as a caller would keep one per
  // thread (its depth bound is the check's); the input is copied into
  // padded memory per call, as an envelope's payload (a std::string) would
  // have to be. (Debian 12's libsimdjson 3.0.1 crashes in its DOM parser
  // when the caller is compiled with optimisation, so the on-demand API.)
  simdjson::ondemand::parser parser;
  if (parser.allocate(1 << 20, kLevels) != simdjson::SUCCESS) {
    return state.SkipWithError("simdjson: allocate failed");
  }
  std::vector<std::string_view> keys;
  Run(state, [&](std::string_view t) {
    simdjson::padded_string padded(t);
    simdjson::ondemand::document doc;
    simdjson::ondemand::value root;
    if (parser.iterate(padded).get(doc) != simdjson::SUCCESS ||
        doc.get_value().get(root) != simdjson::SUCCESS) {
      return false;
    }
    // (3.0.1 has no document::at_end: trailing text after the root is not
    // checked here, which only flatters simdjson.)
    return WalkValid(root, keys);
  });
  state.SetLabel(simdjson::get_active_implementation()->name());
}
BENCHMARK(BM_CheckSimdjson)->Arg(0)->Arg(1)->Arg(2);
#endif

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
