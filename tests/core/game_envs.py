"""Environments without data that end their own episodes (hosted by ``module:Class`` id)."""

from __future__ import annotations

from envhub import Budgets, Environment, GoldCall, Task, TaskSet, tool

COUNTER_GAME = f"{__name__}:CounterGame"
COUNTER_GAME_WITH_GOLD = f"{__name__}:CounterGameWithGold"


class CounterGame(Environment):
    """Reach ``goal`` with ``up``; ``moves`` moves (tool calls or answers) are allowed.

    No ``load_tasks``: its one task is the default task with :attr:`default_prompt`.
    """

    name = "counter-game"
    default_prompt = "Count up to 3 with the `up` tool."
    budgets = Budgets(max_turns=50)
    final_answer_ends_episode = False  # talking is a move; the game decides when it ends

    def __init__(self, goal: int = 3, moves: int = 5) -> None:
        super().__init__()
        self.goal = goal
        self.moves_left = moves
        self.count = 0

    @tool
    def up(self, by: int = 1) -> str:
        """Add to the counter.

        Args:
            by: How much to add (a typo such as 0 wastes a move).
        """
        self.count += by
        self._moved()
        return f"count={self.count}"

    @tool
    def end_with(self, reason: str) -> str:
        """Ask the game to end with a given reason (exercises reason validation).

        Args:
            reason: The reason label.
        """
        self.end_episode(reason)
        return "ending"

    async def on_final_answer(self, content: str) -> None:
        await super().on_final_answer(content)
        if content.strip() == "I give up":
            self.end_episode("resigned")
        else:
            self._moved()

    def _moved(self) -> None:
        self.moves_left -= 1
        if self.count >= self.goal:
            self.end_episode("goal_reached")
        elif self.moves_left <= 0:
            self.end_episode("out_of_moves")

    def reward(self) -> float:
        return float(self.count >= self.goal)


class CounterGameWithGold(CounterGame):
    """The same game with a gold solution, for the reference policy; the fourth gold call
    must never run because the game ends at the third."""

    name = "counter-game-gold"

    def load_tasks(self) -> TaskSet:
        return TaskSet([Task(id="reach-3", prompt=[{"role": "user", "content": "count to 3"}],
                             gold_actions=[GoldCall(name="up")] * 4)])
