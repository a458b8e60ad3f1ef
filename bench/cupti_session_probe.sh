#!/usr/bin/env bash
# GPU machine: bench/cupti_session_probe.cu alone, then inside a torch process that ran a Llama forward first
# (torch's modules loaded), as the gate's program is when its first timed call starts a session.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp}
nvcc -O2 -std=c++17 "$here/cupti_session_probe.cu" -lcuda -lcupti -o "$out/cupti_session_probe"
nvcc -O2 -std=c++17 -DPROBE_LIBRARY -shared -Xcompiler -fPIC "$here/cupti_session_probe.cu" -lcuda -lcupti \
  -o "$out/libcupti_session_probe.so"
echo "## alone"
"$out/cupti_session_probe"
echo "## in a torch process, after a Llama forward"
python3 - "$out/libcupti_session_probe.so" <<'PY'
import ctypes, sys, torch, transformers
cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                               num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
model = transformers.LlamaForCausalLM(cfg).cuda().eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    model(torch.randint(0, 32000, (1, 2048), device="cuda"))
torch.cuda.synchronize()
sys.stdout.flush()
ctypes.CDLL(sys.argv[1]).run_probe()
PY
