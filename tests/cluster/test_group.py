"""Worker groups on a real local Ray: jax.distributed over gloo, bit-identical tiles and gradients, lost members."""
import os
import pathlib
import signal
import socket
import time

import numpy as np
import pytest

from cluster.gradient_task import GradientTask
from cluster.group import GroupError, GroupFailed, GroupShape, WorkerGroup
from cluster.task import SceneRef, TileTask

ROOT = pathlib.Path(__file__).resolve().parents[2]
CBOX = SceneRef(path=str(ROOT / "examples" / "cbox.xml"), params=(("res", 48),))
INVERSE = SceneRef(path=str(ROOT / "examples" / "inverse.xml"), params=(("res", 16),))


def tile(n_passes=2, first_pass=1, frame=3, y=8, x=16, spp=40):
    return TileTask(scene=CBOX, frame=frame, seed=7, spp=spp, tile_y=y, tile_x=x, tile_h=24, tile_w=32,
                    first_pass=first_pass, n_passes=n_passes, pass_size=8)


def gradient():
    """A gradient task of the bottom edge tile (7 of its 8 rows in the film)."""
    target = np.random.default_rng(0).uniform(0, 0.5, (7, 8, 3)).astype(np.float32)
    params = (("left.reflectance.value", np.array([0.5, 0.4, 0.3], np.float32)),
              ("lamp.emitter.radiance.value", np.array([8.0, 8.0, 8.0], np.float32)))
    return GradientTask(scene=INVERSE, frame=0, seed=3, spp=4, tile_y=9, tile_x=8, tile_h=8, tile_w=8, rows=7,
                        cols=8, params=params, target=target, loss="l2")


def test_two_hosts_of_two_devices_render_the_bits_of_one_host(local_ray):
    # "one" names no device count: it takes one device per core (here, on CI, two).
    one = WorkerGroup(GroupShape(hosts=1, strategy="PACK"), name="one").start()
    two = WorkerGroup(GroupShape(hosts=2, devices_per_host=2, strategy="PACK"), name="two").start()
    try:
        assert [i["global_devices"] for i in two.info] == [4, 4]
        assert one.info[0]["local_devices"] == len(os.sched_getaffinity(0))
        assert sorted(i["process_index"] for i in two.info) == [0, 1]
        assert len(set(two.member_pids())) == 2
        for task in (tile(), tile(n_passes=3, first_pass=2, frame=0, y=24, x=0)):  # the last pass is cut by spp
            v1, w1, _ = one.result(one.submit(task))
            v4, w4, _ = two.result(two.submit(task))
            assert v1.shape == (24, 32, 3) and w1.shape == (24, 32)
            assert np.all(w1 > 0) and v1.mean() > 0
            np.testing.assert_array_equal(v4, v1)
            np.testing.assert_array_equal(w4, w1)
        # A gradient task's 8 bands: one device's after another on 2 devices, on 4 over two hosts.
        g2, g4 = one.result(one.submit(gradient())), two.result(two.submit(gradient()))
        assert g2.loss > 0 and all(np.abs(g).max() > 0 for _, g in g2.grads) and g2.image.shape == (7, 8, 3)
        assert g4.loss == g2.loss and g4.image.tobytes() == g2.image.tobytes()
        assert [g.tobytes() for _, g in g4.grads] == [g.tobytes() for _, g in g2.grads]
        # Continuing from an accumulator is the same as rendering the passes at once.
        a = one.result(one.submit(tile(n_passes=1, first_pass=0)))
        b = one.result(one.submit(TileTask(**{**tile(n_passes=2, first_pass=1).__dict__, "start": a[:2]})))
        c = one.result(one.submit(tile(n_passes=3, first_pass=0)))
        np.testing.assert_array_equal(b[0], c[0])
    finally:
        one.teardown()
        two.teardown()


