"""config.pbtxt and RepositoryModelLoad's JSON ``config`` through modelconfig/parse.py."""

from __future__ import annotations

from fuzz_config_strategies import config_jsons, config_texts
from fuzz_oracles import check_config_json, check_config_pbtxt, tally
from fuzz_strategies import mutated
from hypothesis import given, settings
from hypothesis import strategies as st

EXAMPLES = 200


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_fuzz_config_pbtxt(data: st.DataObject) -> None:
    text = data.draw(config_texts)
    if data.draw(st.booleans()):
        text = data.draw(mutated(text.encode())).decode("utf-8", "replace")
    tally("config_pbtxt (hypothesis)", check_config_pbtxt(text))


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_fuzz_config_json(data: st.DataObject) -> None:
    text = data.draw(config_jsons)
    if data.draw(st.booleans()):
        text = data.draw(mutated(text.encode())).decode("utf-8", "replace")
    tally("config_json (hypothesis)", check_config_json(text))


@settings(max_examples=5)
@given(depth=st.sampled_from([10, 900, 5000, 100_000]))
def test_fuzz_config_json_deep(depth: int) -> None:
    text = '{"parameters": ' * depth + "{}" + "}" * depth
    tally("config_json deep (hypothesis)", check_config_json(text))
