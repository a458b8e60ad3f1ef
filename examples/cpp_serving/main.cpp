// A LibTorch "server" that records its own operator calls through lingprobe's
// C ABI: one DiT-block-shaped forward loop (fused QKV, attention, output
// projection, FFN) with the stage set through lingprobe_stage_push/pop.
//   lingprobe_cpp_serving OUT_DIR [STEPS] [DIM]
#include <ATen/ATen.h>
#include <lingprobe/lingprobe.h>

#include <cstdio>
#include <cstdlib>

namespace {

// RAII helpers of the kind a C++ server wants on top of the C ABI.
struct Stage {
  explicit Stage(const char* name) { lingprobe_stage_push(name); }
  ~Stage() { lingprobe_stage_pop(); }
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
};

at::Tensor block(const at::Tensor& x, const at::Tensor& qkv, const at::Tensor& out, const at::Tensor& up,
                 const at::Tensor& down) {
  auto parts = at::linear(x, qkv).chunk(3, -1);
  auto scores = at::softmax(at::matmul(parts[0], parts[1].transpose(-1, -2)) / 8.0, -1);
  auto h = x + at::linear(at::matmul(scores, parts[2]), out);
  return h + at::linear(at::gelu(at::linear(h, up)), down);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [STEPS] [DIM]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  const int64_t dim = argc > 3 ? std::atoll(argv[3]) : 128;

  lingprobe_options options = {};
  options.struct_size = sizeof options;
  options.use_environment = 1;
  options.out_dir = argv[1];
  options.ops = "aten::linear,aten::matmul";
  const lingprobe_status status = lingprobe_init(&options);
  if (status == LINGPROBE_ERROR_ALREADY_INITIALIZED)  // LD_PRELOAD configured it at load, from the environment
    std::fprintf(stderr, "lingprobe: recording as configured at load (%s)\n", lingprobe_last_error());
  else if (status != LINGPROBE_OK)
    std::fprintf(stderr, "lingprobe: %s (serving on without it)\n", lingprobe_last_error());

  auto x = at::randn({1, 64, dim});
  auto qkv = at::randn({3 * dim, dim}) * 0.02, out = at::randn({dim, dim}) * 0.02;
  auto up = at::randn({4 * dim, dim}) * 0.02, down = at::randn({dim, 4 * dim}) * 0.02;
  for (int i = 0; i < steps; ++i) {
    Stage dit("dit");
    x = block(x, qkv, out, up, down);
  }

  lingprobe_stats stats = {};
  stats.struct_size = sizeof stats;
  lingprobe_get_stats(&stats);
  char path[4096] = {0};
  lingprobe_get_metadata_path(path, sizeof path);
  std::printf("%s\n", path);
  std::fprintf(stderr, "recorded %llu calls, %llu signatures\n", static_cast<unsigned long long>(stats.calls_recorded),
               static_cast<unsigned long long>(stats.signatures));
  return lingprobe_finalize() == LINGPROBE_OK ? 0 : 1;
}
