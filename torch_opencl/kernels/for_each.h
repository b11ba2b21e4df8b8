// FOR_EACH(i, n): the elements a work-item of a one-dimensional launch takes of n. With
// -DCONTIGUOUS=1 (CPUs) each work-item takes a contiguous run, which the compiler vectorises
// within the work-item; otherwise (GPUs) i, i + items, ..., so neighbouring work-items touch
// neighbouring elements. Included by amp.cl and optim.cl.
#ifndef DEVICE_FOR_EACH_H
#define DEVICE_FOR_EACH_H

#if CONTIGUOUS
#define FOR_EACH(i, n)                                                                                   \
  const int per_item = ((n) + get_global_size(0) - 1) / get_global_size(0);                           \
  const int first = get_global_id(0) * per_item, last = min((n), first + per_item);                   \
  for (int i = first; i < last; ++i)
#else
#define FOR_EACH(i, n) for (int i = get_global_id(0); i < (n); i += get_global_size(0))
#endif

#endif  // DEVICE_FOR_EACH_H
