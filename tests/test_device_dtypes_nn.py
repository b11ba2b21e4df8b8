"""float64, float16 and bfloat16 through the opencl device's nn paths, against torch on the
CPU: products (and the few-row 16-bit kernels GPUs take), convolutions (and their 16-bit GPU
and tensor-core builds), batch norm reading 16 bits, norms and softmax, attention,
embeddings, gradients of small networks, and GPT-2 and Llama forward in 16 bits.

Float16 and bfloat16 run with OCLF_FALLBACK=error: every operator runs on the device. Where
torch's own CPU result at that dtype is inexact, ours must be no worse than twice torch's
error against a float64 reference (plus one unit in the last place of the result's scale:
dtype_checks.no_worse)."""
import copy

import pytest
import torch
import torch.nn.functional as F

from device_checks import logged_launches
from dtype_checks import FLOATS, HALVES, allow_fallback, dev, no_worse, randn, same


@pytest.fixture(autouse=True)
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")  # allow_fallback() lifts it for float64 and complex
    return opencl_device


# ---- the nn paths ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m, k, n", [(7, 33, 9), (1, 40, 6), (17, 5, 3)])
def test_matmul_and_linear(dtype, m, k, n, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    a, b, w, bias = randn(2, m, k, dtype=dtype), randn(k, n, dtype=dtype), randn(n, k, dtype=dtype), randn(n, dtype=dtype)
    da, db, dw, dbias = dev(a, b, w, bias)
    ref = lambda t: t.double()  # noqa: E731
    no_worse(da @ db, a @ b, ref(a) @ ref(b))
    no_worse(F.linear(da, dw, dbias), F.linear(a, w, bias), F.linear(ref(a), ref(w), ref(bias)))
    no_worse(da[0].t() @ da[1], a[0].t() @ a[1], ref(a[0]).t() @ ref(a[1]))


@pytest.mark.parametrize("dtype", HALVES)
def test_few_row_products_over_aligned_weights_as_on_a_gpu(dtype, monkeypatch):
    """GPUs' kernels for up to 8 rows over 16-byte aligned weights, run here as on a GPU.
    gemm16_rows_kc (an n×k weight, 16-byte loads along k): k a multiple of 8 (A read 8 at a
    time too), k = 37 through a slice of 40-wide rows (k's last 5 one at a time, A's rows
    aligned), A not aligned (its rows read one element at a time), and a batch of them.
    gemm16_rows_nc (a k×n weight, 16-byte loads along n): n a multiple of 8, and n = 21 through
    a slice of 24-wide rows (the last columns one at a time)."""
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "gpu")
    w, a, bias = randn(19, 40, dtype=dtype), randn(8, 48, dtype=dtype), randn(19, dtype=dtype)
    x, y, kn = randn(3, 5, 40, dtype=dtype), randn(3, 6, 40, dtype=dtype), randn(40, 24, dtype=dtype)
    dw, da, dbias, dx, dy, dkn = dev(w, a, bias, x, y, kn)
    r = lambda t: t.double()  # noqa: E731
    with logged_launches() as launches:
        for rows, k in [(1, 40), (8, 40), (3, 37)]:
            no_worse(F.linear(da[:rows, :k], dw[:, :k], dbias), F.linear(a[:rows, :k], w[:, :k], bias),
                     F.linear(r(a[:rows, :k]), r(w[:, :k]), r(bias)))
        no_worse(F.linear(da[:4, 1:41], dw), F.linear(a[:4, 1:41], w), F.linear(r(a[:4, 1:41]), r(w)))
        no_worse(torch.bmm(dx, dy.transpose(1, 2)), torch.bmm(x, y.transpose(1, 2)), torch.bmm(r(x), r(y).transpose(1, 2)))
        for rows, cols in [(1, 24), (8, 24), (3, 21)]:
            no_worse(da[:rows, :40] @ dkn[:, :cols], a[:rows, :40] @ kn[:, :cols], r(a[:rows, :40]) @ r(kn[:, :cols]))
    options = [opts.split() for _, kernel, opts, *_ in launches if kernel == "gemm16_rows_kc"]
    assert len(options) == 5, [kernel for _, kernel, *_ in launches]
    assert sum("-DA_VEC" in o for o in options) == 4  # all but the unaligned A
    assert sum(kernel == "gemm16_rows_nc" for _, kernel, *_ in launches) == 3



