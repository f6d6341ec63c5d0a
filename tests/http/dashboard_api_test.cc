// The dashboard (HttpEndpointOptions::dashboard): its page and files, and
// its JSON API over a real loopback socket -- each read, the numbers agreeing
// with /metrics, and the guards of every action (token, CSRF, read-only),
// dry runs that change nothing, and replay, discard and resume audited with
// the actor and the reason. In-memory backends and a manual clock: the
// runner is driven by RunUntilIdle(), nothing sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/backend.h"
#include "jobpact/failure.h"
#include "jobpact/http/endpoint.h"
#include "jobpact/job_runner.h"
#include "jobpact/operations.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "src/http/scrape_summary.h"

namespace jobpact {
namespace {

using Json = nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::IsOk;
using testing::StatusIs;

constexpr const char* kToken = "s3cret-operator-token";

class DashboardApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobRunnerOptions ro;
    ro.backend = backend_;
    ro.clock = clock_;
    ro.metrics = metrics_;
    ro.log_level = LogLevel::kOff;
    auto runner = JobRunner::Create(ro);
    ASSERT_THAT(runner.status(), IsOk());
    runner_ = std::move(*runner);
    ASSERT_THAT(runner_->Handle("mail.send", [](JobContext&) { return Status::Ok(); }), IsOk());
    ASSERT_THAT(runner_->Handle("report.render",
                                [](JobContext&) -> Status {
                                  throw PermanentError("template missing", "no_template");
                                }),
                IsOk());
    for (int i = 0; i < 3; ++i) Enqueue("mail.send");
    dead_.push_back(Enqueue("report.render"));
    dead_.push_back(Enqueue("report.render"));
    ASSERT_THAT(runner_->RunUntilIdle().status(), IsOk());
    OperationsOptions oo;
    oo.clock = clock_;
    oo.metrics = metrics_;
    auto ops = Operations::Open(backend_, oo);
    ASSERT_THAT(ops.status(), IsOk());
    ops_ = std::move(*ops);
  }

  std::string Enqueue(const std::string& type) {
    Envelope e;
    e.job_type = type;
    e.payload = R"({"n":1})";
    auto r = runner_->Enqueue(e);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? r->job_id : "";
  }

  void Serve(const std::function<void(HttpEndpointOptions&)>& configure = nullptr) {
    HttpEndpointOptions o;
    o.metrics = metrics_;
    o.admin = backend_.admin;
    o.runner = runner_.get();
    o.dashboard = true;
    o.operations = ops_;
    o.operator_token = kToken;
    o.operator_name = "alice";
    o.clock = clock_;
    if (configure) configure(o);
    auto e = HttpEndpoint::Start(o);
    ASSERT_THAT(e.status(), IsOk());
    endpoint_ = std::move(*e);
  }

  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", endpoint_->port());
    c.set_read_timeout(30, 0);
    return c;
  }

  Json GetJson(const std::string& path, int want_status = 200) {
    auto res = Client().Get(path.c_str());
    EXPECT_TRUE(res) << path;
    if (!res) return Json();
    EXPECT_EQ(res->status, want_status) << path << ": " << res->body;
    EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("application/json"));
    Json j = Json::parse(res->body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << res->body;
    return j;
  }

  std::string Csrf() { return GetJson("/api/session")["csrf_token"].get<std::string>(); }

  // What a page of this endpoint sends with an action.
  httplib::Headers ActionHeaders() {
    return {{"Authorization", std::string("Bearer ") + kToken}, {"X-Jobpact-CSRF", Csrf()}};
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers,
                       const char* type = "application/json") {
    return Client().Post(path.c_str(), headers, body, type);
  }

  JobStatus StatusOf(const std::string& id) {
    auto r = ops_->GetJob(id);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? r->status : JobStatus::kQueued;
  }

  int DeadLetters() {
    auto s = ops_->Stats();
    EXPECT_THAT(s.status(), IsOk());
    return s.ok() ? static_cast<int>(s->dead_letters) : -1;
  }

  // Asserts an action was refused with `status` and a message holding
  // `why`, and that the DLQ is as it was.
  void ExpectRefused(const httplib::Result& res, int status, const std::string& why) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_THAT(Json::parse(res->body, nullptr, false).value("error", ""), HasSubstr(why));
    EXPECT_EQ(DeadLetters(), 2);
    EXPECT_EQ(StatusOf(dead_[0]), JobStatus::kDeadLettered);
  }

  std::string ReplayBody(bool dry_run, const std::string& reason = "INC-7: template restored") {
    return Json{{"job_ids", {dead_[0]}}, {"dry_run", dry_run}, {"reason", reason}}.dump();
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  BackendBundle backend_ = InMemoryBackend(clock_);
  std::shared_ptr<PrometheusMetricsSink> metrics_ = std::make_shared<PrometheusMetricsSink>();
  std::unique_ptr<JobRunner> runner_;
  std::shared_ptr<Operations> ops_;
  std::vector<std::string> dead_;
  std::unique_ptr<HttpEndpoint> endpoint_;
};

