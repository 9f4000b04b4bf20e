"""FLOPs and bytes of one call of a GEMM, convolution or scaled-dot-product attention operator, from
the shapes a Kineto trace records with `record_shapes` (`Input Dims`, `Input type`, and, since
PyTorch 2.x, `Concrete Inputs`: the scalar and list arguments as texts).

The formulas (docs/analysis.md, "Operator efficiency"):
- GEMM: 2*M*N*K per batch (a multiply and an add per product term); mm, addmm, bmm, baddbmm,
  matmul (broadcast batch dimensions) and linear (M: the product of the input's leading
  dimensions). The bias add of addmm/linear is not counted (M*N, negligible beside 2*M*N*K).
- convolution: 2*N*Cout*prod(out spatial)*(Cin/groups)*prod(kernel), the output size from the
  recorded stride, padding and dilation (the Concrete Inputs); without them: no FLOPs, and the
  reason names what is missing. A transposed convolution: 2*N*Cin*prod(in spatial)*(Cout/groups)*
  prod(kernel). convolution_backward: the forward's FLOPs once per gradient its output_mask asks
  for (input, weight; the bias gradient is not counted).
- attention: 2*B*H*Lq*Lk*(D + Dv) forward (= 4*B*H*Lq*Lk*D when D == Dv: Q K^T and P V), halved
  when is_causal; the backward operators count 2.5 times the forward (the two products recomputed
  or reused plus three gradient products, the convention of the FlashAttention papers).
- bytes: every tensor input plus the outputs, each its element count times its dtype's size: the
  traffic of one pass over operands and results, a lower bound of what the kernels move.
A call whose FLOPs cannot be known gets flops None and a one-line reason.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

DTYPE_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}
"""Bytes per element of the dtype names Kineto writes in `Input type` (c10's C++ type names)."""
DTYPE_CLASS = {"double": "fp64", "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
               "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
               "c10::Float8_e5m2fnuz": "fp8"}
"""The compute dtype of an operator by its first input's type, as the peaks table names them."""

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
# convolution operators: positions of (stride, padding, dilation, transposed, groups) among the inputs
CONV_ARGS = {
    "aten::conv1d": (3, 4, 5, None, 6), "aten::conv2d": (3, 4, 5, None, 6), "aten::conv3d": (3, 4, 5, None, 6),
    "aten::convolution": (3, 4, 5, 6, 8), "aten::_convolution": (3, 4, 5, 6, 8),
    "aten::cudnn_convolution": (3, 2, 4, None, 5), "aten::mkldnn_convolution": (4, 3, 5, None, 6),
    "aten::miopen_convolution": (4, 3, 5, None, 6), "aten::convolution_backward": (4, 5, 6, 7, 9),
}
CONV_BACKWARD_MASK = 10  # convolution_backward's output_mask (grad input, grad weight, grad bias)
# attention operators: position of is_causal, and whether it is a backward
ATTENTION_ARGS = {
    "aten::scaled_dot_product_attention": (5, False),
    "aten::_scaled_dot_product_flash_attention": (4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (4, False),
    "aten::_scaled_dot_product_efficient_attention": (6, False),
    "aten::_scaled_dot_product_cudnn_attention": (6, False),
    "aten::_scaled_dot_product_flash_attention_backward": (11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": (11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (14, True),
}
ATTENTION_BACKWARD_FACTOR = 2.5
OPS = frozenset((*GEMM_OPS, *CONV_ARGS, *ATTENTION_ARGS))
"""Every operator name this module knows."""
NO_CONCRETE = "the trace has no Concrete Inputs (recorded by PyTorch 2.x with record_shapes)"


@dataclass(frozen=True)
class Cost:
    """One call's cost: `kind` gemm/conv/attention, FLOPs and bytes (None: unknown, `reason` says
    why), the compute dtype class (fp32, bf16...: DTYPE_CLASS) and the tensor inputs' shapes as text."""

    kind: str
    flops: float | None
    bytes: float | None
    dtype: str | None
    shape: str
    reason: str | None = None


def kind_of(name: str) -> str | None:
    return "gemm" if name in GEMM_OPS else "conv" if name in CONV_ARGS else "attention" if name in ATTENTION_ARGS else None


def _dims(v) -> list | None:
    return [int(x) for x in v] if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v) else None


def _tensors(dims: list, types: list) -> list[tuple[int, list[int], str]]:
    """(position, dims, dtype) of the inputs that are tensors of a known dtype."""
    out = []
    for i, (d, t) in enumerate(zip(dims, types)):
        dd = _dims(d)
        if dd is not None and t in DTYPE_BYTES:
            out.append((i, dd, t))
    return out


def _nbytes(shape: list[int], dtype: str) -> float:
    return float(math.prod(shape)) * DTYPE_BYTES[dtype]


def _concrete(concrete, i: int):
    """The i-th Concrete Input as a Python value (list, int, bool), None where not recorded."""
    if not isinstance(concrete, (list, tuple)) or i >= len(concrete):
        return None
    v = concrete[i]
    if not isinstance(v, str) or not v:
        return None
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError):
        return v  # e.g. conv2d's padding "same"


def call_cost(name: str, dims, types, concrete=None) -> Cost | None:
    """The cost of one call of operator `name` (None: not an operator of this module); `dims`,
    `types`, `concrete`: the call's `Input Dims`, `Input type` and `Concrete Inputs`."""
    kind = kind_of(name)
    if kind is None:
        return None
    dims = dims if isinstance(dims, (list, tuple)) else []
    types = types if isinstance(types, (list, tuple)) else []
    ts = _tensors(dims, types)
    shape = " x ".join(str(d) for _, d, _ in ts) if ts else "?"
    if len(ts) < 2:
        return Cost(kind, None, None, None, shape, "the trace records no input shapes for this call (record_shapes off)")
    dtype = DTYPE_CLASS.get(ts[0][2], ts[0][2])
    in_bytes = sum(_nbytes(d, t) for _, d, t in ts)
    if kind == "gemm":
        return _gemm(name, ts, dtype, shape, in_bytes)
    if kind == "conv":
        return _conv(name, ts, dtype, shape, in_bytes, concrete)
    return _attention(name, ts, dtype, shape, in_bytes, concrete)


def _gemm(name: str, ts: list, dtype: str, shape: str, in_bytes: float) -> Cost:
    bad = Cost("gemm", None, None, dtype, shape, f"{name}: input shapes {shape} are not those of a matrix product")
    if name == "aten::linear":
        x, w = ts[0][1], ts[1][1]
        if len(x) < 1 or len(w) != 2 or x[-1] != w[1]:
            return bad
        batch, m, k, n = 1, math.prod(x[:-1]), x[-1], w[0]
        out = [*x[:-1], n]
    else:
        a, b = (ts[1][1], ts[2][1]) if name in ("aten::addmm", "aten::baddbmm") and len(ts) >= 3 else (ts[0][1], ts[1][1])
        if not a or not b:
            return bad
        a2 = [1, *a] if len(a) == 1 else a
        b2 = [*b, 1] if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            return bad
        try:
            bshape = list(_broadcast(a2[:-2], b2[:-2]))
        except ValueError:
            return bad
        batch, m, k, n = math.prod(bshape), a2[-2], a2[-1], b2[-1]
        out = [*bshape, m, n]
    flops = 2.0 * batch * m * n * k
    return Cost("gemm", flops, in_bytes + _nbytes(out, ts[0][2]), dtype, shape)


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError("not broadcastable")
        out.append(max(x, y))
    return out


def _conv(name: str, ts: list, dtype: str, shape: str, in_bytes: float, concrete) -> Cost:
    pos = {i: d for i, d, _ in ts}
    i_stride, i_pad, i_dil, i_trans, i_groups = CONV_ARGS[name]
    backward = name == "aten::convolution_backward"
    x, w = (pos.get(1), pos.get(2)) if backward else (pos.get(0), pos.get(1))
    el = ts[0][2]
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return Cost("conv", None, None, dtype, shape, f"{name}: input shapes {shape} are not those of a convolution")
    transposed = _concrete(concrete, i_trans) if i_trans is not None else False
    if transposed is None and not backward:
        transposed = False if i_trans is None else None
    if transposed is None:
        return Cost("conv", None, None, dtype, shape, f"{name}: whether it is transposed is not recorded ({NO_CONCRETE})")
    n, k = x[0], math.prod(w[2:])
    if transposed:  # weight [Cin, Cout/groups, k...]: each input element meets Cout/groups * k weights
        fwd = 2.0 * n * x[1] * math.prod(x[2:]) * w[1] * k
        out_shape = None
    elif backward:  # grad_output [N, Cout, out...] gives the output size without stride or padding
        g = pos.get(0)
        if g is None or len(g) != len(x):
            return Cost("conv", None, None, dtype, shape, f"{name}: no grad_output shape among {shape}")
        fwd = 2.0 * n * w[0] * math.prod(g[2:]) * w[1] * k
        out_shape = g
    else:
        args = {a: _concrete(concrete, i) for a, i in (("stride", i_stride), ("padding", i_pad), ("dilation", i_dil))}
        missing = [a for a, v in args.items() if v is None]
        if missing:
            return Cost("conv", None, None, dtype, shape, f"{name}: {', '.join(missing)} not recorded ({NO_CONCRETE}), so the output size is unknown")
        out_sp = _conv_out(x[2:], w[2:], args["stride"], args["padding"], args["dilation"])
        if out_sp is None:
            return Cost("conv", None, None, dtype, shape, f"{name}: stride/padding/dilation {args} do not fit the input {x}")
        out_shape = [n, w[0], *out_sp]
        fwd = 2.0 * n * w[0] * math.prod(out_sp) * w[1] * k
    if not backward:
        if out_shape is None:  # transposed: (in - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1
            out_shape = _transposed_out(x, w, concrete, i_stride, i_pad, i_dil, i_groups)
        if out_shape is None:
            return Cost("conv", fwd, None, dtype, shape, f"{name}: output size of the transposed convolution not recorded ({NO_CONCRETE})")
        return Cost("conv", fwd, in_bytes + _nbytes(out_shape, el), dtype, shape)
    mask = _concrete(concrete, CONV_BACKWARD_MASK)
    if not isinstance(mask, (list, tuple)) or len(mask) < 2:
        return Cost("conv", None, None, dtype, shape, f"{name}: output_mask not recorded ({NO_CONCRETE}), so which gradients it computes is unknown")
    grads = int(bool(mask[0])) + int(bool(mask[1]))
    out_bytes = (_nbytes(x, el) if mask[0] else 0.0) + (_nbytes(w, el) if mask[1] else 0.0)
    return Cost("conv", fwd * grads, in_bytes + out_bytes, dtype, shape)


def _transposed_out(x, w, concrete, i_stride, i_pad, i_dil, i_groups) -> list[int] | None:
    nd = len(x) - 2
    vals = [_concrete(concrete, i) for i in (i_stride, i_pad, i_dil, i_groups - 1)]  # output_padding precedes groups
    vals = [[v] * nd if isinstance(v, int) else v for v in vals]
    g = _concrete(concrete, i_groups)
    if not isinstance(g, int) or any(not isinstance(v, (list, tuple)) or len(v) != nd for v in vals):
        return None
    s, p, d, op = vals
    sp = [(i - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1 for i, kk, ss, pp, dd, oo in zip(x[2:], w[2:], s, p, d, op)]
    return [x[0], w[1] * g, *sp]


def _conv_out(size: list[int], kernel: list[int], stride, padding, dilation) -> list[int] | None:
    """Output spatial size: floor((in + 2*pad - dil*(k-1) - 1)/stride) + 1 per dimension; padding
    "same" keeps the size (stride 1, as PyTorch requires), "valid" is no padding."""
    nd = len(size)

    def per_dim(v):
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        v = v * nd if len(v) == 1 else v
        return v if len(v) == nd and all(isinstance(x, int) for x in v) else None

    if padding == "same":
        return list(size)
    s, p, d = per_dim(stride), per_dim(0 if padding == "valid" else padding), per_dim(dilation)
    if s is None or p is None or d is None or min(s) < 1:
        return None
    out = [(i + 2 * pp - dd * (kk - 1) - 1) // ss + 1 for i, kk, ss, pp, dd in zip(size, kernel, s, p, d)]
    return out if min(out) > 0 else None


def _attention(name: str, ts: list, dtype: str, shape: str, in_bytes: float, concrete) -> Cost:
    i_causal, backward = ATTENTION_ARGS[name]
    pos = {i: d for i, d, _ in ts}
    q, k, v = (pos.get(1), pos.get(2), pos.get(3)) if backward else (pos.get(0), pos.get(1), pos.get(2))
    if q is None or k is None or v is None or len(q) < 2 or len(k) != len(q) or len(v) != len(q):
        return Cost("attention", None, None, dtype, shape, f"{name}: input shapes {shape} are not query, key and value")
    causal = _concrete(concrete, i_causal)
    if not isinstance(causal, bool):
        return Cost("attention", None, None, dtype, shape, f"{name}: is_causal not recorded ({NO_CONCRETE})")
    batch, lq, d, lk, dv = math.prod(q[:-2]), q[-2], q[-1], k[-2], v[-1]
    flops = 2.0 * batch * lq * lk * (d + dv)
    if causal:
        flops /= 2
    el = ts[0][2]
    if backward:
        return Cost("attention", flops * ATTENTION_BACKWARD_FACTOR, in_bytes + _nbytes(q, el) + _nbytes(k, el) + _nbytes(v, el), dtype, shape)
    return Cost("attention", flops, in_bytes + _nbytes([*q[:-1], dv], el), dtype, shape)
