// The hot path's key table: whole-key comparison (a shared hash never merges
// two keys), growth keeping every entry, lengths as part of the key.
#include <catch2/catch.hpp>

#include <vector>

#include "capture/key_table.h"

using lingprobe::capture::hash_words;
using lingprobe::capture::KeyTable;

TEST_CASE("key table: keys with one hash stay apart", "[capture][keys]") {
  KeyTable t;
  const uint64_t a[] = {1, 2, 3}, b[] = {1, 2, 4}, c[] = {1, 2};
  t.insert(42, a, 3, 7);
  t.insert(42, b, 3, 8);  // forced collision
  t.insert(42, c, 2, 9);  // a prefix of both
  REQUIRE(t.find(42, a, 3));
  CHECK(*t.find(42, a, 3) == 7);
  CHECK(*t.find(42, b, 3) == 8);
  CHECK(*t.find(42, c, 2) == 9);
  const uint64_t d[] = {1, 2, 5};
  CHECK(t.find(42, d, 3) == nullptr);
  CHECK(t.find(hash_words(a, 3), a, 3) == nullptr);  // stored under 42, not its real hash
}

TEST_CASE("key table: growth keeps every entry", "[capture][keys]") {
  KeyTable t;
  std::vector<std::vector<uint64_t>> keys;
  for (uint64_t i = 0; i < 5000; ++i) keys.push_back({i, i * i, ~i});
  for (uint32_t i = 0; i < keys.size(); ++i) t.insert(hash_words(keys[i].data(), 3), keys[i].data(), 3, i);
  CHECK(t.size() == 5000);
  bool all = true;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const uint32_t* v = t.find(hash_words(keys[i].data(), 3), keys[i].data(), 3);
    all = all && v && *v == i;
  }
  CHECK(all);
}

TEST_CASE("key table: the hash depends on every word, its order and the length", "[capture][keys]") {
  const uint64_t a[] = {1, 2, 3}, b[] = {3, 2, 1}, z[] = {0, 0};
  CHECK(hash_words(a, 3) != hash_words(b, 3));
  CHECK(hash_words(a, 3) != hash_words(a, 2));
  CHECK(hash_words(z, 1) != hash_words(z, 2));
  CHECK(hash_words(a, 3) == hash_words(a, 3));
}
