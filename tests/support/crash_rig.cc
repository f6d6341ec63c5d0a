#include "tests/support/crash_rig.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <thread>

#include "jobpact/job_status.h"
#include "tests/support/crash_worker.h"

namespace jobpact {
namespace crash_testing {
namespace {

pid_t Spawn(const std::string& binary, const std::vector<std::string>& args, const std::string& dir,
            int seq) {
  const std::string err = dir + "/worker-" + std::to_string(seq) + ".stderr";
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `limit` for `pid` to exit; SIGKILLs it after that.
int WaitBounded(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

// SIGKILL and reap: false if `pid` could not be killed.
bool KillNow(pid_t pid) { return kill(pid, SIGKILL) == 0 && waitpid(pid, nullptr, 0) == pid; }

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// What the producers logged (RunProducer, crash_worker.h): the jobs of
// every acknowledged batch, and the batches whose call a kill cut short.
struct Produced {
  std::vector<std::string> acked;
  std::vector<std::vector<std::string>> cut;
};

// Reads every dir/produce-<pid>.log.
Produced ReadProduced(const std::string& dir) {
  Produced out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("produce-", 0) != 0) continue;
    std::vector<std::string> batch;
    bool open_batch = false;
    for (const std::string& line : Lines(entry.path().string())) {
      if (line.rfind("sent", 0) == 0) {
        if (open_batch) out.cut.push_back(batch);  // Never acked: cut short.
        std::istringstream words(line.substr(4));
        batch.assign(std::istream_iterator<std::string>(words), {});
        open_batch = true;
      } else if (line == "acked" && open_batch) {
        out.acked.insert(out.acked.end(), batch.begin(), batch.end());
        open_batch = false;
      }
    }
    if (open_batch) out.cut.push_back(batch);
  }
  return out;
}

// Every acknowledged job is stored, and a cut batch is stored whole or not
// at all. Appends every stored job to *ids and counts the cut batches
// found stored and absent. Returns the problems.
std::vector<std::string> CheckProduced(QueueAdmin& admin, const Produced& produced,
                                       std::vector<std::string>* ids, int* cut_stored,
                                       int* cut_absent) {
  std::vector<std::string> problems;
  for (const std::string& id : produced.acked) {
    Result<JobRecord> rec = admin.Get(id);
    if (!rec.ok()) {
      problems.push_back("acknowledged enqueue of " + id + " lost: " + rec.status().ToString());
    }
    ids->push_back(id);
  }
  for (const std::vector<std::string>& batch : produced.cut) {
    std::size_t stored = 0;
    for (const std::string& id : batch) {
      Result<JobRecord> rec = admin.Get(id);
      if (rec.ok()) {
        ++stored;
      } else if (rec.status().code() != StatusCode::kNotFound) {
        problems.push_back("reading " + id + ": " + rec.status().ToString());
      }
    }
    if (stored == 0) {
      ++*cut_absent;
    } else if (stored == batch.size()) {
      ++*cut_stored;
      ids->insert(ids->end(), batch.begin(), batch.end());
    } else {
      problems.push_back("a batch cut by a kill is stored in part: " + std::to_string(stored) +
                         " of " + std::to_string(batch.size()) + " jobs, first " + batch.front());
    }
  }
  return problems;
}

// One job's stored history, read for what the kills did to it.
struct JobTrace {
  std::vector<pid_t> deliverers;  // PidOfWorker of each delivery, in order.
  std::vector<pid_t> lost_by;     // The deliverer before each lease expiry.
  int claim_waits = 0;            // Requeued "idempotency_in_progress".
};

JobTrace TraceJob(const std::vector<nlohmann::json>& history) {
  JobTrace out;
  for (const nlohmann::json& e : history) {
    if (!e.is_object()) continue;
    const std::string why = e.value("reason", "");
    if (e.value("to", "") == "running")
      out.deliverers.push_back(PidOfWorker(e.value("worker", "")));
    if (why.rfind("lease_expired", 0) == 0) {
      out.lost_by.push_back(out.deliverers.empty() ? -1 : out.deliverers.back());
    }
    if (why == reason::kIdempotencyInProgress) ++out.claim_waits;
  }
  return out;
}

// What RunKillLoopAndCheck says of one job (crash_rig.h). Returns the
// problems.
std::vector<std::string> CheckTrace(const JobRecord& record, const JobTrace& trace,
                                    const std::set<pid_t>& killed, int max_recoveries,
                                    bool leases_lost_to_kills) {
  std::vector<std::string> problems;
  const std::string& id = record.envelope.job_id;
  auto problem = [&](const std::string& what) { problems.push_back(id + ": " + what); };
  if (!IsFinal(record.status) && record.status != JobStatus::kDeadLettered) {
    problem("is " + std::string(JobStatusName(record.status)));
  }
  if (trace.deliverers.empty()) problem("was never delivered");
  if (static_cast<int>(trace.lost_by.size()) != record.lease_recoveries) {
    problem(std::to_string(trace.lost_by.size()) + " lease expiries in the history, " +
            std::to_string(record.lease_recoveries) + " lease recoveries counted");
  }
  if (!leases_lost_to_kills) return problems;
  for (pid_t pid : trace.lost_by) {
    if (killed.count(pid) == 0)
      problem("lost a lease held by " + std::to_string(pid) + ", never killed");
  }
  // Every delivery but the last ended by a lost lease or by the claim a
  // lost worker left behind (its key's own earlier delivery).
  if (!trace.deliverers.empty() &&
      trace.deliverers.size() - 1 !=
          trace.lost_by.size() + static_cast<std::size_t>(trace.claim_waits)) {
    problem(std::to_string(trace.deliverers.size()) + " deliveries, but " +
            std::to_string(trace.lost_by.size()) + " lost leases and " +
            std::to_string(trace.claim_waits) + " claim waits to explain the redeliveries");
  }
  if (trace.claim_waits > 0 && trace.lost_by.empty())
    problem("waited for a claim no lost worker held");
  if (record.status == JobStatus::kDeadLettered) {
    const std::set<pid_t> holders(trace.lost_by.begin(), trace.lost_by.end());
    if (record.reason != reason::kLeaseExpiredRepeatedly) {
      problem("dead-lettered for " + record.reason);
    } else if (record.lease_recoveries != max_recoveries + 1 ||
               static_cast<int>(holders.size()) < max_recoveries + 1) {
      problem("dead-lettered after " + std::to_string(record.lease_recoveries) +
              " lost leases held by " + std::to_string(holders.size()) +
              " distinct killed workers; the cap is " + std::to_string(max_recoveries));
    }
  }
  return problems;
}

// Waits (up to 2 s) until the producer `pid` is inside an EnqueueBatch
// call: the last line of its log is "sent ..." (not "acked"). False if it
// never was in that time (it may have finished).
bool AwaitProducerInCall(const std::string& dir, pid_t pid) {
  const std::string path = dir + "/produce-" + std::to_string(pid) + ".log";
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
    if (size >= 6) {
      char tail[6];
      in.seekg(size - 6);
      in.read(tail, 6);
      if (std::string_view(tail, 6) != "acked\n") return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

}  // namespace

TempDir::TempDir(std::string_view name) {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / (std::string(name) + "_XXXXXX")).string();
  if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty() && getenv("JOBPACT_KEEP_CRASH_DIR") == nullptr) {
    std::filesystem::remove_all(path_, ec);
  }
}

pid_t PidOfWorker(std::string_view worker) {
  constexpr std::string_view kPrefix = "crash-worker-";
  if (worker.substr(0, kPrefix.size()) != kPrefix) return -1;
  return static_cast<pid_t>(std::atol(std::string(worker.substr(kPrefix.size())).c_str()));
}

std::int64_t Pending(const QueueStats& stats) {
  auto count = [&](JobStatus s) {
    auto it = stats.by_status.find(s);
    return it == stats.by_status.end() ? std::int64_t{0} : it->second;
  };
  return count(JobStatus::kQueued) + count(JobStatus::kRunning) + count(JobStatus::kRetryScheduled);
}

KillLoopResult RunKillLoop(const KillLoop& loop) {
  KillLoopResult out;
  const auto started = std::chrono::steady_clock::now();
  std::mt19937 rng(std::random_device{}());
  std::vector<pid_t> workers;
  pid_t producer = -1;
  // Whatever happens, no process outlives the loop.
  struct Reaper {
    std::vector<pid_t>* workers;
    pid_t* producer;
    ~Reaper() {
      for (pid_t pid : *workers) KillNow(pid);
      if (*producer > 0) KillNow(*producer);
    }
  } reaper{&workers, &producer};
  int seq = 0;
  auto spawn_worker = [&] { return Spawn(loop.binary, loop.args, loop.dir, seq++); };
  for (int i = 0; i < loop.workers; ++i) workers.push_back(spawn_worker());
  if (!loop.producer_args.empty())
    producer = Spawn(loop.binary, loop.producer_args, loop.dir, seq++);
  auto kill_and_note = [&](pid_t pid) {
    if (!KillNow(pid)) {
      out.failure = "could not kill process " + std::to_string(pid);
      return false;
    }
    out.killed.insert(pid);
    ++out.kills;
    return true;
  };
  while (std::chrono::steady_clock::now() - started < loop.budget) {
    if (producer > 0) {
      int status = 0;
      if (waitpid(producer, &status, WNOHANG) == producer) {
        producer = -1;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          out.failure = "the producer exited with status " + std::to_string(status) + " (see " +
                        loop.dir + "/worker-*.stderr)";
          return out;
        }
      }
    }
    Result<std::int64_t> pending = loop.pending();
    if (!pending.ok()) {
      out.failure = "reading the pending jobs: " + pending.status().ToString();
      return out;
    }
    if (*pending == 0 && producer < 0) {
      out.done = true;
      break;
    }
    // A worker that died on its own is a failure of the test subject.
    for (pid_t pid : workers) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != 0) {
        out.failure = "worker " + std::to_string(pid) + " exited by itself, status " +
                      std::to_string(status) + " (see " + loop.dir + "/worker-*.stderr)";
        return out;
      }
    }
    if (out.rounds >= loop.max_rounds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const auto spread = std::max<long>(1, (loop.max_pause - loop.min_pause).count());
    std::this_thread::sleep_for(loop.min_pause + std::chrono::milliseconds(rng() % spread));
    const int round = out.rounds++;
    if (producer > 0 && out.producer_kills < loop.producer_kills &&
        AwaitProducerInCall(loop.dir, producer)) {
      if (!kill_and_note(producer)) return out;
      ++out.producer_kills;
      producer = Spawn(loop.binary, loop.producer_args, loop.dir, seq++);
    } else if (round == loop.kill_all_round) {
      for (std::size_t i = static_cast<std::size_t>(loop.spared); i < workers.size(); ++i) {
        if (!kill_and_note(workers[i])) return out;
      }
      for (std::size_t i = static_cast<std::size_t>(loop.spared); i < workers.size(); ++i) {
        workers[i] = spawn_worker();
      }
      out.killed_all_at_once = true;
    } else {
      const std::size_t victim = static_cast<std::size_t>(loop.spared) +
                                 rng() % (workers.size() - static_cast<std::size_t>(loop.spared));
      if (!kill_and_note(workers[victim])) return out;
      workers[victim] = spawn_worker();
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (pid_t pid : workers) kill(pid, SIGTERM);
  std::vector<pid_t> stopping;
  stopping.swap(workers);
  for (pid_t pid : stopping) {
    const int status = WaitBounded(pid, std::chrono::milliseconds(10000));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && out.failure.empty()) {
      out.failure = "worker " + std::to_string(pid) + " did not shut down cleanly, status " +
                    std::to_string(status);
    }
  }
  return out;
}

StartupKillsResult KillDuringStartup(const StartupKills& startup) {
  StartupKillsResult out;
  std::mt19937 rng(std::random_device{}());
  double delay_ms = 1;
  for (int round = 0; round < startup.max_rounds && out.inside_open < startup.inside_open;
       ++round) {
    const pid_t pid = Spawn(startup.binary, startup.args, startup.dir, 10000 + round);
    // The moment of the kill: the adaptive delay, jittered by +-50%.
    const double jitter = 0.5 + static_cast<double>(rng() % 1000) / 1000.0;
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<long>(delay_ms * jitter * 1000)));
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      out.failure = "a worker exited by itself during startup, status " + std::to_string(status) +
                    " (see " + startup.dir + "/worker-" + std::to_string(10000 + round) +
                    ".stderr)";
      return out;
    }
    if (!KillNow(pid)) {
      out.failure = "could not kill process " + std::to_string(pid);
      return out;
    }
    out.killed.insert(pid);
    ++out.kills;
    const std::vector<std::string> log =
        Lines(startup.dir + "/open-" + std::to_string(pid) + ".log");
    const bool opening = std::find(log.begin(), log.end(), "opening") != log.end();
    const bool opened = std::find(log.begin(), log.end(), "opened") != log.end();
    if (!opening) {
      delay_ms = delay_ms * 1.5 + 1;  // Too early: not yet at Open.
    } else if (opened) {
      delay_ms = std::max(0.5, delay_ms * 0.7);  // Too late: Open was done.
    } else {
      ++out.inside_open;
    }
  }
  return out;
}

