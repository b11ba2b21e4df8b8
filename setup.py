"""Builds opencl_functions._core, the pybind11 module, in place:
    python setup.py build_ext --inplace
It links the system's OpenCL ICD loader and CLBlast; no libtorch is needed."""
from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

core = Pybind11Extension(
    "opencl_functions._core",
    sources=[
        "opencl_functions/ocl_runtime.cpp",
        "opencl_functions/opencl-functions.cpp",
        "opencl_functions/ocl_wrapper_torch.cpp",
        "opencl_functions/backward.cpp",
        "opencl_functions/baselines.cpp",
    ],
    define_macros=[("CL_TARGET_OPENCL_VERSION", "120")],
    libraries=["OpenCL", "clblast"],
    cxx_std=17,
    extra_compile_args=["-O2", "-Wall", "-Wno-deprecated-declarations"],
)

setup(name="opencl_functions", ext_modules=[core], cmdclass={"build_ext": build_ext}, zip_safe=False)
