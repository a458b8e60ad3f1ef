#include <catch2/catch.hpp>

#include <string>

#include "format/flops.h"
#include "format/json_parse.h"

using lingprobe::format::flops_per_call;
using lingprobe::format::parse_json;

namespace {
std::optional<int64_t> flops(const char* sig) {
  auto p = parse_json(sig);
  REQUIRE(p.status.ok());
  return flops_per_call(p.value);
}
std::optional<int64_t> flops(const std::string& sig) { return flops(sig.c_str()); }
}  // namespace

TEST_CASE("linear FLOPs for the seed's DiT shapes, bias included", "[flops]") {
  // [1,2640,5120] x [5120,5120]^T + bias: M=2640, N=5120, K=5120.
  // 2*M*N*K = 2*2640*5120*5120 = 138,412,032,000; bias M*N = 13,516,800.
  CHECK(
      flops(
          R"({"op":"aten.linear.default","args":[{"dtype":"torch.bfloat16","shape":[1,2640,5120],"stride":[13516800,5120,1]},
      {"dtype":"torch.bfloat16","shape":[5120,5120],"stride":[5120,1]},{"dtype":"torch.bfloat16","shape":[5120],"stride":[1]}],
      "kwargs":{},"output":{"dtype":"torch.bfloat16","shape":[1,2640,5120],"stride":[13516800,5120,1]},"stage":"dit"})") ==
      138425548800);
  // Patch embed Linear(144,5120) on [10560,144]: 2*10560*144*5120 + 10560*5120 = 15,625,420,800.
  CHECK(flops(R"({"op":"aten.linear.default","args":[{"dtype":"torch.bfloat16","shape":[10560,144],"stride":[144,1]},
      {"dtype":"torch.bfloat16","shape":[5120,144],"stride":[144,1]},{"dtype":"torch.bfloat16","shape":[5120],"stride":[1]}],
      "kwargs":{},"output":null,"stage":"dit"})") == 15625420800);
  // Without bias: no M*N term.
  CHECK(flops(R"({"op":"aten.linear.default","args":[{"dtype":"torch.float32","shape":[4,8],"stride":[8,1]},
      {"dtype":"torch.float32","shape":[16,8],"stride":[8,1]}],"kwargs":{},"output":null,"stage":"s"})") ==
        2 * 4 * 16 * 8);
}

TEST_CASE("conv3d FLOPs for a seed VAE shape", "[flops]") {
  // out [1,384,1,88,40] = 1,351,680 elements; per element C_in*kt*kh*kw = 384*27 = 10,368 MACs.
  // 2 * 1,351,680 * 10,368 = 28,028,436,480, + bias 1,351,680 = 28,029,788,160.
  CHECK(
      flops(
          R"({"op":"aten.conv3d.default","args":[{"dtype":"torch.float32","shape":[1,384,3,90,42],"stride":[4354560,11340,3780,42,1]},
      {"dtype":"torch.float32","shape":[384,384,3,3,3],"stride":[10368,27,9,3,1]},{"dtype":"torch.float32","shape":[384],"stride":[1]}],
      "kwargs":{},"output":{"dtype":"torch.float32","shape":[1,384,1,88,40],"stride":[1351680,3520,3520,40,1]},"stage":"vae"})") ==
      28029788160);
  // time_conv (3,1,1) 384->768 on [1,384,4,176,80] -> [1,768,2,176,80]: 2*21,626,880*1,152 + 21,626,880.
  CHECK(
      flops(
          R"({"op":"aten.conv3d.default","args":[{"dtype":"torch.float32","shape":[1,384,4,176,80],"stride":[1,1,1,1,1]},
      {"dtype":"torch.float32","shape":[768,384,3,1,1],"stride":[1,1,1,1,1]},{"dtype":"torch.float32","shape":[768],"stride":[1]}],
      "kwargs":{},"output":{"dtype":"torch.float32","shape":[1,768,2,176,80],"stride":[1,1,1,1,1]},"stage":"vae"})") ==
      2LL * 21626880 * 1152 + 21626880);
}

