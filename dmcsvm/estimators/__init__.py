"""scikit-learn estimators of dmcsvm, one module per formulation."""

from .binary import BinarySVC, OneVsOneSVC, OneVsRestSVC
from .multiclass import MulticlassSVC
from .scatter import ScatterSVC

__all__ = ["MulticlassSVC", "ScatterSVC", "BinarySVC", "OneVsRestSVC", "OneVsOneSVC"]
