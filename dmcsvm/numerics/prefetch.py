"""Software prefetch for numba kernels that visit rows in a random order.

The sequential dual passes (:mod:`dmcsvm.numerics.sequential_dual`) visit the patterns in a
random order, and each visit reads the pattern's X row, its active-prototype list and its
coefficients from arrays far larger than the caches, each read a cache miss the loop then waits
for.  The next pattern is known one visit ahead, so its lines can be requested while the current
one is computed.  A prefetch is only a hint: it changes no value, only when the line arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload
from numpy.typing import NDArray

if TYPE_CHECKING:
    from numba.core.base import BaseContext
    from numba.core.typing.context import Context
    from numba.core.typing.templates import Signature

    #: an intrinsic's code generation (llvmlite ships no type information: ``ir`` is Any here)
    Codegen: TypeAlias = Callable[
        [BaseContext, ir.IRBuilder, Signature, Sequence[ir.Value]], ir.Value
    ]

# Typing: numba's code generation helpers (cgutils, the target context's methods) are unannotated,
# hence the `no-untyped-call` ignores below; and numba's stub types a call of an intrinsic with all
# the parameters of its typing function, typing context included, which numba supplies itself,
# hence the `call-arg` (and `arg-type`) ignores on calls of prefetch and prefetch2 in numba code.


def _emit_prefetch(builder: ir.IRBuilder, ptr: ir.Value) -> None:
    """``llvm.prefetch(ptr, read, high locality, data cache)``."""
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
        builder.module, fnty, "llvm.prefetch.p0i8"
    )
    builder.call(
        fn,
        [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)],
    )


def _prefetch_codegen(
    context: BaseContext, builder: ir.IRBuilder, sig: Signature, args: Sequence[ir.Value]
) -> ir.Value:
    """Lower ``prefetch(arr, *indices)``: the address of ``arr[indices]``, then the hint."""
    aty = sig.args[0]
    idx = [
        context.cast(builder, v, t, types.intp)  # type: ignore[no-untyped-call]
        for v, t in zip(args[1:], sig.args[1:], strict=False)
    ]
    ary = context.make_array(aty)(context, builder, args[0])  # type: ignore[no-untyped-call]
    _emit_prefetch(
        builder,
        cgutils.get_item_pointer(  # type: ignore[no-untyped-call]
            context, builder, aty, ary, idx, wraparound=False
        ),
    )
    return context.get_dummy_value()  # type: ignore[no-untyped-call]


@intrinsic
def prefetch(
    typingctx: Context, arr: types.Type, i: types.Type
) -> tuple[Signature, Codegen] | None:
    """Ask for the cache line holding ``arr[i]`` (1-d ``arr``; numba only; no bounds check, and
    none needed: a prefetch of a bad address is dropped, never a fault)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(i, types.Integer)):
        return None
    return types.void(arr, i), _prefetch_codegen


@intrinsic
def prefetch2(
    typingctx: Context, arr: types.Type, i: types.Type, k: types.Type
) -> tuple[Signature, Codegen] | None:
    """Ask for the cache line holding ``arr[i, k]`` (2-d ``arr``; numba only)."""
    if not (
        isinstance(arr, types.Array)
        and arr.ndim == 2
        and isinstance(i, types.Integer)
        and isinstance(k, types.Integer)
    ):
        return None
    return types.void(arr, i, k), _prefetch_codegen


def prefetch_row(rows: tuple[NDArray[Any], ...], i: int) -> None:
    """Ask for X row ``i`` (its first 1 KB and its end; numba only): ``rows`` is ``(Xd,)``
    (dense) or ``(indptr, indices, data)`` (CSR), as :mod:`.sequential_dual` takes them."""


@overload(prefetch_row)
def _prefetch_row(rows: Any, i: Any) -> Callable[[Any, Any], None]:
    if len(rows) == 1:

        def impl(rows: Any, i: Any) -> None:
            Xd = rows[0]
            d = Xd.shape[1]
            # every line of the first 1 KB (the hardware prefetcher follows a longer row)
            for k in range(0, min(d, 128), 8):
                prefetch2(Xd, i, k)  # type: ignore[call-arg, arg-type]
            prefetch2(Xd, i, d - 1)  # type: ignore[call-arg]
    else:

        def impl(rows: Any, i: Any) -> None:
            indptr, indices, data = rows
            a = indptr[i]
            b = max(indptr[i + 1] - 1, a)
            prefetch(indices, a)  # type: ignore[call-arg]
            prefetch(indices, b)
            prefetch(data, a)
            prefetch(data, b)

    return impl