// The value of one series line of the scrape, e.g.
// jobpact_jobs_succeeded_total{job_type="mail.send",queue="default",reason="succeeded"}.
double ScrapeValue(const std::string& scrape, const std::string& series) {
  const std::size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + series.size() + 2));
}

TEST_F(DashboardApiTest, ServesThePageAndItsFilesEmbeddedWithTheirTypesAndAStrictCsp) {
  Serve();
  httplib::Client c = Client();
  struct File {
    const char* path;
    const char* type;
    const char* holds;
  };
  for (const File& f : {File{"/", "text/html", "<title>jobpact dashboard</title>"},
                        File{"/dashboard/dashboard.js", "text/javascript", "/api/overview"},
                        File{"/dashboard/dashboard.css", "text/css", "font"}}) {
    auto res = c.Get(f.path);
    ASSERT_TRUE(res) << f.path;
    EXPECT_EQ(res->status, 200) << f.path;
    EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr(f.type)) << f.path;
    EXPECT_THAT(res->body, HasSubstr(f.holds)) << f.path;
    // Nothing from elsewhere: no CDN, no external address in the files.
    EXPECT_THAT(res->body, Not(HasSubstr("https://"))) << f.path;
    EXPECT_THAT(res->body, Not(HasSubstr("http://"))) << f.path;
    const std::string csp = res->get_header_value("Content-Security-Policy");
    EXPECT_THAT(csp, HasSubstr("default-src 'none'")) << f.path;
    EXPECT_THAT(csp, HasSubstr("script-src 'self'")) << f.path;
    EXPECT_THAT(csp, HasSubstr("frame-ancestors 'none'")) << f.path;
    EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  }
  auto missing = c.Get("/dashboard/other.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(DashboardApiTest, WithoutTheDashboardNoneOfItIsServed) {
  Serve([](HttpEndpointOptions& o) { o.dashboard = false; });
  httplib::Client c = Client();
  for (const char* path : {"/", "/api/overview", "/api/session", "/dashboard/dashboard.js"}) {
    auto res = c.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << path;
  }
  auto post = c.Post("/api/dlq/replay", ReplayBody(false), "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);
  EXPECT_EQ(DeadLetters(), 2);
}

TEST_F(DashboardApiTest, StartRefusesADashboardWithoutOperationsOrWithAnUnsafeOperatorName) {
  HttpEndpointOptions o;
  o.metrics = metrics_;
  o.dashboard = true;
  EXPECT_THAT(HttpEndpoint::Start(o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("operations")));
  o.operations = ops_;
  o.operator_name = "alice smith";
  EXPECT_THAT(HttpEndpoint::Start(o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("operator_name")));
}

TEST_F(DashboardApiTest, OverviewNumbersAreThoseOfMetrics) {
  Serve();
  const std::string scrape = Client().Get("/metrics")->body;
  const Json o = GetJson("/api/overview");

  EXPECT_EQ(o["stats"]["dead_letters"], 2);
  EXPECT_EQ(o["stats"]["by_status"]["succeeded"], 3);
  Json mail, report;
  for (const Json& t : o["types"]) {
    if (t["job_type"] == "mail.send") mail = t;
    if (t["job_type"] == "report.render") report = t;
  }
  ASSERT_TRUE(mail.is_object()) << o.dump();
  ASSERT_TRUE(report.is_object()) << o.dump();
  EXPECT_EQ(mail["counters"]["jobs_succeeded"].get<double>(),
            ScrapeValue(scrape, "jobpact_jobs_succeeded_total{job_type=\"mail.send\","
                                "queue=\"default\",reason=\"succeeded\"}"));
  EXPECT_EQ(mail["counters"]["jobs_succeeded"].get<double>(), 3);
  EXPECT_EQ(report["counters"]["jobs_dead_lettered"].get<double>(),
            ScrapeValue(scrape, "jobpact_jobs_dead_lettered_total{job_type=\"report.render\","
                                "queue=\"default\",reason=\"permanent_error\"}"));
  EXPECT_EQ(report["counters"]["jobs_dead_lettered"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(mail["success_ratio"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(mail["dlq_ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(report["success_ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(report["dlq_ratio"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(report["retry_ratio"].get<double>(), 0.0);
  // The manual clock never moved: every run took 0 s, so each lies in the
  // first bucket (le 0.001), and the median interpolates to its middle, as
  // Prometheus' histogram_quantile(0.5, ...) does.
  EXPECT_EQ(mail["duration_seconds"]["count"].get<double>(),
            ScrapeValue(scrape, "jobpact_job_duration_seconds_count{job_type=\"mail.send\","
                                "queue=\"default\"}"));
  EXPECT_DOUBLE_EQ(mail["duration_seconds"]["p50"].get<double>(), 0.0005);
  EXPECT_DOUBLE_EQ(mail["duration_seconds"]["p99"].get<double>(), 0.00099);
  EXPECT_EQ(mail["paused"], false);

  ASSERT_EQ(o["queues"].size(), 1u) << o.dump();
  EXPECT_EQ(o["queues"][0]["queue"], "default");
  EXPECT_EQ(o["queues"][0]["depth"], 0);
  EXPECT_EQ(o["queues"][0]["counters"]["jobs_enqueued"].get<double>(), 5);
  EXPECT_EQ(o["workers"]["hung"], 0);
  EXPECT_EQ(o["workers"]["source"], "runner");
  EXPECT_EQ(o["paused"].size(), 0u);

  // The single reads say the same as the overview.
  EXPECT_EQ(GetJson("/api/stats")["dead_letters"], 2);
  EXPECT_EQ(GetJson("/api/types").size(), o["types"].size());
  EXPECT_EQ(GetJson("/api/queues")[0]["queue"], "default");
  EXPECT_TRUE(o["queues"][0]["max_depth"].is_null()) << "no backpressure rule";
  ASSERT_THAT(ops_->SetMaxQueueDepth("default", 5000, "bob", "INC-9 backlog"), IsOk());
  EXPECT_EQ(GetJson("/api/queues")[0]["max_depth"], 5000);
  EXPECT_EQ(GetJson("/api/workers")["busy"], 0);
  EXPECT_EQ(GetJson("/api/paused").size(), 0u);
}

TEST_F(DashboardApiTest, FlowControlShowsThePerTenantCapAndTheRateLimiters) {
  Serve();
  Json o = GetJson("/api/overview");
  EXPECT_TRUE(o["queues"][0]["per_tenant_limit"].is_null()) << "no per-tenant cap";
  EXPECT_EQ(o["rate_limiters"], Json::array()) << "no limiter used yet";

  ASSERT_THAT(ops_->SetTenantConcurrencyLimit("default", 4, "bob", "INC-11 one tenant's flood"),
              IsOk());
  ASSERT_THAT(backend_.rate_limits->Backoff("dependency:payments-api", clock_->Now() + Seconds(30),
                                            "mail.send job 7: 429, retry after 30 s"),
              IsOk());
  ASSERT_THAT(ops_->OverrideRate("type:mail.send", RateLimit{5, 10}, "bob", "INC-11 upstream quota"),
              IsOk());
  o = GetJson("/api/overview");
  EXPECT_EQ(o["queues"][0]["per_tenant_limit"], 4);
  const Json limiters = GetJson("/api/rate_limiters");
  EXPECT_EQ(limiters, o["rate_limiters"]);
  ASSERT_EQ(limiters.size(), 2u) << limiters.dump();
  std::map<std::string, Json> by_key;
  for (const Json& l : limiters) by_key[l["key"].get<std::string>()] = l;
  const Json& dep = by_key["dependency:payments-api"];
  EXPECT_EQ(dep["backoff_until"], FormatRfc3339(clock_->Now() + Seconds(30)));
  EXPECT_EQ(dep["backoff_reason"], "mail.send job 7: 429, retry after 30 s");
  EXPECT_TRUE(dep["override"].is_null());
  const Json& type = by_key["type:mail.send"];
  EXPECT_EQ(type["override"]["per_second"], 5.0);
  EXPECT_EQ(type["override"]["burst"], 10);
  EXPECT_EQ(type["override"]["actor"], "bob");
  EXPECT_TRUE(type["backoff_until"].is_null());
}

TEST_F(DashboardApiTest, DlqListsWithFiltersAndShowsAnEntryWithItsHistory) {
  Serve();
  EXPECT_EQ(GetJson("/api/dlq")["entries"].size(), 2u);
  EXPECT_EQ(GetJson("/api/dlq?type=report.render&class=permanent")["entries"].size(), 2u);
  EXPECT_EQ(GetJson("/api/dlq?reason=permanent_error&limit=1")["entries"].size(), 1u);
  EXPECT_EQ(GetJson("/api/dlq?type=mail.send")["entries"].size(), 0u);
  EXPECT_EQ(GetJson("/api/dlq?class=transient")["entries"].size(), 0u);
  // since/until are read on the endpoint's clock: an age, or RFC 3339.
  EXPECT_EQ(GetJson("/api/dlq?since=1h")["entries"].size(), 2u);
  EXPECT_EQ(GetJson("/api/dlq?until=2020-01-01T00:00:00Z")["entries"].size(), 0u);
  const Json first = GetJson("/api/dlq")["entries"][0];
  EXPECT_EQ(first["job_type"], "report.render");
  EXPECT_EQ(first["reason"], "permanent_error");
  EXPECT_EQ(first["failure_class"], "permanent");
  EXPECT_FALSE(first.contains("history"));  // The listing is a summary.

  const Json e = GetJson("/api/dlq/" + dead_[0]);
  EXPECT_EQ(e["job_id"], dead_[0]);
  EXPECT_EQ(e["payload"], R"({"n":1})");
  ASSERT_GE(e["history"].size(), 2u) << e.dump();
  EXPECT_EQ(e["history"].back()["to"], "dead_lettered");
  EXPECT_EQ(e["last_failure"]["message"], "jobpact::PermanentError: template missing");
}

TEST_F(DashboardApiTest, BadInputIsA400ThatSaysWhatIsWrong) {
  Serve();
  EXPECT_THAT(GetJson("/api/dlq?class=nope", 400)["error"].get<std::string>(),
              HasSubstr("class: 'nope' is not a failure class"));
  EXPECT_THAT(GetJson("/api/dlq?since=yesterday", 400)["error"].get<std::string>(),
              HasSubstr("since: 'yesterday' is not a time"));
  EXPECT_THAT(GetJson("/api/dlq?limit=0", 400)["error"].get<std::string>(),
              HasSubstr("limit: '0' is not within 1..100000"));
  EXPECT_THAT(GetJson("/api/dlq?limit=ten", 400)["error"].get<std::string>(),
              HasSubstr("limit"));
  EXPECT_THAT(GetJson("/api/dlq/job%20one", 400)["error"].get<std::string>(),
              HasSubstr("is not a job id"));
  EXPECT_THAT(GetJson("/api/dlq/job_NOT_THERE", 404)["error"].get<std::string>(),
              HasSubstr("job_NOT_THERE"));

  const httplib::Headers h = ActionHeaders();
  ExpectRefused(Post("/api/dlq/replay", "{not json", h), 400, "not a JSON object");
  ExpectRefused(Post("/api/dlq/replay", "[1,2]", h), 400, "not a JSON object");
  ExpectRefused(Post("/api/dlq/replay", Json{{"job_ids", {dead_[0]}}}.dump(), h), 400,
                "reason: required");
  ExpectRefused(Post("/api/dlq/replay", Json{{"job_ids", {dead_[0]}}, {"reason", "  "}}.dump(), h),
                400, "reason: required");
  ExpectRefused(Post("/api/dlq/replay", Json{{"job_ids", dead_[0]}, {"reason", "r"}}.dump(), h),
                400, "job_ids: required, a non-empty array");
  ExpectRefused(Post("/api/dlq/replay", Json{{"job_ids", {"a b"}}, {"reason", "r"}}.dump(), h),
                400, "'a b' is not a job id");
  ExpectRefused(Post("/api/dlq/replay",
                     Json{{"job_ids", {dead_[0]}}, {"reason", "r"}, {"dry_run", "yes"}}.dump(), h),
                400, "dry_run: true or false");
  ExpectRefused(Post("/api/dlq/discard", Json{{"job_ids", {1}}, {"reason", "r"}}.dump(), h), 400,
                "each id is a string");
  ExpectRefused(Post("/api/resume", Json{{"reason", "r"}}.dump(), h), 400,
                "name one of job_type or queue");
  ExpectRefused(Post("/api/resume", Json{{"job_type", "a b"}, {"reason", "r"}}.dump(), h), 400,
                "job_type: a name");
}

TEST_F(DashboardApiTest, ActionsAreOffWithoutAConfiguredToken) {
  Serve([](HttpEndpointOptions& o) { o.operator_token.clear(); });
  const Json s = GetJson("/api/session");
  EXPECT_EQ(s["actions_enabled"], false);
  EXPECT_THAT(s["actions_disabled_because"].get<std::string>(), HasSubstr("no operator token"));
  // Not even an empty bearer token opens them.
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false),
                     {{"Authorization", "Bearer "}, {"X-Jobpact-CSRF", Csrf()}}),
                403, "no operator token");
}

TEST_F(DashboardApiTest, ActionsNeedTheRightBearerToken) {
  Serve();
  EXPECT_EQ(GetJson("/api/session")["actions_enabled"], true);
  const std::string csrf = Csrf();
  auto none = Post("/api/dlq/replay", ReplayBody(false), {{"X-Jobpact-CSRF", csrf}});
  ExpectRefused(none, 401, "Authorization: Bearer");
  EXPECT_THAT(none->get_header_value("WWW-Authenticate"), HasSubstr("Bearer"));
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false),
                     {{"Authorization", "Bearer wrong"}, {"X-Jobpact-CSRF", csrf}}),
                401, "token is wrong");
  ExpectRefused(Post("/api/dlq/discard", ReplayBody(false),
                     {{"Authorization", std::string("Bearer ") + kToken + "x"},
                      {"X-Jobpact-CSRF", csrf}}),
                401, "token is wrong");
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false),
                     {{"Authorization", std::string("Basic ") + kToken}, {"X-Jobpact-CSRF", csrf}}),
                401, "token is wrong");
}