@pytest.mark.parametrize("dtype", HALVES)
def test_grouped_products_with_norm_gate_and_residual_as_on_a_gpu(dtype, monkeypatch):
    """torch.ops.oclf.mm_group's options in one launch of gemm16_rows_kc_group, run here as on a
    GPU: the input's rows RMS-normalized (k = 1032: more than one pass of the work-group's
    lanes), a gated pair (act(x·Wg)·(x·Wu), 21 columns: work-groups of 8 straddle the end), a
    residual added, and the norm with each. Each against torch's own float16/bfloat16 (the
    operator's CPU form, which spells the steps out as torch operations) and float64. An input
    whose rows are not 16-byte aligned (a slice from its second column) keeps the values: the
    norm then runs as torch operations, the other options still in the kernel."""
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "gpu")
    k = 1032
    x, gain = randn(3, k + 1, dtype=dtype), (1 + 0.1 * randn(k)).to(dtype)
    wq, wg, wu = randn(13, k, dtype=dtype), randn(21, k, dtype=dtype), randn(21, k, dtype=dtype)
    res = randn(3, 13, dtype=dtype)
    tensors = {"x": x[:, :k].contiguous(), "full": x, "gain": gain, "wq": wq, "wg": wg, "wu": wu, "res": res}
    cpu, on = tensors, dict(zip(tensors, dev(*tensors.values())))
    for where in (cpu, on):
        where["shifted"] = where["full"][:, 1:]
    cases = [(["wq", "wg"], dict(rms_weight="gain", rms_eps=1e-5)), (["wg", "wu"], dict(glu="silu")),
             (["wq"], dict(residual="res")), (["wg", "wu"], dict(rms_weight="gain", rms_eps=1e-6, glu="gelu_tanh")),
             (["wq"], dict(rms_weight="gain", rms_eps=1e-5, residual="res"))]
    group = torch.ops.oclf.mm_group

    def call(where, source, weights, options, cast=lambda t: t):
        named = {key: cast(where[v]) if key in ("rms_weight", "residual") else v for key, v in options.items()}
        return group(cast(where[source]), [cast(where[w]).t() for w in weights], **named)

    for source in ("x", "shifted"):
        for weights, options in cases:
            with logged_launches() as launches:
                got = call(on, source, weights, options)
            for g, t, r in zip(got, call(cpu, source, weights, options),
                               call(cpu, source, weights, options, lambda t: t.double())):
                no_worse(g, t, r)
            fused = [opts.split() for _, kernel, opts in launches if kernel == "gemm16_rows_kc_group"]
            if source == "x" or "rms_weight" not in options:
                assert len(launches) == 1 and len(fused) == 1, launches
                for flag, key in (("-DRMS", "rms_weight"), ("-DGLU", "glu"), ("-DRESIDUAL", "residual")):
                    assert (flag in fused[0]) == (key in options), fused
            else:
                assert not fused, launches
    with pytest.raises(RuntimeError, match="glu takes two products"):
        group(on["x"], [on["wq"].t()], glu="silu")
    with pytest.raises(RuntimeError, match="activation must be"):
        group(on["x"], [on["wg"].t(), on["wu"].t()], glu="swish")