std::string KillWhileOpening(const std::string& binary, const std::vector<std::string>& args,
                             const std::string& dir, StartupKillsResult* result) {
  StartupKills startup;
  startup.binary = binary;
  startup.args = args;
  startup.dir = dir;
  *result = KillDuringStartup(startup);
  if (!result->failure.empty()) return result->failure;
  if (result->inside_open == 0) {
    return "no kill landed inside Open in " + std::to_string(result->kills) + " kills";
  }
  return "";
}

Result<std::vector<std::string>> EnqueueJobs(QueueBackend& queue, Clock& clock, int count,
                                             const std::function<std::string(int)>& type_of) {
  std::vector<std::string> ids;
  ids.reserve(static_cast<std::size_t>(count));
  for (int first = 0; first < count; first += 500) {
    std::vector<Envelope> envs;
    for (int n = first; n < std::min(count, first + 500); ++n) {
      envs.push_back(CrashJob(type_of(n), n, clock.Now()));
      ids.push_back(envs.back().job_id);
    }
    JOBPACT_ASSIGN_OR_RETURN(std::vector<EnqueueResult> r, queue.EnqueueBatch(envs, {}));
    (void)r;
  }
  return ids;
}

std::string CrashOutcome::Summary() const {
  std::ostringstream out;
  out << ids.size() << " jobs, " << run.kills << " kills in " << run.rounds << " rounds ("
      << run.producer_kills << " of the producer, " << (run.killed_all_at_once ? "one" : "no")
      << " round of every worker), " << redelivered_jobs << " jobs redelivered (" << redeliveries
      << " redeliveries, " << claim_waits << " for a lost claim), " << succeeded.size()
      << " succeeded, " << dead_lettered << " dead-lettered, cut batches " << cut_stored
      << " stored / " << cut_absent << " absent, " << run.seconds << " s";
  return out.str();
}

