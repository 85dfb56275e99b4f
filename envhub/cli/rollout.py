"""``envhub rollout``, ``envhub check`` and ``envhub export``.

The rollout engine, policies and ``datasets`` are imported inside the command bodies so
that ``envhub --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import shlex
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TextIO, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envhub._util.gc_tuning import DEFAULT_GC_THRESHOLD
from envhub.cli._app import app
from envhub.cli.options import (
    EnvArgOption,
    GcThresholdOption,
    SandboxBackendOption,
    env_options,
    plugin_choices,
    warn_tool_gaps,
)
from envhub.cli.targets import (
    EnvFleetOption,
    EnvTarget,
    EnvTokenOption,
    EnvUrlOption,
    FleetNamespaceOption,
    local_task_source,
)
from envhub.errors import EnvhubError, InvalidRequest, RolloutFailed

if TYPE_CHECKING:
    import asyncio
    import signal
    from collections.abc import Awaitable, Callable, Iterator

    from envhub.clients.remote import SessionTransport
    from envhub.policies.base import Policy
    from envhub.policies.endpoints import RoutingMode
    from envhub.policies.openai_compat import TokenIdMode
    from envhub.policies.transport import TransportOptions
    from envhub.protocol import EnvironmentClient
    from envhub.rewards.judge import GroupJudge
    from envhub.rollout.compaction import CompactionConfig
    from envhub.rollout.episode import TurnLoop
    from envhub.rollout.run import RolloutResult
    from envhub.rollout.summary import RunSummary
    from envhub.trajectory import Trajectory

# The defaults of envhub.rollout.breaker and envhub.rollout.run, spelled out so that
# `envhub --help` imports none of them (tests/rollout/test_defaults.py holds them equal).
# --env-transport has none of its own: the client's (envhub.clients.remote) decides.
DEFAULT_MAX_MASKED_FRACTION = 0.1
DEFAULT_MAX_CONSECUTIVE_MASKED = 20

console = Console(stderr=True)

NO_MODEL_HINT = (
    "no --base-url given. Start a local model server with `envhub llm serve` "
    "(pip install 'envhub-rl[local-llm]') and pass --base-url http://127.0.0.1:8080/v1 "
    "--model smollm2-135m, point --base-url at any OpenAI-compatible server (vLLM, SGLang), "
    "or replay gold actions with --policy reference."
)


def _group_judge(spec: str) -> GroupJudge:
    """``--group-judge``'s judge, from its endpoint config as JSON (the operator's)."""
    from pydantic import ValidationError

    from envhub.policies.judge import OpenAIJudgeEndpoint
    from envhub.rewards.judge import GroupJudge, JudgeEndpointConfig

    try:
        config = JudgeEndpointConfig.model_validate_json(spec)
    except ValidationError as exc:
        reason = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()[:3]
        )
        hint = '{"base_urls": [URL], "model": NAME}'
        raise _fail(f"--group-judge takes {hint}: {reason}") from None
    try:
        return GroupJudge(OpenAIJudgeEndpoint(config))
    except EnvhubError as exc:
        raise _fail(str(exc)) from None


def _fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` as one unwrapped line (logs and greps keep URLs and paths whole)
    and return the exit to raise."""
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """Show the warnings raised while the block runs (a resumed file whose pins cannot
    be checked: :class:`envhub.rollout.pins.PinWarning`) as ``warning: ...`` lines on
    stderr, as the CLI's other warnings are, each time it is raised."""
    from envhub.rollout.pins import PinWarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        typer.echo(f"warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("always", PinWarning)
        warnings.showwarning = show
        yield


def _summary_table(summary: RunSummary) -> Table:
    table = Table("metric", "value", title="rollout summary")
    if summary.env is not None:
        table.add_row("environment", summary.env.pins())

    def fmt(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    table.add_row(
        "episodes (scored / masked)", f"{summary.episodes} ({summary.scored} / {summary.masked})"
    )
    table.add_row("tasks", str(summary.tasks))
    table.add_row("mean reward", fmt(summary.mean_reward))
    for name, value in summary.pass_at_k.items():
        table.add_row(name, fmt(value))
    table.add_row(
        "stop reasons", ", ".join(f"{k}: {v}" for k, v in sorted(summary.stop_reasons.items()))
    )
    if summary.errors:
        table.add_row("errors", ", ".join(f"{k}: {v}" for k, v in sorted(summary.errors.items())))
    if summary.retried:
        table.add_row(
            "retried attempts", ", ".join(f"{k}: {v}" for k, v in sorted(summary.retried.items()))
        )
    for replica, counts in summary.by_replica.items():
        table.add_row(f"on {replica}", f"{counts.episodes} episodes ({counts.masked} masked)")
    table.add_row("mean turns", fmt(summary.mean_turns, 2))
    table.add_row("tool errors", str(summary.tool_errors))
    table.add_row(
        "tokens (prompt / completion)", f"{summary.prompt_tokens} / {summary.completion_tokens}"
    )
    table.add_row("episodes/s (this run)", fmt(summary.episodes_per_s, 1))
    if summary.groups_kept is not None:
        table.add_row("groups (kept / dropped)",
                      f"{summary.groups_kept} / {summary.groups_dropped}")  # fmt: skip
        rates = summary.pass_rate_by_task.values()
        never, always = sum(r == 0 for r in rates), sum(r == 1 for r in rates)
        table.add_row("tasks by pass rate", f"0: {never}, between: "
                      f"{len(rates) - never - always}, 1: {always}")  # fmt: skip
    if summary.gold_prefix_episodes is not None:
        rate = summary.gold_prefix_pass_rate
        table.add_row("from a gold prefix (pass rate)",
                      f"{summary.gold_prefix_episodes} ({fmt(rate)})")  # fmt: skip
    if summary.trees is not None:
        shape = f"{summary.trees} ({summary.tree_nodes} / {summary.tree_leaves})"
        table.add_row("trees (nodes / leaves)", shape)
    if summary.missing:
        table.add_row("not run", f"{summary.missing} of {summary.planned} ({summary.stopped})")
    return table


@app.command("rollout")
def rollout_command(
    ctx: typer.Context,
    env: Annotated[str, typer.Argument(
        help="environment plugin name (or module:Class), optionally with a version pin on "
        "its distribution: calc==0.2.0 (any PEP 440 specifier: calc>=0.2,<0.3)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="trajectory JSONL file")],
    model: Annotated[str | None, typer.Option(help="model name sent to the server")] = None,
    base_url: Annotated[
        list[str] | None, typer.Option("--base-url", help="OpenAI-compatible base URL (repeatable)")
    ] = None,
    policy: Annotated[
        str, typer.Option(help=f"{plugin_choices('envhub.policies')} (an envhub.policies entry "
                          "point; tito: token-in/token-out) or module:Name")
    ] = "openai",
    tasks: Annotated[
        str | None,
        typer.Option(help="SPLIT, [SPLIT]START:END, or ID,ID,... (default: the test split)"),
    ] = None,
    group_size: Annotated[int, typer.Option(help="samples per task (a GRPO group)")] = 1,
    sampler: Annotated[
        str | None, typer.Option(help="which task each group samples: uniform (the tasks "
                                 "in order, cycling) | adaptive (favours tasks of moderate "
                                 "pass rate); its state: OUTPUT.sampler.json")
    ] = None,
    groups: Annotated[
        int | None, typer.Option(help="groups to keep, drawn by --sampler (default: one "
                                 "per task)")
    ] = None,
    drop_uniform_groups: Annotated[
        bool, typer.Option(help="drop a group whose rewards all agree (no GRPO signal; "
                           "DAPO) and draw another in its place, up to 4 x --groups draws")
    ] = False,
    sampler_seed: Annotated[int, typer.Option(help="seed of --sampler adaptive")] = 0,
    gold_restart_after: Annotated[
        int | None, typer.Option(help="with --sampler: a task with N scored samples and no "
                                 "pass has every other group started from a gold prefix "
                                 "(tasks with fewer than 2 gold actions never are)")
    ] = None,
    gold_prefix: Annotated[
        str, typer.Option(help="with --gold-restart-after: gold turns replayed before the "
                          "policy plays on: K | half (at most all but the last)")
    ] = "half",
    tree: Annotated[
        bool, typer.Option(help="tree rollouts: one tree per task, forked at the branch "
                           "points of --branch-at (the tree is the group)")
    ] = False,
    branch_at: Annotated[
        str, typer.Option(help="with --tree: where to branch: fixed:K (after K turns of a "
                          "node) | every (after every turn) | entropy[:T] (after a turn "
                          "whose mean surprisal is >= T nats/token, default 0.5)")
    ] = "fixed:1",
    branch_factor: Annotated[
        int, typer.Option(help="with --tree: continuations per branch point (the parent "
                          "and m-1 forks)")
    ] = 2,
    tree_depth: Annotated[
        int, typer.Option(help="with --tree: branch points along any path, at most")
    ] = 1,
    tree_budget: Annotated[
        int | None, typer.Option(help="with --tree: episodes (leaves) per tree, at most; a "
                                 "fork past it is not taken")
    ] = None,
    compact_at: Annotated[
        str | None, typer.Option(help="compact an episode's context before the model call "
                                 "after N calls on it (turns:N) or once the last call's "
                                 "prompt + completion reached N tokens (tokens:N)")
    ] = None,
    compact_strategy: Annotated[
        str, typer.Option(help="with --compact-at: summarize (the older turns become a "
                          "summary) | keep-last-k (they are dropped) | drop-tool-outputs "
                          "(their tool results are) | module:Name")
    ] = "summarize",
    compact_keep: Annotated[
        int, typer.Option(help="with --compact-at: the last turns kept verbatim")
    ] = 2,
    summary_base_url: Annotated[
        list[str] | None, typer.Option(help="with --compact-strategy summarize: an "
                                       "OpenAI-compatible endpoint that writes the summaries "
                                       "(repeatable; default: the policy itself)")
    ] = None,
    summary_model: Annotated[
        str | None, typer.Option(help="with --summary-base-url: its model name")
    ] = None,
    summary_api_key: Annotated[
        str | None, typer.Option(envvar="ENVHUB_SUMMARY_API_KEY", show_envvar=True,
                                 help="with --summary-base-url: its bearer key")
    ] = None,
    group_judge: Annotated[
        str | None, typer.Option(help="rank each group in one request with an LLM judge "
                                 "(RULER-style; its scores replace the rewards): its endpoint "
                                 'as JSON, {"base_urls": [URL], "model": NAME}')
    ] = None,
    concurrency: Annotated[
        int, typer.Option(help="episodes in flight (with --tree: trees in flight)")
    ] = 64,
    max_turns: Annotated[int | None, typer.Option(help="assistant turns per episode")] = None,
    temperature: Annotated[
        float, typer.Option(help="sampling temperature sent with every model request")
    ] = 1.0,
    top_p: Annotated[
        float, typer.Option(help="nucleus-sampling top_p sent with every model request")
    ] = 1.0,
    max_tokens: Annotated[int | None, typer.Option(help="completion tokens per turn")] = None,
    resume: Annotated[
        bool, typer.Option(help="run the episodes OUTPUT has no scored record of (re-runs "
                           "masked ones; OUTPUT keeps the latest record of each)")
    ] = False,
    time_limit: Annotated[
        float | None, typer.Option(help="seconds; then episodes in flight are cancelled "
                                   "(--resume runs them later)")
    ] = None,
    progress_interval: Annotated[
        float, typer.Option(help="seconds between plain progress lines ('12/40 episodes, 3 "
                            "masked, 2.1 episodes/s') where stderr is not a terminal (Slurm, "
                            "Kubernetes logs), in place of the bar; 0: none")
    ] = 30.0,
    max_masked_fraction: Annotated[
        float, typer.Option(help="exit 1 when more of the episodes are masked")
    ] = DEFAULT_MAX_MASKED_FRACTION,
    max_consecutive_masked: Annotated[
        int, typer.Option(help="stop dispatching (and exit 1) after this many masked "
                          "episodes in a row: a dead server; 0: never")
    ] = DEFAULT_MAX_CONSECUTIVE_MASKED,
    env_arg: EnvArgOption = None,
    env_url: EnvUrlOption = None,
    env_fleet: EnvFleetOption = None,
    fleet_namespace: FleetNamespaceOption = "envhub",
    env_transport: Annotated[
        str | None,
        typer.Option(help="with --env-url/--env-fleet: ws (pooled WebSockets; the default "
                     "where aiohttp is installed) | http (the default otherwise)"),
    ] = None,
    env_token: EnvTokenOption = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_API_KEY",
            show_envvar=True,
            help="key sent to the model server(s) as `Authorization: Bearer KEY`",
        ),
    ] = None,
    token_ids: Annotated[str, typer.Option(help="ask for token ids: auto | on | off")] = "auto",
    endpoint_concurrency: Annotated[
        int | None, typer.Option(help="cap on requests in flight per base URL")
    ] = None,
    request_timeout: Annotated[float, typer.Option(help="seconds per model request")] = 600.0,
    routing: Annotated[
        str, typer.Option(help="which --base-url serves a request: least-outstanding | "
                          "episode (all turns of an episode on one) | group (all samples of "
                          "a GRPO group on one)")
    ] = "least-outstanding",
    sticky_max_outstanding: Annotated[
        int | None, typer.Option(help="episode/group routing: a busy endpoint with this many "
                                 "requests in flight sends more least-outstanding")
    ] = None,
    session_header: Annotated[
        str, typer.Option(help="HTTP header carrying the episode's (group's) session id to "
                          "the model server or router; '' sends none")
    ] = "X-Session-ID",
    weight_version_header: Annotated[
        str, typer.Option(help="response header in which the model server reports the weight "
                          "version it serves, recorded on each turn ('': none)")
    ] = "",
    weight_version_field: Annotated[
        str, typer.Option(help="field of the model's entry in the server's GET /v1/models that "
                          "reports the weight version it serves, recorded on each turn (read "
                          "once per server and weight update; '': none)")
    ] = "",
    tokenizer: Annotated[
        str | None, typer.Option(help="tito: the model's tokenizer (a model directory or a "
                                 ".gguf file)")
    ] = None,
    chat_template: Annotated[
        Path | None, typer.Option(help="tito: a Jinja chat template replacing the tokenizer's")
    ] = None,
    tito_backend: Annotated[
        str, typer.Option(help="tito: the server kind "
                          f"({plugin_choices('envhub.tito_backends')}, or module:Class); "
                          "--base-url is its root URL (vllm: its /v1 URL)")
    ] = "llama.cpp",
    tool_parser: Annotated[
        str, typer.Option(help="tito: how tool calls are read from the sampled text: "
                          f"{plugin_choices('envhub.tool_call_parsers')} (or module:function)")
    ] = "hermes",
    max_env_attempts: Annotated[
        int, typer.Option(help="tries of an episode whose environment fails, then masked")
    ] = 3,
    policy_version: Annotated[int | None, typer.Option(help="recorded on every turn")] = None,
    success_threshold: Annotated[float, typer.Option(help="reward counted as a pass")] = 1.0,
    wrong_action_p: Annotated[
        float, typer.Option(help="reference policy: chance of a wrong action per turn")
    ] = 0.0,
    sandbox: SandboxBackendOption = None,
    gc_threshold: GcThresholdOption = DEFAULT_GC_THRESHOLD,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve Prometheus metrics on 127.0.0.1:PORT/metrics "
                                 "while the rollout runs")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(help="an external agent framework plays each episode over MCP, its "
                     "model calls recorded by a capture proxy: "
                     f"{plugin_choices('envhub.agents')} | module:Class | 'command:ARGV' (a child "
                     "process per episode)"),
    ] = None,
    agent_env: Annotated[
        list[str] | None,
        typer.Option(help="a variable of envhub's environment to pass on to a 'command:' "
                     "agent (repeatable); its child gets only PATH, HOME, LANG, LC_*, TMPDIR, "
                     "TERM and the episode's own variables otherwise"),
    ] = None,
) -> None:
    """Roll out GROUP_SIZE samples of each selected task and write trajectories to OUTPUT.

    Writes one JSON line per episode as it finishes, then OUTPUT.summary.json. Exits 1
    when the run stopped on a dead server or masked more than --max-masked-fraction, and
    2 before any episode when no --base-url answers.

    Every trajectory and the summary record the environment's pins: its distribution, that
    distribution's version and the hash of its task set (a server's own, with
    --env-url). ENV==VERSION refuses to run (exit 2) another version than the pinned one,
    and --resume refuses a file written from another task set.

    Curricula: with --sampler, --groups or --drop-uniform-groups, each group's task is
    drawn when a worker frees up, from the pass rates seen so far (--sampler adaptive),
    and the summary counts the groups kept and dropped; --resume continues the saved
    OUTPUT.sampler.json. With --gold-restart-after N, a task with N scored samples and no
    pass has every other group started from --gold-prefix turns of its gold replay
    (replayed once per group and forked for its episodes); the summary counts those
    episodes apart from pass@k.

    Trees: with --tree each task gets one tree: its episode is forked (the parent goes on
    too, --branch-factor continuations) where --branch-at says, up to --tree-depth times
    along a path and --tree-budget episodes per tree. Each episode is a line, a fork's
    storing only its turns after the branch point; a tree is written whole, so --resume
    runs again every tree that is missing or has a masked episode.

    Compaction: with --compact-at, an episode whose context passed the threshold goes on
    from a shorter one (--compact-strategy, keeping the last --compact-keep turns); each
    compaction starts a new segment of the trajectory, trained as its own row. Not
    combined with --tree, --gold-restart-after or --agent in this release.

    SIGINT (Ctrl-C) or SIGTERM stops the run as --time-limit does: the episodes in flight
    are cancelled, OUTPUT keeps whole lines, the summary is written and printed with the
    command that resumes the run (--resume), and the exit status is 130 (SIGINT) or 143
    (SIGTERM), 128 plus the signal's number as shells report it. A second signal stops
    at once.
    """
    from envhub.policies import SamplingParams, TitoOptions, make_policy
    from envhub.rollout.pins import split_pin
    from envhub.rollout.runtime import run_async
    from envhub.rollout.sampling import SAMPLERS, UniformRewardGate

    try:
        env, pin = split_pin(env)
    except EnvhubError as exc:
        raise _fail(str(exc)) from None
    if sampler not in (*SAMPLERS, None):
        raise _fail(f"--sampler must be {' or '.join(SAMPLERS)}, not {sampler!r}")
    prefix: int | Literal["half"] = "half"
    if gold_prefix != "half":
        if not gold_prefix.isdigit() or int(gold_prefix) < 1:
            raise _fail(f"--gold-prefix must be a turn count >= 1 or half, not {gold_prefix!r}")
        prefix = int(gold_prefix)
    tree_config = None
    if tree:
        from envhub.rollout.tree import TreeConfig, make_branch_rule

        try:
            tree_config = TreeConfig(make_branch_rule(branch_at), factor=branch_factor,
                                     depth=tree_depth, max_leaves=tree_budget)  # fmt: skip
        except EnvhubError as exc:
            raise _fail(str(exc)) from None
    from envhub.rollout.compaction import check_combination

    compaction = None
    if compact_at is not None:
        try:
            compaction = _compaction(compact_at, compact_strategy, compact_keep,
                                     summary_base_url, summary_model, summary_api_key)
            check_combination(compaction, tree=tree, turn_loop=agent is not None,
                              gold_restarts=gold_restart_after is not None)  # fmt: skip
        except EnvhubError as exc:
            raise _fail(str(exc)) from None
    elif summary_base_url:
        raise _fail("--summary-base-url writes compaction summaries: give --compact-at too")
    if env_transport not in ("ws", "http", None):
        raise _fail(f"--env-transport must be ws or http, not {env_transport!r}")
    try:
        target = EnvTarget(env_url or [], env_fleet, fleet_namespace,
                           cast("SessionTransport | None", env_transport), env_token)
    except EnvhubError as exc:
        raise _fail(str(exc)) from None
    if sandbox is not None and target.remote:
        raise _fail(
            "--sandbox sets the backend of an in-process environment; a server's is its "
            "operator's (envhub serve --sandbox): drop --sandbox"
        )
    env_opts = env_options([env], env_arg, sandbox)[0]
    ranker = None if group_judge is None else _group_judge(group_judge)
    if policy in ("openai", "tito") and not base_url:
        raise _fail(NO_MODEL_HINT)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens)
    # a plain dict (the TypedDict is for mypy): its module imports aiohttp, which a run
    # without a model server (--policy reference) on the core install has not got
    transport: TransportOptions = {
        "api_key": api_key,
        "request_timeout_s": request_timeout,
        "endpoint_concurrency": endpoint_concurrency,
        "routing": cast("RoutingMode", routing),  # the endpoint pool refuses unknown modes
        "sticky_max_outstanding": sticky_max_outstanding,
        "session_header": session_header or None,
        "weight_version_header": weight_version_header or None,
        "weight_version_field": weight_version_field or None,
    }
    tito = TitoOptions(
        tokenizer=tokenizer, chat_template=chat_template, backend=tito_backend,
        tool_parser=tool_parser,
    )  # fmt: skip
    try:
        turn_loop: TurnLoop | None = None
        if agent is not None:
            from envhub.agents import AgentLoop, make_agent

            turn_loop = AgentLoop(make_agent(agent, pass_env=agent_env or ()))
        elif agent_env:
            raise _fail("--agent-env passes variables to a 'command:' agent: give --agent too")
        chosen = make_policy(
            policy, model=model, base_urls=base_url or (), sampling=sampling,
            transport=transport, token_ids=cast("TokenIdMode", token_ids), tito=tito,
            wrong_action_p=wrong_action_p,
        )  # fmt: skip

        async def run_on(
            env_client: EnvironmentClient, tasks_from: EnvironmentClient | None,
            on_result: Callable[[Trajectory], None], on_plan: Callable[[int, int], None],
            stop: asyncio.Event,
        ) -> RolloutResult:
            from envhub.rollout.run import run

            try:
                return await run(
                    env_client, chosen, tasks, pin=pin, group_size=group_size,
                    concurrency=concurrency,
                    output=output, resume=resume, time_limit_s=time_limit, stop=stop,
                    max_turns=max_turns,
                    max_env_attempts=max_env_attempts, policy_version=policy_version,
                    success_threshold=success_threshold,
                    max_masked_fraction=max_masked_fraction,
                    max_consecutive_masked=max_consecutive_masked or None,
                    gc_threshold=gc_threshold, on_result=on_result, on_plan=on_plan,
                    tasks_from=tasks_from, turn_loop=turn_loop, metrics_port=metrics_port,
                    sampler=sampler, sampler_seed=sampler_seed, groups=groups,
                    gates=[UniformRewardGate()] if drop_uniform_groups else [],
                    tree=tree_config, gold_restart_after=gold_restart_after,
                    gold_prefix=prefix, compaction=compaction, group_judge=ranker,
                )  # fmt: skip
            finally:  # the summary endpoint's and the judge's connections belong to this loop
                if compaction is not None and compaction.summarizer is not None:
                    await compaction.summarizer.aclose()
                if ranker is not None:
                    await ranker.aclose()

        with _warnings_on_stderr():
            result, received = run_async(_rollout(
                env,
                chosen,
                options=env_opts,
                target=target,
                replay_gold=policy == "reference" or gold_restart_after is not None,
                max_turns=max_turns,
                progress_interval=progress_interval,
                run_on=run_on,
            ))
    except RolloutFailed as exc:
        console.print(_summary_table(cast("RolloutResult", exc.result).summary))
        raise _fail(str(exc), code=1) from None
    except EnvhubError as exc:
        raise _fail(str(exc)) from None
    summary = result.summary
    console.print(_summary_table(summary))
    stopped_by = {"deadline": "time limit reached"}
    if received is not None:
        stopped_by["interrupted"] = f"interrupted ({received.name})"
    if summary.stopped in stopped_by:
        console.print(
            f"[yellow]{stopped_by[summary.stopped]}[/yellow]: {summary.missing} of "
            f"{summary.planned} episodes did not run; rerun with --resume to run them:",
            soft_wrap=True,
        )
        console.print(_resume_command(ctx), markup=False, highlight=False, soft_wrap=True)
    console.print(f"trajectories: {output}   summary: {output}.summary.json")
    if received is not None:
        raise typer.Exit(128 + received)


