// The dashboard's routes (src/http/dashboard_api.h). Reads go through the
// Operations facade and the metrics sink's own scrape; actions go through
// Operations too, with the actor and reason the audit trail keeps, after
// the checks in Authorize(). Every answer of the API is JSON: a document,
// or {"error": "<what is wrong>"} with the status that says who must act.
#include "src/http/dashboard_api.h"

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/http/embedded_files.h"
#include "src/http/scrape_summary.h"
#include "src/internal/guarded.h"
#include "src/internal/names.h"
#include "src/internal/operator_input.h"
#include "src/internal/operator_json.h"

namespace jobpact {
namespace internal {
namespace {

constexpr const char* kJson = "application/json; charset=utf-8";
// The most ids one replay or discard may name, and the longest reason.
constexpr std::size_t kMaxIdsPerAction = 1000;
constexpr std::size_t kMaxReasonLength = 1000;

void SecurityHeaders(httplib::Response& res) {
  res.set_header("Content-Security-Policy", kDashboardCsp);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

void Send(httplib::Response& res, int status, const Json& body) {
  SecurityHeaders(res);
  res.status = status;
  res.set_content(body.dump(), kJson);
}

void Error(httplib::Response& res, int status, const std::string& message) {
  Send(res, status, Json{{"error", message}});
}

// The HTTP status for a Status from Operations: who must act.
int HttpStatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return 503;
    default:
      return 500;
  }
}

void Fail(httplib::Response& res, const Status& s) { Error(res, HttpStatusOf(s), s.ToString()); }

// Equal in time independent of where they differ (the token's check).
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = b.size();
  for (std::size_t i = 0; i < n; ++i) {
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  }
  return diff == 0;
}

Status CheckJobId(std::string_view id) {
  if (!IsSafeName(id)) {
    return Status::InvalidArgument("'" + StorableText(std::string(id)) +
                                   "' is not a job id (letters, digits and . _ : -, at most " +
                                   std::to_string(kMaxNameLength) + ")");
  }
  return Status::Ok();
}

class Dashboard {
 public:
  Dashboard(const HttpEndpointOptions& o, const std::string& csrf) : o_(o), csrf_(csrf) {}

  TimePoint Now() const {
    return o_.clock != nullptr ? o_.clock->Now() : SystemClock::Default()->Now();
  }
  bool ActionsEnabled() const { return !o_.read_only && !o_.operator_token.empty(); }

  Json Session() const {
    std::string why;
    if (o_.read_only) {
      why = "read-only: this endpoint was started with read_only";
    } else if (o_.operator_token.empty()) {
      why = "no operator token is configured: actions are disabled";
    }
    return Json{{"read_only", o_.read_only},
                {"actions_enabled", ActionsEnabled()},
                {"actions_disabled_because", why.empty() ? Json(nullptr) : Json(why)},
                {"csrf_token", csrf_},
                {"operator_name", o_.operator_name},
                {"backend", o_.operations->backend().name}};
  }

  Result<Json> Stats() const {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats s, Guarded("dashboard: stats", [&] {
                               return o_.operations->Stats();
                             }));
    Json j = StatsToJson(s);
    j["at"] = TimeJson(Now());
    return j;
  }

  // Per queue: the store's depth, running and oldest ready age, and the
  // sink's counters for the queue (the page turns them into rates).
  Result<Json> Queues(const ScrapeSummary& m) const {
    JOBPACT_ASSIGN_OR_RETURN(QueueStats s, Guarded("dashboard: stats", [&] {
                               return o_.operations->Stats();
                             }));
    JOBPACT_ASSIGN_OR_RETURN(ControlState c, Guarded("dashboard: control", [&] {
                               return o_.operations->Control();
                             }));
    Json queues = Json::array();
    std::vector<std::string> names;
    for (const auto& [name, q] : s.queues) names.push_back(name);
    for (const auto& [name, q] : m.queues) {
      if (s.queues.find(name) == s.queues.end()) names.push_back(name);
    }
    for (const std::string& name : names) {
      Json q{{"queue", name}, {"depth", 0}, {"running", 0}, {"oldest_ready_age_seconds", 0.0}};
      if (auto it = s.queues.find(name); it != s.queues.end()) {
        q["depth"] = it->second.depth;
        q["running"] = it->second.running;
        q["oldest_ready_age_seconds"] = SecondsOf(it->second.oldest_ready_age);
      }
      q["paused"] = c.QueuePaused(name);
      std::optional<int> max_depth = c.MaxQueueDepth(name);
      q["max_depth"] = max_depth ? Json(*max_depth) : Json(nullptr);
      std::optional<int> per_tenant = c.TenantConcurrencyLimit(name);
      q["per_tenant_limit"] = per_tenant ? Json(*per_tenant) : Json(nullptr);
      Json counters = Json::object();
      if (auto it = m.queues.find(name); it != m.queues.end()) {
        for (const auto& [k, v] : it->second.counters) counters[k] = v;
      }
      q["counters"] = std::move(counters);
      queues.push_back(std::move(q));
    }
    return queues;
  }

