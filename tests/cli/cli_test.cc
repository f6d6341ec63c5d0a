// The jobpact command end to end, as a user runs it: a store filled by
// cli_fill (jobs succeeded, dead letters of every failure class, a paused
// type, published policies, held locks), then the real binary -- the built
// one, or the installed one when JOBPACT_CLI_BIN names it (the
// cli.installed test) -- run as a child process, checking its tables, its
// JSON, its exit codes, its guard rails and its one-line errors. Every test
// runs on SQLite and, where a Redis or PostgreSQL server is at hand
// (redis_test_server.h, postgres_test_server.h), on Redis and PostgreSQL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#ifdef JOBPACT_CLI_TEST_WITH_REDIS
#include "tests/backends/redis/redis_test_server.h"
#endif
#ifdef JOBPACT_CLI_TEST_WITH_POSTGRES
#include "tests/backends/postgres/postgres_test_server.h"
#endif

#include "tests/support/run_program.h"

namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using Json = nlohmann::json;
using jobpact::testing::Ran;
using jobpact::testing::RunProgram;

std::string CliBinary() {
  const char* installed = std::getenv("JOBPACT_CLI_BIN");
  return installed != nullptr && *installed != '\0' ? installed : JOBPACT_CLI_BUILT;
}

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "jobpact_cli_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

Ran Cli(const std::vector<std::string>& args,
        const std::vector<std::pair<std::string, const char*>>& env = {}) {
  return RunProgram(CliBinary(), args, env);
}

std::vector<std::string> Ids(const Json& array) {
  std::vector<std::string> ids;
  for (const Json& e : array) ids.push_back(e.at("job_id").get<std::string>());
  return ids;
}

class CliTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      dir_ = TempDir();
      ASSERT_FALSE(dir_.empty());
      url_ = "sqlite://" + dir_ + "/jobs.db";
    } else if (GetParam() == "postgres") {
#ifdef JOBPACT_CLI_TEST_WITH_POSTGRES
      JOBPACT_POSTGRES_URL_OR_SKIP(server);
      schema_ = jobpact::postgres_testing::FreshSchema();
      url_ = server + (server.find('?') == std::string::npos ? "?" : "&") + "schema=" + schema_;
#else
      GTEST_SKIP() << "this build has no PostgreSQL backend";
#endif
    } else {
#ifdef JOBPACT_CLI_TEST_WITH_REDIS
      JOBPACT_REDIS_URL_OR_SKIP(server);
      url_ = server + (server.find('?') == std::string::npos ? "?" : "&") +
             "namespace=" + jobpact::redis_testing::FreshNamespace();
#else
      GTEST_SKIP() << "this build has no Redis backend";
#endif
    }
    Ran fill = RunProgram(JOBPACT_CLI_FILL, {url_});
    ASSERT_EQ(fill.rc, 0) << fill;
    made_ = fill.json();
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
#ifdef JOBPACT_CLI_TEST_WITH_POSTGRES
    if (!schema_.empty()) {
      jobpact::postgres::PostgresOptions o = jobpact::postgres_testing::TestOptions();
      o.schema = schema_;
      jobpact::postgres_testing::DropSchema(o);
    }
#endif
  }

  // The command with --backend first.
  Ran Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--backend", url_});
    return Cli(args);
  }
  Ran RunJson(std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return Run(std::move(args));
  }
  std::string Made(const char* bucket, int i) const { return made_.at(bucket).at(i); }
  Json Lock(const char* which) const { return made_.at("locks").at(which); }
  Json Job(const std::string& id) {
    Ran r = RunJson({"jobs", "show", id});
    EXPECT_EQ(r.rc, 0) << r;
    return r.json();
  }
  std::vector<std::string> LockKeys() {
    Ran r = RunJson({"locks", "list"});
    EXPECT_EQ(r.rc, 0) << r;
    std::vector<std::string> keys;
    for (const Json& l : r.json()) keys.push_back(l.at("key"));
    return keys;
  }

  std::string dir_;
  std::string url_;
  std::string schema_;  // PostgreSQL: the fresh schema, dropped at TearDown.
  Json made_;
};

