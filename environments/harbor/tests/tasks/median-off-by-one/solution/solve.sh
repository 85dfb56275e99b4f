#!/bin/bash
# Deliberately wrong: drops the header *and* the first price before taking the median.
python3 - <<'PY'
import statistics
prices = [float(line) for line in open("/app/prices.csv").read().split()[2:]]
open("/app/median.txt", "w").write(str(statistics.median(prices)))
PY
