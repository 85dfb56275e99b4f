"""GRPO training with TRL on an envhub environment.

    # CPU smoke run: a tiny model that first imitates a few gold episodes, then GRPO
    python examples/train_grpo_trl.py --tiny --max-steps 2

    # a real model (a local checkpoint; TRL's generation, envhub's tools and rewards)
    python examples/train_grpo_trl.py --model ./Qwen2.5-0.5B-Instruct --env calc

    # environments hosted by `envhub serve`
    python examples/train_grpo_trl.py --model ./ckpt --env-url http://host:8000 --env calc

    # generation by an OpenAI-compatible server that returns token ids (vLLM
    # `return_token_ids`): envhub runs whole episodes, TRL trains on the sampled ids
    python examples/train_grpo_trl.py --model ./ckpt --rollout-url http://127.0.0.1:8001/v1

Rewards are envhub's (``envhub_reward``): each rollout is an envhub session whose tool
calls go through envhub's budgets and error handling, and whose reward is the
environment's. The weights of the rollout server are not synced by this script: with
``--rollout-url`` use TRL's vLLM server mode (``trl vllm-serve``) so the server follows
the trainer.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="calc", help="plugin name (or the name on --env-url)")
    parser.add_argument("--env-url", help="an `envhub serve` URL hosting --env")
    parser.add_argument("--model", help="a model path or id for AutoModelForCausalLM")
    parser.add_argument("--tiny", action="store_true", help="tiny offline model (CPU smoke)")
    parser.add_argument(
        "--tasks",
        default="calc-0-00000,calc-0-00001",
        help="with --tiny: comma-separated task ids to imitate and train on",
    )
    parser.add_argument("--split", default="train", help="task split (without --tiny)")
    parser.add_argument("--rollout-url", help="OpenAI-compatible server for rollout_func")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--temperature", type=float, default=0.9)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--output-dir", default="grpo-envhub")
    return parser.parse_args()


def load_model(args: argparse.Namespace, env: object) -> tuple[object, object, list[str] | None]:
    """(model, tokenizer, task ids to train on, or None for the whole split)."""
    if args.tiny or not args.model:
        from envhub.trainers.tiny import (
            gold_vocabulary,
            imitate_gold,
            smollm2_tokenizer,
            tiny_llama,
        )
        from envhub.trainers.trl import environment_factory

        tokenizer = smollm2_tokenizer()
        task_ids = args.tasks.split(",")
        # imitate under the exact prompt TRL will render (its form of the tool schemas)
        tools = environment_factory(env).rendered_tools()
        # the tiny model reads and writes the demonstrations' tokens (and digits, operators)
        vocabulary = gold_vocabulary(tokenizer, env, task_ids, tools=tools)
        model = tiny_llama(tokenizer, vocabulary=vocabulary)
        losses = imitate_gold(model, tokenizer, env, task_ids, tools=tools)
        print(f"imitation warm-up: loss {losses[0]:.2f} -> {losses[-1]:.2f}")
        return model, tokenizer, task_ids
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    return AutoModelForCausalLM.from_pretrained(args.model), tokenizer, None


def main() -> None:
    args = parse_args()
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from envhub.trainers.environments import resolve_environment
    from envhub.trainers.trl import envhub_reward, environment_factory, task_dataset
    from envhub.trainers.trl_rollout import EnvhubRollout

    tiny = args.tiny or not args.model
    if args.threads or tiny:  # the tiny model's matrices gain nothing from threads
        torch.set_num_threads(args.threads or 1)
    if tiny and args.env_url:
        raise SystemExit("--tiny imitates gold episodes, which needs an in-process --env")
    env = resolve_environment(args.env_url or args.env, env_name=args.env)
    model, tokenizer, task_ids = load_model(args, env)
    dataset = task_dataset(env, split=None if task_ids else args.split)
    if task_ids:
        dataset = dataset.filter(lambda row: row["task_id"] in task_ids)

    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=4,
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=tiny,
        gradient_checkpointing=not tiny,
    )
    factory = rollout = None
    if args.rollout_url:
        rollout = EnvhubRollout(env, model=args.model or "tiny", base_urls=[args.rollout_url])
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=envhub_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
        )
    else:
        factory = environment_factory(env)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=envhub_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=factory,
        )
    trainer.train()
    for entry in trainer.state.log_history:
        if "rewards/envhub_reward/mean" in entry:
            print(
                f"step {entry['step']}: envhub reward {entry['rewards/envhub_reward/mean']:.3f}"
                f" loss {entry.get('loss', float('nan')):.4f}"
            )
    if factory is not None:
        print(f"{len(factory.episodes)} envhub episodes scored")
        factory.close()
    if rollout is not None:
        rollout.close()


if __name__ == "__main__":
    main()
