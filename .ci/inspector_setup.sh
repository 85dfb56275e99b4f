#!/usr/bin/env bash
# The MCP Inspector's CLI, for tests/mcp/test_inspector.py: the Node MCP client users
# reach for first, run against `envhub serve --mcp` (Streamable HTTP) and `envhub mcp`
# (stdio).
#
# Only its CLI package (@modelcontextprotocol/inspector-cli: ~100 npm packages, 41 MB;
# the whole Inspector, web client included, is 250 packages, 148 MB), at the version
# `npm install @modelcontextprotocol/inspector` picks on Node 20: npm takes the newest
# release whose `engines` admit the running Node, and every Inspector after 0.15.0 needs
# Node >= 22.7.5. (The standalone CLI's own 1.x line has no `engines` but reads its
# package.json relative to the working directory, so it fails outside its own folder.)
# Installed under $ENVHUB_CACHE/mcp-inspector, npm's cache beside it; Node from the
# machine's packages (Debian's nodejs and npm when there is none). Idempotent: a rerun
# with the version in place does nothing.
set -euo pipefail

VERSION="${MCP_INSPECTOR_VERSION:-0.15.0}"
cache="${ENVHUB_CACHE:-$HOME/.cache/envhub}"
target="$cache/mcp-inspector"
package="$target/node_modules/@modelcontextprotocol/inspector-cli"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm \
        >/dev/null
fi
installed=$(node -p "require('$package/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
    npm install --prefix "$target" --cache "$cache/npm" --no-audit --no-fund --omit=dev --prefer-offline \
        --loglevel=error "@modelcontextprotocol/inspector-cli@$VERSION" >/dev/null
fi
echo "inspector_setup: MCP Inspector CLI $VERSION in $target on Node $(node --version)"
