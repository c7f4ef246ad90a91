# The extension module kvtools._kv is declared by kvtools_build.py (cffi,
# API mode); the rest of the metadata is in pyproject.toml.
#
# libkv's C sources (../lib) are compiled here, into the build directory,
# several at a time, and linked into the extension -- unless KVTOOLS_LIBKV
# names a static libkv built with -fPIC (make python does that).  The
# shipped model configs (../tests/configs) go into the package as
# kvtools/configs, for kvtools.testing's fixtures.
import glob
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvtools_build  # noqa: E402


class build_ext_libkv(build_ext):
    def build_extensions(self):
        if not os.environ.get("KVTOOLS_LIBKV"):
            srcs = kvtools_build.lib_sources()
            out = os.path.join(self.build_temp, "libkv")

            def one(src):
                return self.compiler.compile(
                    [src], output_dir=out, include_dirs=[kvtools_build.LIB],
                    macros=[("_GNU_SOURCE", None)],
                    extra_postargs=kvtools_build.CFLAGS + ["-fPIC"])[0]

            with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
                objs = list(ex.map(one, srcs))
            for ext in self.extensions:
                ext.extra_objects = list(ext.extra_objects or []) + objs
        super().build_extensions()


class build_py_configs(build_py):
    def run(self):
        super().run()
        src = os.path.join(HERE, "..", "tests", "configs")
        dst = os.path.join(self.build_lib, "kvtools", "configs")
        os.makedirs(dst, exist_ok=True)
        for f in sorted(glob.glob(os.path.join(src, "*.json"))):
            self.copy_file(f, dst)


setup(cffi_modules=["kvtools_build.py:ffibuilder"],
      cmdclass={"build_ext": build_ext_libkv, "build_py": build_py_configs})
