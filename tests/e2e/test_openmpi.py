"""Open MPI 5 between the guests, over UCX (pml ucx) and over libfabric's
RDM endpoints on verbs (mtl ofi), on 2 ranks and on 4, on one switch and
across two. What the user guide's mpirun does: test_hpc.py."""

import pytest

from mpi_runs import mpi_check

pytestmark = pytest.mark.also_two_switches  # the ranks' traffic then crosses the inter-switch link


def test_openmpi_over_ucx_on_2_and_4_ranks(ctx):
    mpi_check(ctx, "openmpi", 2, "ucx")
    mpi_check(ctx, "openmpi", 4, "ucx")


def test_openmpi_over_libfabric_rdm_on_2_and_4_ranks(ctx):
    mpi_check(ctx, "openmpi", 2, "ofi")
    mpi_check(ctx, "openmpi", 4, "ofi")
