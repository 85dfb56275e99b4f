"""The transport floor of ``envhub serve``: the same stack with no application.

uvicorn with the event loop, HTTP parser and WebSocket implementation ``envhub serve``
gets (``auto``: uvloop, httptools, websockets), and a pure ASGI app that parses each
message with orjson and answers it with a canned reply of the size a real one has (the
create, step and close bodies of a real ``calc`` episode, passed as JSON on argv). No
validation, no session, no tool, no metrics: what any server on this stack pays per
step, which ``server_throughput.py --floor`` measures beside envhub's doors.

    python benchmarks/_floor_server.py PORT '{"create": ..., "step": ..., "close": ...}'
"""

from __future__ import annotations

import sys
from typing import Any

import orjson
import uvicorn

Scope = dict[str, Any]


def floor_app(replies: dict[str, bytes]) -> Any:
    """An ASGI app answering ``/v1/ws`` messages by their ``op`` and ``POST`` requests by
    the path's last part (``sessions``: create, ``step``, ``close``)."""
    by_path = {"sessions": replies["create"], "step": replies["step"], "close": replies["close"]}
    texts = {op: body.decode() for op, body in replies.items()}

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return
                request = orjson.loads(message.get("text") or message.get("bytes") or b"")
                await send({"type": "websocket.send", "text": texts[request["op"]]})
        elif scope["type"] == "http":
            body, more = b"", True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            if body:
                orjson.loads(body)
            if scope["path"] == "/health":
                payload = b'{"status":"ok"}'
            else:
                payload = by_path[scope["path"].rsplit("/", 1)[-1]]
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
        elif scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    return app


if __name__ == "__main__":
    port, canned = int(sys.argv[1]), orjson.loads(sys.argv[2])
    replies = {op: orjson.dumps(body) for op, body in canned.items()}
    uvicorn.run(floor_app(replies), host="127.0.0.1", port=port, log_level="warning",
                access_log=False, backlog=65535, timeout_keep_alive=30)
