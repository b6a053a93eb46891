"""Builds fairshm's cdylib with cargo (unless FAIRSHM_LIB names one already built) and
ships it inside the package, so `pip install bindings/python` gives a package that needs
nothing else at run time."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


class BuildWithCdylib(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("FAIRSHM_LIB")
        if lib:
            src = Path(lib)
        else:
            target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
            subprocess.check_call(
                ["cargo", "build", "--release", "--lib", "--manifest-path", str(ROOT / "Cargo.toml")]
            )
            src = target / "release" / "libfairshm.so"
        dest = Path(self.build_lib) / "fairshm" / "libfairshm.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


setup(cmdclass={"build_py": BuildWithCdylib})
