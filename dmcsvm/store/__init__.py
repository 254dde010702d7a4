"""On-disk data store: a zarr group of row-chunked features and labels, its converters and readers.

See :mod:`dmcsvm.store.layout` for the format.  The writers live one source kind a module
(:mod:`~dmcsvm.store.from_arrays`, :mod:`~dmcsvm.store.svmlight`, :mod:`~dmcsvm.store.delimited`)
over the shared builder in :mod:`~dmcsvm.store._builder` and text reading in
:mod:`~dmcsvm.store.text`.  Typical use::

    from dmcsvm.store import from_svmlight, open_store, read_rows
    info = from_svmlight("train.svm", "train.zarr")
    for lo, hi in info.chunk_bounds:
        X_block = read_rows(info, lo, hi)
"""

from .delimited import from_csv
from .from_arrays import from_dask, from_npy, write_arrays
from .layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    StoreInfo,
    chunk_bounds,
    default_rows_per_chunk,
    open_store,
)
from .readers import iter_chunks, read_all, read_labels, read_rows, read_sample_weight
from .svmlight import from_svmlight

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "StoreInfo",
    "chunk_bounds",
    "default_rows_per_chunk",
    "open_store",
    "read_rows",
    "read_labels",
    "read_sample_weight",
    "read_all",
    "iter_chunks",
    "write_arrays",
    "from_svmlight",
    "from_csv",
    "from_npy",
    "from_dask",
]