TEST_P(CliTest, StatsShowsEveryStateAsATableAndAsJson) {
  Ran j = RunJson({"stats"});
  ASSERT_EQ(j.rc, 0) << j;
  const Json s = j.json();
  EXPECT_EQ(s["by_status"]["succeeded"], 6);  // 5 mail.send, the order:final job.
  EXPECT_EQ(s["by_status"]["dead_lettered"], 127);
  EXPECT_EQ(s["by_status"]["queued"], 2);  // The paused mail.send jobs.
  EXPECT_EQ(s["by_status"]["running"], 2);  // order:live and order:expired.
  EXPECT_EQ(s["dead_letters"], 127);
  EXPECT_EQ(s["queues"]["default"]["depth"], 2);
  EXPECT_EQ(s["queues"]["orders"]["running"], 2);
  EXPECT_GE(s["queues"]["default"]["oldest_ready_age_seconds"].get<double>(), 0.0);

  // The env var works as well as --backend.
  Ran env = Cli({"--json", "stats"}, {{"JOBPACT_BACKEND", url_.c_str()}});
  ASSERT_EQ(env.rc, 0) << env;
  EXPECT_EQ(env.json()["by_status"], s["by_status"]);
  // --json may come after the command too.
  Ran after = Run({"stats", "--json"});
  ASSERT_EQ(after.rc, 0) << after;
  EXPECT_EQ(after.json()["dead_letters"], 127);
  Ran t = Run({"stats"});
  ASSERT_EQ(t.rc, 0) << t;
  EXPECT_THAT(t.out, AllOf(HasSubstr("QUEUE"), HasSubstr("OLDEST READY"), HasSubstr("orders"),
                           HasSubstr("dead_lettered"), HasSubstr("dead letters: 127")));
}

TEST_P(CliTest, JobsListShowAndCancel) {
  Ran ok = RunJson({"jobs", "list", "--status", "succeeded", "--limit", "100"});
  ASSERT_EQ(ok.rc, 0) << ok;
  EXPECT_THAT(ok.json(), SizeIs(6));
  for (const Json& j : ok.json()) EXPECT_EQ(j["status"], "succeeded");
  Ran queued = RunJson({"jobs", "list", "--status", "queued", "--type", "mail.send"});
  ASSERT_EQ(queued.rc, 0) << queued;
  EXPECT_THAT(Ids(queued.json()), ElementsAre(Made("queued", 0), Made("queued", 1)));
  Ran limited = RunJson({"jobs", "list", "--limit", "3"});
  EXPECT_THAT(limited.json(), SizeIs(3));
  Ran table = Run({"jobs", "list", "--type", "mail.send", "--status", "queued"});
  EXPECT_THAT(table.out, AllOf(HasSubstr("JOB ID"), HasSubstr(Made("queued", 0))));

  const Json pdf = Job(Made("dlq_permanent", 0));
  EXPECT_EQ(pdf["status"], "dead_lettered");
  EXPECT_EQ(pdf["job_type"], "pdf.render");
  EXPECT_EQ(pdf["last_failure"]["class"], "permanent");
  EXPECT_EQ(pdf["reason"], "permanent_error");
  ASSERT_GE(pdf["history"].size(), 3u);  // enqueued, delivered, dead-lettered.
  EXPECT_EQ(pdf["history"].back()["to"], "dead_lettered");
  EXPECT_THAT(pdf["enqueued_at"].get<std::string>(), HasSubstr("T"));
  Ran shown = Run({"jobs", "show", Made("dlq_permanent", 0)});
  EXPECT_THAT(shown.out, AllOf(HasSubstr("history:"), HasSubstr("template missing"),
                               HasSubstr("permanent_error")));

  Ran cancel = RunJson({"jobs", "cancel", Made("queued", 0), "--actor", "erin", "--reason",
                        "sent twice"});
  ASSERT_EQ(cancel.rc, 0) << cancel;
  EXPECT_EQ(cancel.json()["outcome"], "discarded");
  const Json cancelled = Job(Made("queued", 0));
  EXPECT_EQ(cancelled["status"], "discarded");
  EXPECT_THAT(cancelled["audit"].back().get<std::string>(), HasSubstr("by erin: sent twice"));
  Ran again = Run({"jobs", "cancel", Made("queued", 0), "--actor", "erin", "--reason", "x"});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_TRUE(again.one_line_error()) << again;
  // The actor defaults to $USER.
  Ran by_user = Cli({"--backend", url_, "jobs", "cancel", Made("queued", 1), "--reason", "dup"},
                    {{"USER", "oncall-7"}});
  ASSERT_EQ(by_user.rc, 0) << by_user;
  EXPECT_THAT(Job(Made("queued", 1))["audit"].back().get<std::string>(),
              HasSubstr("by oncall-7: dup"));
}