@pytest.mark.parametrize("dtype", HALVES)
def test_products_with_layer_norm_and_residual_as_on_a_gpu(dtype, monkeypatch):
    """torch.ops.oclf.addmm_act's options in one launch of gemm16_rows_nc, run here as on a GPU
    (a k×n weight, transformers' Conv1D): the input's rows through a layer norm (k = 300: more
    than one pass of 256 slices), a residual added after the activation, and both; against
    torch's own 16-bit result (the operator's CPU form: layer_norm, addmm, the activation and
    the add as torch operations) and float64; n = 24 and n = 21 through a slice of it (the last
    columns one at a time). A weight whose rows are not 16-byte aligned (21 wide) runs as torch
    operations with the same values."""
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "gpu")
    x = (randn(3, 300) * 3 + 1).to(dtype)
    w, b, kn, row, res = (1 + 0.1 * randn(300)).to(dtype), randn(300, dtype=dtype), randn(300, 24, dtype=dtype), \
        randn(24, dtype=dtype), randn(3, 24, dtype=dtype)
    names = ("x", "w", "b", "kn", "row", "res", "odd")
    cpu = dict(zip(names, (x, w, b, kn, row, res, kn[:, :21].contiguous())))
    on = dict(zip(names, dev(*cpu.values())))
    norm = dict(norm_weight="w", norm_bias="b", norm_eps=1e-5)
    cases = [("gelu_tanh", norm), ("none", dict(residual="res")), ("gelu_tanh", {**norm, "residual": "res"})]

    def call(where, weight, cols, activation, options, cast=lambda t: t):
        named = {k: cast(where[v][:, :cols] if k == "residual" else where[v]) if isinstance(v, str) else v
                 for k, v in options.items()}
        return torch.ops.oclf.addmm_act(cast(where["row"][:cols]), cast(where["x"]), cast(where[weight][:, :cols]),
                                        activation, **named)

    for weight, cols in (("kn", 24), ("kn", 21), ("odd", 21)):
        for activation, options in cases:
            with logged_launches() as launches:
                got = call(on, weight, cols, activation, options)
            no_worse(got, call(cpu, weight, cols, activation, options),
                     call(cpu, weight, cols, activation, options, torch.Tensor.double))
            fused = [opts.split() for _, kernel, opts in launches if kernel == "gemm16_rows_nc"]
            if weight == "kn":
                assert len(launches) == 1 and len(fused) == 1, launches
                assert ("-DLAYER_NORM" in fused[0]) == ("norm_weight" in options), fused
                assert ("-DRESIDUAL" in fused[0]) == ("residual" in options), fused
            else:
                assert not fused, launches
    with pytest.raises(RuntimeError, match="norm_weight and norm_bias are given together"):
        torch.ops.oclf.addmm_act(on["row"], on["x"], on["kn"], "none", norm_weight=on["w"])

