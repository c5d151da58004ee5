"""The transport's copy-free marshal writes exactly what lark-oapi's JSON.marshal writes."""

from __future__ import annotations

from typing import Any

import lark_oapi as lark
from hypothesis import given
from hypothesis import strategies as st
from lark_oapi.api.cardkit.v1 import ContentCardElementRequestBody
from lark_oapi.api.im.v1 import (
    CreateMessageRequestBody,
    PatchMessageRequestBody,
    ReplyMessageRequestBody,
)

from bot.feishu.transport import marshal


class Model:
    """A stand-in for the SDK's generated models: plain attributes in ``__dict__``."""

    def __init__(self, **fields: Any) -> None:
        vars(self).update(fields)


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    # What lark-oapi's encoder turns into JSON itself: dates, bytes (UTF-8 or base64). Not
    # sets: its deep copy may iterate one in another order, so its own text is not fixed.
    st.datetimes(),
    st.binary(max_size=8),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4).map(lambda d: Model(**d)),
    ),
    max_leaves=25,
)


@given(st.dictionaries(st.text(max_size=8), values, max_size=6).map(lambda d: Model(**d)))
def test_any_model_marshals_as_the_sdk_marshals_it(model: Model) -> None:
    assert marshal(model) == lark.JSON.marshal(model)


@given(st.dictionaries(st.text(max_size=8), values, max_size=6).map(lambda d: Model(**d)))
def test_marshal_leaves_the_model_as_it_was(model: Model) -> None:
    before = lark.JSON.marshal(model)
    marshal(model)
    assert lark.JSON.marshal(model) == before


def test_the_bodies_the_bot_sends_marshal_as_the_sdk_marshals_them() -> None:
    bodies = [
        ReplyMessageRequestBody.builder()
        .content('{"text":"你好 <at>"}')
        .msg_type("text")
        .uuid("u-1")
        .reply_in_thread(True)
        .build(),
        ReplyMessageRequestBody.builder().content("{}").msg_type("interactive").build(),
        CreateMessageRequestBody.builder()
        .receive_id("oc_1")
        .msg_type("post")
        .content('{"zh_cn":{"content":[[{"tag":"text","text":"x"}]]}}')
        .build(),
        PatchMessageRequestBody.builder().content('{"elements":[]}').build(),
        ContentCardElementRequestBody.builder().content("tokens…").sequence(7).uuid("s").build(),
    ]
    for body in bodies:
        assert marshal(body) == lark.JSON.marshal(body)
