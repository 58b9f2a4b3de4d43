#!/usr/bin/env bash
# Everything the speed issue asks of a GPU, in one call on a fresh NVIDIA machine (the `device`
# tool's): install, the image tests on the GPU, the tracer against Mitsuba's cuda_ad_rgb on the
# Cornell box and the two BVH examples, and a 2-group farm job. Figures go to stdout and to
# $OUT/gpu_check.txt (where $OUT is set, as the device tool sets it). Meant to finish in under 8
# minutes; each step has its own time limit, and a failed step does not stop the next.
#
#     bash scripts/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
LOG="${OUT:-/tmp}/gpu_check.txt"
: > "$LOG"
say() { echo "== $*" | tee -a "$LOG"; }
step() {  # step LIMIT_S NAME COMMAND...: run it with a time limit, its output kept
    local limit=$1 name=$2; shift 2
    say "$name"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tail -40 | tee -a "$LOG"
    say "$name: exit ${PIPESTATUS[0]} in $((SECONDS - t0)) s"
}

PY=python3.12
command -v "$PY" >/dev/null || PY=python3
say "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1); $(nproc) cores"
step 240 install bash -c "$PY -m venv .venv && .venv/bin/pip install -q -e '.[test]' 'jax[cuda12]' mitsuba"
export JAX_PLATFORMS=cuda
step 30 devices .venv/bin/python -c "import jax; print(jax.devices())"
step 150 "image tests on the GPU" .venv/bin/python -m pytest -q -x tests/tracer/test_images.py
for scene in "examples/cbox.xml --res 256" "examples/mesh.xml --res 256" "examples/orbit.xml --res 256"; do
    # shellcheck disable=SC2086  # (the scene and its resolution are two words)
    step 120 "bench_tracer $scene" .venv/bin/python scripts/bench_tracer.py --platform gpu --scene $scene --spp 64 \
        --repeats 3
done
rm -rf /tmp/gpu_check.zarr
step 120 "farm: 2 groups on the GPU" .venv/bin/farm render examples/orbit.xml --frames 0-7 --spp 64 --res 320x240 \
    --set angle=0:0,7:315 --groups 2 --platform gpu --no-progress --out /tmp/gpu_check.zarr
step 30 "farm status" .venv/bin/farm status /tmp/gpu_check.zarr
say "figures in $LOG"
