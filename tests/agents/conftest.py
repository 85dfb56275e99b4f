"""The rollout tests' fixtures: scripted model servers and the calc environment."""

from tests.rollout.conftest import calc as calc
from tests.rollout.conftest import scripted as scripted
