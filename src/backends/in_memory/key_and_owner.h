// KeyAndOwner: the key and the owner of an entry of the in-memory lock and
// idempotency stores, in one heap block. An entry then costs one allocation
// for its two strings (and none for itself: the tables hold entries by
// value), and its key view stays put while the entry lives, however the
// table moves the entry, so the table is keyed by that view and a lookup by
// string_view never allocates.
//
// Thread-compatible.
#ifndef JOBPACT_SRC_BACKENDS_IN_MEMORY_KEY_AND_OWNER_H_
#define JOBPACT_SRC_BACKENDS_IN_MEMORY_KEY_AND_OWNER_H_

#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>

namespace jobpact {
namespace internal {

class KeyAndOwner {
 public:
  // Copies both. May throw std::bad_alloc.
  KeyAndOwner(std::string_view key, std::string_view owner)
      : bytes_(new char[key.size() + owner.size()]),
        key_size_(key.size()),
        owner_size_(owner.size()) {
    if (!key.empty()) std::memcpy(bytes_.get(), key.data(), key.size());
    if (!owner.empty()) std::memcpy(bytes_.get() + key.size(), owner.data(), owner.size());
  }

  std::string_view key() const { return std::string_view(bytes_.get(), key_size_); }
  std::string_view owner() const { return std::string_view(bytes_.get() + key_size_, owner_size_); }

 private:
  std::unique_ptr<char[]> bytes_;  // The key, then the owner; never null.
  std::size_t key_size_;
  std::size_t owner_size_;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_IN_MEMORY_KEY_AND_OWNER_H_
