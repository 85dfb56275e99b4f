import pytest

from envhub.errors import ToolArgumentError
from tests.core.toy_envs import ToyEnv


def test_schema_from_hints_and_docstring() -> None:
    specs = ToyEnv.tool_specs()
    add = specs["add"].schema["function"]
    assert add["description"] == "Add two integers."
    params = add["parameters"]
    assert params["properties"]["a"] == {"type": "integer", "description": "The first number."}
    assert params["properties"]["b"]["default"] == 1
    assert params["required"] == ["a"]
    assert params["additionalProperties"] is False
    assert specs["finish"].terminal and not specs["add"].terminal
    assert specs["wait"].is_async and not specs["nap"].is_async


def test_validation_errors_are_readable() -> None:
    add = ToyEnv.tool_specs()["add"]
    assert add.validate({"a": "3"}) == {"a": 3, "b": 1}  # lax: numeric strings are accepted
    with pytest.raises(ToolArgumentError, match="a: Input should be a valid integer"):
        add.validate({"a": "three"})
    with pytest.raises(ToolArgumentError, match="a: Field required"):
        add.validate({})
    with pytest.raises(ToolArgumentError, match="c: Extra inputs are not permitted"):
        add.validate({"a": 1, "c": 2})
