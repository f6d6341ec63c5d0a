#include "src/runner/job_logger.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <string>

namespace jobpact {
namespace internal {
namespace {

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::string_view LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "info";
}

std::shared_ptr<spdlog::logger> GetOrCreateLogger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  try {
    auto created = spdlog::stderr_color_mt(name);
    // Our own threshold (options.log_level) filters; the logger we own lets
    // everything through so that it is the only knob.
    created->set_level(spdlog::level::trace);
    return created;
  } catch (const spdlog::spdlog_ex&) {
    // Another runner registered it between get() and create: use theirs.
    if (auto existing = spdlog::get(name)) return existing;
    return std::make_shared<spdlog::logger>(name);
  }
}

// logfmt: bare when the value is a plain token, quoted (with escaped quotes and
// backslashes) otherwise, so that any line splits back into its fields.
void AppendTextValue(std::string& out, std::string_view v) {
  bool plain = !v.empty();
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      plain = false;
      break;
    }
  }
  if (plain) {
    out.append(v);
    return;
  }
  out.push_back('"');
  for (char c : v) {
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        out.push_back(c);
    }
  }
  out.push_back('"');
}

void AppendText(std::string& out, std::string_view key, std::string_view value) {
  out.push_back(' ');
  out.append(key);
  out.push_back('=');
  AppendTextValue(out, value);
}

}  // namespace

JobLogger::JobLogger(const std::string& name, LogLevel level, bool json,
                     std::shared_ptr<Clock> clock)
    : logger_(GetOrCreateLogger(name)),
      level_(level),
      json_(json),
      name_(name),
      clock_(std::move(clock)) {
  if (json_) logger_->set_pattern("%v");
}

bool JobLogger::Enabled(LogLevel level) const {
  return level != LogLevel::kOff && level >= level_ && logger_->should_log(ToSpdlog(level));
}

void JobLogger::Log(LogLevel level, std::string_view event, const Envelope* env,
                    std::initializer_list<LogField> fields) const {
  if (!Enabled(level)) return;
  Write(level, event, env, fields.begin(), fields.end());
}

void JobLogger::Log(LogLevel level, std::string_view event, const Envelope* env,
                    const std::vector<LogField>& fields) const {
  if (!Enabled(level)) return;
  Write(level, event, env, fields.data(), fields.data() + fields.size());
}

void JobLogger::Write(LogLevel level, std::string_view event, const Envelope* env,
                      const LogField* begin, const LogField* end) const {
  try {
    std::string line;
    if (json_) {
      // ordered_json keeps the fields in the order written, so that the
      // identity fields come first, as in text mode.
      nlohmann::ordered_json j;
      j["ts"] = FormatRfc3339(clock_->Now());
      j["level"] = LevelName(level);
      j["logger"] = name_;
      j["event"] = event;
      if (env != nullptr) {
        j["job_id"] = env->job_id;
        j["job_type"] = env->job_type;
        j["attempt"] = env->attempt;
        j["max_attempts"] = env->max_attempts;
        j["trace_id"] = env->trace_id;
        if (!env->idempotency_key.empty()) j["idempotency_key"] = env->idempotency_key;
      }
      for (const LogField* f_it = begin; f_it != end; ++f_it) {
        const LogField& f = *f_it;
        std::string key(f.key);
        switch (f.kind) {
          case LogField::Kind::kString:
            j[key] = f.str;
            break;
          case LogField::Kind::kInt:
            j[key] = f.i;
            break;
          case LogField::Kind::kDouble:
            j[key] = f.d;
            break;
        }
      }
      // `replace` keeps a line whose payload-derived text is not valid UTF-8.
      line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } else {
      line.reserve(192);
      line.append(event);
      if (env != nullptr) {
        AppendText(line, "job_id", env->job_id);
        AppendText(line, "job_type", env->job_type);
        AppendText(line, "attempt", std::to_string(env->attempt));
        AppendText(line, "max_attempts", std::to_string(env->max_attempts));
        AppendText(line, "trace_id", env->trace_id);
        if (!env->idempotency_key.empty()) {
          AppendText(line, "idempotency_key", env->idempotency_key);
        }
      }
      for (const LogField* f_it = begin; f_it != end; ++f_it) {
        const LogField& f = *f_it;
        switch (f.kind) {
          case LogField::Kind::kString:
            AppendText(line, f.key, f.str);
            break;
          case LogField::Kind::kInt:
            AppendText(line, f.key, std::to_string(f.i));
            break;
          case LogField::Kind::kDouble:
            AppendText(line, f.key, fmt::format("{:.6g}", f.d));
            break;
        }
      }
    }
    logger_->log(ToSpdlog(level), "{}", line);
  } catch (...) {
    // A log line is never worth failing a job for (out of memory, a throwing
    // user sink that spdlog did not catch).
  }
}

}  // namespace internal
}  // namespace jobpact