TEST_CASE("data movement is 0, unknown ops are null, other formulas", "[flops]") {
  CHECK(
      flops(
          R"({"op":"aten.to.dtype","args":[{"dtype":"torch.float32","shape":[1,3,9,704,1280],"stride":[1,1,1,1,1]},"torch.uint8"],
      "kwargs":{},"output":{"dtype":"torch.uint8","shape":[1,3,9,704,1280],"stride":[1,1,1,1,1]},"stage":"output"})") ==
      0);
  CHECK_FALSE(flops(R"({"op":"aten.softmax.int","args":[],"kwargs":{},"output":null,"stage":"s"})").has_value());
  CHECK_FALSE(flops(R"({"op":"aten.linear.default","args":[null],"kwargs":{},"output":null,"stage":"s"})").has_value());
  CHECK(
      flops(
          R"({"op":"aten.mm.default","args":[{"dtype":"f","shape":[4,8],"stride":[8,1]},{"dtype":"f","shape":[8,16],"stride":[16,1]}],
      "kwargs":{},"output":{"dtype":"f","shape":[4,16],"stride":[16,1]},"stage":"s"})") == 2 * 4 * 16 * 8);
  CHECK(
      flops(
          R"({"op":"aten.bmm.default","args":[{"dtype":"f","shape":[3,4,8],"stride":[1,1,1]},{"dtype":"f","shape":[3,8,16],"stride":[1,1,1]}],
      "kwargs":{},"output":null,"stage":"s"})") == 2 * 3 * 4 * 16 * 8);
  CHECK(
      flops(
          R"({"op":"aten.addmm.default","args":[{"dtype":"f","shape":[16],"stride":[1]},{"dtype":"f","shape":[4,8],"stride":[8,1]},
      {"dtype":"f","shape":[8,16],"stride":[16,1]}],"kwargs":{},"output":null,"stage":"s"})") ==
      2 * 4 * 16 * 8 + 4 * 16);
  // SDPA [1,40,2640,128] q/k/v: QK^T and PV, 2*B*H*L*S*E each.
  CHECK(
      flops(
          R"({"op":"aten.scaled_dot_product_attention.default","args":[{"dtype":"f","shape":[1,40,2640,128],"stride":[1,1,1,1]},
      {"dtype":"f","shape":[1,40,2640,128],"stride":[1,1,1,1]},{"dtype":"f","shape":[1,40,2640,128],"stride":[1,1,1,1]}],
      "kwargs":{},"output":null,"stage":"s"})") == 4LL * 40 * 2640 * 2640 * 128);
  // Causal (is_causal=True, SDPA's 6th argument): half of it.
  CHECK(
      flops(
          R"({"op":"aten.scaled_dot_product_attention.default","args":[{"dtype":"f","shape":[1,8,64,32],"stride":[1,1,1,1]},
      {"dtype":"f","shape":[1,8,64,32],"stride":[1,1,1,1]},{"dtype":"f","shape":[1,8,64,32],"stride":[1,1,1,1]},null,0.0,true],
      "kwargs":{"scale":null},"output":null,"stage":"s"})") == 2LL * 8 * 64 * 64 * 32);
}

