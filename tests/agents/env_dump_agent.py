"""A command agent that writes its whole environment as JSON to ``argv[1]``, then makes
one model call through the capture proxy with the variables it was given (standard
library only, as any program could)."""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def main() -> None:
    with open(sys.argv[1], "w") as out:
        json.dump(dict(os.environ), out)
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(
            {"model": os.environ["ENVHUB_MODEL"], "messages": json.load(sys.stdin)}
        ).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()


if __name__ == "__main__":
    main()
