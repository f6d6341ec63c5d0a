// Sha1Hex (client.h): SHA-1 as FIPS 180-4 defines it, for the script
// digests EVALSHA takes. Computed locally so that a script never needs a
// SCRIPT LOAD round trip before its first use. (SHA-1 names scripts here;
// it protects nothing.)
#include <cstdint>
#include <cstring>
#include <string>

#include "src/backends/redis/client.h"

namespace jobpact {
namespace redis_internal {
namespace {

std::uint32_t Rotl(std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

void Block(std::uint32_t h[5], const unsigned char* p) {
  std::uint32_t w[80];
  for (int i = 0; i < 16; ++i) {
    w[i] = (std::uint32_t{p[4 * i]} << 24) | (std::uint32_t{p[4 * i + 1]} << 16) |
           (std::uint32_t{p[4 * i + 2]} << 8) | std::uint32_t{p[4 * i + 3]};
  }
  for (int i = 16; i < 80; ++i) w[i] = Rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int i = 0; i < 80; ++i) {
    std::uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDC;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6;
    }
    const std::uint32_t t = Rotl(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = Rotl(b, 30);
    b = a;
    a = t;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
}

}  // namespace

std::string Sha1Hex(const std::string& data) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::size_t n = data.size();
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) Block(h, p + i);
  // The tail, a 1 bit, zeros, and the length in bits (big-endian, 64 bits).
  unsigned char tail[128] = {};
  const std::size_t rest = n - i;
  std::memcpy(tail, p + i, rest);
  tail[rest] = 0x80;
  const std::size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
  const std::uint64_t bits = static_cast<std::uint64_t>(n) * 8;
  for (int b = 0; b < 8; ++b) {
    tail[tail_len - 1 - b] = static_cast<unsigned char>(bits >> (8 * b));
  }
  Block(h, tail);
  if (tail_len == 128) Block(h, tail + 64);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(40);
  for (std::uint32_t v : h) {
    for (int s = 28; s >= 0; s -= 4) out.push_back(kHex[(v >> s) & 0xF]);
  }
  return out;
}

}  // namespace redis_internal
}  // namespace jobpact