TEST_P(CliTest, DlqListFiltersByClassTypeReasonAndTime) {
  auto list = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"dlq", "list"});
    Ran r = RunJson(args);
    EXPECT_EQ(r.rc, 0) << r;
    return r.json();
  };
  EXPECT_THAT(list({}), SizeIs(127));
  const Json transient = list({"--class", "transient"});
  EXPECT_THAT(Ids(transient), ElementsAre(Made("dlq_transient", 0), Made("dlq_transient", 1)));
  EXPECT_EQ(transient[0]["job_type"], "sms.send");
  EXPECT_EQ(transient[0]["reason"], "max_attempts_exceeded");
  EXPECT_EQ(transient[0]["last_failure"]["code"], "http_503");
  EXPECT_THAT(Ids(list({"--class", "unknown"})),
              ElementsAre(Made("dlq_unknown", 0), Made("dlq_unknown", 1)));
  EXPECT_THAT(list({"--type", "pdf.render"}), SizeIs(3));
  EXPECT_THAT(list({"--class", "permanent", "--reason", "permanent_error"}), SizeIs(123));
  EXPECT_THAT(list({"--type", "pdf.render", "--since", "1h"}), SizeIs(3));
  EXPECT_THAT(list({"--until", "1h"}), SizeIs(0));
  EXPECT_THAT(list({"--until", "2100-01-01T00:00:00Z", "--limit", "5"}), SizeIs(5));

  Ran table = Run({"dlq", "list", "--type", "sms.send"});
  EXPECT_THAT(table.out, AllOf(HasSubstr("CLASS"), HasSubstr("transient"), HasSubstr("http_503"),
                               HasSubstr("2 entries")));
  Ran show = RunJson({"dlq", "show", Made("dlq_unknown", 0)});
  ASSERT_EQ(show.rc, 0) << show;
  EXPECT_EQ(show.json()["failure_class"], "unknown");
  EXPECT_THAT(show.json()["last_failure"]["message"].get<std::string>(),
              HasSubstr("warehouse said something odd"));
  EXPECT_FALSE(show.json()["history"].empty());
  Ran missing = Run({"dlq", "show", Made("succeeded", 0)});
  EXPECT_EQ(missing.rc, 1) << missing;
  EXPECT_TRUE(missing.one_line_error()) << missing;
}

TEST_P(CliTest, ReplayOverTheThresholdNeedsYes) {
  const std::vector<std::string> bulk = {"dlq", "replay", "--type", "bulk.import",
                                         "--actor", "carol", "--reason", "INC-2 fixed"};
  Ran refused = Run(bulk);
  EXPECT_EQ(refused.rc, 3) << refused;
  EXPECT_TRUE(refused.one_line_error()) << refused;
  EXPECT_THAT(refused.err, AllOf(HasSubstr("refused"), HasSubstr("120"), HasSubstr("--yes")));
  EXPECT_THAT(RunJson({"dlq", "list", "--type", "bulk.import"}).json(), SizeIs(120))
      << "a refused replay changes nothing";

  std::vector<std::string> dry = bulk;
  dry.push_back("--dry-run");
  Ran would = RunJson(dry);
  ASSERT_EQ(would.rc, 0) << would;
  EXPECT_THAT(would.json()["would_replay"], SizeIs(120));

  std::vector<std::string> yes = bulk;
  yes.push_back("--yes");
  Ran done = RunJson(yes);
  ASSERT_EQ(done.rc, 0) << done;
  EXPECT_THAT(done.json()["replayed"], SizeIs(120));
  EXPECT_THAT(RunJson({"dlq", "list", "--type", "bulk.import"}).json(), SizeIs(0));
  EXPECT_EQ(Job(Made("dlq_bulk", 0))["status"], "queued");
}

TEST_P(CliTest, ReplayByIdAtARateKeepingAttempts) {
  Ran r = RunJson({"dlq", "replay", "--id", Made("dlq_transient", 0), "--id",
                   Made("dlq_transient", 1), "--rate", "2/s", "--keep-attempts",
                   "--extra-attempts", "2", "--actor", "carol", "--reason", "gateway back"});
  ASSERT_EQ(r.rc, 0) << r;
  EXPECT_THAT(r.json()["replayed"], ElementsAre(Made("dlq_transient", 0), Made("dlq_transient", 1)));
  EXPECT_EQ(r.json()["rate_per_second"], 2.0);
  const Json a = Job(Made("dlq_transient", 0));
  const Json b = Job(Made("dlq_transient", 1));
  EXPECT_EQ(a["status"], "queued");
  EXPECT_EQ(a["attempt"], 1) << "--keep-attempts keeps the attempt spent";
  EXPECT_EQ(a["max_attempts"], 3) << "1 + --extra-attempts 2";
  EXPECT_THAT(a["audit"].back().get<std::string>(), HasSubstr("replay by carol: gateway back"));
  EXPECT_LT(a["ready_at"].get<std::string>(), b["ready_at"].get<std::string>())
      << "--rate spaces the replayed jobs";

  // An id that does not match the filters, or is not in the DLQ.
  Ran mixed = Run({"dlq", "replay", "--id", Made("dlq_unknown", 0), "--id", Made("succeeded", 0),
                   "--type", "sms.send", "--actor", "carol", "--reason", "x"});
  EXPECT_EQ(mixed.rc, 1) << mixed;
  EXPECT_THAT(mixed.out, AllOf(HasSubstr("does not match the selection"), HasSubstr("replayed 0")));
  EXPECT_EQ(Job(Made("dlq_unknown", 0))["status"], "dead_lettered");
}

