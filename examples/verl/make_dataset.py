"""Write an envhub task split as the parquet file verl's RLHFDataset reads.

    python examples/verl/make_dataset.py calc train data/calc_train.parquet

Rows: ``prompt`` (the task's chat messages), ``data_source`` (the environment),
``agent_name`` (the agent loop in ``envhub_agent_loop.yaml``) and ``extra_info.task_id``;
the reward comes from the envhub session, so there is no ``reward_model`` ground truth.
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env")
    parser.add_argument("split")
    parser.add_argument("output")
    parser.add_argument("--agent-name", default=None, help="default: envhub_<env>")
    args = parser.parse_args()

    from datasets import Dataset

    import envhub

    env = envhub.make(args.env)
    tasks = env.tasks.split(args.split)
    agent = args.agent_name or f"envhub_{args.env}"
    rows = [
        {
            "prompt": list(task.prompt),
            "data_source": f"envhub/{args.env}",
            "agent_name": agent,
            "extra_info": {"task_id": task.id},
        }
        for task in tasks
    ]
    Dataset.from_list(rows).to_parquet(args.output)
    print(f"{len(rows)} tasks of {args.env}/{args.split} -> {args.output}")


if __name__ == "__main__":
    main()
