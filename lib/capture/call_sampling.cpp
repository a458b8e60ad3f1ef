#include "capture/call_sampling.h"

#include "format/canonical_json.h"

namespace lingprobe::capture {

SampleKey* sample_key(Sampler& sampler, const OpInfo& op, const format::JsonValue& arguments, StageId stage) {
  format::JsonValue input = arguments;
  input.set("op", format::JsonValue::string(op.dotted));
  input.set("stage", format::JsonValue::string(stage_name(stage)));
  return sampler.key_for(format::canonical_sha256(input), op.name, op.with_overload, stage_name(stage));
}

void* begin_sample(Sampler& sampler, SampledCallHooks& hooks, SampleKey* k, const OpInfo& op,
                   c10::ArrayRef<const c10::IValue> inputs, StageId stage) {
  SampledCall call;
  call.schema = &op.schema;
  call.inputs = inputs;
  call.op_dotted = &op.dotted;
  call.stage = stage;
  call.key = k;
  if (const CallRefusal why = hooks.refusal(call); why != CallRefusal::None) {
    sampler.refused_early(k, why);
    return nullptr;
  }
  return sampler.take(k) ? hooks.begin(call) : nullptr;
}

}  // namespace lingprobe::capture
