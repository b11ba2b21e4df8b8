"""Configuration sweeps as test parameters: the first configuration of each kind runs in
`make test`, the others carry the slow mark (`make test-slow`). Each configuration is a
program of its own to build, which on a 2-core CPU costs more than its checks."""
from typing import List

import pytest


def first_of_each_kind(configs: List[str]) -> list:
    """configs ("rows VW=16 ...", "cols ...": the kind is the first word) as parameters."""
    seen, params = set(), []
    for config in configs:
        kind = config.split()[0]
        params.append(config if kind not in seen else pytest.param(config, marks=pytest.mark.slow))
        seen.add(kind)
    return params
