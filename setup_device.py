"""Builds torch_opencl._C, the opencl device for PyTorch, in place:
    python setup_device.py build_ext --inplace        (make device, after make build)
Apart from setup.py (the students' pybind11 module) because it compiles against torch's
C++ headers, which take long to compile and fill compiler errors with templates. With
ninja on PATH, only changed files are rebuilt. setup.py takes device_extension() from here
for package builds (pip install ., make wheel).

The OpenCL runtime (opencl_functions/runtime/) is compiled once, into the library's module
_core; _C links that module (in the opencl_functions package beside torch_opencl, rpath
$ORIGIN/../opencl_functions), so the library and the device share one runtime per process:
one context, queue and program cache per OpenCL device. _core must be built first (make device depends on make build)."""
import glob
import os
import sysconfig

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = "torch_opencl._C"
CORE = "opencl_functions._core"


def device_extension():
    """The device's extension, compiled against the torch that runs this build (its C++ ABI
    is that torch's: the module loads under the same torch release only). It links _core,
    whose folder build_ext_command() adds when it builds it."""
    from torch.utils.cpp_extension import CppExtension

    sources = sorted(glob.glob("torch_opencl/csrc/**/*.cpp", root_dir=HERE, recursive=True))
    return CppExtension(
        DEVICE,
        sources=sources,
        include_dirs=[HERE],  # the library's headers as "opencl_functions/runtime/..."
        define_macros=[("CL_TARGET_OPENCL_VERSION", "120")],
        libraries=["OpenCL", "clblast"],
        extra_compile_args=["-O2", "-g0", "-Wall", "-Wno-deprecated-declarations", "-Wno-unused-parameter"],
        extra_link_args=[f"-l:{CORE.rsplit('.', 1)[1]}{sysconfig.get_config_var('EXT_SUFFIX')}",
                         "-Wl,-rpath,$ORIGIN/../opencl_functions"],
    )


def build_ext_command():
    """torch's build_ext (ninja when on PATH), keeping the Python ABI suffix of module names,
    and linking the device against the _core this same build put in place (or built)."""
    from torch.utils.cpp_extension import BuildExtension

    base = BuildExtension.with_options(no_python_abi_suffix=False)

    class DeviceBuild(base):
        def build_extension(self, ext):
            if ext.name == DEVICE:
                core = self.get_ext_fullpath(CORE)
                if not os.path.exists(core):
                    raise SystemExit(f"opencl_functions: the device links the library's module, which is not built "
                                     f"({core}): make build (or python setup.py build_ext --inplace) first")
                ext.library_dirs = [*ext.library_dirs, os.path.dirname(os.path.abspath(core))]
            super().build_extension(ext)

    return DeviceBuild


if __name__ == "__main__":
    setup(name="opencl_functions_device", ext_modules=[device_extension()],
          cmdclass={"build_ext": build_ext_command()}, packages=[], zip_safe=False)