  // Per job type, from the scrape: the counters, the success, retry and
  // DLQ ratios, and the latency percentiles, plus the control state.
  Result<Json> Types(const ScrapeSummary& m) const {
    JOBPACT_ASSIGN_OR_RETURN(ControlState c, Guarded("dashboard: control", [&] {
                               return o_.operations->Control();
                             }));
    Json types = Json::array();
    auto count = [](const TypeSummary& t, std::string_view k) {
      auto it = t.counters.find(k);
      return it == t.counters.end() ? 0.0 : it->second;
    };
    auto ratio = [](double a, double b) { return b > 0 ? Json(a / b) : Json(nullptr); };
    auto percentiles = [](const HistogramSum& h) {
      Json p = Json::object();
      for (const auto& [name, q] : {std::pair<const char*, double>{"p50", 0.5},
                                    {"p95", 0.95},
                                    {"p99", 0.99}}) {
        std::optional<double> v = HistogramQuantile(h, q);
        p[name] = v ? Json(*v) : Json(nullptr);
      }
      p["count"] = h.count;
      p["mean"] = h.count > 0 ? Json(h.sum / h.count) : Json(nullptr);
      return p;
    };
    for (const auto& [name, t] : m.types) {
      if (t.counters.empty() && t.duration.buckets.empty()) continue;
      const double succeeded = count(t, "jobs_succeeded");
      const double failed = count(t, "jobs_failed");
      const double dead = count(t, "jobs_dead_lettered");
      const double started = count(t, "jobs_started");
      const double retries = count(t, "job_retries");
      const double finished = succeeded + failed + dead;
      Json counters = Json::object();
      for (const auto& [k, v] : t.counters) counters[k] = v;
      Json j{{"job_type", name},
             {"counters", std::move(counters)},
             {"success_ratio", ratio(succeeded, finished)},
             {"retry_ratio", ratio(retries, started)},
             {"dlq_ratio", ratio(dead, finished)},
             {"duration_seconds", percentiles(t.duration)},
             {"queue_latency_seconds", percentiles(t.queue_latency)},
             {"paused", c.TypePaused(name)}};
      std::optional<int> limit = c.ConcurrencyLimit(name);
      j["concurrency_limit"] = limit ? Json(*limit) : Json(nullptr);
      types.push_back(std::move(j));
    }
    return types;
  }

  Json Workers(const ScrapeSummary& m) const {
    Json j{{"busy", m.workers_busy},
           {"hung", m.workers_hung},
           {"hung_total", m.hung_workers_total},
           {"source", "metrics"}};
    if (o_.runner != nullptr) {
      const RunnerStats r = o_.runner->Stats();
      j["busy"] = r.busy_workers;
      j["hung"] = r.hung_workers;
      j["hung_total"] = r.hung_workers_total;
      j["replacement_workers"] = r.replacement_workers;
      j["source"] = "runner";
    }
    return j;
  }

  Result<Json> Paused() const {
    JOBPACT_ASSIGN_OR_RETURN(ControlState c, Guarded("dashboard: control", [&] {
                               return o_.operations->Control();
                             }));
    Json out = Json::array();
    for (const ControlRule& r : c.rules) {
      if (r.kind != ControlKind::kPauseType && r.kind != ControlKind::kPauseQueue) continue;
      out.push_back(Json{{"kind", std::string(ControlKindName(r.kind))},
                         {"subject", r.subject},
                         {"actor", r.actor},
                         {"reason", r.reason},
                         {"set_at", TimeJson(r.set_at)}});
    }
    return out;
  }

  // The shared rate limiters with their overrides and backoffs; null when
  // the backend has no RateLimitStore.
  Result<Json> RateLimiters() const {
    if (o_.operations->backend().rate_limits == nullptr) return Json(nullptr);
    JOBPACT_ASSIGN_OR_RETURN(std::vector<RateLimiterState> rates,
                             Guarded("dashboard: rate limiters",
                                     [&] { return o_.operations->RateLimiters(); }));
    Json out = Json::array();
    for (const RateLimiterState& r : rates) out.push_back(RateLimiterToJson(r));
    return out;
  }

