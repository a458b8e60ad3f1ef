// Analytic FLOPs of one call from its signature (SPEC section 4: 2 per
// multiply-add, bias included; data-movement ops are 0, not null). Returns
// nullopt where no formula is known (never a guess), and where a dimension is
// negative or the count would not fit in 64 bits (never a wrapped one).
//
//   linear            2*M*N*K (+ M*N with bias), M = prod(input.shape[:-1])
//   mm / matmul       2 * numel(output) * K
//   bmm / baddbmm     2*B*M*N*K (+ B*M*N for baddbmm's add)
//   addmm             2*M*N*K + M*N
//   conv1d/2d/3d, convolution, _convolution
//                     2 * numel(output) * (C_in/groups) * prod(kernel) (+ numel(output) with bias)
//   conv_transpose1d/2d/3d, and convolution/_convolution with transposed=True
//                     2 * numel(input) * (C_out/groups) * prod(kernel) (+ numel(output) with bias)
//   convolution_backward
//                     the forward's products for grad_input and for grad_weight, numel(grad_output) for grad_bias,
//                     as output_mask asks
//   scaled_dot_product_attention
//                     2*B*H*L*S*E + 2*B*H*L*S*Ev (QK^T and PV; softmax not counted; causal: half)
//   _scaled_dot_product_{flash,efficient}_attention_backward
//                     twice the forward (dP, dV, dQ and dK)
//   add/sub/mul/div and add_/sub_/mul_/div_ (Tensor, Scalar)  numel(output)
//   to, _to_copy, copy_, clone, contiguous, view, reshape, permute, transpose, t, expand,
//   cat, stack, chunk, split, slice, select, narrow, squeeze, unsqueeze, flatten,
//   constant_pad_nd, pad, as_strided, unbind           0
//   a call that raised (output {"raised":true})        0
#pragma once

#include <cstdint>
#include <optional>

#include "format/json_value.h"

namespace lingprobe::format {

std::optional<int64_t> flops_per_call(const JsonValue& signature);

}  // namespace lingprobe::format
