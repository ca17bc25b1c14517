from __future__ import annotations

import pytest

from pbd.grpc.restricted import GROUPS, parse_restrictions


def test_rules_map_every_rpc_of_the_groups_to_its_header():
    rules = parse_restrictions(["model-repository,shared-memory:Admin-Key=s3cret"])
    assert set(rules) == set(GROUPS["model-repository"]) | set(GROUPS["shared-memory"])
    assert {(r.header, r.value) for r in rules.values()} == {
        ("triton-grpc-protocol-admin-key", "s3cret")
    }
    assert parse_restrictions([]) == {}


@pytest.mark.parametrize(
    "rule, message",
    [
        ("model-repository", "expected <group>"),
        ("nonsense:k=v", "unknown group 'nonsense'"),
        (":k=v", "expected <group>"),
    ],
)
def test_bad_rules_say_what_is_wrong(rule, message):
    with pytest.raises(ValueError, match=message):
        parse_restrictions([rule])
    with pytest.raises(ValueError, match="given twice"):
        parse_restrictions(["inference:a=1", "inference:b=2"])