CrashOutcome RunKillLoopAndCheck(const KillLoop& loop, QueueAdmin& admin,
                                 std::vector<std::string> ids, const RawHistory& history,
                                 int max_recoveries, bool leases_lost_to_kills) {
  CrashOutcome out;
  out.run = RunKillLoop(loop);
  if (!out.run.failure.empty()) {
    out.problems.push_back(out.run.failure);
    return out;
  }
  if (!out.run.done) {
    out.problems.push_back("jobs still pending after " + std::to_string(out.run.seconds) + " s");
    return out;
  }
  out.ids = std::move(ids);
  const std::vector<std::string> produced =
      CheckProduced(admin, ReadProduced(loop.dir), &out.ids, &out.cut_stored, &out.cut_absent);
  out.problems.insert(out.problems.end(), produced.begin(), produced.end());
  for (const std::string& id : out.ids) {
    Result<JobRecord> rec = admin.Get(id);
    Result<std::vector<nlohmann::json>> entries = rec.ok() ? history(id) : rec.status();
    if (!entries.ok()) {
      out.problems.push_back(id + ": " + entries.status().ToString());
      continue;
    }
    const JobTrace trace = TraceJob(*entries);
    const std::vector<std::string> job =
        CheckTrace(*rec, trace, out.run.killed, max_recoveries, leases_lost_to_kills);
    out.problems.insert(out.problems.end(), job.begin(), job.end());
    if (rec->status == JobStatus::kSucceeded) out.succeeded.insert(id);
    if (rec->status == JobStatus::kDeadLettered) ++out.dead_lettered;
    if (!trace.deliverers.empty()) out.last_deliverer[id] = trace.deliverers.back();
    if (trace.deliverers.size() > 1) {
      ++out.redelivered_jobs;
      out.redeliveries += static_cast<int>(trace.deliverers.size()) - 1;
    }
    out.claim_waits += trace.claim_waits;
  }
  return out;
}

}  // namespace crash_testing
}  // namespace jobpact
