#!/usr/bin/env bash
# Everything the speed issue asks of a GPU, in one call on a fresh NVIDIA machine (the `device`
# tool's): install, the tracer against Mitsuba's cuda_ad_rgb on the Cornell box and the two BVH
# examples, the image tests on the GPU, and a 2-group farm job. Figures go to stdout and to
# $OUT/gpu_check.txt (where $OUT is set, as the device tool sets it). Meant to finish in under 8
# minutes; each step has its own time limit, and a failed step does not stop the next.
#
#     bash scripts/gpu_check.sh
#
# Two ways to install:
# - With a package index: a virtual environment with jaxfarm, JAX's CUDA 12 wheels and Mitsuba.
# - Offline (a machine that reaches no index, such as the device tool's, whose Python already has
#   JAX with its CUDA plugin): where a folder .whl/ came with the tree, its wheels and .tar.xz
#   archives are unpacked into /tmp/site, and the machine's own python3 and JAX are used. Make the
#   folder here with `bash scripts/gpu_check.sh --pack` (Mitsuba trimmed to the variants the check
#   uses; the whole of it would not fit the 64 MiB the tool carries). Ray and imagecodecs are too
#   large to carry: offline, the farm job and the image test of the PNG-textured scene are skipped.
set -u
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--pack" ]]; then  # here, with a package index: fill .whl/ for an offline run
    set -e
    rm -rf .whl /tmp/gpu_check_pack && mkdir -p .whl /tmp/gpu_check_pack
    for p in drjit==1.5.0 defusedxml openexr trimesh; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl "$p"
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d /tmp/gpu_check_pack mitsuba==3.9.1
    (cd /tmp/gpu_check_pack && unzip -q mitsuba-*.whl && rm mitsuba-*.whl \
        && rm -rf mitsuba/llvm_ad_* mitsuba/cuda_ad_mono* mitsuba/cuda_ad_spectral* mitsuba/scalar_spectral* \
                  mitsuba/include mitsuba/mitsuba_stubs mitsuba/cmake mitsuba/pkgconfig \
        && find mitsuba -name '*.pyi' -delete && tar -cf - mitsuba mitsuba-*.dist-info) | xz -6 -T0 > .whl/mitsuba-trim.tar.xz
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    du -sh .whl
    exit 0
fi

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

say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1); $(nproc) cores"
if [[ -d .whl ]]; then
    PY=python3
    step 120 "install (offline, carried wheels)" bash -c "$PY -m pip install -q --no-index --no-deps --no-compile \
        --target /tmp/site .whl/*.whl && for a in .whl/*.tar.xz; do tar -xJf \"\$a\" -C /tmp/site; done"
    export PYTHONPATH="$PWD:/tmp/site"
    TESTS=(-k "not textures")  # its PNG textures need imagecodecs, not carried
else
    step 240 install bash -c "python3.12 -m venv .venv && .venv/bin/pip install -q -e '.[test]' 'jax[cuda12]' mitsuba"
    PY=.venv/bin/python
    TESTS=()
fi
export JAX_PLATFORMS=cuda
step 60 devices "$PY" -c "import jax; print(jax.__version__, jax.devices())"
# The BVH traversal kernel (Pallas, lowered by Triton here) against the XLA traversal, ray by ray.
step 120 "BVH kernel against the XLA traversal" "$PY" -m pytest -q -p no:cacheprovider tests/tracer/test_bvh.py \
    -k "gpu_kernel or triton"
# 512x512 at 256 spp: a render takes 0.3-1.4 s on either side (at 256x256, 64 spp 10-110 ms: too
# short to time; November 29's H200 run).
for scene in "examples/cbox.xml --res 512" "examples/mesh.xml --res 512" "examples/orbit.xml --res 512"; do
    # shellcheck disable=SC2086  # (the scene and its resolution are two words)
    step 150 "bench_tracer $scene" "$PY" scripts/bench_tracer.py --platform gpu --scene $scene --spp 256 \
        --repeats 2
done
step 200 "image tests on the GPU" "$PY" -m pytest -q -x -p no:cacheprovider tests/tracer/test_images.py "${TESTS[@]}"
if "$PY" -c "import ray, zarr" 2>/dev/null; then
    rm -rf /tmp/gpu_check.zarr
    FARM=("$PY" -m farm.cli)
    step 120 "farm: 2 groups on the GPU" "${FARM[@]}" render examples/orbit.xml --frames 0-7 --spp 64 --res 320x240 \
        --set angle=0:0,7:315 --groups 2 --platform gpu --no-progress --out /tmp/gpu_check.zarr
    step 30 "farm status" "${FARM[@]}" status /tmp/gpu_check.zarr
else
    say "farm: skipped (Ray or Zarr is not installed here)"
fi
say "figures in $LOG"
