"""Validates JSON documents against headroom's schemas with python-jsonschema (Draft 2020-12),
one request per line on stdin, one answer per line on stdout, so a test run pays Python's start
once. A request is {"schema": NAME or a schema object, "doc": the instance}; NAME is read from
docs/schema/NAME.schema.json (and checked against the 2020-12 meta-schema) once. The answer is
{"errors": ["<JSON pointer>: <message>", ...]} with at most five errors."""

import json
import os
import sys

from jsonschema import Draft202012Validator

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "schema")
validators = {}


def validator(schema):
    if isinstance(schema, str):
        if schema not in validators:
            with open(os.path.join(ROOT, schema + ".schema.json"), encoding="utf-8") as f:
                s = json.load(f)
            Draft202012Validator.check_schema(s)
            validators[schema] = Draft202012Validator(s)
        return validators[schema]
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def main():
    for line in sys.stdin:
        req = json.loads(line)
        try:
            v = validator(req["schema"])
            errors = [
                "/" + "/".join(str(p) for p in e.absolute_path) + ": " + e.message[:300]
                for e in sorted(v.iter_errors(req["doc"]), key=lambda e: list(map(str, e.absolute_path)))[:5]
            ]
        except Exception as e:  # a schema that is not valid 2020-12 is an answer too
            errors = ["(schema) " + type(e).__name__ + ": " + str(e).splitlines()[0]]
        sys.stdout.write(json.dumps({"errors": errors}) + "\n")
        sys.stdout.flush()


main()
