"""Builds opencl_functions._core, the pybind11 module, in place:
    python setup.py build_ext --inplace
It links the system's OpenCL ICD loader and CLBlast; no libtorch is needed. Sources
compile in parallel, and only those older than their object or any header recompile
(a student's edit of opencl-functions.cpp rebuilds that file alone)."""
import glob
import os

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

HEADERS = glob.glob("opencl_functions/**/*.hpp", recursive=True)


def needs_recompile(obj: str, src: str) -> bool:
    if not os.path.exists(obj):
        return True
    return os.path.getmtime(obj) < max(os.path.getmtime(p) for p in [src, *HEADERS])


ParallelCompile("OCLF_BUILD_JOBS", default=0, needs_recompile=needs_recompile).install()

core = Pybind11Extension(
    "opencl_functions._core",
    sources=[
        "opencl_functions/opencl-functions.cpp",
        "opencl_functions/bindings.cpp",
        "opencl_functions/backward.cpp",
        "opencl_functions/baselines.cpp",
        *sorted(glob.glob("opencl_functions/runtime/*.cpp")),
    ],
    depends=HEADERS,  # an edited header alone rebuilds too (the fast paths live in headers)
    define_macros=[("CL_TARGET_OPENCL_VERSION", "120")],
    libraries=["OpenCL", "clblast"],
    cxx_std=17,
    extra_compile_args=["-O2", "-Wall", "-Wno-deprecated-declarations"],
)

setup(name="opencl_functions", ext_modules=[core], cmdclass={"build_ext": build_ext}, zip_safe=False)