def _resume_command(ctx: typer.Context) -> str:
    """This ``envhub rollout`` command line with ``--resume``, rebuilt from the values
    given on it (so it is exact however the CLI was started); an ``--api-key`` value is
    left out (it would land in logs), with a shell comment saying to export
    ``OPENAI_API_KEY``, which the option reads instead."""
    words = ["envhub", "rollout"]
    note = ""
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE" or name == "resume":
            continue
        if name == "api_key":
            note = "  # --api-key left out: export OPENAI_API_KEY"
            continue
        value = ctx.params[name]
        if param.param_type_name != "option":
            words.append(str(value))
        elif getattr(param, "is_flag", False):
            words.append(param.opts[0] if value else param.secondary_opts[0])
        else:
            for item in value if param.multiple else (value,):
                words += [param.opts[0], str(item)]
    return shlex.join([*words, "--resume"]) + note


def _compaction(
    at: str, strategy: str, keep: int, base_urls: list[str] | None, model: str | None,
    api_key: str | None,
) -> CompactionConfig:  # fmt: skip
    """``--compact-*``'s configuration; the summarizer endpoint is the operator's own
    OpenAI-compatible policy (its retries and balancing), with its own key."""
    from envhub.policies import make_policy
    from envhub.rollout.compaction import CompactionConfig

    summarizer = None
    if base_urls:
        if strategy != "summarize":
            raise InvalidRequest("--summary-base-url writes summaries: it takes "
                                 "--compact-strategy summarize")  # fmt: skip
        summarizer = make_policy("openai", model=model, base_urls=base_urls,
                                 transport={"api_key": api_key})  # fmt: skip
    return CompactionConfig.of(at, strategy, keep=keep, summarizer=summarizer)


