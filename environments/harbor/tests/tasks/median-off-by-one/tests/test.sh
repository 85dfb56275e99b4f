#!/bin/bash
# reward.txt: 1 when /app/median.txt holds the median, else 0
python3 /tests/check_median.py && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
