# SPDX-License-Identifier: Apache-2.0
"""Validators for docs/schema/*.schema.json, with the cross-file $ref
("result.schema.json") resolved locally, for Debian's python3-jsonschema
(4.10, RefResolver) and newer ones (referencing)."""

import json
import os

SCHEMA_DIR = os.environ.get("AGENTCAGE_SCHEMA_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "schema")


def load(name):
    with open(os.path.join(SCHEMA_DIR, name + ".schema.json")) as f:
        return json.load(f)


def validator(name):
    import jsonschema

    schemas = {s["$id"]: s for s in (load(n) for n in ("result", "control-request", "control-reply"))}
    schema = load(name)
    cls = jsonschema.Draft202012Validator
    cls.check_schema(schema)
    try:
        from referencing import Registry, Resource

        registry = Registry().with_resources(
            (uri, Resource.from_contents(s)) for uri, s in schemas.items())
        return cls(schema, registry=registry)
    except ImportError:
        resolver = jsonschema.RefResolver.from_schema(schema, store=schemas)
        return cls(schema, resolver=resolver)


def errors(name, document):
    """The schema's complaints about `document` (empty: valid)."""
    return ["%s: %s" % ("/".join(str(p) for p in e.absolute_path), e.message)
            for e in validator(name).iter_errors(document)]