async def _rollout(
    env_name: str,
    policy: Policy,
    *,
    options: dict[str, Any],
    target: EnvTarget,
    replay_gold: bool,
    max_turns: int | None,
    progress_interval: float,
    run_on: Callable[
        [EnvironmentClient, EnvironmentClient | None, Callable[[Trajectory], None],
         Callable[[int, int], None], asyncio.Event],
        Awaitable[RolloutResult],
    ],
) -> tuple[RolloutResult, signal.Signals | None]:
    """Check that the policy's model servers answer, open the environment, then
    ``run_on(env, tasks_from, on_result, on_plan, stop)`` (the command's
    :func:`envhub.rollout.run` call) with the progress shown and SIGINT/SIGTERM setting
    ``stop`` (:class:`~envhub.cli._signals.StopOnSignal`); returns the result and the
    signal that stopped the run, if one did. ``replay_gold``: the policy reads whole
    tasks, which a remote environment does not publish, so they come from a local copy
    of the plugin.

    ``--max-turns`` is the runner's cap on every transport (:func:`envhub.rollout.run`);
    in-process it is also the sessions' budget, which the runner's cap cannot raise."""
    from envhub.cli._progress import LiveProgress
    from envhub.cli._signals import StopOnSignal
    from envhub.policies.base import check_servers

    tasks_from: EnvironmentClient | None = None
    try:
        await check_servers(policy)  # a dead --base-url fails here, not episode by episode
        env = target.open(env_name, options, max_turns)
        try:
            if replay_gold and target.remote:
                tasks_from = await local_task_source(env_name, options, env)
        except BaseException:
            await env.aclose()
            raise
    except BaseException:
        await policy.aclose()
        raise
    progress = LiveProgress(console, f"{env_name} x {policy.model}", progress_interval)
    signals = StopOnSignal()
    summary: RunSummary | None = None
    try:
        with signals.installed() as stop:
            try:
                result = await run_on(env, tasks_from, progress.record, progress.plan, stop)
            except RolloutFailed as exc:
                summary = cast("RolloutResult", exc.result).summary
                raise
            summary = result.summary
        return result, signals.received
    finally:
        progress.finish(summary)
        await policy.aclose()
        await env.aclose()
        if tasks_from is not None:
            await tasks_from.aclose()


