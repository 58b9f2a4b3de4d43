"""Every `farm` command with hostile arguments, job files and stores: one line and the documented
exit code (1 user error, 2 invalid job spec or command line, 3 store problem), never a traceback
(exit 70 is main's code for an exception it did not expect), and no store made or changed.

In this process (a command costs milliseconds) and without Ray: nothing here gets as far as
rendering. Two cases run through the real entry point, to show what reaches a terminal."""
import os
import shutil

import pytest

from tests.helpers.farm_cases import ORBIT, farm_cli, farm_main, filled_store, store_files


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """{name: path}: a finished store, a damaged one, a store of 2 frames not rendered, a file,
    job files, and where nothing is."""
    root = tmp_path_factory.mktemp("hostile")
    filled_store(root / "done.zarr")
    shutil.copytree(root / "done.zarr", root / "damaged.zarr")
    (root / "damaged.zarr" / "records" / "zarr.json").write_bytes(b'{"shape": [3, 1, 2')
    filled_store(root / "other.zarr", frames=(0, 0))
    from farm import job
    from tests.helpers.farm_cases import orbit_spec
    job.prepare(orbit_spec(root / "empty.zarr", frames=(0, 1)))
    (root / "file").write_text("not a store")
    (root / "folder").mkdir()
    for fmt in ("exr", "png", "npy"):  # where export would write its first frame
        (root / "blocked" / f"frame_0000.{fmt}").mkdir(parents=True)
    jobs = {"latin1.toml": b'scene = "caf\xe9.xml"\nstore = "s.zarr"\nspp = 4\n',
            "params.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\nparams = 5\n'.encode(),
            "scene.toml": b'scene = 5\nstore = "s.zarr"\nspp = 4\n',
            "spp.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = "many"\n'.encode(),
            "groups.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\n[groups]\ncount = [2]\n'.encode(),
            "garbage.toml": b"\x00\x01\x02 = = [[",
            "opt_none.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\n'.encode(),
            "opt.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\n[optimize]\ntargets = "t_{{frame}}.npy"\n'
                        f'parameters = ["a.value"]\niterations = 2\n'.encode(),
            "opt_iter.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\n[optimize]\ntargets = "t_{{frame}}.npy"\n'
                             f'parameters = ["a.value"]\niterations = "many"\n'.encode(),
            "opt_targets.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\n[optimize]\ntargets = "t.npy"\n'
                                f'parameters = ["a.value"]\niterations = 2\n'.encode(),
            "opt_keys.toml": f'scene = "{ORBIT}"\nstore = "s.zarr"\nspp = 4\n[optimize]\ntargets = "t_{{frame}}.npy"\n'
                             f'parameters = 5\niterations = 2\nrate = 1\n'.encode(),
            "dir.toml/": None}
    for name, text in jobs.items():
        if text is None:
            (root / name).mkdir()
        else:
            (root / name).write_bytes(text)
    # Scenes that describe() reads but the loader refuses: found before Ray starts or a store is made.
    orbit = open(ORBIT).read()
    (root / "assets").symlink_to(os.path.join(os.path.dirname(ORBIT), "assets"))
    (root / "badplugin.xml").write_text(orbit.replace('type="diffuse"', 'type="nosuch"', 1))
    (root / "nomesh.xml").write_text(orbit.replace("assets/torus.obj", "assets/nothere.obj"))
    return {"root": root, "done": root / "done.zarr", "damaged": root / "damaged.zarr", "other": root / "other.zarr",
            "empty": root / "empty.zarr", "file": root / "file", "folder": root / "folder",
            "nowhere": root / "nowhere.zarr"}


