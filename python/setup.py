# The extension module kvtools._kv is declared by kvtools_build.py (cffi,
# API mode); the rest of the metadata is in pyproject.toml.  The shipped
# model configs (tests/configs in the source tree) go into the package
# as kvtools/configs, for kvtools.testing's fixtures.
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_configs(build_py):
    def run(self):
        super().run()
        src = os.path.join(HERE, "..", "tests", "configs")
        dst = os.path.join(self.build_lib, "kvtools", "configs")
        os.makedirs(dst, exist_ok=True)
        for f in sorted(glob.glob(os.path.join(src, "*.json"))):
            shutil.copy(f, dst)


setup(cffi_modules=["kvtools_build.py:ffibuilder"],
      cmdclass={"build_py": build_py_configs})
