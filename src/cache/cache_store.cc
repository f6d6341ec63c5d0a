// What every CacheStore shares (jobpact/cache_store.h).
#include "jobpact/cache_store.h"

#include <algorithm>

namespace jobpact {

TimePoint CacheEntry::expires_at() const {
  return std::max({fresh_until, stale_until, error_until});
}

CacheStore::~CacheStore() = default;

}  // namespace jobpact
