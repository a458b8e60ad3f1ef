// Set-up calls: model construction and loading rather than the compute, so
// that they may use only a share of the evidence budgets (capture/evidence_budgets).
#pragma once

#include "capture/sampled_call.h"

namespace lingprobe::capture {

// A call of model construction or loading rather than of the compute: its
// result is random or uninitialised by definition (init, to_empty), or it
// writes a parameter (a leaf that requires grad: init, load_state_dict's
// copy_, trunc_normal_'s in-place steps with scalars only) or moves one
// (module.to(device)), or it moves or copies any tensor across devices (a
// frozen model's weights to the GPU). View-only calls count with them
// (their schema says every result aliases an input without writing it:
// detach, view, t, expand... no kernel runs): Parameter() detaches every
// new weight, and such a snapshot costs the whole tensor twice.
bool is_setup_call(const SampledCall& call);

}  // namespace lingprobe::capture