TEST_F(DashboardApiTest, ActionsNeedTheCsrfHeaderAJsonBodyAndTheSameOrigin) {
  Serve();
  const std::string bearer = std::string("Bearer ") + kToken;
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false), {{"Authorization", bearer}}), 403,
                "CSRF check failed");
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false),
                     {{"Authorization", bearer}, {"X-Jobpact-CSRF", "0123456789abcdef"}}),
                403, "CSRF check failed");
  httplib::Headers h = ActionHeaders();
  h.emplace("Origin", "http://evil.example");
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false), h), 403, "Origin");
  // What an HTML form can send (no preflight) is not JSON.
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false), ActionHeaders(), "text/plain"), 415,
                "application/json");
  // The same origin passes.
  httplib::Headers same = ActionHeaders();
  same.emplace("Origin", "http://127.0.0.1:" + std::to_string(endpoint_->port()));
  auto ok = Post("/api/dlq/replay", ReplayBody(true), same);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(DashboardApiTest, ReadOnlyRefusesEveryActionWhateverTheToken) {
  Serve([](HttpEndpointOptions& o) { o.read_only = true; });
  const Json s = GetJson("/api/session");
  EXPECT_EQ(s["read_only"], true);
  EXPECT_EQ(s["actions_enabled"], false);
  const httplib::Headers h = ActionHeaders();
  ExpectRefused(Post("/api/dlq/replay", ReplayBody(false), h), 403, "read-only");
  ExpectRefused(Post("/api/dlq/discard", ReplayBody(false), h), 403, "read-only");
  ASSERT_THAT(ops_->PauseType("mail.send", "bob", "INC-1"), IsOk());
  ExpectRefused(Post("/api/resume", Json{{"job_type", "mail.send"}, {"reason", "r"}}.dump(), h),
                403, "read-only");
  EXPECT_TRUE(ops_->Control()->TypePaused("mail.send"));
  // Reads still work.
  EXPECT_EQ(GetJson("/api/dlq")["entries"].size(), 2u);
}

