"""The work unit lowers for GPUs and TPUs, though no accelerator is here.

``jax.export`` lowers ``render_tile`` for the ``cuda`` and ``tpu`` platforms as a worker there
would run it: each example scene with the accelerator's default intersection backend (what
``auto`` resolves to off the CPU: the pure-JAX structures). A host callback (Embree, Warp) or a
CPU-only kernel on that path fails the lowering or shows as a custom call here."""
import pathlib

import jax
import jax.numpy as jnp
import pytest

import tracer
from tracer.rendering import WorkItem, WorkShape, local_mesh, render_tile

EXAMPLES = sorted(pathlib.Path(__file__).parents[2].joinpath("examples").glob("*.xml"))
TILE, PASS = 8, 2


def _export(path, accel):
    """``render_tile`` of the scene at ``path`` exported for GPUs and TPUs."""
    with tracer.load_scene(path, resolution=(TILE, TILE), accel=accel) as scene:
        args = (scene, WorkItem.of(0, 0, 0, 0, 0, 1, PASS), jnp.zeros((TILE, TILE, 3), jnp.float32),
                jnp.zeros((TILE, TILE), jnp.float32))
        return jax.export.export(render_tile.jit(), platforms=("cuda", "tpu"))(
            *args, shape=WorkShape(TILE, TILE, PASS), mesh=local_mesh())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_work_unit_lowers_for_cuda_and_tpu(path):
    exported = _export(path, "jax")
    assert exported.platforms == ("cuda", "tpu")
    module = exported.mlir_module()
    custom_calls = {line.split("custom_call @", 1)[1].split("(", 1)[0]
                    for line in module.splitlines() if "custom_call @" in line}
    # Sharding annotations are the only custom calls a portable program may hold.
    assert custom_calls <= {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}, custom_calls


def test_a_host_engine_is_caught():
    """The check above can fail: the same lowering with Embree behind a host callback refuses."""
    pytest.importorskip("embreex")
    with pytest.raises((NotImplementedError, ValueError)):
        _export(EXAMPLES[0], "embree")


def test_on_a_gpu_the_bvh_scenes_work_unit_holds_the_traversal_kernel(monkeypatch):
    """As a GPU worker makes it (``auto``: there the pure-JAX BVH, its triangles traversed by the
    Pallas kernel of ``tracer.shapes.bvh_kernel``), the work unit of a BVH scene lowers for
    ``cuda`` with the kernel as a Triton call, and no other custom call than the sharding ones.
    Exporting it takes leave of a check: a Triton call has no compatibility guarantee across
    jaxlib versions (the farm's GPU workers compile their own program; nothing ships one)."""
    from jax._src.pallas.triton import gpu_info

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(gpu_info, "get_device_kind", lambda: "NVIDIA H200")  # the GPU Triton compiles for
    path = next(p for p in EXAMPLES if p.stem == "mesh")
    with tracer.load_scene(path, resolution=(TILE, TILE)) as scene:
        assert scene.geometry.accel == "bvh" and scene.geometry.bvh.leaf_analytic.shape[0] == 0
        args = (scene, WorkItem.of(0, 0, 0, 0, 0, 1, PASS), jnp.zeros((TILE, TILE, 3), jnp.float32),
                jnp.zeros((TILE, TILE), jnp.float32))
        triton = "__gpu$xla.gpu.triton"
        exported = jax.export.export(render_tile.jit(), platforms=("cuda",),
                                     disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(triton)])(
            *args, shape=WorkShape(TILE, TILE, PASS), mesh=local_mesh())
    module = exported.mlir_module()
    custom_calls = {line.split("custom_call @", 1)[1].split("(", 1)[0]
                    for line in module.splitlines() if "custom_call @" in line}
    assert triton in custom_calls
    assert custom_calls - {triton} <= {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}, custom_calls
