"""scikit-learn estimators of dmcsvm, one module per formulation."""

from .multiclass import MulticlassSVC

__all__ = ["MulticlassSVC"]
