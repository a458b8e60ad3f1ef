#include "format/flops.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "format/signature_fields.h"

namespace lingprobe::format {
namespace {

// A count that cannot wrap: dimensions come from files, where a corrupt or hand-edited one can hold any int64, so a
// negative factor or a product or sum past 2^63 - 1 leaves no count (nullopt), never an overflow.
class Count {
 public:
  Count(int64_t v = 0) : v_(v), known_(v >= 0) {}  // NOLINT: an int is a count
  static Count unknown() {
    Count c;
    c.known_ = false;
    return c;
  }
  friend Count operator*(Count a, Count b) {
    Count r;
    r.known_ = a.known_ && b.known_ && !__builtin_mul_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend Count operator+(Count a, Count b) {
    Count r;
    r.known_ = a.known_ && b.known_ && !__builtin_add_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend Count operator/(Count a, int64_t d) { return a.known_ ? Count(a.v_ / d) : a; }
  bool known() const { return known_; }
  operator std::optional<int64_t>() const {  // NOLINT: the result
    return known_ ? std::optional<int64_t>(v_) : std::nullopt;
  }

 private:
  int64_t v_;
  bool known_;
};

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

// The product of v[from, to): unknown with a negative factor, 0 with a zero one (an empty tensor, whatever the
// others), unknown past 2^63 - 1.
Count prod(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, v.size());
  bool zero = false;
  for (size_t i = from; i < to; ++i) {
    if (v[i] < 0) return Count::unknown();
    zero = zero || v[i] == 0;
  }
  if (zero) return 0;
  Count p = 1;
  for (size_t i = from; i < to; ++i) p = p * v[i];
  return p;
}

const JsonValue* arg(const JsonValue& sig, size_t i) {
  const JsonValue* args = sig.find("args");
  if (!args || args->kind() != JsonValue::Kind::Array || i >= args->items().size()) return nullptr;
  return &args->items()[i];
}

bool is_tensor(const JsonValue* v) { return v && v->kind() == JsonValue::Kind::Object && v->find("dtype"); }

bool is_true(const JsonValue* v) { return v && v->kind() == JsonValue::Kind::Bool && v->as_bool(); }

// A convolution's multiply-adds, twice: each element of `per` (the output; a transposed convolution's input) meets
// weight.shape[1] * prod(kernel) weights (C_in/groups; a transposed one's weight is [C_in, C_out/groups, kernel]).
Count convolution_products(const std::vector<int64_t>& per, const std::vector<int64_t>& weight) {
  if (weight.size() < 3 || per.empty()) return Count::unknown();
  return 2 * prod(per) * weight[1] * prod(weight, 2);
}

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
Count multi_head_attention_flops(const std::vector<int64_t>& q, const std::vector<int64_t>& k) {
  if (q.size() < 2 || k.size() < 2) return Count::unknown();
  const Count batch = prod(q, 0, q.size() - 2), l = q[q.size() - 2], e = q.back(), s = k[k.size() - 2];
  const Count projections = (2 * e + 1) * e * batch * (2 * l + 2 * s);  // q, k, v and out, each with its bias
  return projections + 4 * batch * l * s * e;
}

bool one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Count matmul_flops(const std::string& name, const JsonValue& sig) {
  std::vector<int64_t> a, b, out;
  if (name == "linear") {
    if (!shape_of(arg(sig, 0), a) || !shape_of(arg(sig, 1), b) || a.empty() || b.size() != 2) return Count::unknown();
    const Count m = prod(a, 0, a.size() - 1), k = a.back(), n = b[0];
    const bool bias = is_tensor(arg(sig, 2));
    return 2 * m * n * k + (bias ? m * n : Count(0));
  }
  if (name == "mm" || name == "matmul") {
    if (!shape_of(arg(sig, 0), a) || !shape_of(sig.find("output"), out) || a.empty()) return Count::unknown();
    return 2 * prod(out) * a.back();
  }
  if (name == "addmm") {
    if (!shape_of(arg(sig, 1), a) || !shape_of(arg(sig, 2), b) || a.size() != 2 || b.size() != 2)
      return Count::unknown();
    return 2 * Count(a[0]) * b[1] * a[1] + Count(a[0]) * b[1];
  }
  const size_t first = name == "baddbmm" ? 1 : 0;  // bmm, baddbmm
  if (!shape_of(arg(sig, first), a) || !shape_of(arg(sig, first + 1), b) || a.size() != 3 || b.size() != 3)
    return Count::unknown();
  const Count mnk = Count(a[0]) * a[1] * b[2] * a[2];
  return 2 * mnk + (name == "baddbmm" ? Count(a[0]) * a[1] * b[2] : Count(0));
}

Count convolution_flops(const std::string& name, const JsonValue& sig) {
  std::vector<int64_t> input, weight, out;
  const bool transposed = name.rfind("conv_transpose", 0) == 0 || is_true(arg(sig, 6));  // convolution's 7th
  if (!shape_of(arg(sig, 1), weight) || !shape_of(sig.find("output"), out) ||
      (transposed && !shape_of(arg(sig, 0), input)))
    return Count::unknown();
  return convolution_products(transposed ? input : out, weight) + (is_tensor(arg(sig, 2)) ? prod(out) : Count(0));
}

// (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask)
Count convolution_backward_flops(const JsonValue& sig) {
  std::vector<int64_t> grad_out, input, weight;
  const JsonValue* mask = arg(sig, 10);
  if (!shape_of(arg(sig, 0), grad_out) || !shape_of(arg(sig, 1), input) || !shape_of(arg(sig, 2), weight) || !mask ||
      mask->kind() != JsonValue::Kind::Array || mask->items().size() != 3)
    return Count::unknown();
  const Count products = convolution_products(is_true(arg(sig, 7)) ? input : grad_out, weight);
  if (!products.known()) return products;  // no formula for these shapes: no count, whatever the mask asks
  const auto& m = mask->items();           // grad_input and grad_weight: the forward's products each; grad_bias: a sum
  return (is_true(&m[0]) ? products : Count(0)) + (is_true(&m[1]) ? products : Count(0)) +
         (is_true(&m[2]) ? prod(grad_out) : Count(0));
}

Count attention_flops(const std::string& name, const JsonValue& sig) {
  std::vector<int64_t> q, k, v;
  if (name == "_native_multi_head_attention") {  // (query, key, value, embed_dim, num_head, qkv_weight, ...)
    if (!shape_of(arg(sig, 0), q) || !shape_of(arg(sig, 1), k)) return Count::unknown();
    return multi_head_attention_flops(q, k);
  }
  if (name == "_transformer_encoder_layer_fwd") {  // nn.TransformerEncoderLayer's fused path: attention and FFN
    std::vector<int64_t> ffn;                      // ffn_weight_1 [F, E], the 15th argument
    if (!shape_of(arg(sig, 0), q) || !shape_of(arg(sig, 14), ffn) || q.size() < 2 || ffn.size() != 2)
      return Count::unknown();
    const Count tokens = prod(q, 0, q.size() - 1), e = q.back(), f = ffn[0];
    return multi_head_attention_flops(q, q) + tokens * (4 * e * f + f + e);  // two linears with their biases
  }
  // The backward ops take grad_out first, then query, key and value, and compute four products where the forward
  // computes two (dP = dO V^T and dV = P^T dO over Ev, dQ = dS K and dK = dS^T Q over E): twice the forward's.
  const bool backward = name.size() > 9 && name.compare(name.size() - 9, 9, "_backward") == 0;
  const size_t first = backward ? 1 : 0;
  if (!shape_of(arg(sig, first), q) || !shape_of(arg(sig, first + 1), k) || !shape_of(arg(sig, first + 2), v) ||
      q.size() < 2 || k.size() < 2 || v.size() < 2)
    return Count::unknown();
  const Count batch = prod(q, 0, q.size() - 2), l = q[q.size() - 2], e = q.back();
  const Count s = k[k.size() - 2], ev = v.back();
  // is_causal: half the pairs. SDPA's 6th argument, the flash overload's 5th, the efficient one's 7th; both backward
  // ops' 12th (the efficient backward's 7th before torch 2.1, where its 12th does not exist)
  const bool causal = backward ? is_true(arg(sig, 11)) || is_true(arg(sig, 6))
                               : is_true(arg(sig, name == "_scaled_dot_product_flash_attention"       ? 4
                                                  : name == "_scaled_dot_product_efficient_attention" ? 6
                                                                                                      : 5));
  const Count full = Count(backward ? 2 : 1) * (2 * batch * l * s * e + 2 * batch * l * s * ev);
  return causal ? full / 2 : full;
}

}  // namespace

std::optional<int64_t> flops_per_call(const JsonValue& sig) {
  if (call_raised(sig)) return 0;  // no work its signature could describe
  const JsonValue* op_v = sig.find("op");
  if (!op_v || op_v->kind() != JsonValue::Kind::String) return std::nullopt;
  const std::string name = base_name(op_v->as_string());
  for (const char* dm : kDataMovement)
    if (name == dm) return 0;
  if (one_of(name, {"linear", "mm", "matmul", "bmm", "baddbmm", "addmm"})) return matmul_flops(name, sig);
  if (one_of(name, {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
                    "conv_transpose3d"}))
    return convolution_flops(name, sig);
  if (name == "convolution_backward") return convolution_backward_flops(sig);
  if (one_of(name, {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_backward",
                    "_scaled_dot_product_efficient_attention_backward", "_native_multi_head_attention",
                    "_transformer_encoder_layer_fwd"}))
    return attention_flops(name, sig);
  if (one_of(name, {"add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_"})) {
    std::vector<int64_t> out;
    if (!shape_of(sig.find("output"), out)) return std::nullopt;
    return prod(out);
  }
  return std::nullopt;
}

}  // namespace lingprobe::format
