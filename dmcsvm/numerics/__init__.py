"""Plain numba functions on arrays, below the engine: they import nothing of dmcsvm but each other
and the foundation modules (CONTRIBUTING.md, "Layers").

pattern (per-pattern optimizers, selection values, scan_rows, solve_batch), working_set (the
coordinator's re-selection solve of a batch on K_BB), selection (stopping thresholds), binary_smo
(Platt steps and bias), grouped_smo (SMO for duals with one equality constraint per group: binary
C-SVM and mScatter), linear_prototypes (scores, slacks and steps of explicit prototypes),
sequential_dual (the passes of the sequential dual method), prefetch (cache-line hints for
random-order passes).
"""