TEST_F(DashboardApiTest, ADryRunListsWhatWouldBeReplayedAndChangesNothing) {
  Serve();
  const std::string before = Client().Get("/metrics")->body;
  auto res = Post("/api/dlq/replay", ReplayBody(true), ActionHeaders());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  EXPECT_EQ(j["dry_run"], true);
  EXPECT_EQ(j["would_replay"], Json::array({dead_[0]}));
  EXPECT_EQ(j["replayed"], Json::array());
  EXPECT_EQ(DeadLetters(), 2);
  EXPECT_EQ(StatusOf(dead_[0]), JobStatus::kDeadLettered);
  EXPECT_TRUE(ops_->GetDeadLetter(dead_[0])->audit.empty());
  EXPECT_EQ(Client().Get("/metrics")->body, before);
}

TEST_F(DashboardApiTest, AReplayIsAuditedWithTheActorAndTheReasonAndCounted) {
  Serve();
  auto res = Post("/api/dlq/replay", ReplayBody(false), ActionHeaders());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  EXPECT_EQ(j["dry_run"], false);
  EXPECT_EQ(j["replayed"], Json::array({dead_[0]}));
  EXPECT_EQ(j["actor"], "dashboard:alice@127.0.0.1");
  EXPECT_EQ(DeadLetters(), 1);
  EXPECT_EQ(StatusOf(dead_[0]), JobStatus::kQueued);
  const JobRecord r = ops_->GetJob(dead_[0]).value();
  ASSERT_EQ(r.audit.size(), 1u);
  EXPECT_THAT(r.audit[0], HasSubstr("by dashboard:alice@127.0.0.1: INC-7: template restored"));
  EXPECT_THAT(Client().Get("/metrics")->body,
              HasSubstr("jobpact_dlq_replayed_total{job_type=\"report.render\",queue=\"default\","
                        "reason=\"permanent_error\"} 1"));
  // The page's numbers follow: one entry left.
  EXPECT_EQ(GetJson("/api/overview")["stats"]["dead_letters"], 1);
  // A second replay of the same id finds nothing to replay.
  auto again = Post("/api/dlq/replay", ReplayBody(false), ActionHeaders());
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  const Json a = Json::parse(again->body);
  EXPECT_EQ(a["replayed"], Json::array());
  ASSERT_EQ(a["failed"].size(), 1u);
  EXPECT_THAT(a["failed"][0]["error"].get<std::string>(), HasSubstr("NOT_FOUND"));
}

