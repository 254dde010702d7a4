"""scikit-learn estimators of dmcsvm, one module per formulation."""

from .binary import BinarySVC, OneVsOneSVC, OneVsRestSVC
from .multiclass import MulticlassSVC
from .multiprototype import MultiPrototypeSVC
from .scatter import ScatterSVC

__all__ = ["MulticlassSVC", "MultiPrototypeSVC", "ScatterSVC", "BinarySVC", "OneVsRestSVC", "OneVsOneSVC"]