TEST_CASE("the fused attention paths of nn.MultiheadAttention and nn.TransformerEncoderLayer", "[flops]") {
  // A new user's ViT (torchvision, eval, no autograd) ran its attention as _native_multi_head_attention: 71% of its
  // encoder's time with no formula, so the FLOP shares and the sample plan left it out.
  // Self-attention, query = key = value [2,17,64]: four projections of 34 tokens with their biases, then 2BLSE twice.
  const int64_t self_attention = 4 * (2 * 34 * 64 * 64 + 34 * 64) + 4 * 2 * 17 * 17 * 64;
  CHECK(flops(R"({"op":"aten._native_multi_head_attention.default","args":[
      {"dtype":"f","shape":[2,17,64],"stride":[1088,64,1]},{"dtype":"f","shape":[2,17,64],"stride":[1088,64,1]},
      {"dtype":"f","shape":[2,17,64],"stride":[1088,64,1]},64,4,{"dtype":"f","shape":[192,64],"stride":[64,1]},
      {"dtype":"f","shape":[192],"stride":[1]},{"dtype":"f","shape":[64,64],"stride":[64,1]},
      {"dtype":"f","shape":[64],"stride":[1]},null,false,true,null],"kwargs":{},"output":null,"stage":"s"})") ==
        self_attention);
  // Cross-attention, query [1,10,32] against key/value [1,20,32]: q and out over 10 tokens, k and v over 20.
  CHECK(flops(R"({"op":"aten._native_multi_head_attention.default","args":[
      {"dtype":"f","shape":[1,10,32],"stride":[320,32,1]},{"dtype":"f","shape":[1,20,32],"stride":[640,32,1]},
      {"dtype":"f","shape":[1,20,32],"stride":[640,32,1]},32,2,{"dtype":"f","shape":[96,32],"stride":[32,1]},
      {"dtype":"f","shape":[96],"stride":[1]},{"dtype":"f","shape":[32,32],"stride":[32,1]},
      {"dtype":"f","shape":[32],"stride":[1]},null,false,true,null],"kwargs":{},"output":null,"stage":"s"})") ==
        2 * (2 * 10 * 32 * 32 + 10 * 32) + 2 * (2 * 20 * 32 * 32 + 20 * 32) + 4 * 10 * 20 * 32);
  // The encoder layer [2,17,64] with an FFN of 128 (ffn_weight_1 [128,64], its 15th argument): the attention above
  // and two linears with their biases over 34 tokens.
  const char* t = R"({"dtype":"f","shape":[64],"stride":[1]})";
  const std::string layer =
      std::string(
          R"({"op":"aten._transformer_encoder_layer_fwd.default","args":[)"
          R"({"dtype":"f","shape":[2,17,64],"stride":[1088,64,1]},64,4,{"dtype":"f","shape":[192,64],"stride":[64,1]},)"
          R"({"dtype":"f","shape":[192],"stride":[1]},{"dtype":"f","shape":[64,64],"stride":[64,1]},)") +
      t + ",false,false,1e-05," + t + "," + t + "," + t + "," + t +
      R"(,{"dtype":"f","shape":[128,64],"stride":[64,1]},{"dtype":"f","shape":[128],"stride":[1]},)"
      R"({"dtype":"f","shape":[64,128],"stride":[128,1]},)" +
      t + R"(,null,null],"kwargs":{},"output":null,"stage":"s"})";
  CHECK(flops(layer.c_str()) == self_attention + 34 * (2 * 64 * 128 + 128 + 2 * 128 * 64 + 64));
}

