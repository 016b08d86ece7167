"""Builds the rdmakit Python package through the project's CMake (python/CMakeLists.txt).

The CMake build assembles the whole package (extensions, librdmakit copied next to them with RPATH
$ORIGIN, pure-Python files, stubs) in <build>/python/rdmakit; this copies that directory into the wheel.
RDMAKIT_CMAKE_ARGS adds CMake arguments (e.g. "-DRDMAKIT_WITH_VERBS=OFF"); RDMAKIT_BUILD_JOBS the parallel jobs
(default 2). RDMAKIT_PREBUILT_PACKAGE names an already assembled package directory to copy instead of building
(python_pip_install uses the build tree's; python_pip_install_full runs the real build).
"""

import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    """Configures and builds the Python targets with CMake, then copies the assembled package."""

    def build_extension(self, ext):
        destination = pathlib.Path(self.get_ext_fullpath(ext.name)).parent
        prebuilt = os.environ.get("RDMAKIT_PREBUILT_PACKAGE")
        package = pathlib.Path(prebuilt) if prebuilt else self.cmake_build()
        shutil.copytree(package, destination, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def cmake_build(self):
        """Configures and builds the package's targets; the directory where CMake assembled the package."""
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}", "-DRDMAKIT_PYTHON=ON", "-DRDMAKIT_BUILD_TESTS=OFF",
            "-DRDMAKIT_BUILD_EXAMPLES=OFF", "-DRDMAKIT_BUILD_TOOLS=OFF", "-DRDMAKIT_WERROR=OFF",
            # a few large translation units instead of ~150: 2.5x less compile time (CMakeLists.txt)
            "-DRDMAKIT_UNITY_BUILD=ON",
        ] + shlex.split(os.environ.get("RDMAKIT_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        targets = ["rdmakit_python"]
        help_text = subprocess.run(["cmake", "--build", str(build), "--target", "help"], check=True,
                                   capture_output=True, text=True).stdout
        if "_rdmakit_torch" in help_text:  # the torch.distributed backend, when libtorch-dev is there
            targets.append("_rdmakit_torch")
        # Only the package's targets (the library, the extensions), not the tests, tools and examples; two jobs
        # unless RDMAKIT_BUILD_JOBS says otherwise (a torch translation unit takes over 1 GB to compile).
        jobs = os.environ.get("RDMAKIT_BUILD_JOBS", "2")
        subprocess.run(["cmake", "--build", str(build), "-j", jobs, "--target", *targets], check=True)
        return build / "python" / "rdmakit"


setup(
    packages=["rdmakit"],
    package_dir={"": "python"},
    package_data={"rdmakit": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("rdmakit._rdmakit", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
