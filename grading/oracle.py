"""What "correct" means, in one place for tests.py, the test suite and the grader: the
tolerances, the comparison and its message, and the cases both tests.py and the grader
run (tests.py's random conv2d configurations and matmul shapes).

    mismatch(actual, expected, atol, rtol)    None, or what is wrong in words
    assert_matches(actual, expected, reduction, what="")
    conv_tolerance(reduction)                  (atol, rtol) for a sum of `reduction` products
    base_case(...), random_conv_config(seed), describe_conv(...), MATMUL_SHAPES, matmul_layouts(),
    PUBLIC_CONV_SEEDS
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch

from grading.library import geometry

EPS = torch.finfo(torch.float32).eps
RTOL = 1e-4
# The grader's new random shapes and the race check: looser, as their sums can be longer.
HIDDEN_TOL = (1e-3, 1e-3)
# Whole models: atol is MODEL_RTOL · max|reference| (logits grow with depth).
MODEL_RTOL = 1e-3
PUBLIC_CONV_SEEDS = range(40)  # test_conv2d_random_configs: the seeds tests.py and the grader share


def conv_tolerance(reduction: int) -> Tuple[float, float]:
    """(atol, rtol) for outputs that each sum `reduction` products in float32: the rounding
    grows with the length of the sum."""
    return 1e-5 + 8 * EPS * reduction, RTOL


def mismatch(actual: object, expected: torch.Tensor, atol: float, rtol: float) -> Optional[str]:
    """None when actual matches expected within atol + rtol·|expected| everywhere (NaN never
    matches), else what is wrong: how many outputs differ, the first one's index with both
    values, and how many were never written (still NaN, as outputs start)."""
    if not isinstance(actual, torch.Tensor):
        return f"returned {type(actual).__name__}, not a tensor"
    if actual.dtype != torch.float32 or tuple(actual.shape) != tuple(expected.shape):
        return f"returned {actual.dtype} {tuple(actual.shape)}, expected float32 {tuple(expected.shape)}"
    bad = ~((actual - expected).abs() <= atol + rtol * expected.abs())
    if not bad.any():
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    text = (f"{int(bad.sum())} of {expected.numel()} values differ from torch (atol={atol:.1e}, rtol={rtol:.1e}); "
            f"first at {list(first)}: got {actual[first].item():.6g}, expected {expected[first].item():.6g}")
    unwritten = int(actual.isnan().sum())
    if unwritten:
        text += f"; {unwritten} outputs were never written (still NaN)"
    return text


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, reduction: int, what: str = "") -> None:
    """actual == expected within float32 rounding of a sum of `reduction` products."""
    problem = mismatch(actual, expected, *conv_tolerance(reduction))
    if problem:
        raise AssertionError(f"{what}: {problem}" if what else problem)


def _pair(v) -> Tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def describe_conv(x_shape: Sequence[int], w_shape: Sequence[int], bias: bool, stride=1, padding=0, dilation=1,
                  groups: int = 1) -> str:
    """A conv2d case in words: 'x (3, 5, 13, 11), weight (7, 5, 3, 3), bias, stride 2x1, ...'."""
    pairs = [f"{name} {'x'.join(map(str, _pair(v)))}" for name, v in
             (("stride", stride), ("padding", padding), ("dilation", dilation)) if not isinstance(v, str)]
    if isinstance(padding, str):
        pairs.insert(1, f"padding {padding!r}")
    return (f"x {tuple(x_shape)}, weight {tuple(w_shape)}, {'bias' if bias else 'no bias'}, " + ", ".join(pairs) +
            f", groups {groups}")


def base_case(batch=3, c_in=5, c_out=7, size=(13, 11), kernel=(3, 3), groups=1, bias=True):
    """x (batch, c_in, *size), weight (c_out, c_in/groups, *kernel), bias (c_out,) or None,
    from seed 0."""
    torch.manual_seed(0)
    x = torch.randn(batch, c_in, *size)
    weight = torch.randn(c_out, c_in // groups, *kernel)
    b = torch.randn(c_out) if bias else None
    return x, weight, b


def random_conv_config(seed: int) -> Dict:
    """A random valid F.conv2d configuration: every parameter drawn together, small sizes."""
    rng = torch.Generator().manual_seed(seed)

    def pick(*choices):
        return choices[torch.randint(len(choices), (1,), generator=rng).item()]

    groups = pick(1, 1, 2, 3)
    c_in, c_out = groups * pick(1, 2, 5, 16), groups * pick(1, 3, 7, 17)
    if pick(True, False, False):  # depthwise, with channel multiplier 1 or 2
        groups = c_in
        c_out = c_in * pick(1, 2)
    kernel, dilation = (pick(1, 2, 3, 5), pick(1, 3, 4)), (pick(1, 2), pick(1, 3))
    stride, padding = (pick(1, 2, 3), pick(1, 2)), (pick(0, 1, 2), pick(0, 1, 3))
    size = tuple(geometry.span(k, d) + pick(0, 1, 4, 9) for k, d in zip(kernel, dilation))
    return dict(
        batch=pick(1, 2, 3), c_in=c_in, c_out=c_out, size=size, kernel=kernel, groups=groups, bias=pick(True, False),
        stride=stride, padding=padding, dilation=dilation,
    )


def random_conv_case(seed: int):
    """tests.py's random configuration `seed` as (x, weight, bias, config), x not yet padded."""
    c = random_conv_config(seed)
    x, w, b = base_case(c["batch"], c["c_in"], c["c_out"], c["size"], c["kernel"], c["groups"], c["bias"])
    return x, w, b, c


