"""The opencl device's kernels under Oclgrind (Oclgrind is a GPU: the device takes its GPU
paths): batch norm, elementwise, few-row products, attention, cat, convolution gradients and
fused optimizer steps; indexing, index checks, sorting and random numbers; the gradient
scaler's kernels; fused convolutions in every kernel kind; recurrent cells, 3-D pooling,
transposed and 3-D convolutions; the activations, losses, padding, group norm, fractional
pooling and CTC kernels; the 16-bit products and convolutions, as on CPUs and as on GPUs, and
the tensor-core kernels (product, attention) with their warp instructions emulated.
No data race, no out-of-bounds access, no read of a write-only buffer, and the results still
match torch. The reference's own kernels under Oclgrind: test_oclgrind.py."""
import shutil
import textwrap

import pytest

from oclgrind_checks import run_under_oclgrind

pytestmark = pytest.mark.skipif(shutil.which("oclgrind") is None, reason="oclgrind is not installed")

SCRIPT = textwrap.dedent("""
    if what == "device":
        # The opencl device's GPU paths (Oclgrind reports a GPU): batch norm as float4s,
        # elementwise ops four per work-item (in place too), few-row products with split K
        # and a bias row (gemm_cols) or the bias in the kernel (gemm_rows, over a K×N
        # parameter's transposed copy too), attention as one kernel, cat of two parts.
        import torch_opencl  # noqa: F401
        d = lambda t: t.to("opencl")
        with torch.no_grad():
            bn = torch.nn.BatchNorm2d(8).eval()
            bn.running_var.uniform_(0.5, 2)
            x = torch.randn(2, 8, 6, 6)
            close(bn.to("opencl")(d(x)).cpu(), bn.cpu()(x))
        # Training batch norm of two long channels: statistics and gradient sums in slices.
        x, g = torch.randn(2, 2, 40, 40) + 3, torch.randn(2, 2, 40, 40)
        ref_x, dev_x = x.clone().requires_grad_(), d(x).requires_grad_()
        F.batch_norm(ref_x, None, None, training=True).backward(g)
        F.batch_norm(dev_x, None, None, training=True).backward(d(g))
        close(dev_x.grad.cpu(), ref_x.grad)
        # Convolution gradients: the input's as a forward convolution, the weights' with
        # images and channels swapped (NC_SWAPPED, inputs loaded along K), padded, strided.
        for xs, ws, stride, pad in (((2, 3, 9, 7), (5, 3, 3, 3), 1, 1), ((3, 4, 8, 6), (6, 4, 1, 1), 2, 0),
                                    ((2, 3, 9, 8), (5, 3, 3, 3), 2, 1)):  # the last by phases
            x, w = torch.randn(xs), torch.randn(ws)
            y = F.conv2d(x, w, None, stride, pad)
            g = torch.randn_like(y)
            args = ((stride, stride), (pad, pad), (1, 1), False, (0, 0), 1, [True, True, False])
            want = torch.ops.aten.convolution_backward(g, x, w, None, *args)
            got = torch.ops.aten.convolution_backward(d(g), d(x), d(w), None, *args)
            close(got[0].cpu(), want[0])
            close(got[1].cpu(), want[1])
        # The weight gradient's large tiles with K split into one wave, forced (steps of 8:
        # Oclgrind has 32 KiB of local memory).
        import os
        x, w = torch.randn(2, 5, 7, 6), torch.randn(130, 5, 3, 3)
        g = torch.randn_like(F.conv2d(x, w, None, 1, 1))
        args = ((1, 1), (1, 1), (1, 1), False, (0, 0), 1, [False, True, False])
        os.environ["OCLF_CONV_KERNEL"] = "gpu TM=128 TN=128 WM=8 WN=8 TK=8 WAVE=1"
        close(torch.ops.aten.convolution_backward(d(g), d(x), d(w), None, *args)[1].cpu(),
              torch.ops.aten.convolution_backward(g, x, w, None, *args)[1])
        del os.environ["OCLF_CONV_KERNEL"]
        # Planes shorter than a work-group (a step of the channel walk spans images), with
        # and without whole float4s, with weights.
        for shape in ((5, 3, 7, 5), (3, 4, 6, 6)):
            x, g = torch.randn(shape), torch.randn(shape)
            w, b = torch.randn(shape[1]), torch.randn(shape[1])
            ref = [t.clone().requires_grad_() for t in (x, w, b)]
            dev = [d(t).requires_grad_() for t in (x, w, b)]
            F.batch_norm(ref[0], None, None, ref[1], ref[2], training=True).backward(g)
            F.batch_norm(dev[0], None, None, dev[1], dev[2], training=True).backward(d(g))
            for r, v in zip(ref, dev):
                close(v.grad.cpu(), r.grad)
        with torch.no_grad():
            t, u = torch.randn(1001), torch.randn(1001)
            y = d(t)
            y.relu_()
            close(y.cpu(), torch.relu(t))
            close((d(t) + d(u)).cpu(), t + u)
            # Long reductions of few outputs, in slices (reduce_parts, reduce_combine).
            long_x = torch.randn(2, 9001)
            close(d(long_x).sum(1).cpu(), long_x.sum(1))
            close(d(long_x).argmax(1).cpu(), long_x.argmax(1))
            close(d(long_x).t().amax(0).cpu(), long_x.amax(1))
            for m, k, n in ((1, 70, 9), (3, 40, 300), (8, 33, 5)):
                a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
                close(torch.addmm(d(bias), d(a), d(b)).cpu(), torch.addmm(bias, a, b))
                close(F.linear(d(a), d(b.t().contiguous()), d(bias)).cpu(), F.linear(a, b.t(), bias))
                w = torch.nn.Parameter(d(b))  # a Conv1D weight: gemm_rows over its transposed copy
                close(torch.addmm(d(bias), d(a), w).cpu(), torch.addmm(bias, a, b))
                # The activation in the product's store (gemm_rows, gemm_cols, gemm_sum_splits).
                for act in ("gelu_tanh", "relu"):
                    want = torch.ops.oclf.addmm_act(bias, a, b, act)
                    close(torch.ops.oclf.addmm_act(d(bias), d(a), d(b), act).cpu(), want)
                    close(torch.ops.oclf.addmm_act(d(bias), d(a), w, act).cpu(), want)
                    close(torch.ops.oclf.addmm_act(d(bias), d(a), d(b.t().contiguous()).t(), act).cpu(), want)
            q, kk, v = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 7, 16), torch.randn(2, 3, 7, 8)
            mask = torch.rand(5, 7) > 0.3
            close(F.scaled_dot_product_attention(d(q), d(kk), d(v), attn_mask=d(mask)).cpu(),
                  F.scaled_dot_product_attention(q, kk, v, attn_mask=mask))
            close(F.scaled_dot_product_attention(d(q), d(q), d(q), is_causal=True).cpu(),
                  F.scaled_dot_product_attention(q, q, q, is_causal=True))
            close(torch.cat([d(kk), d(q)], 2).cpu(), torch.cat([kk, q], 2))
        # Fused optimizer steps: 10 parameters (two launches, empty slots in the second),
        # amsgrad, a tensor learning rate, and the gradient scaler's arguments; SGD's
        # default foreach path (the slot kernels of _foreach_mul_ and _foreach_add(_)).
        params = [torch.randn(s) for s in ((7,), (65,), (3, 2), (1,), (9,), (5,), (2,), (3,), (4,), (300,))]
        grads = [torch.randn_like(p) for p in params]
        for make in (lambda ps: torch.optim.Adam(ps, lr=0.1, amsgrad=True, fused=True),
                     lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(0.1), fused=True),
                     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
                     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)):
            results = []
            for to in (lambda t: t.clone(), d):
                ps = [torch.nn.Parameter(to(p)) for p in params]
                for p, g in zip(ps, grads):
                    p.grad = to(g)
                opt = make(ps)
                opt.step()
                opt.step()
                results.append(torch.cat([p.detach().cpu().flatten() for p in ps]))
            close(results[1], results[0])
    elif what == "indexing":
        # The opencl device's indexing kernels: gather by two index tensors around a kept
        # dimension and by a mask (nonzero), index_put_ with repeated positions accumulated
        # and a broadcast value, index_copy_, a strided cat, isin; attention over grouped
        # key/value heads; sorting.
        import torch_opencl  # noqa: F401
        d = lambda t: t.to("opencl")
        with torch.no_grad():
            x = torch.randn(4, 5, 6)
            i, j = torch.tensor([[0, 3], [-1, 2]]), torch.tensor([1, 4])
            close(d(x)[d(i), :, d(j)].cpu(), x[i, :, j])
            close(d(x)[d(x[:, 0, 0] > 0)].cpu(), x[x[:, 0, 0] > 0])
            k, m, v = torch.tensor([1, 1, 3]), torch.tensor([0, 0, 2]), torch.randn(3, 6)
            close(d(x).index_put_((d(k), d(m)), d(v), accumulate=True).cpu(),
                  x.clone().index_put_((k, m), v, accumulate=True))
            close(d(x).index_put_((d(torch.tensor([2, 0])),), d(torch.tensor(1.5))).cpu(),
                  x.clone().index_put_((torch.tensor([2, 0]),), torch.tensor(1.5)))
            # index_copy_ as a check and one copy (scatter over a broadcast index), in 16 bits; a
            # two-part cat at any strides (cat2_strided)
            cache, rows = torch.randn(1, 3, 7, 5).half(), torch.randn(1, 3, 2, 5).half()
            pos = torch.tensor([6, 1])
            close(d(cache).index_copy_(2, d(pos), d(rows)).cpu().float(), cache.index_copy(2, pos, rows).float())
            close(torch.cat((-d(x)[..., 3:], d(x)[..., :3]), dim=-1).cpu(), torch.cat((-x[..., 3:], x[..., :3]), -1))
            # the range check on the device (index_check.cl): int64 and int32 indices, 70 of them;
            # indices out of range are clamped (index_select, gather) or skipped (scatter, index_add)
            # by the operator's kernel, so nothing reads or writes outside, and raised at the wait
            r = torch.randint(0, 6, (70,))
            close(d(x).index_select(2, d(r)).cpu(), x.index_select(2, r))
            close(d(x).index_select(1, d(r.int() % 5)).cpu(), x.index_select(1, r.int() % 5))
            bad = r.clone()
            bad[33], bad[50] = 6, -1
            def raised_at_wait(use, *args):
                try:
                    use(*args)
                    torch.opencl.synchronize()
                except (IndexError, RuntimeError) as err:  # torch's types: IndexError (index_select), RuntimeError
                    return str(err)
                raise AssertionError("a value out of range was not raised")

            for use in (lambda t, i: t.index_select(2, i), lambda t, i: t.index_add(2, i, d(torch.ones(4, 5, 70))),
                        lambda t, i: torch.gather(t, 2, i.view(1, 1, 70).expand(4, 5, 70)),
                        lambda t, i: t.scatter(2, i.view(1, 1, 70).expand(4, 5, 70), 1.0)):
                err = raised_at_wait(use, d(x), d(bad))
                assert "is out of bounds" in err, err
            # loss targets alike (nll_loss skips one out of range, multi_margin_loss clamps it)
            logits, y = torch.randn(5, 3), torch.tensor([0, 2, -100, 7, 1])
            for use in (lambda a, t: F.cross_entropy(a, t), lambda a, t: F.multi_margin_loss(a, t.clamp(min=0))):
                err = raised_at_wait(use, d(logits), d(y))
                assert "target 7 is out of bounds" in err, err
            e = torch.randint(0, 9, (3, 7))
            assert torch.equal(torch.isin(d(e), d(torch.tensor([2, 5]))).cpu(), torch.isin(e, torch.tensor([2, 5])))
            q, kk, vv = torch.randn(2, 6, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 3)
            close(F.scaled_dot_product_attention(d(q), d(kk), d(vv), enable_gqa=True, is_causal=True).cpu(),
                  F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True, is_causal=True))
            # sort (merge passes over runs that end past the row), topk, multinomial draws
            s = torch.randint(0, 5, (3, 13)).float()
            got, ref = torch.sort(d(s), stable=True, descending=True), torch.sort(s, stable=True, descending=True)
            assert torch.equal(got.indices.cpu(), ref.indices)
            close(torch.topk(d(s), 2, dim=0).values.cpu(), torch.topk(s, 2, dim=0).values)
            p = torch.tensor([[0.2, 0.0, 0.8], [1.0, 1.0, 0.0]])
            assert (torch.multinomial(d(p), 5, replacement=True).cpu() != torch.tensor([[1], [2]])).all()
            assert torch.multinomial(d(p), 2).cpu().sort().values.tolist() == [[0, 2], [0, 1]]
            # random_: int64 and int32, a strided view, a 16-bit tensor, 64-bit draws; from an offset
            torch.opencl.set_rng_state(torch.tensor([7, 13], dtype=torch.int64).view(torch.uint8))  # mid-block
            ri = torch.randint(-2, 3, (67,), device="opencl").cpu()
            assert ri.min().item() >= -2 and ri.max().item() <= 2
            z = torch.zeros(5, 7, dtype=torch.int32, device="opencl").t().random_(4)
            assert 0 <= z.min().item() and z.max().item() < 4
            assert torch.empty(9, dtype=torch.float16, device="opencl").random_().cpu().max().item() <= 2**11
            assert torch.empty(5, dtype=torch.int64, device="opencl").random_().cpu().min().item() >= 0
            # random_fill's other distributions, and draws with a tensor of probabilities
            assert torch.empty(11, device="opencl").geometric_(0.4).cpu().min().item() >= 1
            assert torch.empty(11, device="opencl").exponential_(3.0).cpu().min().item() > 0
            assert torch.bernoulli(torch.full((3, 5), 0.5).to("opencl")).cpu().max().item() <= 1
    elif what == "amp":
        # The gradient scaler's kernels: 10 gradients of each dtype (two launches, empty
        # slots in the second) with an inf and a NaN, unscaled and checked only; the
        # scale's backoff, growth and count.
        import torch_opencl  # noqa: F401
        d = lambda t: t.to("opencl")
        sizes = ((7,), (300,), (3, 2), (1,), (9,), (5,), (2,), (3,), (4,), (700,))
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            for inv in (0.25, 1.0):
                grads = [torch.randn(s).to(dtype) for s in sizes]
                grads[1][-1], grads[8][0] = float("inf"), float("nan")
                want, got = [g.clone() for g in grads], [d(g) for g in grads]
                found = [torch.zeros(1), d(torch.zeros(1))]
                torch._amp_foreach_non_finite_check_and_unscale_(want, found[0], torch.tensor([inv]))
                torch._amp_foreach_non_finite_check_and_unscale_(got, found[1], d(torch.tensor([inv])))
                assert found[1].item() == found[0].item() == 1.0
                for w, g in zip(want, got):
                    assert torch.equal(g.cpu().nan_to_num(), w.nan_to_num())
        states = [(torch.tensor([4.0]), torch.tensor([2], dtype=torch.int32)) for _ in range(2)]
        dev_scale, dev_tracker = d(states[1][0]), d(states[1][1])
        for found in (0.0, 1.0, 0.0, 0.0, 0.0):
            torch._amp_update_scale_(*states[0], torch.tensor([found]), 2.0, 0.5, 3)
            torch._amp_update_scale_(dev_scale, dev_tracker, d(torch.tensor([found])), 2.0, 0.5, 3)
            assert (dev_scale.item(), dev_tracker.item()) == (states[0][0].item(), states[0][1].item())
    elif what == "fused":
        # The opencl device's fused convolutions (reference/epilogue.h): a residual and an
        # activation stored by each kernel kind that can write y, split-K's sum included.
        import os
        import torch_opencl  # noqa: F401
        d = lambda t: t.to("opencl")
        layers = [((1, 32, 6, 7), (8, 32, 3, 3), 1, 1, 1), ((2, 6, 9, 11), (6, 1, 3, 3), 2, 1, 6),
                  ((1, 8, 4, 8), (12, 8, 1, 1), 1, 0, 1)]
        with torch.no_grad():
            for kind in ("gpu", "wino", "cpu", "dw_rows", "dw_tiled", "depthwise", "depthwise_cpu"):
                os.environ["OCLF_CONV_KERNEL"] = kind
                for (xs, ws, stride, pad, groups), act in zip(layers, ("relu", "silu", "hardswish")):
                    x, w, b = torch.randn(xs), torch.randn(ws), torch.randn(ws[0])
                    r = torch.randn_like(F.conv2d(x, w, b, stride, pad, 1, groups))
                    args = ([stride] * 2, [pad] * 2, [1, 1], groups, act)
                    close(torch.ops.oclf.conv2d_fused(d(x), d(w), d(b), d(r), *args).cpu(),
                          torch.ops.oclf.conv2d_fused(x, w, b, r, *args))
    elif what == "nn_nd":
        # The opencl device's recurrent cells (rnn.cl: LSTM and GRU, with and without biases,
        # the LSTM's backward without dcy), 2-D and 3-D pooling (pool.cl: windows compiled in
        # and read at run time), and the transposed and 3-D convolutions on the 2-D kernels,
        # forward and backward.
        import torch_opencl  # noqa: F401
        def both(fn, *xs):
            results = []
            for device in ("cpu", "opencl"):
                ts = [x.detach().clone().to(device).requires_grad_() for x in xs]
                y = fn(*ts)
                y = y[0] if isinstance(y, tuple) else y
                y.backward(torch.ones_like(y))
                results.append([y] + [t.grad for t in ts])
            for got, ref in zip(results[1], results[0]):
                close(got.detach().cpu(), ref.detach())
        torch.manual_seed(0)
        for cls, bias in ((torch.nn.LSTM, True), (torch.nn.GRU, False), (torch.nn.LSTMCell, False),
                          (torch.nn.GRUCell, True)):
            cell = cls(3, 5, bias=bias)
            dev = cls(3, 5, bias=bias).to("opencl")
            dev.load_state_dict(cell.state_dict())
            x = torch.randn(4, 3, 3) if cls in (torch.nn.LSTM, torch.nn.GRU) else torch.randn(3, 3)
            both(lambda t: (cell if t.device.type == "cpu" else dev)(t), x)
        x = torch.randn(2, 3, 5, 6, 7)
        for fn in (lambda t: F.max_pool3d(t, 3, 2, 1), lambda t: F.max_pool3d(t, 2, dilation=2, ceil_mode=True),
                   lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                   lambda t: F.adaptive_avg_pool3d(t, (2, 3, 4)), lambda t: F.adaptive_max_pool3d(t, (3, 4, 9)),
                   lambda t: F.adaptive_max_pool2d(t[:, 0], (4, 3)), lambda t: F.max_pool2d(t[:, 0], 3, 2, 1),
                   lambda t: F.max_pool2d(t[:, 0], 2, dilation=2, ceil_mode=True),
                   lambda t: F.avg_pool2d(t[:, 0], 3, 2, 1, ceil_mode=True, count_include_pad=False),
                   lambda t: F.avg_pool2d(t[:, 0], (6, 17), 1, (3, 8)), lambda t: F.adaptive_avg_pool2d(t[:, 0], (4, 5))):
            both(fn, x)
        both(lambda t, w: F.conv_transpose2d(t, w, stride=2, padding=1, output_padding=1, groups=2),
             torch.randn(2, 4, 5, 3), torch.randn(4, 3, 3, 3))
        both(lambda t, w: F.conv_transpose1d(t, w, stride=3, dilation=2), torch.randn(1, 2, 5), torch.randn(2, 3, 2))
        both(lambda t, w: F.conv3d(t, w, stride=(1, 2, 1), padding=1), torch.randn(1, 2, 3, 5, 4),
             torch.randn(3, 2, 3, 3, 2))
        both(lambda t, w: F.conv_transpose3d(t, w, stride=2, output_padding=(1, 0, 1)), torch.randn(1, 2, 2, 3, 2),
             torch.randn(2, 3, 2, 2, 3))
    elif what == "half":
        # 16-bit products (gemm16.cl): few rows and tiles, transposed and batched operands,
        # a bias row and beta, in float16 and bfloat16.
        import torch_opencl
        for dt in (torch.float16, torch.bfloat16):
            def on(*ts):
                return [t.to(dt).to("opencl") for t in ts]

            def agrees(fn, *ts):  # fn on the device's copies of ts in dt and on the CPU's, alike
                got, ref = fn(*on(*ts)), fn(*(t.to(dt) for t in ts))
                assert torch.allclose(got.cpu().float(), ref.float(), atol=0.1, rtol=0.02)
            a, b, w, bias = torch.randn(67, 19), torch.randn(19, 66), torch.randn(5, 19), torch.randn(5)
            A, W, BIAS = on(a, w, bias)
            for rows in (slice(None), slice(0, 5)):  # tiles; few rows of a k×n matrix
                agrees(lambda x, y: x[rows] @ y, a, b)
            for rows in (A[:3], A[:1]):
                ref = F.linear(rows.cpu().float(), w.to(dt).float(), bias.to(dt).float())
                assert torch.allclose(F.linear(rows, W, BIAS).cpu().float(), ref, atol=0.1, rtol=0.02)
                # ... with the activation applied as C is stored (addmm_act's 16-bit builds).
                got = torch.ops.oclf.addmm_act(BIAS, rows, W.t(), "gelu_tanh").cpu().float()
                assert torch.allclose(got, F.gelu(ref, approximate="tanh"), atol=0.1, rtol=0.02)
            # Weights whose rows are 16-byte aligned (gemm16_rows_kc on GPUs): k = 40 (A read 8 at
            # a time too) and k = 37 through a slice of 40-wide rows (k's last 5 one at a time).
            v, u = torch.randn(6, 40), torch.randn(3, 40)
            for kk in (40, 37):
                agrees(lambda x, w: F.linear(x[:, :kk], w[:, :kk]), u, v)
            # Three such products of one input in one launch (gemm16_rows_kc_group on GPUs): 6, 5
            # and 3 columns, so work-groups of 8 columns straddle the products.
            group = torch.ops.oclf.mm_group
            agrees(lambda x, w: torch.cat(group(x, [w.t(), w[:5].t(), w[:3].t()]), 1), u, v)
            # ... with its options: the rows RMS-normalized with a gated pair, then with a residual.
            agrees(lambda x, w, g: group(x, [w[:5].t(), w[1:].t()], rms_weight=g, rms_eps=1e-5, glu="silu")[0],
                   u, v, torch.rand(40) + 0.5)
            agrees(lambda x, w, g, r: group(x, [w.t()], rms_weight=g, rms_eps=1e-5, residual=r)[0],
                   u, v, torch.rand(40) + 0.5, torch.randn(3, 6))
            # k×n weights with 16-byte aligned rows (gemm16_rows_nc on GPUs): n = 24, and n = 21
            # through a slice of 24-wide rows (the last columns one at a time).
            kn = torch.randn(40, 24)
            for cols in (24, 21):
                agrees(lambda x, w: x @ w[:, :cols], u, kn)
            # ... with addmm_act's layer norm before and residual after (gemm16_rows_nc's builds).
            agrees(lambda x, w, g, h, b, r: torch.ops.oclf.addmm_act(b, x, w, "gelu_tanh", norm_weight=g, norm_bias=h,
                                                                   norm_eps=1e-5, residual=r),
                   u, kn, torch.rand(40) + 0.5, torch.randn(40), torch.randn(24), torch.randn(3, 24))
            x, y, z = on(torch.randn(2, 7, 13), torch.randn(2, 13, 9), torch.randn(2, 7, 9))
            out = torch.baddbmm(z, x.transpose(1, 2).contiguous().transpose(1, 2), y, beta=0.5)
            ref = 0.5 * z.cpu().float() + x.cpu().float() @ y.cpu().float()
            assert torch.allclose(out.cpu().float(), ref, atol=0.1, rtol=0.02)
            # 16-bit convolutions (conv2d_gpu on 16-bit values where OCLF_DEVICE_CONV=gpu): odd
            # 3×3 with scalar loads, a 1×1 with float4-wide ones, strided and grouped, and K =
            # 144 split in two (float partial sums) on a device of 64 compute units.
            for xs, ws, kw in (((1, 3, 5, 7), (4, 3, 3, 3), dict(padding=1)), ((1, 4, 4, 4), (5, 4, 1, 1), dict()),
                               ((2, 4, 7, 6), (6, 2, 3, 3), dict(stride=2, dilation=(1, 2), groups=2)),
                               ((1, 16, 5, 5), (4, 16, 3, 3), dict(padding=1))):
                x, wc, bc = torch.randn(*xs), torch.randn(*ws), torch.randn(ws[0])
                X, WC, BC = on(x, wc, bc)
                ref = F.conv2d(x.to(dt).float(), wc.to(dt).float(), bc.to(dt).float(), **kw)
                assert torch.allclose(F.conv2d(X, WC, BC, **kw).cpu().float(), ref, atol=0.1, rtol=0.02)
            # Eval-mode batch norm reading 16 bits (bn_apply's 16-bit builds), 15 pixels a plane.
            bn = torch.nn.BatchNorm2d(4).eval()
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            x = torch.randn(2, 4, 3, 5)
            with torch.no_grad():
                ref = bn(x.to(dt).float())
                got = bn.to(dt).to("opencl")(x.to(dt).to("opencl")).cpu().float()
            assert torch.allclose(got, ref, atol=0.05, rtol=0.02)
    elif what == "mma":
        # The tensor-core kernels with their warp instructions emulated (OCLF_MMA=emulate):
        # gemm16_mma.cl on a block of 16 rows (partial blocks and chunks of k) and
        # flash_attention.cl (partial blocks of rows and of keys).
        import torch_opencl  # noqa: F401
        from opencl_functions import devices
        devices.launch_log_start()
        for dt in (torch.float16, torch.bfloat16):
            a, b = torch.randn(9, 37).to(dt), torch.randn(37, 17).to(dt)
            ref = a.float() @ b.float()
            assert torch.allclose((a.to("opencl") @ b.to("opencl")).cpu().float(), ref, atol=0.05, rtol=0.02)
        # ... causal with grouped heads; two blocks of keys, the second partial.
        for dt, rows, keys, width, causal in ((torch.float16, 5, 7, 16, True), (torch.bfloat16, 3, 70, 32, False)):
            q, k = torch.randn(1, 2, rows, 16).to(dt), torch.randn(1, 1, keys, 16).to(dt)
            v = torch.randn(1, 1, keys, width).to(dt)
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
            got = F.scaled_dot_product_attention(q.to("opencl"), k.to("opencl"), v.to("opencl"), is_causal=causal,
                                                 enable_gqa=True)
            assert torch.allclose(got.cpu().float(), ref, atol=0.02, rtol=0.02)
        kernels = [launch["kernel"] for launch in devices.launch_log_take()]
        assert kernels.count("gemm16_mma") == 2 and kernels.count("flash_attention") == 2, kernels
    elif what == "ops_more":
        # The kernels of the operators public programs meet (tests/test_device_ops_more.py):
        # elementwise_nn.h's activations and losses (strided, in place), pad.cl, loss.cl,
        # group_norm.cl, pool.cl (fractional pooling) and ctc.cl, forward and backward, on odd shapes.
        import torch_opencl  # noqa: F401
        def both(fn, *xs):
            results = []
            for device in ("cpu", "opencl"):
                ts = [x.detach().clone().to(device).requires_grad_(x.is_floating_point()) for x in xs]
                y = fn(*ts)
                y = y[0] if isinstance(y, tuple) else y
                y.backward(torch.ones_like(y))
                results.append([y] + [t.grad for t in ts if t.requires_grad])
            for got, ref in zip(results[1], results[0]):
                close(got.detach().cpu(), ref.detach())
        x = torch.randn(3, 5, 7)
        for fn in (lambda t: F.elu(t[:, ::2] * 1, inplace=True), F.softplus, F.logsigmoid, F.mish,
                   lambda t: F.softshrink(t, 0.3), lambda t: F.glu(t[..., :6], -1), lambda t: F.threshold(t, 0.1, 2),
                   lambda t: F.prelu(t, torch.full((5,), 0.2, device=t.device))):
            both(fn, x)
        target = torch.rand(3, 5, 7)  # no gradient: the target's is torch's logit
        both(lambda t: F.binary_cross_entropy(torch.sigmoid(t), target.to(t.device)), x)
        both(lambda t, y: F.huber_loss(t, y, delta=0.5) + F.smooth_l1_loss(t, y), x, torch.randn(3, 5, 7))
        for mode, pad in (("reflect", (2, 1, 0, 3)), ("replicate", (3, 0, 1, 2)), ("reflect", (1, 2, 2, 0, 1, 1))):
            both(lambda t: F.pad(t, pad, mode=mode), torch.randn(2, 3, 4, 5) if len(pad) == 4 else x[None])
        labels = torch.tensor([[1, 0, -1, 2], [3, -1, 0, 0], [0, 1, 2, 3]])
        both(lambda t: F.multi_margin_loss(t, labels[:, 0].clamp(min=0).to(t.device), p=2), torch.randn(3, 4))
        both(lambda t: F.multilabel_margin_loss(t, labels.to(t.device)), torch.randn(3, 4))
        both(lambda t: F.group_norm(t, 2, torch.ones(6, device=t.device)), torch.randn(3, 6, 5))
        u = torch.rand(2, 3, 2)
        both(lambda t: F.fractional_max_pool2d(t, 2, output_size=(4, 3), _random_samples=u.to(t.device)),
             torch.randn(2, 3, 7, 5))
        targets = torch.tensor([[1, 2, 2], [3, 1, 0]])
        both(lambda t: F.ctc_loss(F.log_softmax(t, -1), targets.to(t.device), [7, 5], [3, 2]), torch.randn(7, 2, 4))
    else:
        raise ValueError(what)
""")


