import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _binary():
    b = os.environ.get("STOKER_BINARY") or str(ROOT / "build" / "stoker")
    if not os.path.exists(b):
        pytest.skip(f"stoker binary not built at {b} (run scripts/build.sh)")
    return b


@pytest.fixture(scope="session")
def stoker():
    b = _binary()

    def run(*args, check=True, timeout=300, env=None):
        e = dict(os.environ)
        if env:
            e.update(env)
        p = subprocess.run([b, *map(str, args)], capture_output=True, text=True,
                           timeout=timeout, env=e)
        if check and p.returncode != 0:
            raise AssertionError(f"stoker {' '.join(map(str, args))} -> {p.returncode}\n"
                                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    return run


@pytest.fixture(scope="session")
def images(stoker, tmp_path_factory):
    d = tmp_path_factory.mktemp("imgs")
    stoker("gen", "images", "--out", d, "--count", 96, "--seed", 3, "--classes", 4)
    return d
