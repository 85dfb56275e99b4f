"""envhub-rl-calc: the starter environment and the template ``envhub init`` copies."""

from envhub_calc.calculator import CalculatorError as CalculatorError
from envhub_calc.calculator import evaluate as evaluate
from envhub_calc.env import CalcEnv as CalcEnv
from envhub_calc.problems import generate_tasks as generate_tasks

__all__ = ["CalcEnv", "CalculatorError", "evaluate", "generate_tasks"]