def test_device_gpu_paths_under_oclgrind(tmp_path, ocl):
    # A device of 64 compute units, so the few-row products split K over work-groups.
    run_under_oclgrind(SCRIPT, "device", tmp_path, ("--compute-units", "64"))


def test_device_fused_convolutions_under_oclgrind(tmp_path, ocl):
    """conv2d_fused's epilogue in every kernel kind; 64 compute units, so split-K sums too."""
    run_under_oclgrind(SCRIPT, "fused", tmp_path, ("--compute-units", "64"), OCLF_FALLBACK="error")


def test_device_amp_scale_kernels_under_oclgrind(tmp_path, ocl):
    """The gradient scaler's unscale (every dtype, two launches) and scale update."""
    run_under_oclgrind(SCRIPT, "amp", tmp_path, OCLF_FALLBACK="error")


def test_device_indexing_under_oclgrind(tmp_path, ocl):
    """Advanced indexing, index bounds, nonzero, isin, grouped-head attention, sort, topk and
    multinomial on the opencl device."""
    run_under_oclgrind(SCRIPT, "indexing", tmp_path, OCLF_FALLBACK="error")


def test_device_ops_more_under_oclgrind(tmp_path, ocl):
    """The kernels of the activations, losses, padding, group norm's backward, fractional
    max pooling and CTC that public programs meet, forward and backward."""
    run_under_oclgrind(SCRIPT, "ops_more", tmp_path, OCLF_FALLBACK="error")