  Result<Json> Overview() const {
    const ScrapeSummary m = SummarizeScrape(o_.metrics->Scrape());
    JOBPACT_ASSIGN_OR_RETURN(Json stats, Stats());
    JOBPACT_ASSIGN_OR_RETURN(Json queues, Queues(m));
    JOBPACT_ASSIGN_OR_RETURN(Json types, Types(m));
    JOBPACT_ASSIGN_OR_RETURN(Json paused, Paused());
    JOBPACT_ASSIGN_OR_RETURN(Json rate_limiters, RateLimiters());
    return Json{{"stats", std::move(stats)},
                {"queues", std::move(queues)},
                {"types", std::move(types)},
                {"workers", Workers(m)},
                {"paused", std::move(paused)},
                {"rate_limiters", std::move(rate_limiters)}};
  }

  Result<Json> DlqList(const httplib::Request& req) const {
    DlqFilterText text;
    text.type = req.get_param_value("type");
    text.reason = req.get_param_value("reason");
    text.failure_class = req.get_param_value("class");
    text.since = req.get_param_value("since");
    text.until = req.get_param_value("until");
    if (req.has_param("limit")) {
      const std::string l = req.get_param_value("limit");
      char* end = nullptr;
      const long v = std::strtol(l.c_str(), &end, 10);
      if (l.empty() || end != l.c_str() + l.size() || v < 1 || v > kMaxDlqFilterLimit) {
        return Status::InvalidArgument("limit: '" + StorableText(l) + "' is not within 1.." +
                                       std::to_string(kMaxDlqFilterLimit));
      }
      text.limit = static_cast<int>(v);
    } else {
      text.limit = 200;
    }
    JOBPACT_ASSIGN_OR_RETURN(DlqFilter f, ParseDlqFilter(text, Now(), ""));
    JOBPACT_ASSIGN_OR_RETURN(std::vector<DlqEntry> entries, Guarded("dashboard: dlq list", [&] {
                               return o_.operations->ListDeadLetters(f);
                             }));
    Json a = Json::array();
    for (const DlqEntry& e : entries) a.push_back(DlqToJson(e, false));
    return Json{{"entries", std::move(a)}, {"limit", text.limit}};
  }

  Result<Json> DlqEntryJson(const std::string& id) const {
    JOBPACT_RETURN_IF_ERROR(CheckJobId(id));
    JOBPACT_ASSIGN_OR_RETURN(DlqEntry e, Guarded("dashboard: dlq entry", [&] {
                               return o_.operations->GetDeadLetter(id);
                             }));
    return DlqToJson(e, true);
  }

  // Why a POST may not act, as (status, message); status 0: it may.
  std::pair<int, std::string> Authorize(const httplib::Request& req) const {
    if (o_.read_only) return {403, "read-only: this endpoint does not act"};
    if (o_.operator_token.empty()) {
      return {403, "actions are disabled: the service configured no operator token"};
    }
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.empty() || auth == "Bearer" || auth == "Bearer ") {
      return {401, "an action needs Authorization: Bearer <operator token>"};
    }
    if (auth.compare(0, kBearer.size(), kBearer) != 0 ||
        !ConstantTimeEquals(std::string_view(auth).substr(kBearer.size()), o_.operator_token)) {
      return {401, "the operator token is wrong"};
    }
    // CSRF: a cross-site page can make a browser POST, but not with a
    // custom header (that needs a CORS preflight, which this endpoint never
    // grants), nor read /api/session to learn the token. The Origin check
    // refuses a browser's cross-origin request outright.
    if (!ConstantTimeEquals(req.get_header_value("X-Jobpact-CSRF"), csrf_)) {
      return {403, "CSRF check failed: send the X-Jobpact-CSRF header from GET /api/session"};
    }
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && origin != "http://" + req.get_header_value("Host")) {
      return {403, "CSRF check failed: Origin '" + StorableText(origin) +
                       "' is not this endpoint's"};
    }
    const std::string type = req.get_header_value("Content-Type");
    if (type.compare(0, 16, "application/json") != 0) {
      return {415, "an action's body is JSON (Content-Type: application/json)"};
    }
    return {0, ""};
  }

  std::string Actor(const httplib::Request& req) const {
    return "dashboard:" + o_.operator_name + "@" + req.remote_addr;
  }

  const HttpEndpointOptions& options() const { return o_; }

 private:
  const HttpEndpointOptions& o_;
  const std::string& csrf_;
};

