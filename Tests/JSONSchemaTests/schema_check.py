"""Independent check of schemas/ with Python's jsonschema: every schema is valid draft 2020-12,
and every example in schemas/examples (and in an optional second directory, e.g. events a test
emitted) validates against the schema its file name names (NAME.anything.json).
Prints one line per file; exits non-zero on the first problem."""
import json
import pathlib
import sys

import jsonschema
from referencing import Registry, Resource

root = pathlib.Path(sys.argv[1])
schemas = {}
for path in sorted(root.glob("*.schema.json")):
    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    schemas[schema["$id"]] = schema
registry = Registry().with_resources((id, Resource.from_contents(s)) for id, s in schemas.items())
instances = sorted((root / "examples").glob("*.json"))
if len(sys.argv) > 2:
    instances += sorted(pathlib.Path(sys.argv[2]).glob("*.json"))
for path in instances:
    name = path.name.split(".")
    # purchase.submitted.appstore.json -> purchase.submitted; catalog.json -> catalog
    for length in (2, 1):
        schema_id = f"urn:iap-pipeline:schema:{'.'.join(name[:length])}:v1"
        if schema_id in schemas:
            break
    validator = jsonschema.Draft202012Validator(schemas[schema_id], registry=registry,
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    validator.validate(json.loads(path.read_text()))
    print(f"ok {path.name} against {schema_id}")
print(f"{len(schemas)} schemas valid")
