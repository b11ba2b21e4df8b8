// How the CPU fallback runs an operator: each device tensor among the arguments gets a host
// copy, torch's CPU kernel runs on the copies, written arguments are copied back and results
// moved to the arguments' device (the steps of torch's at::native::cpu_fallback), with one
// difference: arguments that share memory keep sharing it on the host. Where a written
// argument shares its storage with another argument (kthvalue(t, 5, out=(t, i)), take's out=
// over its index), or refers to one element more than once (an expanded out=), the span of
// storage they cover is copied once and each gets a host view of it with its own offset and
// strides; so the CPU kernel sees the overlap as it would on the CPU: it raises where torch
// raises ("unsupported operation: ...") and computes what torch computes elsewhere. Copied one
// by one, each would read an unchanged copy and the last one copied back would win.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <optional>
#include <vector>

#include "fallback.h"

namespace oclf::device {

namespace {

// One device tensor among the arguments: argument `index`, element `element` of a list
// (-1 for a plain tensor), and its host copy (a view of a SharedSpan's bytes when `shared`).
struct Argument {
  size_t index;
  int64_t element;
  at::Tensor device;
  bool written;
  at::Tensor host;
  bool shared = false;
};

// Bytes from a tensor's storage offset to one past its last element (strides are >= 0).
int64_t first_byte(const at::Tensor& t) { return t.storage_offset() * int64_t(t.element_size()); }
int64_t end_byte(const at::Tensor& t) {
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return (last + 1) * int64_t(t.element_size());
}

// A tensor of `like`'s dtype and flags over `storage`, starting `offset` bytes in.
at::Tensor view_of(const at::Tensor& like, const at::Storage& storage, int64_t offset, at::Device where) {
  at::Tensor t = at::empty({0}, like.options().device(where));
  t.set_(storage, offset / int64_t(like.element_size()), like.sizes(), like.strides());
  t.unsafeGetTensorImpl()->_set_conj(like.is_conj());
  t.unsafeGetTensorImpl()->_set_neg(like.is_neg());
  return t;
}

// Arguments sharing one device storage, with a written one among them (or a written one
// that refers to an element twice): bytes [low, high) of the storage go to the host once.
struct SharedSpan {
  std::vector<Argument*> members;
  int64_t low = 0, high = 0;
  at::Tensor device_bytes, host_bytes;  // uint8 views of the span on either side

  void to_host() {
    low = INT64_MAX;
    for (Argument* a : members) low = std::min(low, first_byte(a->device));
    low -= low % 16;  // a multiple of every element size, so each member's offset divides
    high = low;
    for (Argument* a : members)
      if (a->device.numel() > 0) high = std::max(high, end_byte(a->device));
    const at::Tensor& any = members.front()->device;
    device_bytes = at::empty({0}, any.options().dtype(at::kByte));
    device_bytes.set_(any.storage(), low, {high - low}, {1});
    host_bytes = device_bytes.cpu();
    for (Argument* a : members) {
      a->host = view_of(a->device, host_bytes.storage(), first_byte(a->device) - low, at::kCPU);
      a->shared = true;
    }
  }

