"""Implementations of the seam (:class:`envhub.protocol.EnvironmentClient`): in-process
(:mod:`.local`), one ``envhub serve`` server over HTTP or WebSocket (:mod:`.remote`, on
the plumbing in :mod:`._remote_calls` and :mod:`._http_transports`), and several replicas
(:mod:`.pooled`, fed by a :mod:`.replicas` source). Each one passes the conformance
suite (:mod:`envhub.testing.conformance`); the server's MCP door has the other one
(:class:`envhub.server.mcp.StoreEnvironment`).
"""