O = ["--out", "{root}/new.zarr"]  # where a render would make its store: it never should here
CASES = [
    # render: flags
    (["render", "{root}/missing.xml", *O], 1, "scene file not found"),
    (["render", "{root}/badplugin.xml", *O], 1, "badplugin.xml:53: unsupported bsdf type 'nosuch'"),
    (["render", "{root}/nomesh.xml", *O], 1, "file 'assets/nothere.obj' not found"),
    (["render", ORBIT], 2, "--out STORE is required"),
    (["render", ORBIT, "--tile", "0", *O], 2, "tile must be a whole number of pixels from 8 to 4096, got 0"),
    (["render", ORBIT, "--tile", "4097", *O], 2, "tile must be a whole number of pixels from 8 to 4096"),
    (["render", ORBIT, "--spp", "99999999999999999999", *O], 2, "spp must be a whole number from 1 to 1073741824"),
    (["render", ORBIT, "--spp", "-3", *O], 2, "spp must be"),
    (["render", ORBIT, "--spp", "lots", *O], 2, "Invalid value for '--spp': 'lots' is not a valid integer"),
    (["render", ORBIT, "--spp", "9" * 5000, *O], 2, "Invalid value for '--spp'"),
    (["render", ORBIT, "--seed", "2147483648", *O], 2, "seed must be a whole number from 0 to 2147483647"),
    (["render", ORBIT, "--frames", "0-99999999999", *O], 2, "frame numbers go up to 2147483647"),
    (["render", ORBIT, "--frames", "0-100000", *O], 2, "at most 100000 frames a job"),
    (["render", ORBIT, "--frames", "3-\n1", *O], 2, "frames '3-\\n1'"),
    (["render", ORBIT, "--res", "1e9x1", *O], 2, "resolution '1e9x1'"),
    (["render", ORBIT, "--res", "99999x10", *O], 2, "between 1 and 16384"),
    (["render", ORBIT, "--set", "angle=nan", *O], 2, "value 'nan' is not finite"),
    (["render", ORBIT, "--set", "angle=1:", *O], 2, "is not FRAME:VALUE"),
    (["render", ORBIT, "--groups", "0", *O], 2, "groups.count must be a whole number >= 1, got 0"),
    (["render", ORBIT, "--hosts-per-group", "-1", *O], 2, "groups.hosts must be"),
    (["render", ORBIT, "--devices-per-host", "0", *O], 2, "groups.devices_per_host must be"),
    (["render", ORBIT, "--accel", "cuda", *O], 2, "Invalid value for '--accel'"),
    (["render", ORBIT, "--platform", "quantum", *O], 2, "Invalid value for '--platform'"),
    (["render", ORBIT, "--nope", *O], 2, "No such option '--nope'"),
    (["render", "{root}/folder", *O], 2, "is a directory"),
    # render: job files
    (["render", "{root}/latin1.toml"], 2, "latin1.toml: not UTF-8 text (byte 12 is 0xe9)"),
    (["render", "{root}/params.toml"], 2, "params.toml: params must be [params.NAME] tables, got 5"),
    (["render", "{root}/scene.toml"], 2, "scene.toml: scene must be a path (a non-empty string), got 5"),
    (["render", "{root}/spp.toml"], 2, "spp.toml: spp must be a whole number from 1 to 1073741824, got 'many'"),
    (["render", "{root}/groups.toml"], 2, "groups.toml: groups.count must be a whole number >= 1, got [2]"),
    (["render", "{root}/garbage.toml"], 2, "garbage.toml: not valid TOML"),
    (["render", "{root}/dir.toml"], 2, "is a directory"),
    # optimize: job files refused before the scene is loaded
    (["optimize", "{root}/missing.toml"], 2, "job file not found"),
    (["optimize", "{root}/opt_none.toml"], 2, "an [optimize] table is required"),
    (["render", "{root}/opt.toml", *O], 2, "an [optimize] table is an inverse-rendering job: run it with `farm optimize`"),
    (["optimize", "{root}/opt_iter.toml"], 2, "optimize.iterations must be a whole number from 1 to 100000, got 'many'"),
    (["optimize", "{root}/opt_targets.toml"], 2, "optimize.targets must name {{frame}}"),
    (["optimize", "{root}/opt_keys.toml"], 2, "unknown key 'optimize.rate'"),
    (["optimize", "{root}/garbage.toml"], 2, "not valid TOML"),
    (["optimize", "{root}/opt.toml", "--task-timeout", "5"], 2, "No such option '--task-timeout'"),
    (["render", "{root}/missing.toml"], 2, "job file not found"),
    # render: where the store goes
    (["render", ORBIT, "--out", ""], 2, "store must be a path (a non-empty string), got ''"),
    (["render", ORBIT, "--out", "{root}/file"], 3, "already exists and is not a frame store of this job"),
    (["render", ORBIT, "--out", "{root}/file/sub.zarr"], 3, "cannot make a store here (NotADirectoryError"),
    (["render", ORBIT, "--out", "nosuchscheme://x/y.zarr"], 3, "Protocol not known: nosuchscheme"),
    (["render", ORBIT, "--out", "{root}/damaged.zarr"], 3, "damaged store: records/zarr.json does not read"),
    (["render", ORBIT, "--set", "angle=0:0,2:90", "--res", "40x30", "--tile", "16", "--frames", "0-2",
      "--out", "{root}/done.zarr", "--seed", "3"], 3, "holds a different job: seed differs"),
    # resume, status, export, cancel: stores
    *[([command, "{root}/%s" % where], 3, message) for command in ("resume", "status", "cancel")
      for where, message in (("nowhere.zarr", "no frame store here"), ("file", "no frame store here"),
                             ("folder", "no frame store here"),
                             ("damaged.zarr", "damaged store: records/zarr.json does not read"))],
    (["resume", "{root}/done.zarr", "--groups", "0"], 2, "groups.count must be a whole number >= 1, got 0"),
    (["resume"], 2, "Missing argument 'STORE'"),
    (["status", "{root}/done.zarr", "extra"], 2, "Got unexpected extra argument (extra)"),
    (["export", "{root}/nowhere.zarr", "--out", "{root}/x"], 3, "no frame store here"),
    (["export", "{root}/damaged.zarr", "--out", "{root}/x"], 3, "damaged store: records/zarr.json does not read"),
    (["export", "{root}/empty.zarr", "--out", "{root}/x"], 3, "frame 0 is 0% rendered; finish it (farm resume"),
    (["export", "{root}/done.zarr", "--out", "{root}/x", "--format", "bmp"], 2, "Invalid value for '--format'"),
    (["export", "{root}/done.zarr", "--out", "{root}/x", "--frames", "5-9"], 2, "the job has frames 0-2"),
    (["export", "{root}/done.zarr", "--out", "{root}/x", "--frames", "two"], 2, "frames 'two'"),
    (["export", "{root}/done.zarr", "--out", "{root}/file/x"], 1, "cannot make the folder: Not a directory"),
    (["export", "{root}/done.zarr", "--out", "{root}/file"], 2, "Directory '{root}/file' is a file"),
    (["export", "{root}/done.zarr"], 2, "Missing option '--out'"),
    *[(["export", "{root}/done.zarr", "--out", "{root}/blocked", "--format", fmt], 1,
       f"frame_0000.{fmt}: cannot write: ") for fmt in ("exr", "png", "npy")],
    # submit: refused before the cluster is asked, or the cluster is not there
    (["submit", ORBIT, "--address", "http://127.0.0.1:1", "--out", "{root}/s.zarr", "--tile", "0"], 2, "tile must be"),
    (["submit", "{root}/latin1.toml", "--address", "http://127.0.0.1:1"], 2, "not UTF-8 text"),
    (["submit", ORBIT, "--out", "{root}/s.zarr"], 2, "Missing option '--address'"),
    (["submit", ORBIT, "--address", "http://127.0.0.1:1", "--out", "{root}/s.zarr"], 1,
     "cannot reach the Ray cluster at http://127.0.0.1:1"),
    (["cancel", "{root}/other.zarr", "--address", "http://127.0.0.1:1"], 1,
     "cannot reach the Ray cluster at http://127.0.0.1:1"),
    # the queue: pause and unpause are a store's, the queue a cluster's (its Ray address, not its dashboard)
    *[([command, "{root}/nowhere.zarr"], 3, "no frame store here") for command in ("pause", "unpause")],
    (["submit", ORBIT, "--address", "http://127.0.0.1:1", "--out", "{root}/s.zarr", "--priority", "5000"], 2,
     "groups.priority must be a whole number from -1000 to 1000, got 5000"),
    (["render", ORBIT, "--out", "{root}/s.zarr", "--priority", "-1001"], 2, "groups.priority must be"),
    (["queue", "--address", "http://127.0.0.1:8265"], 1, "is a dashboard's address: `farm queue` joins the cluster"),
    (["queue", "--address", "127.0.0.1:1"], 1, "cannot join the Ray cluster at 127.0.0.1:1: nothing answers there"),
    (["frobnicate"], 2, "No such command 'frobnicate'"),
    # Names the OS gives that are not UTF-8 (Python holds their bytes as lone surrogates).
    (["render", ORBIT, "--out", "{root}/bad\udcffname.zarr"], 2, "is not valid UTF-8"),
    (["export", "{root}/done.zarr", "--out", "{root}/x\udcff"], 2, "is not valid UTF-8"),
    (["status", "{root}/d\udce9j\udce0.zarr"], 2, "is not valid UTF-8"),
    (["serve", "{root}/\udcff"], 2, "is not valid UTF-8"),
]