TEST_CASE("in-place elementwise ops, transposed convolutions and the convolution's backward", "[flops]") {
  // an optimizer's p.add_(grad, alpha=-lr): numel(out), as add
  CHECK(flops(R"({"op":"aten.add_.Tensor","args":[{"dtype":"f","shape":[16,8],"stride":[8,1]},
      {"dtype":"f","shape":[16,8],"stride":[8,1]}],"kwargs":{"alpha":-0.1},
      "output":{"dtype":"f","shape":[16,8],"stride":[8,1]},"stage":"s"})") == 128);
  CHECK(flops(R"({"op":"aten.mul_.Scalar","args":[{"dtype":"f","shape":[5],"stride":[1]},0.5],"kwargs":{},
      "output":{"dtype":"f","shape":[5],"stride":[1]},"stage":"s"})") == 5);
  // ConvTranspose2d 8 -> 4 channels, kernel 3x3, stride 2: weight [8,4,3,3], input [2,8,5,5] -> [2,4,11,11].
  // Each input element meets C_out * 9 weights: 2 * 400 * 36, with the bias numel(out).
  const char* transposed_input = R"({"dtype":"f","shape":[2,8,5,5],"stride":[200,25,5,1]},
      {"dtype":"f","shape":[8,4,3,3],"stride":[36,9,3,1]})";
  const char* transposed_out = R"("output":{"dtype":"f","shape":[2,4,11,11],"stride":[484,121,11,1]},"stage":"s"})";
  CHECK(flops(std::string(R"({"op":"aten.conv_transpose2d.input","args":[)") + transposed_input +
              R"(,{"dtype":"f","shape":[4],"stride":[1]},[2,2]],"kwargs":{},)" + transposed_out) ==
        2 * 400 * 36 + 2 * 4 * 121);
  CHECK(flops(std::string(R"({"op":"aten.convolution.default","args":[)") + transposed_input +
              R"(,null,[2,2],[0,0],[1,1],true,[0,0],1],"kwargs":{},)" + transposed_out) == 2 * 400 * 36);
  // The same arguments with transposed=false count per output element (the weight's dim 1 is then C_in/groups).
  CHECK(flops(std::string(R"({"op":"aten.convolution.default","args":[)") + transposed_input +
              R"(,null,[2,2],[0,0],[1,1],false,[0,0],1],"kwargs":{},)" + transposed_out) == 2 * 968 * 36);
  // convolution_backward of a conv2d 3 -> 16, kernel 3x3, output [2,16,8,8]: grad_input and grad_weight each the
  // forward's 2 * 2048 * 27, grad_bias 2048, as output_mask asks.
  const std::string backward =
      R"({"op":"aten.convolution_backward.default","args":[{"dtype":"f","shape":[2,16,8,8],"stride":[1024,64,8,1]},
      {"dtype":"f","shape":[2,3,10,10],"stride":[300,100,10,1]},{"dtype":"f","shape":[16,3,3,3],"stride":[27,9,3,1]},
      [16],[1,1],[0,0],[1,1],false,[0,0],1,)";
  const char* rest = R"(],"kwargs":{},"output":null,"stage":"s"})";
  CHECK(flops(backward + "[true,true,true]" + rest) == 2 * (2 * 2048 * 27) + 2048);
  CHECK(flops(backward + "[false,true,false]" + rest) == 2 * 2048 * 27);
  CHECK_FALSE(flops(backward + "null" + rest).has_value());
}

TEST_CASE("the attention backward ops count four products, twice the forward", "[flops]") {
  const std::string t = R"({"dtype":"bf16","shape":[2,8,128,64],"stride":[1,1,1,1]})";
  const int64_t forward = 2LL * 16 * 128 * 128 * 64 * 2;  // QK^T and PV over B*H = 16
  // flash backward: (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
  // is_causal, philox_seed, philox_offset)
  const std::string flash = R"({"op":"aten._scaled_dot_product_flash_attention_backward.default","args":[)" + t + "," +
                            t + "," + t + "," + t + "," + t +
                            R"(,{"dtype":"f32","shape":[2,8,128],"stride":[1,1,1]},)" + R"(null,null,128,128,0.0,)";
  const char* rest = R"(,null,null],"kwargs":{"scale":null},"output":null,"stage":"s"})";
  CHECK(flops(flash + "false" + rest) == 2 * forward);
  CHECK(flops(flash + "true" + rest) == forward);  // causal: half
  // efficient backward (torch 2.1+): (grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed,
  // philox_offset, dropout_p, grad_input_mask, is_causal)
  const std::string efficient = R"({"op":"aten._scaled_dot_product_efficient_attention_backward.default","args":[)" +
                                t + "," + t + "," + t + "," + t + ",null," + t +
                                R"(,{"dtype":"f32","shape":[2,8,128],"stride":[1,1,1]},null,null,0.0,)" +
                                R"([true,true,true,false],true],"kwargs":{},"output":null,"stage":"s"})";
  CHECK(flops(efficient) == forward);
}

