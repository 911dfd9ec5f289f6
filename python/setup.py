"""Builds libunimem_torch.so with cargo (from the workspace one folder up) and ships it in the
package. `UNIMEM_TORCH_LIB=path/to/libunimem_torch.so` ships a library built beforehand.

The wheel holds no CPython extension (the library is loaded with ctypes), so it is tagged
`py3-none-<platform>`: one wheel serves every CPython 3 on that platform."""

import os
import pathlib
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # wheel not installed: only source installs
    bdist_wheel = None

HERE = pathlib.Path(__file__).resolve().parent
LIBRARY = "libunimem_torch.so"


def built_library():
    given = os.environ.get("UNIMEM_TORCH_LIB")
    if given:
        return pathlib.Path(given)
    workspace = HERE.parent
    if not (workspace / "Cargo.toml").is_file():
        raise SystemExit(f"no Cargo workspace at {workspace}: set UNIMEM_TORCH_LIB to a built {LIBRARY}")
    subprocess.check_call(["cargo", "build", "--release", "-p", "unimem-torch"], cwd=workspace)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", workspace / "target"))
    return target / "release" / LIBRARY


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        out = pathlib.Path(self.build_lib) / "unimem_torch"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built_library(), out / LIBRARY)


commands = {"build_py": BuildWithLibrary}
if bdist_wheel is not None:

    class PlatformWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    commands["bdist_wheel"] = PlatformWheel

setup(cmdclass=commands)