def test_a_killed_member_fails_the_task_and_the_group_is_rebuilt(local_ray):
    group = WorkerGroup(GroupShape(hosts=2, devices_per_host=1, strategy="PACK"), name="victim", heartbeat_s=10)
    group.start()
    try:
        expected = group.result(group.submit(tile()))
        old_pids = group.member_pids()
        handle = group.submit(tile(n_passes=1000, first_pass=0, spp=8000))  # about a minute
        time.sleep(2.0)
        os.kill(old_pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(GroupFailed):
            group.result(handle)
        assert time.monotonic() - t0 < 60
        group.rebuild()
        assert group.generation == 2
        assert not set(group.member_pids()) & set(old_pids)
        again = group.result(group.submit(tile()))
        np.testing.assert_array_equal(again[0], expected[0])
    finally:
        group.teardown()


def test_a_taken_coordinator_port_is_a_clear_error(local_ray):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        group = WorkerGroup(GroupShape(hosts=2, devices_per_host=1, strategy="PACK"), name="clash", init_timeout_s=30)
        t0 = time.monotonic()
        with pytest.raises(GroupError, match="clash"):
            group.start(port=port)
        assert time.monotonic() - t0 < 60
        assert group.members == []


def test_a_group_that_cannot_be_placed_is_a_clear_error(local_ray):
    group = WorkerGroup(GroupShape(hosts=2, devices_per_host=1, cpus_per_host=100, strategy="PACK"),
                        name="too-big", init_timeout_s=3, start_attempts=1)
    with pytest.raises(GroupError, match="cannot place 2 x"):
        group.start()


def test_invalid_shapes():
    with pytest.raises(GroupError, match="platform"):
        GroupShape(platform="fpga")
    with pytest.raises(GroupError, match="gpus_per_host"):
        GroupShape(platform="gpu")
    with pytest.raises(GroupError, match="tpu_topology"):
        GroupShape(platform="tpu")
    assert GroupShape(hosts=2, devices_per_host=3).devices == 6
    assert "--xla_force_host_platform_device_count=3" in GroupShape(devices_per_host=3).env()["XLA_FLAGS"]
    assert GroupShape().devices is None
    assert "device_count" not in GroupShape().env()["XLA_FLAGS"]


def test_default_groups_from_the_cluster():
    from cluster.group import discover_shapes
    gpu_nodes = [{"Alive": True, "Resources": {"CPU": 16, "GPU": 4}}, {"Alive": True, "Resources": {"CPU": 16, "GPU": 8}},
                 {"Alive": True, "Resources": {"CPU": 4}}, {"Alive": False, "Resources": {"CPU": 8, "GPU": 2}}]
    assert [(s.platform, s.gpus_per_host) for s in discover_shapes(gpu_nodes)] == [("gpu", 4), ("gpu", 8)]
    cpu_nodes = [{"Alive": True, "Resources": {"CPU": 2}}, {"Alive": True, "Resources": {"CPU": 2}},
                 {"Alive": True, "Resources": {"CPU": 0}}]
    assert [s.platform for s in discover_shapes(cpu_nodes)] == ["cpu", "cpu"]


def test_a_group_whose_hosts_run_other_software_is_refused_naming_them():
    from cluster.group import check_one_renderer

    where = [("n1", "10.0.0.1", 11), ("n2", "10.0.0.2", 12)]
    same = [{"renderer": "tracer aaa, jax 0.9, jaxlib 0.9, cpu AVX2"}] * 2
    check_one_renderer("g", same, where)  # one renderer: nothing said
    other = [same[0], {"renderer": "tracer aaa, jax 0.8, jaxlib 0.8, cpu AVX2"}]
    with pytest.raises(GroupError) as raised:
        check_one_renderer("g", other, where)
    said = str(raised.value)
    assert "\n" not in said and said.startswith("g: its hosts render with different software")
    assert "jax 0.8, jaxlib 0.8, cpu AVX2 on 10.0.0.2" in said and "jax 0.9, jaxlib 0.9, cpu AVX2 on 10.0.0.1" in said