TEST_F(DashboardApiTest, ADiscardIsAuditedWithTheActorAndTheReasonAndCounted) {
  Serve();
  auto res = Post("/api/dlq/discard",
                  Json{{"job_ids", {dead_[1], "job_NOT_THERE"}}, {"reason", "superseded"}}.dump(),
                  ActionHeaders());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  EXPECT_EQ(j["discarded"], Json::array({dead_[1]}));
  ASSERT_EQ(j["failed"].size(), 1u);
  EXPECT_EQ(j["failed"][0]["job_id"], "job_NOT_THERE");
  EXPECT_EQ(StatusOf(dead_[1]), JobStatus::kDiscarded);
  EXPECT_EQ(DeadLetters(), 1);
  const JobRecord r = ops_->GetJob(dead_[1]).value();
  ASSERT_EQ(r.audit.size(), 1u);
  EXPECT_THAT(r.audit[0], HasSubstr("by dashboard:alice@127.0.0.1: superseded"));
  EXPECT_THAT(Client().Get("/metrics")->body,
              HasSubstr("jobpact_jobs_discarded_total{job_type=\"report.render\",queue=\"default\","
                        "reason=\"operator_discard\"} 1"));
}

TEST_F(DashboardApiTest, ResumeLiftsAPauseWithTheAudit) {
  ASSERT_THAT(ops_->PauseType("mail.send", "bob", "INC-9: SMTP down"), IsOk());
  Serve();
  const Json paused = GetJson("/api/paused");
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_EQ(paused[0]["subject"], "mail.send");
  EXPECT_EQ(paused[0]["actor"], "bob");
  for (const Json& t : GetJson("/api/types")) {
    EXPECT_EQ(t["paused"], t["job_type"] == "mail.send") << t.dump();
  }
  auto res = Post("/api/resume", Json{{"job_type", "mail.send"}, {"reason", "SMTP back"}}.dump(),
                  ActionHeaders());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(ops_->Control()->TypePaused("mail.send"));
  const std::vector<std::string> audit = ops_->ControlAudit().value();
  ASSERT_FALSE(audit.empty());
  EXPECT_THAT(audit.back(), HasSubstr("mail.send"));
  EXPECT_THAT(audit.back(), HasSubstr("by dashboard:alice@127.0.0.1: SMTP back"));
  EXPECT_EQ(GetJson("/api/paused").size(), 0u);
  // Nothing paused any more: a second resume names the missing rule.
  auto again = Post("/api/resume", Json{{"job_type", "mail.send"}, {"reason", "r"}}.dump(),
                    ActionHeaders());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 404) << again->body;
}

