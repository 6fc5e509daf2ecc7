"""UCX and MPI over on-demand registrations (issue 61), on either
personality: UCX 1.18, the guests', registers host memory on demand when
UCX_REG_NONBLOCK_MEM_TYPES says so (its non-blocking registration: an
IBV_ACCESS_ON_DEMAND region per buffer; the older UCX_IB_REG_METHODS=odp,
one implicit region, is gone from it). Which registrations were on demand
is read off `rdma resource show mr -dd` while the run goes: each driver
marks its on-demand regions `odp explicit`."""

import threading

from mpi_runs import mpi_check
from pibctl import odp_costs
from pibctl.hpc import ucx_perftest

ON_DEMAND = ("UCX_REG_NONBLOCK_MEM_TYPES=host",)


class OnDemandRegions:
    """While in a `with`: the most on-demand regions each of `vms` had at
    once, sampled every 0.3 s."""

    def __init__(self, ctx, vms):
        self.ctx, self.vms = ctx, vms
        self.most = dict.fromkeys(vms, 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._done.is_set():
            for vm in self.vms:
                out = self.ctx.run(vm, ["rdma", "-dd", "resource", "show", "mr"], check=False).out
                self.most[vm] = max(self.most[vm], out.count("odp explicit"))
            self._done.wait(0.3)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(timeout=60)


def ucx_and_mpi_on_demand(ctx, device, tls, server_vm, client_vm, mpi_hosts, ranks):
    """ucx_perftest's tag bandwidth (1 MiB messages) over `tls`, pinned
    then on demand, and Open MPI over UCX on demand on `mpi_hosts`, every
    byte checked: each on-demand run must have had on-demand regions on
    every guest it used, the pinned one none. Prints the bandwidths, their
    ratio and the page faults the devices took."""
    pair = (server_vm, client_vm)
    bandwidth = {}
    for name, env in (("pinned", ()), ("on demand", ON_DEMAND)):
        with OnDemandRegions(ctx, pair) as regions:
            (_, bandwidth[name]), faults, took = odp_costs.traced_faults(
                ctx, pair,
                lambda env=env: ucx_perftest(ctx, tls, "tag_bw", 1 << 20, 400, device=device,
                                             extra_env=env, server_vm=server_vm,
                                             client_vm=client_vm))
        print(f"ucx_perftest {tls.split(',')[0]} tag_bw 1 MiB {name}: {bandwidth[name]:.1f} MB/s; "
              f"on-demand regions at once: {regions.most}; {faults} page faults, median "
              f"{odp_costs.median_us(took):.0f} us to resume")
        if env:
            assert all(regions.most.values()), f"no on-demand registration: {regions.most}"
        else:
            assert not any(regions.most.values()), f"on demand without asking: {regions.most}"
    print(f"on demand / pinned: {bandwidth['on demand'] / bandwidth['pinned']:.2f}")
    env = (f"UCX_TLS={tls},self,sm", f"UCX_NET_DEVICES={device}", *ON_DEMAND)
    with OnDemandRegions(ctx, mpi_hosts) as regions:
        _, faults, _ = odp_costs.traced_faults(
            ctx, mpi_hosts,
            lambda: mpi_check(ctx, "openmpi", ranks, "ucx", hosts=mpi_hosts,
                              device=device.split(":")[0], env=env))
    print(f"Open MPI on demand: on-demand regions at once {regions.most}, {faults} page faults")
    # A run of a second may end between two samples; a pinned region never
    # faults, so a fault shows an on-demand one as well.
    assert faults or any(regions.most.values()), f"no on-demand registration: {regions.most}"
