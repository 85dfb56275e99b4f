"""An agent as a child process (``--agent 'command:python tests/agents/command_agent.py'``):
reads its episode from the environment and stdin, as any program would, and plays it with
the OpenAI Agents SDK. ``--crash`` makes it fail the way a broken agent process does."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from envhub.agents import AgentEpisode, OpenAIAgentsRunner


def main() -> None:
    if "--crash" in sys.argv:
        print("Traceback: the agent's framework blew up", file=sys.stderr)
        sys.exit(3)
    episode = AgentEpisode(
        task_id=os.environ["ENVHUB_TASK_ID"],
        messages=json.load(sys.stdin),
        mcp_url=os.environ["ENVHUB_MCP_URL"],
        mcp_token=os.environ["ENVHUB_MCP_TOKEN"],
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ["OPENAI_API_KEY"],
        model=os.environ["ENVHUB_MODEL"],
        max_turns=int(os.environ["ENVHUB_MAX_TURNS"]) if "ENVHUB_MAX_TURNS" in os.environ
        else None,
    )
    asyncio.run(OpenAIAgentsRunner().run(episode))


if __name__ == "__main__":
    main()
