// Status names and error checks: see errors.hpp.
#include "errors.hpp"

#include <clblast.h>

#include <cstring>

namespace oclf {

const char* status_name(cl_int status) {
  switch (status) {
#define NAME(x) \
  case x:       \
    return #x;
    NAME(CL_SUCCESS)
    NAME(CL_DEVICE_NOT_FOUND)
    NAME(CL_DEVICE_NOT_AVAILABLE)
    NAME(CL_COMPILER_NOT_AVAILABLE)
    NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    NAME(CL_OUT_OF_RESOURCES)
    NAME(CL_OUT_OF_HOST_MEMORY)
    NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
    NAME(CL_MEM_COPY_OVERLAP)
    NAME(CL_IMAGE_FORMAT_MISMATCH)
    NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    NAME(CL_BUILD_PROGRAM_FAILURE)
    NAME(CL_MAP_FAILURE)
    NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    NAME(CL_COMPILE_PROGRAM_FAILURE)
    NAME(CL_LINKER_NOT_AVAILABLE)
    NAME(CL_LINK_PROGRAM_FAILURE)
    NAME(CL_DEVICE_PARTITION_FAILED)
    NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    NAME(CL_INVALID_VALUE)
    NAME(CL_INVALID_DEVICE_TYPE)
    NAME(CL_INVALID_PLATFORM)
    NAME(CL_INVALID_DEVICE)
    NAME(CL_INVALID_CONTEXT)
    NAME(CL_INVALID_QUEUE_PROPERTIES)
    NAME(CL_INVALID_COMMAND_QUEUE)
    NAME(CL_INVALID_HOST_PTR)
    NAME(CL_INVALID_MEM_OBJECT)
    NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    NAME(CL_INVALID_IMAGE_SIZE)
    NAME(CL_INVALID_SAMPLER)
    NAME(CL_INVALID_BINARY)
    NAME(CL_INVALID_BUILD_OPTIONS)
    NAME(CL_INVALID_PROGRAM)
    NAME(CL_INVALID_PROGRAM_EXECUTABLE)
    NAME(CL_INVALID_KERNEL_NAME)
    NAME(CL_INVALID_KERNEL_DEFINITION)
    NAME(CL_INVALID_KERNEL)
    NAME(CL_INVALID_ARG_INDEX)
    NAME(CL_INVALID_ARG_VALUE)
    NAME(CL_INVALID_ARG_SIZE)
    NAME(CL_INVALID_KERNEL_ARGS)
    NAME(CL_INVALID_WORK_DIMENSION)
    NAME(CL_INVALID_WORK_GROUP_SIZE)
    NAME(CL_INVALID_WORK_ITEM_SIZE)
    NAME(CL_INVALID_GLOBAL_OFFSET)
    NAME(CL_INVALID_EVENT_WAIT_LIST)
    NAME(CL_INVALID_EVENT)
    NAME(CL_INVALID_OPERATION)
    NAME(CL_INVALID_GL_OBJECT)
    NAME(CL_INVALID_BUFFER_SIZE)
    NAME(CL_INVALID_MIP_LEVEL)
    NAME(CL_INVALID_GLOBAL_WORK_SIZE)
    NAME(CL_INVALID_PROPERTY)
    NAME(CL_INVALID_IMAGE_DESCRIPTOR)
    NAME(CL_INVALID_COMPILER_OPTIONS)
    NAME(CL_INVALID_LINKER_OPTIONS)
    NAME(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef NAME
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "CL_UNKNOWN_ERROR";
  }
}

const char* clblast_status_name(int status) {
  // CLBlast's own codes, spelled by its header's enum (a misspelt name does not compile).
  switch (static_cast<clblast::StatusCode>(status)) {
#define NAME(code)                   \
  case clblast::StatusCode::code: \
    return #code;
    NAME(kNotImplemented)
    NAME(kInvalidMatrixA)
    NAME(kInvalidMatrixB)
    NAME(kInvalidMatrixC)
    NAME(kInvalidVectorX)
    NAME(kInvalidVectorY)
    NAME(kInvalidDimension)
    NAME(kInvalidLeadDimA)
    NAME(kInvalidLeadDimB)
    NAME(kInvalidLeadDimC)
    NAME(kInvalidIncrementX)
    NAME(kInvalidIncrementY)
    NAME(kInsufficientMemoryA)
    NAME(kInsufficientMemoryB)
    NAME(kInsufficientMemoryC)
    NAME(kInsufficientMemoryX)
    NAME(kInsufficientMemoryY)
    NAME(kInsufficientMemoryTemp)
    NAME(kInvalidBatchCount)
    NAME(kInvalidOverrideKernel)
    NAME(kMissingOverrideParameter)
    NAME(kInvalidLocalMemUsage)
    NAME(kNoHalfPrecision)
    NAME(kNoDoublePrecision)
    NAME(kInvalidVectorScalar)
    NAME(kInsufficientMemoryScalar)
    NAME(kDatabaseError)
    NAME(kUnknownError)
    NAME(kUnexpectedError)
#undef NAME
    default:
      return status_name(status);  // CLBlast passes OpenCL's own codes through
  }
}

std::string describe_failure(const char* name, int status, const std::string& call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(name) + " (" + std::to_string(status) + ") in " + call + " at " + (base ? base + 1 : file) +
         ":" + std::to_string(line);
}

void check(cl_int status, const char* call, const char* file, int line) {
  if (status != CL_SUCCESS) throw Error(describe_failure(status_name(status), status, call, file, line), status);
}

void check_clblast(int status, const char* call, const char* file, int line) {
  if (status != 0) throw Error(describe_failure(clblast_status_name(status), status, call, file, line), status);
}

}  // namespace oclf
