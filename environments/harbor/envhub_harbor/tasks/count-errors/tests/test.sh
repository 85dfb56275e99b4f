#!/bin/bash
# Harbor's verifier contract: write the reward to /logs/verifier/reward.json (named
# rewards) or /logs/verifier/reward.txt (one number). 3 lines have the level ERROR; the
# DEBUG line that mentions ERROR_PAGE does not count.
expected=$(cat /tests/expected.txt)
if [ -f /app/answer.txt ]; then
  present=1
  got=$(tr -d '[:space:]' < /app/answer.txt)
else
  present=0
  got=""
fi
echo "expected=$expected got=$got"
if [ "$got" = "$expected" ]; then correct=1; else correct=0; fi
printf '{"reward": %s, "answer_present": %s}\n' "$correct" "$present" > /logs/verifier/reward.json
