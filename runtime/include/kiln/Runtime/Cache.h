//===- Cache.h - Kiln's on-disk caches: folder and key hash -----*- C++ -*-===//
//
// The compiler caches plans (kiln train, kiln explain) and the CUDA backend
// compiled kernels, both in one folder and both keyed by FNV-1a hashes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CACHE_H
#define KILN_RUNTIME_CACHE_H

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace kiln::runtime {

/// FNV-1a (64 bits) of `text`, continuing from `h`: a cache key, not a
/// defence against collisions made on purpose (the cache is the user's).
inline uint64_t fnv1a(std::string_view text,
                      uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln, else
/// /tmp/kiln-cache.
inline std::string kilnCacheDir() {
  if (const char *dir = std::getenv("KILN_CACHE_DIR"))
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"))
    return std::string(xdg) + "/kiln";
  if (const char *home = std::getenv("HOME"))
    return std::string(home) + "/.cache/kiln";
  return "/tmp/kiln-cache";
}

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CACHE_H