TEST_P(CliTest, DiscardAndPurge) {
  Ran one = RunJson({"dlq", "discard", "--id", Made("dlq_permanent", 0), "--actor", "dave",
                     "--reason", "superseded by a new render"});
  ASSERT_EQ(one.rc, 0) << one;
  EXPECT_THAT(one.json()["discarded"], ElementsAre(Made("dlq_permanent", 0)));
  const Json j = Job(Made("dlq_permanent", 0));
  EXPECT_EQ(j["status"], "discarded");
  EXPECT_THAT(j["audit"].back().get<std::string>(), HasSubstr("by dave: superseded"));

  Ran many = Run({"dlq", "discard", "--type", "bulk.import", "--actor", "dave", "--reason", "x"});
  EXPECT_EQ(many.rc, 3) << many;
  EXPECT_THAT(many.err, HasSubstr("refused"));
  Ran filtered = RunJson({"dlq", "discard", "--type", "pdf.render", "--actor", "dave",
                          "--reason", "template gone"});
  ASSERT_EQ(filtered.rc, 0) << filtered;
  EXPECT_THAT(filtered.json()["discarded"], SizeIs(2));

  Ran none = RunJson({"dlq", "purge", "--older-than", "1h"});
  ASSERT_EQ(none.rc, 0) << none;
  EXPECT_EQ(none.json()["purged"], 0);
  Ran all = RunJson({"dlq", "purge", "--older-than", "0s"});
  ASSERT_EQ(all.rc, 0) << all;
  EXPECT_EQ(all.json()["purged"], 124);  // 127 less the three discarded.
  EXPECT_THAT(RunJson({"dlq", "list"}).json(), SizeIs(0));
}

TEST_P(CliTest, JobsPurgeByCountThenByAgeLeavesUnfinishedJobsAndTheDlq) {
  // 5 mail.send and 1 order.sync succeeded: the newest 2 of each type stay.
  Ran trim = RunJson({"jobs", "purge", "--keep", "2", "--status", "succeeded", "--dedup-window",
                      "0s"});
  ASSERT_EQ(trim.rc, 0) << trim;
  EXPECT_EQ(trim.json()["trimmed"], 3);
  EXPECT_EQ(trim.json()["kept_per_type"], 2);
  EXPECT_THAT(trim.json()["statuses"], ElementsAre("succeeded"));
  Ran mail = RunJson({"jobs", "list", "--status", "succeeded", "--type", "mail.send"});
  ASSERT_EQ(mail.rc, 0) << mail;
  EXPECT_THAT(mail.json(), SizeIs(2));
  EXPECT_THAT(Ids(RunJson({"jobs", "list", "--status", "succeeded", "--type", "order.sync"}).json()),
              ElementsAre(made_.at("succeeded").back()));
  Ran again = Run({"jobs", "purge", "--keep", "2", "--dedup-window", "0s"});
  ASSERT_EQ(again.rc, 0) << again;
  EXPECT_THAT(again.out, HasSubstr("trimmed 0 jobs beyond the newest 2 per job type and status"));

  // By age: nothing finished an hour ago; everything finished before now.
  Ran none = RunJson({"jobs", "purge", "--older-than", "1h"});
  ASSERT_EQ(none.rc, 0) << none;
  EXPECT_EQ(none.json()["purged"], 0);
  Ran all = RunJson({"jobs", "purge", "--older-than", "0s"});
  ASSERT_EQ(all.rc, 0) << all;
  EXPECT_EQ(all.json()["purged"], 3);
  EXPECT_THAT(RunJson({"jobs", "list", "--status", "succeeded"}).json(), SizeIs(0));
  // Queued jobs and dead letters are not finished jobs.
  EXPECT_THAT(RunJson({"jobs", "list", "--status", "queued", "--type", "mail.send"}).json(),
              SizeIs(2));
  EXPECT_THAT(RunJson({"dlq", "list"}).json(), SizeIs(127));
}

