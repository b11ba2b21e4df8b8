// add_each: one number added in place to each of up to SLOTS one-element tensors, one
// work-item each (a decoding step's position counters: transformers' static cache adds the
// step's length to a counter per layer). Elements of type -DT= (dtypes.h), the number in
// -DCOMPUTE=; every tensor argument is a buffer and an offset in elements; slots past
// `count` get a null buffer.
#include "dtypes.h"

#define SLOTS 8
#define SLOT(k) __global T *p##k, const int p##k##_off
#define PICK(k)            \
  case k:                  \
    p = p##k + p##k##_off; \
    break;

__kernel void add_each(SLOT(0), SLOT(1), SLOT(2), SLOT(3), SLOT(4), SLOT(5), SLOT(6), SLOT(7), const int count,
                       const COMPUTE by) {
  const int i = get_global_id(0);
  if (i >= count) return;
  __global T *p = 0;
  switch (i) {
    PICK(0) PICK(1) PICK(2) PICK(3) PICK(4) PICK(5) PICK(6) PICK(7)
    default: return;
  }
  WRITE(T, p, 0, (COMPUTE)READ(T, p, 0) + by);
}