# test_matmul_shapes: name -> (a's shape, b's shape).
MATMUL_SHAPES = {
    "square": ((64, 64), (64, 64)),
    "square_odd": ((33, 33), (33, 33)),
    "tall": ((1000, 7), (7, 33)),
    "skinny": ((7, 1000), (1000, 5)),
    "wide": ((5, 17), (17, 1001)),
    "1xK_times_Kx1": ((1, 513), (513, 1)),
    "1xK": ((1, 513), (513, 33)),
    "Kx1_outer": ((33, 1), (1, 65)),
    "1x1": ((1, 1), (1, 1)),
    "batched_3d": ((3, 7, 33), (33, 9)),
    "batched_4d": ((2, 3, 5, 17), (17, 6)),
}


def matmul_case(name: str):
    """test_matmul_shapes' operands for `name`, from seed 0."""
    a_shape, b_shape = MATMUL_SHAPES[name]
    torch.manual_seed(0)
    return torch.randn(*a_shape), torch.randn(*b_shape)


def matmul_layouts() -> Dict[str, Tuple[torch.Tensor, torch.Tensor]]:
    """test_matmul_layouts' operands: a (7, 33) and b (33, 9), or one row or one column of
    them, in memory layouts other than row-major: views the host code gets as leading
    dimensions and transpose flags (a row of a transposed matrix has its elements lda apart)."""
    torch.manual_seed(0)
    a, b = torch.randn(7, 33), torch.randn(33, 9)
    big = torch.randn(40, 70)
    return {
        "a_transposed": (torch.randn(33, 7).t(), b),
        "b_transposed": (a, torch.randn(9, 33).t()),
        "both_transposed": (torch.randn(33, 7).t(), torch.randn(9, 33).t()),
        "a_sliced_rows": (big[3:10, 5:38], b),
        "b_sliced_cols": (a, big[2:35, 1:10]),
        "a_strided_cols": (big[:7, ::2][:, :33], b),
        "b_transposed_sliced": (a, big.t()[20:53, 4:13]),
        "b_every_other_row": (a, torch.randn(66, 9)[::2]),
        "a_one_strided_row": (big[5:6, :66:2], b),
        "a_row_of_transposed": (torch.randn(33, 7).t()[2:3], b),
        "b_one_column_of_many": (a, big[:33, 3:4]),
        "row_of_transposed_times_column_of_many": (torch.randn(33, 5).t()[4:5], big[:33, 5:6]),
        "a_expanded_row": (torch.randn(1, 33).expand(7, 33), b),
        "b_expanded_col": (a, torch.randn(33, 1).expand(33, 9)),
        "a_3d_transposed": (torch.randn(2, 33, 7).transpose(1, 2), b),
        "a_3d_sliced": (torch.randn(2, 7, 40)[:, :, 3:36], b),
        "a_3d_permuted": (torch.randn(7, 2, 33).permute(1, 0, 2), b),
        "weight_t_like_linear": (a, torch.randn(9, 33).t()),
    }
