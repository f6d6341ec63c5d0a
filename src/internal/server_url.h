// Private: the pieces of a server URL ([user[:password]@]host[:port], the
// query parameters) shared by the URL parsers of the server backends
// (src/backends/redis/redis_url.cc, src/backends/postgres/postgres_url.cc).
// Each backend keeps its own grammar on top; these keep the common rules
// identical: percent-decoding of every part, bracketed IPv6 hosts, each
// parameter at most once, messages that start with the parser's label,
// name the part at fault and never repeat the password.
#ifndef JOBPACT_SRC_INTERNAL_SERVER_URL_H_
#define JOBPACT_SRC_INTERNAL_SERVER_URL_H_

#include <charconv>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "jobpact/result.h"
#include "jobpact/status.h"
#include "src/internal/percent_encoding.h"

namespace jobpact {
namespace internal {

class ServerUrlParser {
 public:
  // `label` starts every message, e.g. "redis URL".
  explicit ServerUrlParser(std::string label) : label_(std::move(label)) {}

  Status Invalid(const std::string& msg) const {
    return Status::InvalidArgument(label_ + ": " + msg);
  }

  static std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

  // `part` percent-decoded; kInvalidArgument for bad encoding or a NUL.
  Result<std::string> Decode(std::string_view part, std::string_view what) const {
    std::size_t bad = 0;
    std::optional<std::string> out = PercentDecode(part, &bad);
    if (!out) {
      return Invalid("bad percent-encoding in the " + std::string(what) +
                     " (a '%' must be followed by two hex digits; write %25 for a '%')");
    }
    if (out->find('\0') != std::string::npos) {
      return Invalid("the " + std::string(what) + " holds a NUL byte (%00)");
    }
    return *out;
  }

  // A decimal integer in [min, max].
  Result<std::int64_t> ParseInt(std::string_view what, std::string_view value, std::int64_t min,
                                std::int64_t max) const {
    std::int64_t v = 0;
    const char* end = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(value.data(), end, v);
    if (value.empty() || ec == std::errc::invalid_argument || ptr != end) {
      return Invalid(std::string(what) + " " + Quoted(value) + " is not an integer");
    }
    if (ec == std::errc::result_out_of_range || v < min || v > max) {
      return Invalid(std::string(what) + " " + Quoted(value) + " is out of range (" +
                     std::to_string(min) + " to " + std::to_string(max) + ")");
    }
    return v;
  }

  // user[:password] (still encoded), decoded into *user and *password.
  Status SplitUserinfo(std::string_view userinfo, std::string* user,
                       std::string* password) const {
    const std::size_t colon = userinfo.find(':');
    JOBPACT_ASSIGN_OR_RETURN(*user, Decode(userinfo.substr(0, colon), "user name"));
    if (colon != std::string_view::npos) {
      JOBPACT_ASSIGN_OR_RETURN(*password, Decode(userinfo.substr(colon + 1), "password"));
    }
    return Status::Ok();
  }

  // host[:port] or [v6addr][:port] (still encoded). The host is decoded
  // into *host (left as it was if empty); a port given sets *port. An
  // empty host is `no_host` (an error message) unless that is empty.
  Status SplitHostPort(std::string_view hostport, std::string* host, int* port,
                       const std::string& no_host, int example_port) const {
    std::string_view h = hostport;
    std::string_view p;
    if (!hostport.empty() && hostport.front() == '[') {
      const std::size_t close = hostport.find(']');
      if (close == std::string_view::npos) {
        return Invalid("the IPv6 address " + Quoted(hostport) + " has no closing ']'");
      }
      h = hostport.substr(1, close - 1);
      std::string_view after = hostport.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') {
          return Invalid("unexpected " + Quoted(after) +
                         " after the IPv6 address (write [addr]:port)");
        }
        p = after.substr(1);
        if (p.empty()) return Invalid("the port after ':' is empty");
      }
    } else if (const std::size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
      h = hostport.substr(0, colon);
      p = hostport.substr(colon + 1);
      if (h.find(':') != std::string_view::npos) {
        return Invalid("the host " + Quoted(hostport) +
                       " has several ':'; write an IPv6 address in brackets, e.g. [::1]:" +
                       std::to_string(example_port));
      }
      if (p.empty()) return Invalid("the port after ':' is empty");
    }
    if (h.empty()) {
      if (!no_host.empty()) return Invalid(no_host);
    } else {
      JOBPACT_ASSIGN_OR_RETURN(*host, Decode(h, "host"));
    }
    if (!p.empty()) {
      JOBPACT_ASSIGN_OR_RETURN(std::int64_t n, ParseInt("the port", p, 1, 65535));
      *port = static_cast<int>(n);
    }
    return Status::Ok();
  }

  // Calls apply(name, value) for each name=value item of `query` (still
  // encoded), decoded; empty items are skipped; a name given twice, an item
  // without '=' or without a name is refused.
  Status ForEachParam(
      std::string_view query,
      const std::function<Status(const std::string& name, const std::string& value)>& apply)
      const {
    std::set<std::string> seen;
    while (!query.empty()) {
      const std::size_t amp = query.find('&');
      const std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (item.empty()) continue;
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        return Invalid("query parameter " + Quoted(item) + " has no value (write name=value)");
      }
      if (eq == 0) return Invalid("query item " + Quoted(item) + " has no name");
      JOBPACT_ASSIGN_OR_RETURN(std::string name,
                               Decode(item.substr(0, eq), "query parameter name"));
      JOBPACT_ASSIGN_OR_RETURN(std::string value,
                               Decode(item.substr(eq + 1), "value of query parameter " + name));
      if (!seen.insert(name).second) {
        return Invalid("query parameter " + Quoted(name) + " is given more than once");
      }
      JOBPACT_RETURN_IF_ERROR(apply(name, value));
    }
    return Status::Ok();
  }

 private:
  const std::string label_;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_SERVER_URL_H_