  // Whether the CPU kernel left a member where it was made (an out= it resized is not), so
  // copying the span back writes it.
  bool holds(const Argument& a) const {
    return a.host.storage().is_alias_of(host_bytes.storage()) && a.host.sizes() == a.device.sizes() &&
           a.host.strides() == a.device.strides() && first_byte(a.host) + low == first_byte(a.device);
  }
};

bool writes(const c10::Argument& schema) { return schema.alias_info() && schema.alias_info()->isWrite(); }

// The host copies, shared where the device tensors' memory is shared with a written one.
void make_host_copies(std::vector<Argument>& args, std::vector<SharedSpan>& spans) {
  std::map<const c10::StorageImpl*, std::vector<Argument*>> by_storage;
  for (Argument& a : args) by_storage[a.device.storage().unsafeGetStorageImpl()].push_back(&a);
  for (auto& [storage, members] : by_storage) {
    bool written = false, overlapping = false;
    for (Argument* a : members) {
      written = written || a->written;
      overlapping = overlapping || (a->written && at::has_internal_overlap(a->device) == at::MemOverlap::Yes);
    }
    if (written && (members.size() > 1 || overlapping)) {
      spans.push_back(SharedSpan{members});
      spans.back().to_host();
    } else {
      for (Argument* a : members) a->host = a->device.cpu();
    }
  }
}

}  // namespace

void run_with_host_copies(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema_args = op.schema().arguments();
  const size_t begin = stack->size() - schema_args.size();
  std::vector<Argument> args;
  std::optional<at::Device> target;  // where results go: a Device argument's, else the first tensor's
  std::optional<at::Device> first_in_list;
  auto note = [&](size_t i, int64_t element, const at::Tensor& t) {
    if (!t.defined()) return;
    if (element < 0 && !target) target = t.device();
    if (element >= 0 && !first_in_list) first_in_list = t.device();
    if (t.device().is_privateuseone()) args.push_back({i, element, t, writes(schema_args[i]), {}});
  };
  for (size_t i = 0; i < schema_args.size(); ++i) {
    c10::IValue& v = (*stack)[begin + i];
    if (v.isTensor()) {
      note(i, -1, v.toTensor());
    } else if (v.isTensorList()) {
      const std::vector<at::Tensor> list = v.toTensorVector();
      for (size_t e = 0; e < list.size(); ++e) note(i, int64_t(e), list[e]);
    } else if (v.isOptionalTensorList()) {
      const auto list = v.toOptionalTensorVector();
      for (size_t e = 0; e < list.size(); ++e)
        if (list[e].has_value()) note(i, int64_t(e), *list[e]);
    }
  }
  for (size_t i = 0; i < schema_args.size(); ++i) {
    c10::IValue& v = (*stack)[begin + i];
    if (v.isDevice()) {
      target = v.toDevice();
      v = c10::IValue(c10::Device(at::kCPU));
    }
  }
  if (!target) target = first_in_list;

  std::vector<SharedSpan> spans;  // its members point into args, which stays as it is from here
  make_host_copies(args, spans);
  // The original arguments (lists with their device tensors), for the returns that alias them.
  const std::vector<c10::IValue> originals(stack->begin() + int64_t(begin), stack->end());
  std::map<size_t, std::vector<at::Tensor>> lists;  // the host lists, made whole before they go on the stack
  std::map<size_t, std::vector<std::optional<at::Tensor>>> optional_lists;
  for (const Argument& a : args) {
    const c10::IValue& v = (*stack)[begin + a.index];
    if (a.element < 0) {
      (*stack)[begin + a.index] = c10::IValue(a.host);
    } else if (v.isTensorList()) {
      lists.try_emplace(a.index, v.toTensorVector()).first->second[size_t(a.element)] = a.host;
    } else {
      optional_lists.try_emplace(a.index, v.toOptionalTensorVector()).first->second[size_t(a.element)] = a.host;
    }
  }
  for (auto& [i, list] : lists) (*stack)[begin + i] = c10::IValue(c10::List<at::Tensor>(std::move(list)));
  for (auto& [i, list] : optional_lists)
    (*stack)[begin + i] = c10::IValue(c10::List<std::optional<at::Tensor>>(std::move(list)));

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  // Written arguments back to the device: each shared span in one piece, then the others
  // (and a shared one the CPU kernel resized away from its span) one by one.
  for (SharedSpan& s : spans) {
    s.device_bytes.copy_(s.host_bytes);
    for (Argument* a : s.members)
      if (a->written && !s.holds(*a)) at::_copy_from_and_resize(a->host, a->device);
  }
  for (const Argument& a : args)
    if (a.written && !a.shared) at::_copy_from_and_resize(a.host, a.device);

  // Results: a written argument's alias is the device argument itself; others are copied to
  // the target device (a view operator's result too: torch's fallback warns of that).
  const auto& schema_returns = op.schema().returns();
  const size_t returns_begin = stack->size() - schema_returns.size();
  for (size_t r = 0; r < schema_returns.size(); ++r) {
    c10::IValue& v = (*stack)[returns_begin + r];
    const c10::AliasInfo* alias = schema_returns[r].alias_info();
    if (alias && alias->isWrite()) {
      bool found = false;
      for (size_t i = 0; i < schema_args.size() && !found; ++i) {
        const c10::AliasInfo* in = schema_args[i].alias_info();
        if (in && *in == *alias && (originals[i].isTensor() || originals[i].isTensorList())) {
          v = originals[i];
          found = true;
        }
      }
      TORCH_CHECK(found, "The operator ", op.schema().operator_name(), " returns an alias of no argument: ",
                  schema_returns[r]);
      continue;
    }
    if (alias) {
      TORCH_WARN("opencl: ", op.schema().operator_name(), " returns a view of an argument, but it ran on the ",
                 "CPU: its result is a copy on the device, which shares no memory with the argument");
    }
    if (!target) continue;
    if (v.isTensor() && v.toTensor().defined()) {
      v = c10::IValue(v.toTensor().to(*target));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list = v.toTensorVector();
      for (at::Tensor& t : list)
        if (t.defined()) t = t.to(*target);
      v = c10::IValue(c10::List<at::Tensor>(std::move(list)));
    }
  }
}

}  // namespace oclf::device