TEST_F(DashboardApiTest, WrongMethodsAre405AndUnknownPaths404InJson) {
  Serve();
  httplib::Client c = Client();
  auto get_action = c.Get("/api/dlq/replay");
  ASSERT_TRUE(get_action);
  EXPECT_EQ(get_action->status, 405);
  auto post_read = c.Post("/api/overview", ActionHeaders(), "{}", "application/json");
  ASSERT_TRUE(post_read);
  EXPECT_EQ(post_read->status, 405);
  auto put = c.Put("/api/dlq", "{}", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_THAT(GetJson("/api/nothing", 404)["error"].get<std::string>(), HasSubstr("/api/nothing"));
  auto unknown_action = c.Post("/api/dlq/purge", ActionHeaders(), "{}", "application/json");
  ASSERT_TRUE(unknown_action);
  EXPECT_EQ(unknown_action->status, 404);
  // /metrics still only reads.
  auto post_metrics = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post_metrics);
  EXPECT_EQ(post_metrics->status, 405);
}

TEST(ScrapeSummaryTest, QuantilesInterpolateAsHistogramQuantileDoes) {
  const double inf = std::numeric_limits<double>::infinity();
  internal::HistogramSum h;
  h.buckets = {{0.1, 2}, {1, 4}, {inf, 4}};
  EXPECT_DOUBLE_EQ(*internal::HistogramQuantile(h, 0.5), 0.1);    // Rank 2: the top of (0, 0.1].
  EXPECT_DOUBLE_EQ(*internal::HistogramQuantile(h, 0.75), 0.55);  // Rank 3: half way in (0.1, 1].
  EXPECT_DOUBLE_EQ(*internal::HistogramQuantile(h, 0.25), 0.05);
  internal::HistogramSum tail;
  tail.buckets = {{0.1, 1}, {inf, 2}};
  EXPECT_DOUBLE_EQ(*internal::HistogramQuantile(tail, 0.9), 0.1);  // In +Inf: the last bound.
  internal::HistogramSum empty;
  empty.buckets = {{0.1, 0}, {inf, 0}};
  EXPECT_FALSE(internal::HistogramQuantile(empty, 0.5).has_value());
  EXPECT_FALSE(internal::HistogramQuantile(internal::HistogramSum{}, 0.5).has_value());
}

