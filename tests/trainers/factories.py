"""Hand-made trajectories with token ids, for the adapter invariant tests."""

from __future__ import annotations

from envhub.trajectory import EnvRef, Trajectory, Turn


def turn(
    prompt: list[int],
    completion: list[int],
    *,
    logprobs: list[float] | None = None,
    version: int | None = 0,
    prefix_ok: bool | None = None,
    message_index: int = 0,
) -> Turn:
    return Turn(
        message_index=message_index,
        latency_s=0.01,
        policy_version=version,
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=logprobs
        if logprobs is not None
        else [-0.1 * (i + 1) for i in range(len(completion))],
        prefix_ok=prefix_ok,
    )


def trajectory(
    group: str,
    index: int,
    reward: float | None,
    turns: list[Turn],
    *,
    env: str = "calc",
    masked: bool = False,
) -> Trajectory:
    return Trajectory(
        trajectory_id=f"{group}-{index}",
        group_id=group,
        task_id=f"task-{group}",
        sample_index=index,
        env=EnvRef(name=env, version="0.1.0"),
        model="test",
        messages=[],
        turns=turns,
        reward=None if masked else reward,
        masked=masked,
    )


def two_turn(group: str, index: int, reward: float, *, version: int = 0) -> Trajectory:
    """prompt [1 2 3] -> sampled [10 11] -> tool glue [20 21] -> sampled [12 13 14]."""
    first = turn([1, 2, 3], [10, 11], version=version)
    second = turn([1, 2, 3, 10, 11, 20, 21], [12, 13, 14], version=version + 1)
    return trajectory(group, index, reward, [first, second])


def drifted(group: str, index: int, reward: float) -> Trajectory:
    """The second prompt re-renders the first completion as [10, 99] instead of [10, 11]."""
    first = turn([1, 2, 3], [10, 11])
    second = turn([1, 2, 3, 10, 99, 20, 21], [12, 13], version=1)
    return trajectory(group, index, reward, [first, second])


def split_turn(group: str, index: int, reward: float) -> Trajectory:
    """A weight update (version 3 -> 4) split the first turn mid-completion:
    prompt [1 2 3] -> sampled [10 11 | 12 13] -> tool glue [20 21] -> sampled [14 15] (v4)."""
    first = turn([1, 2, 3], [10, 11, 12, 13], version=3)
    first.completion_versions = [3, 3, 4, 4]
    second = turn([1, 2, 3, 10, 11, 12, 13, 20, 21], [14, 15], version=4)
    return trajectory(group, index, reward, [first, second])


def _path(own: list[list[int]], shared: list[Turn] | None = None) -> list[Turn]:
    """Turns that extend ``shared``: each new turn's prompt is the previous prompt +
    completion + one tool-result token (90 + turn index)."""
    turns = list(shared or [])
    for completion in own:
        if turns:
            last = turns[-1]
            prompt = [*last.prompt_token_ids, *last.completion_token_ids, 90 + len(turns)]  # type: ignore[misc]
        else:
            prompt = [1, 2, 3]
        turns.append(turn(prompt, completion))
    return turns


def _fork(
    group: str, index: int, reward: float, parent: Trajectory, at: int, own: list[list[int]]
) -> Trajectory:
    child = trajectory(group, index, reward, _path(own, parent.turns[:at]))
    return child.model_copy(
        update={"tree_id": f"{group}-0", "parent_id": parent.trajectory_id, "branch_turn": at}
    )


def hand_tree(
    group: str = "t", rewards: tuple[float, float, float, float] = (1, 0, 1, 0)
) -> list[Trajectory]:
    """R plays 3 turns; A forked from R after turn 1, B from R after turn 2, C from A
    after turn 2. Nodes: R[0,1) -> {R[1,2) -> {R[2,3), B[2,3)}, A[1,2) -> {A[2,3), C[2,3)}}."""
    r_root, r_a, r_b, r_c = rewards
    root = trajectory(group, 0, r_root, _path([[10, 11], [12, 13], [14]]))
    root = root.model_copy(update={"tree_id": f"{group}-0"})
    a = _fork(group, 1, r_a, root, 1, [[30, 31], [32]])
    b = _fork(group, 2, r_b, root, 2, [[40]])
    c = _fork(group, 3, r_c, a, 2, [[50, 51]])
    return [t.model_copy(update={"tree_size": 4}) for t in (root, a, b, c)]
