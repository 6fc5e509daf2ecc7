"""pibctl: setup, fabric control and tests for pib-hca (driven by ./pib)."""
