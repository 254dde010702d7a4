"""Train dmcsvm on workers started as SLURM jobs by dask-jobqueue.

Run it on a login node (it hosts the scheduler and the coordinator of the training):

    pip install dask-jobqueue                  # not a dependency of dmcsvm
    python cluster/jobqueue/slurm_example.py /shared/train.zarr -o model.npz \\
        --jobs 4 --cores 8 --processes 2 --memory 32GB --walltime 02:00:00 --queue compute
    python cluster/jobqueue/slurm_example.py --print-job-script ...   # show the sbatch script

Each job runs ``--processes`` Dask workers with ``--cores / --processes`` threads each; the job
asks SLURM for ``--memory`` (``#SBATCH --mem``) and each worker gets ``--memory / --processes``
as its ``--memory-limit``, the budget its dmcsvm partitions must fit in (cluster/README.md,
"Sizing --memory-limit"). The store must be on storage that every compute node mounts: the
workers read their rows from it. The Dask settings of cluster/dask-config.yaml reach the jobs
through ``DASK_CONFIG`` (exported in the job script).
"""

from __future__ import annotations

import argparse
import os
import sys

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "dask-config.yaml")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("store", nargs="?", help="dmcsvm zarr store on shared storage")
    p.add_argument("-o", "--output", default="model.npz", help="model file to write")
    p.add_argument("--jobs", type=int, default=2, help="SLURM jobs (each runs --processes workers)")
    p.add_argument("--cores", type=int, default=8, help="cores per job")
    p.add_argument("--processes", type=int, default=2, help="Dask worker processes per job")
    p.add_argument("--memory", default="32GB", help="memory per job (#SBATCH --mem)")
    p.add_argument("--walltime", default="01:00:00")
    p.add_argument("--queue", default=None, help="SLURM partition (-p)")
    p.add_argument("--account", default=None, help="SLURM account (-A)")
    p.add_argument(
        "--local-directory",
        default="$TMPDIR",
        help="node-local scratch for the workers (kernel-column disk cache)",
    )
    p.add_argument("--C", type=float, default=10.0)
    p.add_argument(
        "--print-job-script",
        action="store_true",
        help="print the sbatch script the jobs would run, submit nothing",
    )
    return p.parse_args(argv)


def make_cluster(a):
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        print(
            "dask-jobqueue is not installed: pip install dask-jobqueue "
            "(it is not a dependency of dmcsvm)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    return SLURMCluster(
        queue=a.queue,
        account=a.account,
        cores=a.cores,
        processes=a.processes,
        memory=a.memory,  # per job; each worker: memory / processes
        walltime=a.walltime,
        local_directory=a.local_directory,
        job_script_prologue=[f"export DASK_CONFIG={os.path.abspath(CONFIG)}"],
        # the row partitions live in the workers: a job that reaches its walltime mid-fit takes
        # its partitions with it, so give the jobs a walltime that covers the fit (and keep
        # checkpoints for long fits: dmcsvm train --checkpoint DIR)
        worker_extra_args=["--no-dashboard"],
    )


def main(argv=None) -> int:
    a = parse_args(argv)
    cluster = make_cluster(a)
    try:
        if a.print_job_script:
            print(cluster.job_script())
            return 0
        if not a.store:
            print("give the store to train on (or --print-job-script)", file=sys.stderr)
            return 2
        from distributed import Client

        from dmcsvm import MulticlassSVC
        from dmcsvm.model_io import save_model

        cluster.scale(jobs=a.jobs)
        with Client(cluster) as client:
            # partitions are spread over the workers present when fit starts: wait for them all
            client.wait_for_workers(a.jobs * a.processes, timeout=3600)
            clf = MulticlassSVC(C=a.C, client=client).fit(a.store)
        save_model(clf, a.output)
        print(f"model written to {a.output}: {len(clf.support_)} support vectors")
        return 0
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