TEST_CASE("a call that raised did no work: 0 FLOPs, whatever its arguments", "[flops]") {
  const std::string mm =
      R"({"op":"aten.mm.default","args":[{"dtype":"f","shape":[4,8],"stride":[8,1]},{"dtype":"f","shape":[9,16],"stride":[16,1]}],
      "kwargs":{},"output":OUT,"stage":"s"})";
  auto with_output = [&](const std::string& out) { return std::string(mm).replace(mm.find("OUT"), 3, out); };
  CHECK(flops(with_output(R"({"raised":true})")) == 0);
  CHECK(flops(with_output(R"({"dtype":"f","shape":[4,16],"stride":[16,1]})")) == 2 * 4 * 16 * 8);
  CHECK(flops(R"({"op":"aten.linear.default","args":[{"dtype":"f","shape":[4,8],"stride":[8,1]},
      {"dtype":"f","shape":[16,9],"stride":[9,1]}],"kwargs":{},"output":{"raised":true},"stage":"s"})") == 0);
}

TEST_CASE("shapes whose FLOPs would not fit in 64 bits, or negative ones, have no count (never a wrapped one)",
          "[flops]") {
  // a corrupt or hand-edited metadata file can hold any int64 as a dimension: the products used to overflow
  // (undefined behaviour; a wrapped, possibly negative count in the report)
  const std::string big = "3037000500";  // its square is just over 2^63
  CHECK_FALSE(flops(R"({"op":"aten.linear.default","args":[{"dtype":"f","shape":[)" + big + "," + big +
                    R"(],"stride":[1,1]},{"dtype":"f","shape":[4,)" + big + R"(],"stride":[1,1]},null],
      "kwargs":{},"output":null,"stage":"s"})")
                  .has_value());
  CHECK_FALSE(flops(R"({"op":"aten.mul.Tensor","args":[],"kwargs":{},"output":{"dtype":"f","shape":[)" + big + "," +
                    big + R"(],"stride":[1,1]},"stage":"s"})")
                  .has_value());
  CHECK_FALSE(flops(R"({"op":"aten.mul.Tensor","args":[],"kwargs":{},"output":{"dtype":"f","shape":[-4,8],
      "stride":[1,1]},"stage":"s"})")
                  .has_value());
  // the largest square that fits still counts, exactly (3037000499^2 < 2^63 - 1)
  CHECK(flops(R"({"op":"aten.mul.Tensor","args":[],"kwargs":{},"output":{"dtype":"f","shape":[3037000499,
      3037000499],"stride":[1,1]},"stage":"s"})") == 9223372030926249001LL);
  // an empty tensor counts 0, however large its other dimensions
  CHECK(flops(R"({"op":"aten.mul.Tensor","args":[],"kwargs":{},"output":{"dtype":"f","shape":[)" + big + "," + big +
              R"(,0],"stride":[1,1,1]},"stage":"s"})") == 0);
  // a convolution backward whose shapes have no formula has no count, whatever its output mask asks
  CHECK_FALSE(flops(R"({"op":"aten.convolution_backward.default","args":[{"dtype":"f","shape":[2,4],"stride":[1,1]},
      {"dtype":"f","shape":[2,3],"stride":[1,1]},{"dtype":"f","shape":[4,3],"stride":[1,1]},null,[1],[0],[1],false,
      [0],1,[false,false,true]],"kwargs":{},"output":null,"stage":"s"})")
                  .has_value());
  std::string sdpa = R"({"op":"aten.scaled_dot_product_attention.default","args":[)";
  for (int i = 0; i < 3; ++i)
    sdpa += std::string(i ? "," : "") + R"({"dtype":"f","shape":[1,1,)" + big + R"(,128],"stride":[1,1,1,1]})";
  CHECK_FALSE(flops(sdpa + R"(],"kwargs":{},"output":null,"stage":"s"})").has_value());
}
