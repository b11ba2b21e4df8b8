// The smallest useful launch: one float written per work-item. bench.ops enqueues it many
// times with its arguments set once (torch.ops.oclf.enqueue_cost) to measure what the
// OpenCL driver alone costs the host per clEnqueueNDRangeKernel, the floor beneath every
// operator of the device.
__kernel void enqueue_probe(__global float* x, const int offset) { x[offset + get_global_id(0)] = 1.0f; }
