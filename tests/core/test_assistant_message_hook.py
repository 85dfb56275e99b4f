"""``Environment.on_assistant_message`` sees each assistant message as the model sent it,
before its calls run, including the calls the session refuses (an unknown tool, arguments
that are not JSON), which still become error observations."""

from __future__ import annotations

from envhub import Environment, LocalEnvironment, Reward, ToolCall, tool


class RecordingEnv(Environment):
    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[list[ToolCall], str | None]] = []
        self.ran: list[int] = []

    async def on_assistant_message(self, tool_calls: list[ToolCall], content: str | None) -> None:
        self.seen.append((tool_calls, content))

    @tool
    def double(self, x: int) -> int:
        """Double a number.

        Args:
            x: The number.
        """
        self.ran.append(x)
        return 2 * x

    def reward(self) -> Reward:
        return Reward(value=float(len(self.seen)))


async def test_the_hook_sees_refused_calls_before_any_call_runs() -> None:
    env = LocalEnvironment(RecordingEnv)
    async with await env.open() as session:
        result = await session.step(
            [
                {"id": "a", "name": "double", "arguments": '{"x": 2}'},
                {"id": "b", "name": "triple", "arguments": '{"x": 2}'},
                {"id": "c", "name": "double", "arguments": '{"x": '},
            ],
            content="thinking",
        )
        recorder = session.env
        assert isinstance(recorder, RecordingEnv)
        [(calls, content)] = recorder.seen
        assert [(c.name, c.arguments) for c in calls] == [
            ("double", '{"x": 2}'),
            ("triple", '{"x": 2}'),
            ("double", '{"x": '),
        ]
        assert content == "thinking"
        assert [o.is_error for o in result.observations] == [False, True, True]
        assert recorder.ran == [2]
        final = await session.step([], content="done")
        assert final.done and recorder.seen[-1] == ([], "done")
    assert (await session.close()).reward == 2.0
