from __future__ import annotations

import pytest

from pbd.restrictions import GROUPS, Restriction, parse_restrictions


def test_a_rule_restricts_each_of_its_groups_with_one_header() -> None:
    rules = parse_restrictions("http-restricted-api", ["inference,model-repository:Admin-Key=s3"])
    assert rules == {
        "inference": Restriction("Admin-Key", "s3"),
        "model-repository": Restriction("Admin-Key", "s3"),
    }
    assert rules["inference"].header == "admin-key"
    assert parse_restrictions("http-restricted-api", []) == {}


def test_rules_of_several_flags_and_every_group() -> None:
    rules = parse_restrictions("f", [f"{','.join(GROUPS[:4])}:a=1", f"{','.join(GROUPS[4:])}:b=2"])
    assert set(rules) == set(GROUPS)
    assert {rules[g].name for g in GROUPS[:4]} == {"a"} and rules["logging"].value == "2"


def test_the_prefix_names_the_header() -> None:
    (rule,) = parse_restrictions("g", ["health:Key=v"], "triton-grpc-protocol-").values()
    assert rule.name == "triton-grpc-protocol-Key" and rule.header == "triton-grpc-protocol-key"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("inference", "expected <group>"),
        ("inference:k", "expected <group>"),
        ("inference:=v", "expected <group>"),
        ("inference:k=", "expected <group>"),
        (":k=v", "expected <group>"),
        ("nonsense:k=v", "unknown group 'nonsense'"),
        ("inference,:k=v", "unknown group ''"),
    ],
)
def test_bad_rules_say_what_is_wrong(rule: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^--http-restricted-api '{rule}': {message}"):
        parse_restrictions("http-restricted-api", [rule])


def test_a_group_in_two_rules_is_refused() -> None:
    with pytest.raises(ValueError, match="group 'inference' given twice"):
        parse_restrictions("http-restricted-api", ["inference,health:a=1", "inference:b=2"])


def test_only_the_exact_value_is_allowed() -> None:
    rule = Restriction("Key", "s3cret")
    assert rule.allows("s3cret") and rule.allows(b"s3cret")
    assert not rule.allows(None) and not rule.allows("S3CRET") and not rule.allows("s3cret ")
    assert Restriction("Key", "\u00e9t\u00e9").allows("\u00e9t\u00e9".encode())
