"""The first commands of a fresh clone: scripts/qt_libs.sh names the missing system libraries and
the install line within a second, and the build configuration makes setuptools print no banner."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _elf_needing(tmp_path: Path, soname: str) -> Path:
    """A real shared object linked against a library named ``soname`` that exists nowhere on the system."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test libraries")
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    (stub_dir / "stub.c").write_text("int fusion_stub(void) { return 1; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(stub_dir / soname), str(stub_dir / "stub.c")],
        check=True,
    )
    (tmp_path / "plugin.c").write_text("int fusion_stub(void);\nint plugin(void) { return fusion_stub(); }\n")
    plugin = tmp_path / "libqfake.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(plugin), str(tmp_path / "plugin.c"), str(stub_dir / soname)],
        check=True,
    )
    shutil.rmtree(stub_dir)  # now the plugin needs a library that is not there
    return plugin


LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb platform is Linux's")


@LINUX
def test_missing_xcb_library_prints_the_install_line_and_exits_3(tmp_path):
    plugin = _elf_needing(tmp_path, "libfusion-xcb-test.so.0")  # a name no system has
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "scripts/qt_libs.sh", str(plugin)], cwd=ROOT, capture_output=True, text=True)
    assert time.perf_counter() - t0 < 5
    assert proc.returncode == 3
    assert "libfusion-xcb-test.so.0" in proc.stderr
    os_release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    if "debian" in os_release or "ubuntu" in os_release:
        assert "sudo apt-get install libfusion-xcb-test0" in proc.stderr


@LINUX
def test_debian_package_names_follow_the_soname(tmp_path):
    plugin = _elf_needing(tmp_path, "libfusion-test-1.so.3")  # like libdbus-1.so.3 -> libdbus-1-3
    proc = subprocess.run(["bash", "scripts/qt_libs.sh", str(plugin)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 3 and "libfusion-test-1.so.3" in proc.stderr
    if "debian" in Path("/etc/os-release").read_text(errors="replace"):
        assert "apt-get install libfusion-test-1-3" in proc.stderr


@LINUX
def test_a_plugin_with_every_library_passes(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test libraries")
    (tmp_path / "ok.c").write_text("int plugin(void) { return 0; }\n")
    plugin = tmp_path / "libqok.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin), str(tmp_path / "ok.c")], check=True)
    proc = subprocess.run(["bash", "scripts/qt_libs.sh", str(plugin)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""


@LINUX
def test_app_sh_stops_before_set_up_when_xcb_libraries_are_missing(tmp_path):
    """With a display and a Qt whose xcb plugin lacks a library, app.sh says so and exits non-zero at once."""
    proc = subprocess.run(["bash", "scripts/qt_libs.sh"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        pytest.skip("this machine has every library the xcb platform needs")
    env = {"PATH": "/usr/bin:/bin", "DISPLAY": ":97", "HOME": str(tmp_path)}
    t0 = time.perf_counter()
    app = subprocess.run(["bash", "scripts/app.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert time.perf_counter() - t0 < 10
    assert app.returncode == 3
    assert "Install" in app.stderr and proc.stderr.splitlines()[1] in app.stderr


def test_the_editable_build_prints_no_warning_banner(tmp_path):
    """What scripts/setup.sh installs (an editable wheel) builds without setuptools' BuildBackendWarning
    ("Editable installation ... Please be careful with folders ..."): package-dir "" = "." makes it a .pth."""
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "default",
            "-c",
            f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path)!r})",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    output = proc.stdout + proc.stderr
    assert "Warning" not in output and "Please be careful" not in output, output


def test_the_oldest_smoke_run_pins_the_lower_bounds_pyproject_admits():
    """scripts/test_oldest.sh tests what pyproject.toml promises: its transformers pin is the
    range's lower bound, and torch is pinned to the CPU build that lies on disk (as in constraints.txt)."""
    [lower] = re.findall(r'^\s*"transformers>=([0-9.]+),', (ROOT / "pyproject.toml").read_text(), re.M)

    def pins(name: str) -> dict[str, str]:
        lines = (ROOT / name).read_text().splitlines()
        return dict(line.split("==") for line in lines if line and not line.startswith("#"))

    oldest = pins("constraints-oldest.txt")
    assert oldest["transformers"] in (lower, f"{lower}.0")
    assert oldest["torch"] == pins("constraints.txt")["torch"]