@pytest.mark.parametrize("args, code, message", CASES)
def test_every_command_refuses_hostile_input_in_one_line(places, args, code, message):
    root = places["root"]
    args = [a.format(root=root) for a in args]
    before = {name: store_files(places[name]) for name in ("done", "damaged", "empty")}
    got, out, err = farm_main(*args)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert got == code and len(lines) == 1, (got, out + err)
    assert lines[0].startswith("error: ") and message.format(root=root) in lines[0], lines[0]
    assert {name: store_files(places[name]) for name in before} == before
    assert not (root / "new.zarr").exists() and not (root / "x").exists()


def test_a_store_path_that_is_not_utf8_is_refused_before_a_store_or_lease(places):
    """Through the real entry point (argv as the OS's bytes): one line, exit 2, nothing made."""
    import subprocess
    import sys

    from tests.helpers.farm_cases import ROOT
    out = os.fsencode(places["root"]) + b"/bad\xffname.zarr"
    result = subprocess.run([sys.executable, "-m", "farm.cli", "render", ORBIT, "--out", out], capture_output=True,
                            timeout=120, cwd=ROOT)
    err = result.stderr.decode(errors="replace").strip().splitlines()
    assert result.returncode == 2 and len(err) == 1 and "is not valid UTF-8" in err[0], err
    assert not os.path.exists(out)


def test_the_entry_point_prints_one_line_and_no_traceback(places):
    for args, code, message in (
            (["status", places["damaged"]], 3, "damaged store: records/zarr.json does not read"),
            (["render", places["root"] / "params.toml"], 2, "params must be [params.NAME] tables, got 5")):
        result = farm_cli(*map(str, args), timeout=120)
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        assert result.returncode == code and len(lines) == 1 and message in lines[0], result.stderr[-2000:]


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`farm ... | head`: the reader closes the pipe before the command has written all it
    says. The command ends as Unix tools do (no "unexpected BrokenPipeError ... please report
    it", exit 141 as a shell reports a tool that SIGPIPE ended)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "render", "--help"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child has started: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err
