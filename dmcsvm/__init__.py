"""dmcsvm: multiclass kernel SVMs (Crammer-Singer family, multi-prototype, mScatter, binary SMO)
trained in-process or on a Dask cluster, with data and kernel-row blocks in zarr."""

__version__ = "0.1.0"

from .estimators import (BinarySVC, MulticlassSVC, MultiPrototypeSVC, OneVsOneSVC,  # noqa: E402
                         OneVsRestSVC, ScatterSVC)

from .model_io import load_model as load, save_model as save  # noqa: E402

__all__ = ["save", "load", "MulticlassSVC", "MultiPrototypeSVC", "ScatterSVC", "BinarySVC", "OneVsRestSVC", "OneVsOneSVC", "__version__"]