TEST_P(CliTest, PauseConcurrencyAndRoutesAreTheControlStateWithItsAudit) {
  auto rules = [&] {
    Ran r = RunJson({"control", "show"});
    EXPECT_EQ(r.rc, 0) << r;
    std::vector<std::string> out;
    const Json state = r.json();
    for (const Json& rule : state["rules"]) {
      out.push_back(rule["kind"].get<std::string>() + " " + rule["subject"].get<std::string>());
    }
    return out;
  };
  EXPECT_THAT(rules(), ElementsAre("pause_type mail.send"));  // The filler's.
  const std::vector<std::string> who = {"--actor", "bob", "--reason", "INC-3"};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), who.begin(), who.end());
    return Run(args);
  };
  EXPECT_EQ(run({"pause", "pdf.render"}).rc, 0);
  EXPECT_EQ(run({"pause", "--queue", "bulk"}).rc, 0);
  EXPECT_EQ(run({"concurrency", "report.build", "2"}).rc, 0);
  EXPECT_EQ(run({"concurrency", "exports", "3", "--per-tenant"}).rc, 0);
  EXPECT_EQ(run({"concurrency", "payments-api", "8", "--dependency"}).rc, 0);
  EXPECT_EQ(run({"depth-limit", "bulk", "5000"}).rc, 0);
  EXPECT_EQ(run({"route", "sms.send", "--class", "transient", "--to", "dlq"}).rc, 0);
  EXPECT_EQ(run({"resume", "mail.send"}).rc, 0);
  // Unordered: SQLite sorts the rules by kind name, Redis by kind.
  EXPECT_THAT(rules(), UnorderedElementsAre("pause_type pdf.render", "pause_queue bulk",
                                            "concurrency_limit report.build",
                                            "tenant_concurrency_limit exports",
                                            "dependency_concurrency_limit payments-api",
                                            "max_queue_depth bulk", "route_to_dlq sms.send"));
  Ran shown = Run({"control", "show"});
  EXPECT_THAT(shown.out, AllOf(HasSubstr("limit 2"), HasSubstr("limit 3 per tenant"),
                               HasSubstr("limit 8 handlers"),
                               HasSubstr("max depth 5000"),
                               HasSubstr("transient -> dlq"),
                               HasSubstr("clear pause_type mail.send")));
  Ran json = RunJson({"control", "show", "--audit", "50"});
  const Json audit = json.json()["audit"];
  ASSERT_FALSE(audit.empty());
  EXPECT_THAT(audit.back().get<std::string>(), HasSubstr("clear pause_type mail.send by bob: INC-3"));

  Ran not_paused = run({"resume", "mail.send"});
  EXPECT_EQ(not_paused.rc, 1) << not_paused;
  EXPECT_TRUE(not_paused.one_line_error()) << not_paused;
  EXPECT_EQ(run({"concurrency", "report.build", "--clear"}).rc, 0);
  EXPECT_EQ(run({"concurrency", "exports", "--per-tenant", "--clear"}).rc, 0);
  EXPECT_EQ(run({"concurrency", "payments-api", "--dependency", "--clear"}).rc, 0);
  EXPECT_EQ(run({"depth-limit", "bulk", "--clear"}).rc, 0);
  EXPECT_EQ(run({"route", "sms.send", "--class", "transient", "--clear"}).rc, 0);
  EXPECT_EQ(run({"resume", "--queue", "bulk"}).rc, 0);
  EXPECT_EQ(run({"resume", "pdf.render"}).rc, 0);
  EXPECT_THAT(rules(), SizeIs(0));

  EXPECT_EQ(run({"concurrency", "report.build", "-1"}).rc, 2);
  Ran bad_cap = run({"concurrency", "exports", "many", "--per-tenant"});
  EXPECT_EQ(bad_cap.rc, 2) << bad_cap;
  EXPECT_THAT(bad_cap.err, AllOf(HasSubstr("concurrency --per-tenant exports"),
                                 HasSubstr("'many' is not a whole number")));
  Ran both = run({"concurrency", "exports", "3", "--per-tenant", "--dependency"});
  EXPECT_EQ(both.rc, 2) << both;
  EXPECT_THAT(both.err, HasSubstr("--per-tenant or --dependency, not both"));
  Ran bad_depth = run({"depth-limit", "bulk", "lots"});
  EXPECT_EQ(bad_depth.rc, 2) << bad_depth;
  EXPECT_THAT(bad_depth.err, HasSubstr("'lots' is not a whole number"));
  EXPECT_EQ(run({"depth-limit", "bulk"}).rc, 2) << "neither N nor --clear";
  EXPECT_EQ(run({"route", "sms.send", "--class", "sometimes", "--to", "dlq"}).rc, 2);
  EXPECT_EQ(run({"route", "sms.send", "--class", "transient", "--to", "trash"}).rc, 2);
  EXPECT_EQ(run({"pause"}).rc, 2);
  Ran no_reason = Run({"pause", "pdf.render", "--actor", "bob"});
  EXPECT_EQ(no_reason.rc, 2) << no_reason;
  EXPECT_THAT(no_reason.err, HasSubstr("--reason"));
  EXPECT_TRUE(no_reason.one_line_error()) << no_reason;
}

