from __future__ import annotations

import pytest

from pbd.grpc.restricted import RPCS, grpc_restrictions
from pbd.restrictions import GROUPS


def test_every_group_names_its_rpcs() -> None:
    assert tuple(RPCS) == GROUPS


def test_rules_map_every_rpc_of_the_groups_to_its_header() -> None:
    rules = grpc_restrictions(["model-repository,shared-memory:Admin-Key=s3cret"])
    assert set(rules) == set(RPCS["model-repository"]) | set(RPCS["shared-memory"])
    assert {(r.header, r.value) for r in rules.values()} == {
        ("triton-grpc-protocol-admin-key", "s3cret")
    }
    assert grpc_restrictions([]) == {}


def test_bad_rules_name_the_grpc_flag() -> None:
    with pytest.raises(ValueError, match="--grpc-restricted-protocol 'nope:k=v': unknown group"):
        grpc_restrictions(["nope:k=v"])
