"""Acquire / release loads and stores of int64 array elements, and a yield to the OS scheduler,
for numba functions that hand work between threads (:mod:`.passes`).

numba has no atomics and no ``volatile``: a plain load in a spin loop may be hoisted out of it,
and plain stores may be reordered past the one that publishes them.  These intrinsics emit LLVM's
``load atomic ... acquire`` / ``store atomic ... release`` (plain moves on x86, with the compiler
kept from reordering or caching them), so that what a thread wrote before a release store is
seen by a thread whose acquire load reads that store.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import cast

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numpy.typing import NDArray

__all__ = ["load_acquire", "store_release", "yield_cpu"]


def _int64_array(arr) -> bool:  # type: ignore[no-untyped-def]
    return isinstance(arr, types.Array) and arr.dtype == types.int64


def _element_pointer(context, builder, aty, ary, idx, idx_ty):  # type: ignore[no-untyped-def]
    a = context.make_array(aty)(context, builder, ary)
    i = context.cast(builder, idx, idx_ty, types.intp)
    return cgutils.get_item_pointer(  # type: ignore[no-untyped-call]
        context, builder, aty, a, [i], wraparound=False
    )


def _load_acquire(typingctx, arr, idx):  # type: ignore[no-untyped-def]
    """``arr[idx]`` (an int64 array, no negative indices) read with acquire ordering."""
    if not _int64_array(arr) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        aty, ity = signature.args
        ptr = _element_pointer(  # type: ignore[no-untyped-call]
            context, builder, aty, args[0], args[1], ity
        )
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(arr, idx), codegen


def _store_release(typingctx, arr, idx, val):  # type: ignore[no-untyped-def]
    """``arr[idx] = val`` (an int64 array, no negative indices) written with release ordering."""
    if not _int64_array(arr) or not isinstance(idx, types.Integer):
        return None
    if not isinstance(val, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        aty, ity, vty = signature.args
        ptr = _element_pointer(  # type: ignore[no-untyped-call]
            context, builder, aty, args[0], args[1], ity
        )
        v = context.cast(builder, args[2], vty, types.int64)
        builder.store_atomic(v, ptr, "release", 8)
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


def _yield_cpu(typingctx):  # type: ignore[no-untyped-def]
    """Give the core to another runnable thread (POSIX ``sched_yield``; nothing on Windows): a
    thread waiting on another must not spin through a time slice the other needs when the
    machine has more runnable threads than cores (a loaded box, ``pytest -n 3`` on 2 cores)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if sys.platform != "win32":
            fnty = ir.FunctionType(ir.IntType(32), [])
            fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
                builder.module, fnty, "sched_yield"
            )
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


# typed names for the jitted callers (an intrinsic is called from numba code only, without the
# typing context its definition takes first)
load_acquire = cast(Callable[[NDArray[np.int64], int], int], intrinsic(_load_acquire))
store_release = cast(Callable[[NDArray[np.int64], int, int], None], intrinsic(_store_release))
yield_cpu = cast(Callable[[], None], intrinsic(_yield_cpu))
