#include "format/flops.h"

#include <cstring>
#include <string>
#include <vector>

namespace lingprobe::format {
namespace {

// The shape of a tensor object, or false when `v` is not a tensor with a shape.
bool shape_of(const JsonValue* v, std::vector<int64_t>& shape) {
  shape.clear();
  if (!v || v->kind() != JsonValue::Kind::Object) return false;
  const JsonValue* s = v->find("shape");
  if (!s || s->kind() != JsonValue::Kind::Array) return false;
  for (const auto& d : s->items()) {
    if (d.kind() != JsonValue::Kind::Int) return false;
    shape.push_back(d.as_int());
  }
  return true;
}

int64_t prod(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < v.size() && i < to; ++i) p *= v[i];
  return p;
}

const JsonValue* arg(const JsonValue& sig, size_t i) {
  const JsonValue* args = sig.find("args");
  if (!args || args->kind() != JsonValue::Kind::Array || i >= args->items().size()) return nullptr;
  return &args->items()[i];
}

bool is_tensor(const JsonValue* v) { return v && v->kind() == JsonValue::Kind::Object && v->find("dtype"); }

// "aten.linear.default" -> "linear"
std::string base_name(const std::string& op) {
  const size_t a = op.find('.');
  const size_t b = op.find('.', a + 1);
  if (a == std::string::npos) return op;
  return op.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
}

const char* const kDataMovement[] = {"to",
                                     "_to_copy",
                                     "copy_",
                                     "clone",
                                     "contiguous",
                                     "view",
                                     "reshape",
                                     "permute",
                                     "transpose",
                                     "t",
                                     "expand",
                                     "cat",
                                     "stack",
                                     "chunk",
                                     "split",
                                     "slice",
                                     "select",
                                     "narrow",
                                     "squeeze",
                                     "unsqueeze",
                                     "flatten",
                                     "constant_pad_nd",
                                     "pad",
                                     "as_strided",
                                     "unbind",
                                     "_unsafe_view",
                                     "split_with_sizes",
                                     "empty_like",
                                     "zeros_like"};

// nn.MultiheadAttention's fused path (eval, no autograd): in-projections of query [B,L,E] and key/value [B,S,E]
// with their biases, the attention (2BLSE for the scores and 2BLSE for the weighted values, all heads), and the
// out-projection with its bias. Masks are not counted (the fused kernels compute every pair).
std::optional<int64_t> multi_head_attention_flops(const std::vector<int64_t>& q, const std::vector<int64_t>& k) {
  if (q.size() < 2 || k.size() < 2) return std::nullopt;
  const int64_t batch = prod(q, 0, q.size() - 2), l = q[q.size() - 2], e = q.back(), s = k[k.size() - 2];
  const int64_t projections = (2 * e + 1) * e * batch * (2 * l + 2 * s);  // q, k, v and out, each with its bias
  return projections + 4 * batch * l * s * e;
}

}  // namespace

std::optional<int64_t> flops_per_call(const JsonValue& sig) {
  const JsonValue* op_v = sig.find("op");
  if (!op_v || op_v->kind() != JsonValue::Kind::String) return std::nullopt;
  const std::string name = base_name(op_v->as_string());
  const JsonValue* output = sig.find("output");
  std::vector<int64_t> a, b, out;

  for (const char* dm : kDataMovement)
    if (name == dm) return 0;

  if (name == "linear") {
    if (!shape_of(arg(sig, 0), a) || !shape_of(arg(sig, 1), b) || a.empty() || b.size() != 2) return std::nullopt;
    const int64_t m = prod(a, 0, a.size() - 1), k = a.back(), n = b[0];
    const bool bias = is_tensor(arg(sig, 2));
    return 2 * m * n * k + (bias ? m * n : 0);
  }
  if (name == "mm" || name == "matmul") {
    if (!shape_of(arg(sig, 0), a) || !shape_of(output, out) || a.empty()) return std::nullopt;
    return 2 * prod(out) * a.back();
  }
  if (name == "bmm" || name == "baddbmm") {
    const size_t first = name == "baddbmm" ? 1 : 0;
    if (!shape_of(arg(sig, first), a) || !shape_of(arg(sig, first + 1), b) || a.size() != 3 || b.size() != 3)
      return std::nullopt;
    const int64_t mnk = a[0] * a[1] * b[2] * a[2];
    return 2 * mnk + (name == "baddbmm" ? a[0] * a[1] * b[2] : 0);
  }
  if (name == "addmm") {
    if (!shape_of(arg(sig, 1), a) || !shape_of(arg(sig, 2), b) || a.size() != 2 || b.size() != 2) return std::nullopt;
    return 2 * a[0] * b[1] * a[1] + a[0] * b[1];
  }
  if (name == "conv1d" || name == "conv2d" || name == "conv3d" || name == "convolution" || name == "_convolution") {
    if (!shape_of(arg(sig, 1), b) || !shape_of(output, out) || b.size() < 3) return std::nullopt;
    const int64_t per_output = b[1] * prod(b, 2);
    const bool bias = is_tensor(arg(sig, 2));
    return 2 * prod(out) * per_output + (bias ? prod(out) : 0);
  }
  if (name == "scaled_dot_product_attention" || name == "_scaled_dot_product_flash_attention" ||
      name == "_scaled_dot_product_efficient_attention") {
    std::vector<int64_t> q, k, v;
    if (!shape_of(arg(sig, 0), q) || !shape_of(arg(sig, 1), k) || !shape_of(arg(sig, 2), v) || q.size() < 2 ||
        k.size() < 2 || v.size() < 2)
      return std::nullopt;
    const int64_t batch = prod(q, 0, q.size() - 2), l = q[q.size() - 2], e = q.back();
    const int64_t s = k[k.size() - 2], ev = v.back();
    // is_causal (the flash overload's 5th argument, the efficient one's 7th, SDPA's 6th): half the pairs
    const size_t causal_at = name == "_scaled_dot_product_flash_attention"       ? 4
                             : name == "_scaled_dot_product_efficient_attention" ? 6
                                                                                 : 5;
    const JsonValue* causal = arg(sig, causal_at);
    const bool half = causal && causal->kind() == JsonValue::Kind::Bool && causal->as_bool();
    const int64_t full = 2 * batch * l * s * e + 2 * batch * l * s * ev;
    return half ? full / 2 : full;
  }
  if (name == "_native_multi_head_attention") {  // (query, key, value, embed_dim, num_head, qkv_weight, ...)
    if (!shape_of(arg(sig, 0), a) || !shape_of(arg(sig, 1), b)) return std::nullopt;
    return multi_head_attention_flops(a, b);
  }
  if (name == "_transformer_encoder_layer_fwd") {  // nn.TransformerEncoderLayer's fused path: attention and FFN
    std::vector<int64_t> ffn;                      // ffn_weight_1 [F, E], the 15th argument
    if (!shape_of(arg(sig, 0), a) || !shape_of(arg(sig, 14), ffn) || a.size() < 2 || ffn.size() != 2)
      return std::nullopt;
    const auto attention = multi_head_attention_flops(a, a);
    if (!attention) return std::nullopt;
    const int64_t tokens = prod(a, 0, a.size() - 1), e = a.back(), f = ffn[0];
    return *attention + tokens * (4 * e * f + f + e);  // two linears with their biases
  }
  if (name == "add" || name == "sub" || name == "mul" || name == "div") {
    if (!shape_of(output, out)) return std::nullopt;
    return prod(out);
  }
  return std::nullopt;
}

}  // namespace lingprobe::format