CONVS = [  # (batch, c_in, h, w, c_out, k, stride, padding, groups)
    (2, 3, 9, 7, 5, 3, 1, 1, 1),
    (1, 4, 11, 13, 6, 3, 2, 0, 2),
    (3, 6, 5, 8, 6, 1, 1, 0, 6),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", CONVS)
def test_conv2d(dtype, shape, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    batch, c_in, h, w, c_out, k, stride, padding, groups = shape
    x, wt, b = randn(batch, c_in, h, w, dtype=dtype), randn(c_out, c_in // groups, k, k, dtype=dtype), randn(c_out, dtype=dtype)
    dx, dwt, db = dev(x, wt, b)
    kw = dict(stride=stride, padding=padding, groups=groups)
    ref = F.conv2d(x.double(), wt.double(), b.double(), **kw)
    no_worse(F.conv2d(dx, dwt, db, **kw), F.conv2d(x, wt, b, **kw), ref)


GPU_CONVS = [  # (batch, c_in, h, w, c_out, k, stride, padding, dilation, groups, bias)
    (2, 3, 9, 7, 5, 3, 1, 1, 1, 1, True),  # K = 27 read one at a time, 63 outputs a channel
    (1, 8, 8, 8, 12, 1, 1, 0, 1, 1, False),  # 1×1: POINTWISE, float4-wide loads and stores
    (1, 64, 4, 4, 8, 3, 1, 1, 1, 1, True),  # one tile: K split, float partial sums
    (1, 4, 11, 13, 6, 3, 2, 0, 2, 2, True),  # strided, dilated, grouped
]


def check_convs(shapes, dtype):
    """Each convolution of `shapes` (GPU_CONVS' tuples) at `dtype` on the device: no worse
    than torch's own at that dtype against float64."""
    for batch, c_in, h, w, c_out, k, stride, padding, dilation, groups, has_bias in shapes:
        x, wt = randn(batch, c_in, h, w, dtype=dtype), randn(c_out, c_in // groups, k, k, dtype=dtype)
        b = randn(c_out, dtype=dtype) if has_bias else None
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        ref = F.conv2d(x.double(), wt.double(), None if b is None else b.double(), **kw)
        got = F.conv2d(*dev(x, wt), None if b is None else b.to("opencl"), **kw)
        no_worse(got, F.conv2d(x, wt, b, **kw), ref)


@pytest.mark.parametrize("dtype", HALVES)
def test_convolutions_in_16_bits_as_on_a_gpu(dtype, monkeypatch):
    """conv2d_gpu reads and writes float16/bfloat16 itself (no float32 copies), as on a GPU:
    vector and scalar loads, split K's float partial sums, groups, conv1d; depthwise layers
    run on float32 copies (their kernels are float32 only)."""
    monkeypatch.setenv("OCLF_DEVICE_CONV", "gpu")
    with logged_launches() as launches:
        check_convs(GPU_CONVS, dtype)
        x, wt, b = randn(2, 6, 17, dtype=dtype), randn(4, 6, 5, dtype=dtype), randn(4, dtype=dtype)
        no_worse(F.conv1d(*dev(x, wt, b), padding=2), F.conv1d(x, wt, b, padding=2),
                 F.conv1d(x.double(), wt.double(), b.double(), padding=2))
        x, wt = randn(1, 6, 5, 8, dtype=dtype), randn(6, 1, 3, 3, dtype=dtype)
        no_worse(F.conv2d(*dev(x, wt), groups=6), F.conv2d(x, wt, groups=6), F.conv2d(x.double(), wt.double(), groups=6))
    flag = {torch.float16: "-DIO_HALF", torch.bfloat16: "-DIO_BFLOAT"}[dtype]
    convs = [opts.split() for _, kernel, opts, *_ in launches if kernel == "conv2d_gpu"]
    assert len(convs) == 5 and all(flag in o for o in convs), convs
    assert sum("-DPARTS_FLOAT" in o for o in convs) == 1 and sum("-DPOINTWISE" in o for o in convs) == 1
    assert any(kernel == "conv2d_sum_splits" and flag in opts.split() for _, kernel, opts, *_ in launches)
    assert any(kernel.startswith("dw_") or "depthwise" in kernel for _, kernel, *_ in launches)


TENSOR_CORE_CONVS = [  # as GPU_CONVS: several warps and tiles, edges of both, every load form
    (2, 32, 15, 13, 48, 3, 1, 1, 1, 1, True),  # 3×3 over 390 pixels, K = 288
    (1, 64, 8, 8, 96, 1, 1, 0, 1, 1, False),  # 1×1: POINTWISE
    (3, 20, 9, 11, 40, 3, 2, 1, 1, 2, True),  # strided, grouped, K = 90 read one at a time
    (1, 128, 7, 7, 130, 3, 1, 1, 2, 1, True),  # dilated; 130 channels: a partial tile; K split
]


@pytest.mark.parametrize("dtype", HALVES)
def test_convolutions_on_tensor_cores(dtype, monkeypatch):
    """NVIDIA devices run 16-bit convolutions on tensor cores (conv2d_gpu's MMA build: inline
    PTX mma.sync), unless OCLF_MMA=0; other devices never build it (their compilers refuse
    PTX)."""
    import opencl_functions
    nvidia = "NVIDIA" in opencl_functions.device_info()["platform"]
    for mma in ("auto", "0"):
        monkeypatch.setenv("OCLF_MMA", mma)
        with logged_launches() as launches:
            check_convs(TENSOR_CORE_CONVS, dtype)
        with_mma = [kernel for _, kernel, opts, *_ in launches if "-DMMA" in opts.split()]
        if nvidia and mma == "auto":
            convs = [opts for _, kernel, opts, *_ in launches if kernel == "conv2d_gpu"]
            assert len(with_mma) == len(convs) == len(TENSOR_CORE_CONVS), convs
        else:
            assert with_mma == []


@pytest.mark.parametrize("dtype", HALVES)
def test_batch_norm_reads_16_bits_in_eval_mode(dtype):
    """Eval-mode batch norm of a 16-bit model (statistics and affine parameters in 16 bits,
    or in float32 as autocast leaves them) reads and writes 16 bits (bn_apply's 16-bit
    builds, float4-wide and plain); training runs on float32 copies, with the same values."""
    x = randn(2, 6, 5, 4, dtype=dtype) * 3 + 1
    for params in (dtype, torch.float32):
        bn = torch.nn.BatchNorm2d(6).eval()
        with torch.no_grad():
            bn.running_mean.copy_(torch.randn(6))
            bn.running_var.copy_(torch.rand(6) + 0.5)
            bn.weight.copy_(torch.randn(6))
            bn.bias.copy_(torch.randn(6))
        model = copy.deepcopy(bn).to(params)
        ours = copy.deepcopy(model).to("opencl")

        def torch_cpu(xs):  # at the dtype the parameters are, then the input's
            return model(xs.to(params)).to(dtype)

        with logged_launches() as launches:
            for xs in (x, x[..., :3].contiguous()):  # 20 pixels a plane (float4-wide on GPUs), 15
                with torch.no_grad():
                    got = ours(xs.to("opencl"))
                    assert got.dtype == dtype
                    no_worse(got, torch_cpu(xs), bn.double()(xs.double()))
        name = {torch.float16: "half", torch.bfloat16: "bfloat"}[dtype]
        applied = [opts.split() for _, kernel, opts, *_ in launches if kernel.startswith("bn_apply")]
        assert len(applied) == 2 and all(f"-DT={name}" in o for o in applied), launches
    train = torch.nn.BatchNorm2d(6).train()
    ours = copy.deepcopy(train).to(dtype).to("opencl")
    got = ours(x.to("opencl"))
    no_worse(got, copy.deepcopy(train).to(dtype)(x), copy.deepcopy(train).double()(x.double()))
    assert ours.running_mean.dtype == dtype
    torch.testing.assert_close(ours.running_mean.cpu().double(), x.double().mean((0, 2, 3)) * 0.1, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms_and_softmax(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    x, w, b = randn(3, 5, 37, dtype=dtype) * 2 + 1, randn(37, dtype=dtype), randn(37, dtype=dtype)
    dx, dw, db = dev(x, w, b)
    r = lambda t: t.double()  # noqa: E731
    no_worse(F.layer_norm(dx, (37,), dw, db), F.layer_norm(x, (37,), w, b), F.layer_norm(r(x), (37,), r(w), r(b)))
    no_worse(F.softmax(dx, -1), F.softmax(x, -1), F.softmax(r(x), -1))
    no_worse(F.log_softmax(dx, 1), F.log_softmax(x, 1), F.log_softmax(r(x), 1))
    # RMSNorm as Llama writes it: float32 variance, then the 16-bit weight
    def rms(t, weight):
        wide = t.to(torch.float32) if t.dtype in HALVES else t
        v = wide.pow(2).mean(-1, keepdim=True)
        return weight * (wide * torch.rsqrt(v + 1e-6)).to(t.dtype)
    no_worse(rms(dx, dw), rms(x, w), r(w) * r(x) * torch.rsqrt(r(x).pow(2).mean(-1, keepdim=True) + 1e-6))
    xb = randn(4, 6, 5, 3, dtype=dtype)
    (dxb,) = dev(xb)
    wb, bb = randn(6, dtype=dtype), randn(6, dtype=dtype)
    dwb, dbb = dev(wb, bb)
    no_worse(F.batch_norm(dxb, None, None, dwb, dbb, training=True), F.batch_norm(xb, None, None, wb, bb, training=True),
             F.batch_norm(r(xb), None, None, r(wb), r(bb), training=True))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mask", ["none", "causal", "additive", "bool"])
def test_attention(dtype, mask, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    q, k, v = randn(2, 3, 7, 16, dtype=dtype), randn(2, 3, 9, 16, dtype=dtype), randn(2, 3, 9, 16, dtype=dtype)
    bias = randn(7, 9, dtype=dtype)
    kw = {"none": {}, "causal": {"is_causal": True}, "additive": {"attn_mask": bias}, "bool": {"attn_mask": bias > 0}}[mask]
    dq, dk, dv = dev(q, k, v)
    dkw = {name: value.to("opencl") if torch.is_tensor(value) else value for name, value in kw.items()}
    wide = {name: value.double() if torch.is_tensor(value) and value.is_floating_point() else value
            for name, value in kw.items()}
    r = lambda t: t.double()  # noqa: E731
    sdpa = F.scaled_dot_product_attention
    no_worse(sdpa(dq, dk, dv, **dkw), sdpa(q, k, v, **kw), sdpa(r(q), r(k), r(v), **wide))


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    table, idx = randn(11, 6, dtype=dtype), torch.tensor([[3, 0, 10], [3, 7, 1]])
    dtable, didx = dev(table, idx)
    same(F.embedding(didx, dtable), F.embedding(idx, table))
    same(dtable[didx[0]], table[idx[0]])
    same(torch.cat([dtable, dtable[:2]]), torch.cat([table, table[:2]]))


# ---- backward ----------------------------------------------------------------------------------

def grads_no_worse(model, inputs, dtype):
    """Gradients of model at `dtype` on the device, against torch's at `dtype` and float64."""
    results = []
    for where, dt in [("opencl", dtype), ("cpu", dtype), ("cpu", torch.float64)]:
        m = copy.deepcopy(model).to(dt).to(where)
        out = m(inputs.to(dt).to(where))
        out.float().square().mean().backward() if dt != torch.float64 else out.square().mean().backward()
        results.append([p.grad.cpu() for p in m.parameters()])
    for ours, theirs, ref in zip(*results):
        if dtype == torch.float64:
            same(ours, theirs)
        else:
            no_worse(ours, theirs, ref)


@pytest.mark.parametrize("dtype", FLOATS)
def test_mlp_backward(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(13, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 5))
    grads_no_worse(mlp, torch.randn(7, 13), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv_net_backward(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 4, 3, stride=2),
                              torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    grads_no_worse(net, torch.randn(2, 3, 9, 10), dtype)


# ---- whole models in 16 bits --------------------------------------------------------------------

def language_models():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64,
                                      bos_token_id=0, eos_token_id=1))
    llama = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
                                         max_position_embeddings=64, bos_token_id=0, eos_token_id=1))
    return {"gpt2": gpt2.eval(), "llama": llama.eval()}


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("dtype", HALVES)
def test_language_model_forward_in_16_bits(name, dtype):
    model = language_models()[name]
    ids = torch.randint(0, 500, (2, 13), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(ids).logits
        cpu = copy.deepcopy(model).to(dtype)(ids).logits
        ours = copy.deepcopy(model).to(dtype).to("opencl")(ids.to("opencl")).logits
    assert ours.dtype == dtype
    no_worse(ours, cpu, ref)

