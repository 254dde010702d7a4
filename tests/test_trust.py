"""What dmcsvm trusts (issue 13): a model file or checkpoint never chooses where code runs, non-finite
values and missing or damaged store chunks are errors naming the cause (never a "converged" wrong
model), and a checkpoint resumes only onto the data it was written for."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from dmcsvm import MulticlassSVC
from dmcsvm.model_io import load_model, save_model
from dmcsvm.store import open_store, write_arrays


def _blobs(n=240, d=5, m=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(m, d))
    y = np.arange(n) % m
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32), y


def _rewrite_meta(path, edit):
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    edit(meta)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)


class _Listener:
    """A TCP port on 127.0.0.1 that records every connection made to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()


# ----------------------------------------------------------------------- 1. no connection from a file

def test_model_file_naming_a_scheduler_connects_nowhere(tmp_path):
    """A model whose JSON names a scheduler (as a malicious file, or a model saved after
    fit(client='tcp://...') by dmcsvm 0.1 would) is predicted in this process: nothing connects."""
    X, y = _blobs()
    est = MulticlassSVC(C=5, n_jobs=1).fit(X, y)
    model = tmp_path / "m.npz"
    save_model(est, model)
    listener = _Listener()
    try:
        def name_scheduler(meta):
            meta["model"]["params"]["client"] = f"tcp://127.0.0.1:{listener.port}"
            meta["model"]["params"]["n_jobs"] = 64
        _rewrite_meta(model, name_scheduler)
        loaded = load_model(model)
        assert loaded.client is None and loaded.n_jobs is None
        store = tmp_path / "s.zarr"
        write_arrays(store, X, y)
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        r = subprocess.run([sys.executable, "-m", "dmcsvm.cli", "predict", str(model), str(store),
                            "-o", str(tmp_path / "p.txt")], capture_output=True, text=True,
                           timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        assert np.array_equal(loaded.predict(str(store)), est.predict(X))
    finally:
        listener.close()
    assert listener.connections == 0


def test_runtime_params_are_not_written(tmp_path):
    X, y = _blobs()
    est = MulticlassSVC(C=5, n_jobs=1, client=None, cache_size=17, cache_dir=str(tmp_path),
                        verbose=False).fit(X, y)
    save_model(est, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        params = json.loads(bytes(z["meta"]).decode())["model"]["params"]
    from dmcsvm.runtime_params import RUNTIME_PARAMS
    assert not set(params) & RUNTIME_PARAMS
    assert params["C"] == 5
    back = load_model(tmp_path / "m.npz")
    assert back.cache_dir is None and back.cache_size == MulticlassSVC().cache_size