// The JSON body of an action, with its reason: kInvalidArgument naming
// what is wrong.
Result<Json> ActionBody(const httplib::Request& req, std::string* reason) {
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return Status::InvalidArgument("the body is not a JSON object");
  }
  auto r = body.find("reason");
  if (r == body.end() || !r->is_string()) {
    return Status::InvalidArgument("reason: required, a string (why, for the audit trail)");
  }
  *reason = r->get<std::string>();
  bool blank = true;
  for (char c : *reason) blank = blank && (c == ' ' || c == '\t' || c == '\n' || c == '\r');
  if (blank) return Status::InvalidArgument("reason: required (why, for the audit trail)");
  if (reason->size() > kMaxReasonLength || !IsOperatorText(*reason)) {
    return Status::InvalidArgument("reason: UTF-8 text of at most " +
                                   std::to_string(kMaxReasonLength) + " bytes");
  }
  return body;
}

Result<std::vector<std::string>> JobIds(const Json& body) {
  auto it = body.find("job_ids");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return Status::InvalidArgument("job_ids: required, a non-empty array of job ids");
  }
  if (it->size() > kMaxIdsPerAction) {
    return Status::InvalidArgument("job_ids: at most " + std::to_string(kMaxIdsPerAction));
  }
  std::vector<std::string> ids;
  for (const Json& id : *it) {
    if (!id.is_string()) return Status::InvalidArgument("job_ids: each id is a string");
    JOBPACT_RETURN_IF_ERROR(CheckJobId(id.get<std::string>()));
    ids.push_back(id.get<std::string>());
  }
  return ids;
}

Json FailedJson(const std::vector<std::pair<std::string, Status>>& failed) {
  Json a = Json::array();
  for (const auto& [id, st] : failed) a.push_back(Json{{"job_id", id}, {"error", st.ToString()}});
  return a;
}

Json Strings(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const std::string& s : v) a.push_back(s);
  return a;
}

}  // namespace

std::string NewCsrfToken() {
  std::random_device rd;
  std::string out;
  constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    std::uint32_t v = rd();
    for (int j = 0; j < 8; ++j) {
      out += kHex[v & 0xF];
      v >>= 4;
    }
  }
  return out;
}

