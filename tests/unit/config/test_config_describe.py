"""The description mechanism on a toy document: what each kind reads, says and shows in the schema."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jsonschema
import pytest
from ruamel.yaml import YAML

from trioproxy.config.describe import (
    NOT_SUPPORTED,
    Integer,
    Items,
    Reader,
    described,
    field,
    json_schema,
    openapi_schema,
    read_document,
)
from trioproxy.config.model import Address
from trioproxy.config.scalars import DURATION, HOST_PORT_ADDRESS


@described(one_of=("url", "file"))
class Source:
    """Where keys come from: exactly one of url, file."""

    url: str | None = field("A URL.", default=None)
    file: str | None = field("A file.", default=None)


@described
class Toy:
    """A toy document."""

    name: str = field("Its name.", missing="name it")
    size: Annotated[int, Integer(1, 9)] = field("A size.", default=1)
    mode: Literal["a", "b"] = field("A mode.", default="a")
    every: Annotated[float, DURATION] | None = field("A period.", default=None)
    peers: Annotated[tuple[Annotated[Address, HOST_PORT_ADDRESS], ...], Items(min_items=1)] = field(
        "Peers.", default=())
    source: Source | str | None = field("Inline text or a source.", default=None)
    labels: dict[str, str] = field("Labels.", default={})
    later: Annotated[Any, NOT_SUPPORTED] = field("Not built.", default=None)


def read(text: str, env: dict[str, str] | None = None):
    reader = Reader(env or {})
    value = read_document(Toy, YAML(typ="safe").compose(text), reader)
    return value, [p.render("t.yaml") for p in reader.problems]


def test_a_good_document_reads_into_the_class():
    value, found = read("name: x\nsize: 3\nevery: 1m30s\npeers: ['a:1', 'b:2']\nsource: {file: k.json}\n"
                        "labels: {team: core}\n")
    assert found == []
    assert value == Toy(name="x", size=3, every=90.0, peers=(Address("a", 1), Address("b", 2)),
                        source=Source(file="k.json"), labels={"team": "core"})
    assert read("name: x\nsource: inline text\n")[0].source == "inline text"


@pytest.mark.parametrize("text, expected", [
    ("size: 3\n", "t.yaml:1:1: name: name it"),
    ("name: x\nsize: 10\n", "t.yaml:2:7: size: expected an integer from 1 to 9, got 10"),
    ("name: x\nmode: c\n", "t.yaml:2:7: mode: expected a or b, got 'c'"),
    ("name: x\npeers: []\n", "t.yaml:2:8: peers: expected at least one entry"),
    ("name: x\npeers: ['a:1', nope]\n", "t.yaml:2:16: peers[1]: expected HOST:PORT, got 'nope'"),
    ("name: x\nsource: {url: u, file: f}\n", "t.yaml:2:9: source: expected exactly one of: url, file"),
    ("name: x\nsource: [1]\n", "t.yaml:2:9: source: expected a mapping or a value, got a list"),
    ("name: x\nlater: 1\n", "t.yaml:2:8: later: policy is not supported by this version of trioproxy"),
    ("name: x\nlater:\n", "t.yaml:2:7: later: policy is not supported by this version of trioproxy"),
    ("name: x\nsiez: 2\n", "t.yaml:2:1: siez: unknown field; did you mean 'size'?"),
    ("name: $WHO\n", "t.yaml:1:7: name: environment variable WHO is not set"),
])
def test_each_kind_names_what_is_wrong(text, expected):
    assert expected in read(text)[1]


def test_schemas_of_the_toy():
    schema = json_schema(Toy)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate({"name": "x", "peers": ["a:1"], "source": {"url": "u"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "source": {"url": "u", "file": "f"}}, schema)
    crd = openapi_schema(Toy)
    assert "later" not in crd["properties"] and "$ref" not in str(crd)
    assert crd["properties"]["source"] == {"x-kubernetes-preserve-unknown-fields": True, "nullable": True,
                                           "description": "Inline text or a source."}
    assert crd["required"] == ["name"]


def test_a_field_without_description_is_refused():
    import attrs

    @described
    class Bad:
        """Bad."""

        x: int = attrs.field(default=0)

    reader = Reader({})
    with pytest.raises(TypeError, match="describe.field"):
        read_document(Bad, YAML(typ="safe").compose("x: 1\n"), reader)
