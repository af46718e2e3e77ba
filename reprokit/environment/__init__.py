"""The environment: the machine captured (machine), uv environments (uv), torch_xla releases
(releases)."""