void AddDashboardRoutes(httplib::Server& s, const HttpEndpointOptions& options,
                        const std::string& csrf_token) {
  auto d = std::make_shared<Dashboard>(options, csrf_token);

  // The page and its files.
  for (const EmbeddedFile& f : EmbeddedFiles()) {
    const std::string path = f.name == "index.html" ? "/" : "/dashboard/" + std::string(f.name);
    s.Get(path, [f](const httplib::Request&, httplib::Response& res) {
      SecurityHeaders(res);
      res.set_content(f.bytes.data(), f.bytes.size(), std::string(f.content_type).c_str());
    });
  }

  auto wrong_method = [](const httplib::Request& req, httplib::Response& res) {
    Error(res, 405, "method " + req.method + " is not allowed on " + req.path);
  };

  // A GET route whose handler returns a Result<Json>.
  auto get = [&s](const std::string& pattern, auto handler) {
    s.Get(pattern, [handler](const httplib::Request& req, httplib::Response& res) {
      Result<Json> j = handler(req);
      if (!j.ok()) return Fail(res, j.status());
      Send(res, 200, *j);
    });
  };
  get("/api/session", [d](const httplib::Request&) -> Result<Json> { return d->Session(); });
  get("/api/overview", [d](const httplib::Request&) { return d->Overview(); });
  get("/api/stats", [d](const httplib::Request&) { return d->Stats(); });
  get("/api/queues", [d](const httplib::Request&) {
    return d->Queues(SummarizeScrape(d->options().metrics->Scrape()));
  });
  get("/api/types", [d](const httplib::Request&) {
    return d->Types(SummarizeScrape(d->options().metrics->Scrape()));
  });
  get("/api/workers", [d](const httplib::Request&) -> Result<Json> {
    return d->Workers(SummarizeScrape(d->options().metrics->Scrape()));
  });
  get("/api/paused", [d](const httplib::Request&) { return d->Paused(); });
  get("/api/rate_limiters", [d](const httplib::Request&) { return d->RateLimiters(); });
  get("/api/dlq", [d](const httplib::Request& req) { return d->DlqList(req); });
  // Before the entry's route, which would take "replay" for an id.
  s.Get("/api/dlq/replay", wrong_method);
  s.Get("/api/dlq/discard", wrong_method);
  s.Get("/api/resume", wrong_method);
  get(R"(/api/dlq/([^/]+))",
      [d](const httplib::Request& req) { return d->DlqEntryJson(req.matches[1].str()); });

  // A POST route: authorized first, then the body, then the action, whose
  // handler gets the actor and the reason.
  auto post = [&s, d](const std::string& pattern, auto handler) {
    s.Post(pattern, [d, handler](const httplib::Request& req, httplib::Response& res) {
      auto [status, why] = d->Authorize(req);
      if (status != 0) {
        if (status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"jobpact\"");
        return Error(res, status, why);
      }
      std::string reason;
      Result<Json> body = ActionBody(req, &reason);
      if (!body.ok()) return Fail(res, body.status());
      Result<Json> out = handler(*body, d->Actor(req), reason);
      if (!out.ok()) return Fail(res, out.status());
      Send(res, 200, *out);
    });
  };
  post("/api/dlq/replay", [d](const Json& body, const std::string& actor,
                              const std::string& reason) -> Result<Json> {
    JOBPACT_ASSIGN_OR_RETURN(std::vector<std::string> ids, JobIds(body));
    auto dry = body.find("dry_run");
    if (dry != body.end() && !dry->is_boolean()) {
      return Status::InvalidArgument("dry_run: true or false");
    }
    ReplayRequest r;
    r.job_ids = ids;
    r.actor = actor;
    r.reason = reason;
    r.dry_run = dry != body.end() && dry->get<bool>();
    r.max_jobs = kMaxIdsPerAction;
    JOBPACT_ASSIGN_OR_RETURN(ReplayReport rep, Guarded("dashboard: replay", [&] {
                               return d->options().operations->ReplayDeadLetters(r);
                             }));
    return Json{{"dry_run", r.dry_run},
                {"actor", actor},
                {"replayed", Strings(rep.replayed)},
                {"would_replay", Strings(rep.would_replay)},
                {"failed", FailedJson(rep.failed)}};
  });
  post("/api/dlq/discard", [d](const Json& body, const std::string& actor,
                               const std::string& reason) -> Result<Json> {
    JOBPACT_ASSIGN_OR_RETURN(std::vector<std::string> ids, JobIds(body));
    std::vector<std::string> discarded;
    std::vector<std::pair<std::string, Status>> failed;
    for (const std::string& id : ids) {
      Status st = Guarded("dashboard: discard", [&] {
        return d->options().operations->DiscardDeadLetter(id, actor, reason);
      });
      if (st.ok()) {
        discarded.push_back(id);
      } else {
        failed.emplace_back(id, st);
      }
    }
    return Json{{"actor", actor}, {"discarded", Strings(discarded)}, {"failed", FailedJson(failed)}};
  });
  post("/api/resume", [d](const Json& body, const std::string& actor,
                          const std::string& reason) -> Result<Json> {
    auto type = body.find("job_type");
    auto queue = body.find("queue");
    const bool by_type = type != body.end();
    if (by_type == (queue != body.end())) {
      return Status::InvalidArgument("name one of job_type or queue");
    }
    const Json& subject = by_type ? *type : *queue;
    if (!subject.is_string() || !IsSafeName(subject.get<std::string>())) {
      return Status::InvalidArgument(std::string(by_type ? "job_type" : "queue") +
                                     ": a name of letters, digits and . _ : -");
    }
    const std::string name = subject.get<std::string>();
    Status st = Guarded("dashboard: resume", [&] {
      return by_type ? d->options().operations->ResumeType(name, actor, reason)
                     : d->options().operations->ResumeQueue(name, actor, reason);
    });
    JOBPACT_RETURN_IF_ERROR(st);
    return Json{{"resumed", name}, {"kind", by_type ? "job_type" : "queue"}, {"actor", actor}};
  });

  // Anything else under /api: the wrong method, or no such path.
  for (const char* path : {"/api/session", "/api/overview", "/api/stats", "/api/queues",
                           "/api/types", "/api/workers", "/api/paused", "/api/rate_limiters",
                           "/api/dlq"}) {
    s.Post(path, wrong_method);
  }
  s.Post(R"(/api/.*)", [](const httplib::Request& req, httplib::Response& res) {
    Error(res, 404, "no such action: " + req.path);
  });
  s.Put(R"(/api/.*)", wrong_method);
  s.Delete(R"(/api/.*)", wrong_method);
  s.Patch(R"(/api/.*)", wrong_method);
  s.Get(R"(/api/.*)", [](const httplib::Request& req, httplib::Response& res) {
    Error(res, 404, "no such path: " + req.path);
  });
}

}  // namespace internal
}  // namespace jobpact