TEST_P(CliTest, LocksReleaseOnlyOnceTheOwnerIsGone) {
  EXPECT_THAT(LockKeys(), ElementsAre("order:expired", "order:final", "order:live"));
  Ran table = Run({"locks", "list"});
  EXPECT_THAT(table.out, AllOf(HasSubstr("OWNER"), HasSubstr(Lock("live")["owner"])));
  auto release = [&](const Json& lock, const std::string& owner) {
    return RunJson({"locks", "release", lock["key"], "--owner", owner, "--actor", "frank",
                    "--reason", "INC-4 stuck lock"});
  };

  Ran live = release(Lock("live"), Lock("live")["owner"]);
  EXPECT_EQ(live.rc, 3) << live;
  EXPECT_TRUE(live.one_line_error()) << live;
  EXPECT_THAT(live.err, AllOf(HasSubstr("refused"), HasSubstr("live lease"),
                              HasSubstr(Lock("live")["job_id"].get<std::string>())));
  Ran wrong = release(Lock("final"), Lock("live")["owner"]);
  EXPECT_EQ(wrong.rc, 3) << wrong;
  EXPECT_THAT(wrong.err, HasSubstr("is held by"));
  EXPECT_THAT(LockKeys(), SizeIs(3)) << "refusals change nothing";

  Ran final_ok = release(Lock("final"), Lock("final")["owner"]);
  ASSERT_EQ(final_ok.rc, 0) << final_ok;
  EXPECT_EQ(final_ok.json()["job_id"], Lock("final")["job_id"]);
  EXPECT_EQ(final_ok.json()["job_status"], "succeeded");
  Ran expired_ok = release(Lock("expired"), Lock("expired")["owner"]);
  ASSERT_EQ(expired_ok.rc, 0) << expired_ok;
  EXPECT_THAT(expired_ok.json()["verdict"].get<std::string>(), HasSubstr("lease expired"));
  EXPECT_THAT(LockKeys(), ElementsAre("order:live"));

  Ran gone = release(Lock("final"), Lock("final")["owner"]);
  EXPECT_EQ(gone.rc, 1) << gone;
  EXPECT_THAT(gone.err, HasSubstr("not held"));
}

// The cache guard's shared store: Redis has one; SQLite and PostgreSQL do
// not, and every cache command there fails naming the backend.
bool HasCacheStore(const std::string& backend) { return backend == "redis"; }

TEST_P(CliTest, CacheCommandsNameABackendWithoutACacheStore) {
  if (HasCacheStore(GetParam())) GTEST_SKIP() << GetParam() << " has a cache store";
  const std::vector<std::vector<std::string>> commands = {
      {"cache", "count", "--prefix", "user:"},
      {"cache", "invalidate", "--key", "user:1", "--actor", "gina", "--reason", "INC-7"},
      {"cache", "invalidate", "--prefix", "user:", "--yes", "--actor", "gina", "--reason", "INC-7"},
  };
  for (const auto& args : commands) {
    Ran r = Run(args);
    EXPECT_EQ(r.rc, 1) << r;
    EXPECT_TRUE(r.one_line_error()) << r;
    EXPECT_THAT(r.err, HasSubstr("the " + GetParam() + " backend has no cache store")) << r;
  }
}

TEST_P(CliTest, CacheCountAndInvalidateOneKey) {
  if (!HasCacheStore(GetParam())) GTEST_SKIP() << GetParam() << " has no cache store";
  const Json& made = made_.at("cache");
  Ran all = RunJson({"cache", "count"});
  ASSERT_EQ(all.rc, 0) << all;
  EXPECT_EQ(all.json()["entries"], made["all"]);
  Ran users = RunJson({"cache", "count", "--prefix", "user:"});
  ASSERT_EQ(users.rc, 0) << users;
  EXPECT_EQ(users.json()["entries"], made["user:"]);
  EXPECT_EQ(users.json()["prefix"], "user:");
  Ran table = Run({"cache", "count", "--prefix", "product:"});
  ASSERT_EQ(table.rc, 0) << table;
  EXPECT_THAT(table.out, HasSubstr("120 live cache entries start with 'product:'"));

  Ran one = RunJson({"cache", "invalidate", "--key", "user:2", "--actor", "gina", "--reason",
                     "INC-7: user 2 renamed"});
  ASSERT_EQ(one.rc, 0) << one;
  EXPECT_EQ(one.json()["key"], "user:2");
  EXPECT_EQ(one.json()["removed"], 1);
  EXPECT_EQ(one.json()["actor"], "gina");
  EXPECT_EQ(one.json()["reason"], "INC-7: user 2 renamed");
  EXPECT_EQ(RunJson({"cache", "count", "--prefix", "user:"}).json()["entries"], 2);
  EXPECT_EQ(RunJson({"cache", "count"}).json()["entries"], 125);

  Ran again =
      Run({"cache", "invalidate", "--key", "user:2", "--actor", "gina", "--reason", "INC-7"});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_TRUE(again.one_line_error()) << again;
  EXPECT_THAT(again.err, HasSubstr("no live cache entry")) << again;
}