@app.command("check")
def check_command(
    env: Annotated[str, typer.Argument(help="environment plugin name (or module:Class)")],
    tasks: Annotated[
        str | None,
        typer.Option(
            help="SPLIT, [SPLIT]START:END, or ID,ID,... (default: every task of every split)"
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="check only the first N selected tasks (a quick smoke check)"),
    ] = None,
    env_arg: EnvArgOption = None,
    concurrency: Annotated[int, typer.Option(help="episodes in flight")] = 32,
    sandbox: SandboxBackendOption = None,
    env_url: EnvUrlOption = None,
    env_fleet: EnvFleetOption = None,
    fleet_namespace: FleetNamespaceOption = "envhub",
    env_token: EnvTokenOption = None,
) -> None:
    """Check that the reference policy scores 1 and a no-op policy 0 on every selected task.

    In-process by default; with --env-url or --env-fleet the episodes run on the servers
    and the gold actions come from the plugin installed here (same version). Prints the
    failing tasks and exits 1 if any fails.
    """
    from envhub.rollout.runtime import run_async

    options = env_options([env], env_arg, sandbox)[0]
    try:
        target = EnvTarget(env_url or [], env_fleet, fleet_namespace, token=env_token)
        if sandbox is not None and target.remote:
            raise _fail("--sandbox sets the backend of an in-process environment; drop it")
        report, elapsed = run_async(_check(env, options, tasks, limit, concurrency, target))
    except EnvhubError as exc:
        raise _fail(str(exc)) from None
    warn_tool_gaps(report.tool_gaps)
    if report.ok:
        console.print(
            f"[green]ok[/green]: {report.checked} tasks of {report.env}: reference scores 1, "
            f"no-op scores 0 ({elapsed:.1f}s)"
        )
        return
    table = Table(
        "task", "policy", "reward", "expected", "detail", title=f"{report.env}: failing tasks"
    )
    for failure in report.failures:
        reward = "masked" if failure.reward is None else f"{failure.reward:g}"
        table.add_row(
            failure.task_id, failure.policy, reward, f"{failure.expected:g}", failure.detail[:120]
        )
    console.print(table)
    console.print(
        f"[red]{len(report.failing_tasks)} of {report.checked} tasks fail[/red]: "
        + ", ".join(report.failing_tasks[:50])
    )
    raise typer.Exit(1)


