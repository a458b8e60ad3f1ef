#include "format/sha256.h"

#include <openssl/evp.h>

#include <atomic>
#include <cstdio>
#include <memory>

namespace lingprobe::format {
namespace {

std::string to_hex(const unsigned char* digest, unsigned len) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(len * 2);
  for (unsigned i = 0; i < len; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xF]);
  }
  return hex;
}

struct CtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

std::atomic<void (*)()> g_first_digest_hook{nullptr};
std::atomic<bool> g_digested{false};

// After every digest: the first one runs on_first_digest's callback.
void after_digest() {
  if (g_digested.load(std::memory_order_acquire) || g_digested.exchange(true)) return;
  if (void (*hook)() = g_first_digest_hook.load()) hook();
}

}  // namespace

void on_first_digest(void (*callback)()) {
  g_first_digest_hook.store(callback);
  if (callback && g_digested.load()) callback();  // a digest came first: libcrypto's handler is registered already
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  after_digest();
  return to_hex(digest, len);
}

bool sha256_file_hex(const std::string& path, std::string& hex) {
  hex.clear();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return false;
  std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return false;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf, n);
  if (std::ferror(f.get())) return false;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  after_digest();
  hex = to_hex(digest, len);
  return true;
}

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256Stream::update(const void* data, size_t n) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n); }

std::string Sha256Stream::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &len);
  after_digest();
  return to_hex(digest, len);
}

}  // namespace lingprobe::format
