"""Generate foliot/core/swf/shapes.json from botocore's SWF service model.

The engine validates SWF requests against this table at run time without importing botocore
(a test dependency only). Re-run after upgrading botocore, and commit the result:

    .venv/bin/python tools/gen_swf_shapes.py

Only what validation needs is kept: operations (input and output shape), and per shape its type,
required members, members, list member, enum, min and max. Documentation is dropped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import botocore
from botocore.loaders import Loader

OUT = Path(__file__).resolve().parent.parent / "foliot" / "core" / "swf" / "shapes.json"
KEEP = ("type", "required", "min", "max", "enum", "pattern")


def table() -> dict[str, Any]:
    model = Loader().load_service_model("swf", "service-2", "2012-01-25")
    shapes: dict[str, Any] = {}
    for name, shape in sorted(model["shapes"].items()):
        out = {k: shape[k] for k in KEEP if k in shape}
        if "members" in shape:
            out["members"] = {m: spec["shape"] for m, spec in shape["members"].items()}
        if "member" in shape:
            out["member"] = shape["member"]["shape"]
        if "key" in shape:
            out["key"], out["value"] = shape["key"]["shape"], shape["value"]["shape"]
        if shape.get("exception"):
            out["exception"] = True
        shapes[name] = out
    operations = {
        name: {"input": op["input"]["shape"], "output": op.get("output", {}).get("shape")}
        for name, op in sorted(model["operations"].items())
    }
    return {
        "generatedFrom": f"botocore {botocore.__version__} swf 2012-01-25 service-2.json",
        "targetPrefix": model["metadata"]["targetPrefix"],
        "operations": operations,
        "shapes": shapes,
    }


def main() -> int:
    OUT.write_text(json.dumps(table(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