async def _check(
    env: str,
    options: dict[str, Any],
    tasks: str | None,
    limit: int | None,
    concurrency: int,
    target: EnvTarget,
) -> Any:
    from envhub.cli._progress import make_progress
    from envhub.rollout.check import check_tasks
    from envhub.rollout.tasks import select_task_ids

    client = target.open(env, options)
    tasks_from: EnvironmentClient | None = None
    try:
        if target.remote:
            tasks_from = await local_task_source(env, options, client)
        ids = await client.task_ids() if tasks is None else await select_task_ids(client, tasks)
        ids = ids[:limit]
        started = time.perf_counter()
        with make_progress(console) as progress:
            bar = progress.add_task(f"check {env}", total=2 * len(ids), stats="")
            report = await check_tasks(
                client, ids, concurrency=concurrency, tasks_from=tasks_from,
                on_result=lambda t: progress.advance(bar),
            )  # fmt: skip
        return report, time.perf_counter() - started
    finally:
        await client.aclose()  # in-process: the class's shared resources (pools, browsers)
        if tasks_from is not None:
            await tasks_from.aclose()


@app.command("export")
def export_command(
    file: Annotated[Path, typer.Argument(help="trajectory JSONL file written by envhub rollout")],
    format: Annotated[
        str, typer.Option("--format", help="parquet|jsonl, or a plugin's format: "
                          f"{plugin_choices('envhub.exporters') or 'none installed'}")
    ] = "parquet",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="file (a plugin's format: directory) to write; default: FILE with the "
            "suffix .parquet, .export.jsonl or .FORMAT",
        ),
    ] = None,
) -> None:
    """Export trajectories for `datasets.load_dataset` (Parquet or clean JSONL), or in a
    benchmark's own result format that a plugin provides (`--format bfcl`: BFCL result
    files under the output directory, for BFCL's evaluator).

    messages, tools, sampling and reward_components become JSON strings.
    """
    from envhub.trajectory import export_trajectories

    if not file.is_file():
        raise _fail(f"{file} does not exist")
    _quiet_datasets()
    if format not in ("parquet", "jsonl"):
        _export_with_plugin(file, format, output or file.with_suffix(f".{format}"))
        return
    target = output or file.with_suffix(".parquet" if format == "parquet" else ".export.jsonl")
    try:
        rows = export_trajectories(file, target, format)  # type: ignore[arg-type]
    except EnvhubError as exc:
        raise _fail(str(exc)) from None
    except ImportError:
        raise _fail("export needs `pip install 'envhub-rl[rollout]'` (datasets)") from None
    console.print(f"{rows} trajectories -> {target}", soft_wrap=True)


def _quiet_datasets() -> None:
    """Turn off ``datasets``' tqdm bars for this process: an export is one quick write, and
    its bars ("Creating parquet from Arrow format") only clutter logs and piped output.
    Nothing to do without ``datasets`` (a plugin's format may not need it)."""
    try:
        import datasets
    except ImportError:
        return
    datasets.disable_progress_bars()


def _export_with_plugin(file: Path, format: str, target: Path) -> None:
    from envhub.registry import load_exporter
    from envhub.trajectory import read_trajectories

    try:
        rows = load_exporter(format)(read_trajectories(file), target)
    except EnvhubError as exc:
        raise _fail(str(exc)) from None
    console.print(f"{rows} trajectories -> {target}", soft_wrap=True)
