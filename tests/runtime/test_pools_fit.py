"""Stage pools that cannot all be placed are refused before they are deployed, with what each
asks, instead of waiting for ever on resources that never come."""

from __future__ import annotations

import pytest

from core.config import ServiceConfig
from runtime.placement import placed
from runtime.pools.executor import RayExecutor
from runtime.pools.fit import Demand, PoolsDoNotFit, fit_problems, pools_demand
from stages.base import Resources

TWO_CPUS = [{"CPU": 2.0}]


def pools(**ray: object) -> ServiceConfig:
    return placed(ServiceConfig.load(ray={"placement": "pools", **ray}))


def test_the_service_as_configured_here_fits_two_cpus() -> None:
    for config in (placed(ServiceConfig.load()), pools()):
        assert fit_problems(pools_demand(config), TWO_CPUS, fixed=True) == ([], [])


def test_a_replica_larger_than_every_node_is_refused_on_any_cluster() -> None:
    demand = pools_demand(pools(ocr={"num_cpus": 3}))
    for fixed in (True, False):
        refusals, _ = fit_problems(demand, TWO_CPUS, fixed=fixed)
        assert refusals[0] == (
            "ocr: a replica asks 3 CPUs and the largest node has 2 (ray.ocr.num_cpus)"
        )


def test_more_than_the_cluster_in_all_is_refused_where_no_node_can_come() -> None:
    demand = pools_demand(pools(ocr={"num_cpus": 0.9, "min_replicas": 2}))
    refusals, warnings = fit_problems(demand, TWO_CPUS, fixed=True)
    assert warnings == []
    (refusal,) = refusals
    assert refusal.startswith("the stage pools ask ")
    assert "CPUs at their minimum replicas and the cluster has 2" in refusal
    assert "ocr 1.8 (2 × 0.9, ray.ocr)" in refusal
    # On a cluster an autoscaler may add nodes: a warning, and the deployment goes on.
    assert fit_problems(demand, TWO_CPUS, fixed=False) == ([], [refusal])


def test_a_gpu_pool_needs_a_node_with_a_gpu() -> None:
    demand = {"vlm": Demand("ray.vlm", 1, Resources(cpus=0.5, gpus=1))}
    refusals, _ = fit_problems(demand, TWO_CPUS, fixed=False)
    assert refusals == ["vlm: a replica asks 1 GPUs and the largest node has 0 (ray.vlm.num_gpus)"]
    assert fit_problems(demand, [{"CPU": 8.0, "GPU": 1.0}], fixed=False) == ([], [])


def test_deploying_pools_that_do_not_fit_fails_at_once(serve_apps: None) -> None:
    """On the session's 2-CPU Ray: the error names the pool, where Serve would wait for a
    node that never comes (and the test would time out)."""
    with pytest.raises(PoolsDoNotFit, match=r"ocr: a replica asks 4 CPUs") as raised:
        RayExecutor.deploy(pools(ocr={"num_cpus": 4}))
    assert raised.value.code == "pools_do_not_fit"
