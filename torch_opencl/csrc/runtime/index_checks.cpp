// Index checks on the opencl device (Stream::index_record): kernels record the first index
// found out of range in a small buffer of each device, and the next wait for the device reads
// it back and raises torch's error naming the operator, the index and the dimension.
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../check.h"
#include "stream.h"

namespace oclf::device {

namespace {
// The names in the index record by code (code 0: none named), and the codes by name: looked
// up on every indexing operator, and every generated kernel that checks indices adds one.
// A value check's entry holds its messages instead (failure k: messages[k - 1]).
struct IndexOps {
  std::mutex mutex;
  std::vector<std::string> names{"an indexing operator: index"};
  std::vector<std::vector<std::string>> messages{{}};
  std::unordered_map<std::string, int> codes{{names[0], 0}};

  int code(std::string key, std::vector<std::string> failures) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto [at, added] = codes.try_emplace(key, int(names.size()));
    if (added) {
      names.push_back(std::move(key));
      messages.push_back(std::move(failures));
    }
    return at->second;
  }
};
IndexOps& index_ops() {
  static IndexOps ops;
  return ops;
}
}  // namespace

bool Stream::index_checks_at_call() const {
  if (sync_each_) return true;
  const std::string checks = setting("DEVICE_INDEX_CHECKS");  // read at each check: a program may set it late
  if (checks != "" && checks != "device" && checks != "call")
    throw Error("opencl: " + setting_variable("DEVICE_INDEX_CHECKS") + " must be 'device' or 'call', got '" + checks +
                    "'",
                CL_INVALID_VALUE);
  return checks == "call";
}

int Stream::index_op_code(const char* op, const char* noun) {
  return index_ops().code(std::string(op) + ": " + noun, {});
}

int Stream::value_check_code(const std::vector<std::string>& messages) {
  std::string key = "\n";  // no operator's name starts so: the keys of the two kinds never meet
  for (const std::string& m : messages) key += m + "\n";
  return index_ops().code(std::move(key), messages);
}

cl_mem Stream::index_record() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (index_record_ == nullptr) {
    const int64_t zeros[kIndexRecordWords] = {0};
    cl_int status = CL_SUCCESS;
    cl_mem made = clCreateBuffer(rt_.context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros,
                                 const_cast<int64_t*>(zeros), &status);
    CL_CHECK(status);
    index_record_ = made;  // never released, as the device itself
  }
  return index_record_;
}

// The record read at a wait: when a check found an index out of range, the record is zeroed
// for the next one and the error raised here.
void Stream::raise_index_error(const int64_t* record) {
  int32_t flag = 0;
  std::memcpy(&flag, record, sizeof flag);
  if (flag == 0) return;
  static const int64_t zeros[kIndexRecordWords] = {0};
  {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    CL_CHECK(clEnqueueWriteBuffer(queue(), index_record_, CL_TRUE, 0, sizeof zeros, zeros, 0, nullptr, nullptr));
  }
  std::string op;
  std::vector<std::string> failures;
  {
    IndexOps& ops = index_ops();
    std::lock_guard<std::mutex> lock(ops.mutex);
    const size_t code = record[1] >= 0 && size_t(record[1]) < ops.names.size() ? size_t(record[1]) : 0;
    op = ops.names[code];
    failures = ops.messages[code];
  }
  // (The setting read as is: a wrong value must not hide this error behind its own.)
  const bool at_call = sync_each_ || setting("DEVICE_INDEX_CHECKS") == "call";
  const std::string deferred =
      at_call ? ""
              : " (checked on the device, raised at the first wait for it after the operator: " +
                    setting_variable("DEVICE_INDEX_CHECKS") + "=call raises at the call)";
  if (!failures.empty()) {
    const size_t k = record[2] >= 1 && size_t(record[2]) <= failures.size() ? size_t(record[2]) : 1;
    DEVICE_CHECK(false, failures[k - 1], deferred);
  }
  const std::string where = record[4] >= 0 ? "dimension " + std::to_string(record[4]) + " with size " +
                                                 std::to_string(record[3])
                                           : "a dimension of size " + std::to_string(record[3]);
  // torch's exception types: a RuntimeError from gather, scatter and index_add, an IndexError
  // from the others (index_select, embedding, indexing)
  // (op names the operator and what it checked: "gather: index")
  const bool runtime_error =
      op.rfind("gather", 0) == 0 || op.rfind("index_add", 0) == 0 || op.rfind("scatter", 0) == 0;
  DEVICE_CHECK(!runtime_error, "opencl: ", op, " ", record[2], " is out of bounds for ", where, deferred);
  DEVICE_CHECK_INDEX(false, "opencl: ", op, " ", record[2], " is out of bounds for ", where, deferred);
}

}  // namespace oclf::device
