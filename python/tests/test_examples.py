"""The examples run (in their --quick mode, on generated data)."""

import os
import subprocess
import sys

import pytest

from stoker_testing import ROOT, needs_ext

pytest.importorskip("torch")
pytest.importorskip("torchvision")


def run(name, *args):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), "--quick", *args],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


@needs_ext
def test_resnet_pipeline_both_loaders():
    out = run("resnet_pipeline.py", "--loader", "stoker")
    assert "loader=stoker" in out and "samples/s" in out
    out = run("resnet_pipeline.py", "--loader", "torch", "--workers", "0")
    assert "loader=torch" in out


@needs_ext
def test_watch_loop():
    out = run("watch_loop.py")
    assert "waiting for data: DataLoader" in out and "verdict:" in out


def test_tune_folder():
    out = run("tune_folder.py")
    assert "recommended: DataLoader(" in out and "chart:" in out
