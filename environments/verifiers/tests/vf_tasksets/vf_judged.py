"""A judged taskset written against verifiers' public v1 API: a weighted reward function
of the task's own, and the judges a verifiers config plugs into ``[env.taskset.task]``
(``judges = [...]``: the built-in ``reference`` judge's yes/no verdict and the
``rubric`` judge's weighted criteria, ``vf_judged_rubric.toml``), each pointed at an
OpenAI-compatible endpoint by its config entry. ``Task.score`` runs the judges after the
task's rewards and records each as a reward with its configured weight."""

import verifiers.v1 as vf


class JudgedData(vf.TaskData):
    answer: str


class JudgedTask(vf.Task[JudgedData]):
    @vf.reward(weight=0.5)
    async def brief(self, trace: vf.Trace) -> float:
        return 1.0 if len(trace.last_reply) <= 4 else 0.0


class JudgedTaskset(vf.Taskset[JudgedTask]):
    def load(self):
        for question, answer in [("What is 2 + 3?", "5"), ("What is 7 * 6?", "42")]:
            yield JudgedTask(JudgedData(prompt=question, answer=answer), self.config.task)


__all__ = ["JudgedTaskset"]
