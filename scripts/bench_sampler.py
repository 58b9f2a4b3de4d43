"""Our two samplers on one scene, in one process: relative MSE at equal spp, and time per sample.

    python scripts/bench_sampler.py [--scene /work/shared/scenes/cbox.xml] [--res 128]
                                    [--spp 4,16,64] [--seeds 4] [--ref-spp 4096] [--repeats 3]

The reference is our own render at ``--ref-spp`` with the sobol sampler (unbiased; a seed no
test render uses). For each sample count, the relative MSE (``tests/helpers/image_metrics``)
of ``--seeds`` renders per sampler, averaged, and their ratio. Then the time of a render at the
largest spp, the fastest of ``--repeats`` per sampler after a warm-up (compile), the two
samplers alternating so that load on the machine falls on both alike: the ratio is the
per-sample cost of the sequence (its draws cost a hash per number for ``independent``, an
index shuffle, a Sobol product and Owen scrambles per group for ``sobol``).
"""
import argparse
import dataclasses
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers import image_metrics as im  # noqa: E402

SAMPLERS = ("independent", "sobol")
REF_SEED = 1_000_000


def with_sampler(scene, sampler):
    return dataclasses.replace(scene, settings=dataclasses.replace(scene.settings, sampler=sampler))


def relative_mses(tracer, scenes, reference, spp, seeds):
    """Sampler -> mean relative MSE of ``seeds`` renders at ``spp``."""
    return {name: float(np.mean([im.relative_mse(tracer.render(scene, spp=spp, seed=seed), reference)
                                 for seed in range(seeds)])) for name, scene in scenes.items()}


def render_seconds(tracer, scenes, spp, repeats):
    """Sampler -> the fastest of ``repeats`` renders at ``spp`` (after one warm-up render each)."""
    best = {name: np.inf for name in scenes}
    for name, scene in scenes.items():
        tracer.render(scene, spp=spp, seed=REF_SEED + 1)
    for repeat in range(repeats):
        for name, scene in scenes.items():
            t0 = time.perf_counter()
            tracer.render(scene, spp=spp, seed=REF_SEED + 2 + repeat)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", default="/work/shared/scenes/cbox.xml")
    parser.add_argument("--res", type=int, default=128, help="the scene's 'res' default")
    parser.add_argument("--spp", default="4,16,64", help="sample counts, comma-separated")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--ref-spp", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from tracer.runtime.xla_flags import set_in_environment
    set_in_environment()  # the farm's arithmetic, before JAX starts
    import tracer

    base = tracer.load_scene(args.scene, res=args.res)
    scenes = {name: with_sampler(base, name) for name in SAMPLERS}
    reference = tracer.render(scenes["sobol"], spp=args.ref_spp, seed=REF_SEED)
    print(f"{pathlib.Path(args.scene).name} at {args.res}x{args.res}, reference {args.ref_spp} spp, "
          f"{args.seeds} seeds")
    counts = [int(s) for s in args.spp.split(",")]
    for spp in counts:
        mse = relative_mses(tracer, scenes, reference, spp, args.seeds)
        print(f"{spp:5d} spp  rel.MSE independent {mse['independent']:.4g}  sobol {mse['sobol']:.4g}  "
              f"sobol/independent {mse['sobol'] / mse['independent']:.3f}")
    seconds = render_seconds(tracer, scenes, max(counts), args.repeats)
    print(f"render at {max(counts)} spp: independent {seconds['independent']:.3f}s, sobol {seconds['sobol']:.3f}s, "
          f"time per sample sobol/independent {seconds['sobol'] / seconds['independent']:.3f}")


if __name__ == "__main__":
    main()