def test_device_recurrent_cells_pools_and_nd_convolutions_under_oclgrind(tmp_path, ocl):
    """rnn.cl's LSTM and GRU cells, pool.cl's 2-D and 3-D poolings, and the transposed and 3-D
    convolutions on the 2-D kernels, forward and backward."""
    run_under_oclgrind(SCRIPT, "nn_nd", tmp_path, OCLF_FALLBACK="error")


def test_device_tensor_core_kernels_under_oclgrind(tmp_path, ocl):
    """gemm16_mma.cl and flash_attention.cl, their warp instructions emulated (mma.h)."""
    run_under_oclgrind(SCRIPT, "mma", tmp_path, OCLF_FALLBACK="error", OCLF_MMA="emulate", OCLF_MMA_TILE="16,64,1,2,2")


@pytest.mark.parametrize("plan", ["auto", "gpu"])
def test_device_16bit_products_under_oclgrind(plan, tmp_path, ocl):
    """gemm16.cl's kernels on odd shapes, float16 and bfloat16, and 16-bit convolutions;
    "gpu" runs the few-row products as on a GPU (k shared by a work-group's slices, summed in
    local memory) and the convolutions on conv2d_gpu's 16-bit builds."""
    args = ("--compute-units", "64") if plan == "gpu" else ()
    run_under_oclgrind(SCRIPT, "half", tmp_path, args, OCLF_FALLBACK="error", OCLF_DEVICE_MATMUL=plan, OCLF_DEVICE_CONV=plan)