TEST_P(CliTest, CacheInvalidatePrefixShowsTheCountAndNeedsYes) {
  if (!HasCacheStore(GetParam())) GTEST_SKIP() << GetParam() << " has no cache store";
  Ran refused = Run({"cache", "invalidate", "--prefix", "user:", "--actor", "gina", "--reason",
                     "INC-8: schema change"});
  EXPECT_EQ(refused.rc, 3) << refused;
  EXPECT_TRUE(refused.one_line_error()) << refused;
  EXPECT_THAT(refused.err, AllOf(HasSubstr("would remove 3 cache entries"),
                                 HasSubstr("nothing removed"), HasSubstr("--yes")));
  Ran refused_json =
      RunJson({"cache", "invalidate", "--prefix", "user:", "--actor", "gina", "--reason", "INC-8"});
  EXPECT_EQ(refused_json.rc, 3) << refused_json;
  EXPECT_EQ(refused_json.json()["dry_run"], true);
  EXPECT_EQ(refused_json.json()["would_remove"], 3);
  EXPECT_EQ(RunJson({"cache", "count"}).json()["entries"], 126) << "a refusal changes nothing";

  Ran done = RunJson({"cache", "invalidate", "--prefix", "user:", "--yes", "--actor", "gina",
                      "--reason", "INC-8: schema change"});
  ASSERT_EQ(done.rc, 0) << done;
  EXPECT_EQ(done.json()["removed"], 3);
  EXPECT_EQ(done.json()["actor"], "gina");
  // Only keys STARTING with the prefix: users:9, account:user:1 and user
  // stay, and so do the products.
  EXPECT_EQ(RunJson({"cache", "count", "--prefix", "user:"}).json()["entries"], 0);
  EXPECT_EQ(RunJson({"cache", "count", "--prefix", "user"}).json()["entries"], 2);
  EXPECT_EQ(RunJson({"cache", "count", "--prefix", "account:"}).json()["entries"], 1);
  EXPECT_EQ(RunJson({"cache", "count"}).json()["entries"], 123);
  // A prefix is literal: '*' matches no key here.
  Ran star = RunJson(
      {"cache", "invalidate", "--prefix", "*", "--yes", "--actor", "gina", "--reason", "INC-8"});
  ASSERT_EQ(star.rc, 0) << star;
  EXPECT_EQ(star.json()["removed"], 0);
  EXPECT_EQ(RunJson({"cache", "count"}).json()["entries"], 123);
}

TEST_P(CliTest, CacheInvalidateRefusesAFlushAndBadArguments) {
  struct Case {
    std::vector<std::string> args;
    const char* names;
  };
  const std::vector<Case> cases = {
      {{"cache", "invalidate", "--prefix", "", "--yes", "--actor", "gina", "--reason", "x"},
       "--prefix is empty"},
      {{"cache", "invalidate", "--actor", "gina", "--reason", "x"}, "exactly one"},
      {{"cache", "invalidate", "--key", "a", "--prefix", "b", "--actor", "gina", "--reason", "x"},
       "exactly one"},
      {{"cache", "invalidate", "--key", "user:1"}, "--reason"},
      {{"cache", "invalidate", "--key", "user:1", "--actor", "gina", "--reason", "  "}, "blank"},
  };
  for (const Case& c : cases) {
    Ran r = Run(c.args);
    EXPECT_EQ(r.rc, 2) << testing::PrintToString(c.args) << "\n" << r;
    EXPECT_TRUE(r.one_line_error()) << r;
    EXPECT_THAT(r.err, HasSubstr(c.names)) << r;
  }
  if (HasCacheStore(GetParam())) {
    EXPECT_EQ(RunJson({"cache", "count"}).json()["entries"], made_.at("cache")["all"])
        << "nothing was removed";
  }
}

TEST_P(CliTest, PolicyShowGivesEachOverridesReason) {
  Ran r = RunJson({"policy", "show"});
  ASSERT_EQ(r.rc, 0) << r;
  const Json p = r.json();
  ASSERT_THAT(p, SizeIs(2));
  EXPECT_EQ(p[0]["job_type"], "*");
  EXPECT_EQ(p[1]["job_type"], "bulk.import");
  EXPECT_EQ(p[1]["reason"], "imports are re-sent by the partner; see RB-3");
  EXPECT_EQ(p[1]["policy"]["max_attempts"], 2);
  EXPECT_EQ(p[1]["publisher"], "filler-runner");
  Ran t = Run({"policy", "show"});
  EXPECT_THAT(t.out, AllOf(HasSubstr("REASON"), HasSubstr("see RB-3"), HasSubstr("(default)")));
}

