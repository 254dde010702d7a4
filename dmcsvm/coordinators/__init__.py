"""The loops above the engine: they choose what each round sends to the partitions and when to
stop (CONTRIBUTING.md, "Layers").

crammer_singer (batched rounds of the Crammer-Singer family: ``solve``, CoordinatorState,
SolverSettings), decomposition (SMO decomposition for binary and mScatter), multiprototype
(MProtSVM annealing over assignments), linear_cs (the sequential dual method's orchestration and
estimator hooks, in memory), resume (a solve's state rebuilt from a checkpoint).
"""
