"""Builds opencl_functions.device._C, the opencl device for PyTorch, in place:
    python setup_device.py build_ext --inplace        (make device)
Apart from setup.py (the students' pybind11 module) because it compiles against torch's
C++ headers, which take long to compile and fill compiler errors with templates. With
ninja on PATH, only changed files are rebuilt."""
import glob

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

device = CppExtension(
    "opencl_functions.device._C",
    sources=[*sorted(glob.glob("opencl_functions/runtime/*.cpp")),
             *sorted(glob.glob("opencl_functions/device/csrc/**/*.cpp", recursive=True))],
    define_macros=[("CL_TARGET_OPENCL_VERSION", "120")],
    libraries=["OpenCL", "clblast"],
    extra_compile_args=["-O2", "-g0", "-Wall", "-Wno-deprecated-declarations", "-Wno-unused-parameter"],
)

setup(name="opencl_functions_device", ext_modules=[device],
      cmdclass={"build_ext": BuildExtension.with_options(no_python_abi_suffix=False)}, zip_safe=False)