TEST_P(CliTest, BadInputGetsOneLineNamingItAndANonZeroCode) {
  struct Case {
    std::vector<std::string> args;
    int rc;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"jobs", "list", "--status", "done"}, 2, "'done' is not a job status"},
      {{"jobs", "list", "--limit", "0"}, 2, "--limit"},
      {{"dlq", "list", "--class", "flaky"}, 2, "'flaky' is not a failure class"},
      {{"dlq", "list", "--since", "yesterday"}, 2, "'yesterday' is not a time"},
      {{"dlq", "list", "--until", "2026-13-01T00:00:00Z"}, 2, "--until"},
      {{"dlq", "purge", "--older-than", "10"}, 2, "'10' is not a duration"},
      {{"dlq", "purge", "--older-than", "3 weeks"}, 2, "is not a duration"},
      {{"jobs", "purge"}, 2, "give --older-than DURATION, --keep N or both"},
      {{"jobs", "purge", "--older-than", "soon"}, 2, "'soon' is not a duration"},
      {{"jobs", "purge", "--keep", "-1"}, 2, "--keep must be 0 or more"},
      {{"jobs", "purge", "--keep", "1", "--status", "running"}, 2, "--status 'running'"},
      {{"jobs", "purge", "--keep", "1", "--dedup-window", "a while"}, 2, "is not a duration"},
      {{"dlq", "replay", "--type", "x", "--rate", "fast", "--actor", "a", "--reason", "r"}, 2,
       "'fast' is not a rate"},
      {{"jobs", "show", "job_nope"}, 1, "job_nope"},
      {{"dlq", "show", "job_nope"}, 1, "job_nope"},
      {{"jobs", "cancel", "job_nope", "--actor", "a", "--reason", "r"}, 1, "job_nope"},
      {{"jobs"}, 2, "subcommand"},
      {{"jobs", "list", "--colour"}, 2, "--colour"},
  };
  for (const Case& c : cases) {
    Ran r = Run(c.args);
    EXPECT_EQ(r.rc, c.rc) << testing::PrintToString(c.args) << "\n" << r;
    EXPECT_TRUE(r.one_line_error()) << testing::PrintToString(c.args) << "\n" << r;
    EXPECT_THAT(r.err, HasSubstr(c.names)) << testing::PrintToString(c.args);
    EXPECT_TRUE(r.out.empty()) << testing::PrintToString(c.args) << "\n" << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CliTest, ::testing::Values("sqlite", "redis", "postgres"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// No store needed: the URL itself is wrong, or the server is not there.
TEST(CliBackendTest, ABadOrUnreachableBackendGetsOneLineAndACode) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::pair<std::string, const char*>> env;
    int rc;
    std::string names;
  };
  const std::string dir = TempDir();
  const std::vector<Case> cases = {
      {{"--backend", "ftp://host/jobs", "stats"}, {}, 2, "ftp"},
      {{"--backend", "sqlite://jobs.db", "stats"}, {}, 2, "sqlite:jobs.db"},
      {{"stats"}, {{"JOBPACT_BACKEND", nullptr}}, 2, "no backend"},
      {{"--backend", "sqlite://" + dir + "/no/such/dir/jobs.db", "stats"}, {}, 1, "no/such/dir"},
#ifdef JOBPACT_CLI_TEST_WITH_REDIS
      // Port 1 on loopback: nothing listens there.
      {{"--backend", "redis://127.0.0.1:1", "stats"}, {}, 1, "127.0.0.1:1"},
#else
      {{"--backend", "redis://127.0.0.1:1", "stats"}, {}, 1, "-DJOBPACT_WITH_REDIS=ON"},
#endif
  };
  for (const Case& c : cases) {
    Ran r = Cli(c.args, c.env);
    EXPECT_EQ(r.rc, c.rc) << testing::PrintToString(c.args) << "\n" << r;
    EXPECT_TRUE(r.one_line_error()) << testing::PrintToString(c.args) << "\n" << r;
    EXPECT_THAT(r.err, HasSubstr(c.names)) << testing::PrintToString(c.args) << "\n" << r;
  }
  std::filesystem::remove_all(dir);
}

TEST(CliHelpTest, HelpDocumentsTheExitCodesAndTheGuardRails) {
  Ran r = Cli({"--help"});
  EXPECT_EQ(r.rc, 0) << r;
  EXPECT_THAT(r.out, AllOf(HasSubstr("Exit codes"), HasSubstr("3  refused by a guard rail"),
                           HasSubstr("$USER"), HasSubstr("more than 100 entries need --yes")));
  Ran sub = Cli({"dlq", "replay", "--help"});
  EXPECT_EQ(sub.rc, 0) << sub;
  EXPECT_THAT(sub.out, AllOf(HasSubstr("--dry-run"), HasSubstr("--keep-attempts"),
                             HasSubstr("--rate"), HasSubstr("--yes")));
}

}  // namespace
