"""Builds opencl_functions.device._C, the opencl device for PyTorch, in place:
    python setup_device.py build_ext --inplace        (make device)
Apart from setup.py (the students' pybind11 module) because it compiles against torch's
C++ headers, which take long to compile and fill compiler errors with templates. With
ninja on PATH, only changed files are rebuilt. setup.py takes device_extension() from here
for package builds (pip install ., make wheel)."""
import glob
import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def device_extension():
    """The device's extension, compiled against the torch that runs this build (its C++ ABI
    is that torch's: the module loads under the same torch release only)."""
    from torch.utils.cpp_extension import CppExtension

    sources = [*sorted(glob.glob("opencl_functions/runtime/*.cpp", root_dir=HERE)),
               *sorted(glob.glob("opencl_functions/device/csrc/**/*.cpp", root_dir=HERE, recursive=True))]
    return CppExtension(
        "opencl_functions.device._C",
        sources=sources,
        define_macros=[("CL_TARGET_OPENCL_VERSION", "120")],
        libraries=["OpenCL", "clblast"],
        extra_compile_args=["-O2", "-g0", "-Wall", "-Wno-deprecated-declarations", "-Wno-unused-parameter"],
    )


def build_ext_command():
    """torch's build_ext (ninja when on PATH), keeping the Python ABI suffix of module names."""
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension.with_options(no_python_abi_suffix=False)


if __name__ == "__main__":
    setup(name="opencl_functions_device", ext_modules=[device_extension()],
          cmdclass={"build_ext": build_ext_command()}, packages=[], zip_safe=False)