TEST(ScrapeSummaryTest, SumsSeriesOverQueuesAndReasonsPerTypeAndPerQueue) {
  const std::string scrape =
      "# HELP jobpact_jobs_succeeded_total x\n"
      "# TYPE jobpact_jobs_succeeded_total counter\n"
      "jobpact_jobs_succeeded_total{job_type=\"a\",queue=\"q1\",reason=\"succeeded\"} 2\n"
      "jobpact_jobs_succeeded_total{job_type=\"a\",queue=\"q2\",reason=\"idempotent_skip\"} 3\n"
      "jobpact_jobs_succeeded_total{job_type=\"b\\\"x\",queue=\"q1\",reason=\"succeeded\"} 1\n"
      "jobpact_job_duration_seconds_bucket{job_type=\"a\",queue=\"q1\",le=\"1\"} 1\n"
      "jobpact_job_duration_seconds_bucket{job_type=\"a\",queue=\"q1\",le=\"+Inf\"} 2\n"
      "jobpact_job_duration_seconds_bucket{job_type=\"a\",queue=\"q2\",le=\"1\"} 3\n"
      "jobpact_job_duration_seconds_bucket{job_type=\"a\",queue=\"q2\",le=\"+Inf\"} 3\n"
      "jobpact_job_duration_seconds_count{job_type=\"a\",queue=\"q1\"} 2\n"
      "jobpact_job_duration_seconds_count{job_type=\"a\",queue=\"q2\"} 3\n"
      "jobpact_queue_depth{queue=\"q1\"} 7\n"
      "jobpact_workers_busy 4\n"
      "garbage line without a value\n";
  const internal::ScrapeSummary s = internal::SummarizeScrape(scrape);
  EXPECT_EQ(s.types.at("a").counters.at("jobs_succeeded"), 5);
  EXPECT_EQ(s.types.at("b\"x").counters.at("jobs_succeeded"), 1);
  EXPECT_EQ(s.queues.at("q1").counters.at("jobs_succeeded"), 3);
  EXPECT_EQ(s.queues.at("q2").counters.at("jobs_succeeded"), 3);
  EXPECT_EQ(*s.queues.at("q1").depth, 7);
  EXPECT_EQ(s.workers_busy, 4);
  const internal::HistogramSum& d = s.types.at("a").duration;
  ASSERT_EQ(d.buckets.size(), 2u);
  EXPECT_EQ(d.buckets[0], std::make_pair(1.0, 4.0));
  EXPECT_EQ(d.buckets[1].second, 5);
  EXPECT_EQ(d.count, 5);
}

}  // namespace
}  // namespace jobpact
