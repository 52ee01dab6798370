"""How a party reaches its Dask cluster: TLS settings from a certificate directory, a
connection as a :class:`~p2pboost.workers.ClusterPool`, and a TLS ``LocalCluster`` for tests,
benchmarks and a one-machine try-out. Dask is imported only here and only when used (it is an
optional extra)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from p2pboost.exceptions import ClusterError, ConfigError
from p2pboost.workers._cluster import ClusterPool
from p2pboost.workers._local import WORKER_NICENESS

if TYPE_CHECKING:
    from distributed import LocalCluster
    from distributed.security import Security

__all__ = ["WORKER_SETTINGS", "cluster_security", "connect_cluster", "local_cluster"]

#: Dask settings for a party's workers (``DASK_...`` variables in docs/how-to/cluster.md).
#: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` in its workers to return memory sooner; any
#: explicit value also turns off glibc's adaptive mmap threshold, so every large buffer (a
#: chunk's ciphertext bytes) is mapped and unmapped afresh, which costs the big-integer work
#: measurably; and the workers' statistical profiler samples the running task's stack every
#: 10 ms, taking the GIL from it. Neither helps a party's crypto work.
WORKER_SETTINGS: dict[str, object] = {
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    "distributed.worker.profile.enabled": False,
}

#: Files of one identity, as ``p2pboost certs init`` writes them.
_CA, _CERT, _KEY = "ca.pem", "cert.pem", "key.pem"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ConfigError(
            "a Dask cluster needs the optional dependency: pip install 'p2pboost[dask]'"
        ) from None
    return distributed


def cluster_security(tls_dir: str | os.PathLike[str]) -> Security:
    """Mutual TLS for a party's cluster from one directory of ``p2pboost certs init``
    (``ca.pem``, ``cert.pem``, ``key.pem``): that certificate is the identity of whoever uses
    it (client, scheduler or worker), and only certificates of the same CA are accepted.

    Use a CA of the party's own for its cluster, not the federation's: a partner's party
    certificate must not open the party's cluster.
    """
    distributed = _distributed()
    base = Path(tls_dir)
    files = {name: base / name for name in (_CA, _CERT, _KEY)}
    for path in files.values():
        if not path.is_file():
            raise ConfigError(f"cluster TLS file not found: {path}")
    ca, cert, key = (str(files[n]) for n in (_CA, _CERT, _KEY))
    security: Security = distributed.Security(
        require_encryption=True,
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        tls_min_version=_tls13(),
    )
    return security


def _tls13() -> Any:
    import ssl

    return ssl.TLSVersion.TLSv1_3


def connect_cluster(
    scheduler: str,
    tls_dir: str | os.PathLike[str],
    *,
    timeout: float = 30.0,
    key_workers: Sequence[str] | Literal["all"] | None = None,
) -> ClusterPool:
    """A :class:`ClusterPool` on the cluster whose scheduler is at ``scheduler``
    (``tls://host:8786``), with the TLS identity in ``tls_dir``; it closes its client when
    shut down. Blocks while it connects: call it before the event loop or in a thread.

    The client fetches results from the workers directly, so this process must reach the
    workers' addresses as well as the scheduler's (docs/how-to/cluster.md)."""
    distributed = _distributed()
    if not scheduler.startswith("tls://"):
        raise ConfigError(f"the compute scheduler must be a tls:// address, not {scheduler!r}")
    security = cluster_security(tls_dir)
    try:
        # Results come straight from the worker that made them (one TLS hop, not two through
        # the scheduler, which would also spend its time relaying ciphertext bytes).
        client = distributed.Client(
            scheduler,
            security=security,
            timeout=timeout,
            set_as_default=False,
            direct_to_workers=True,
        )
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"cannot reach the compute cluster at {scheduler}: {exc}") from None
    try:
        return ClusterPool(client, key_workers=key_workers, owns_client=True)
    except BaseException:
        client.close()
        raise


def _lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):
        os.nice(WORKER_NICENESS)


def _priority_plugin() -> Any:
    """A worker plugin that lowers its worker's priority when the worker starts, restarted
    workers included (Dask sends it to every worker that joins)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class LowerPriority(WorkerPlugin):
        name = "p2pboost-lower-priority"

        def setup(self, worker: Any) -> None:
            _lower_priority()

    return LowerPriority()


def local_cluster(
    workers: int, tls_dir: str | os.PathLike[str], *, host: str = "127.0.0.1"
) -> LocalCluster:
    """A TLS ``LocalCluster`` of ``workers`` single-threaded worker processes (tests,
    benchmarks and a one-machine try-out), set up as the how-to sets up a real one
    (:data:`WORKER_SETTINGS`); its workers run at lower priority, like a local pool's, so the
    party's event loop is never kept waiting for a core."""
    distributed = _distributed()
    import dask

    with dask.config.set(WORKER_SETTINGS):
        cluster: LocalCluster = distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            protocol="tls://",
            host=host,
            security=cluster_security(tls_dir),
            dashboard_address=":0",  # no fixed port: several clusters may run on one machine
        )
    with distributed.Client(cluster, set_as_default=False) as client:
        client.register_plugin(_priority_plugin())
    return cluster
